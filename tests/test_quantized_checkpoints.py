"""Checkpoints made by the quantization libraries that run on the CPU beside the main stack
(torchao, bitsandbytes, compressed-tensors), saved, then loaded through the transformers backend
as their runtime loads them: reads equal a naive full-vocabulary forward pass of the same
loaded model, the description says what the candidate is, the fingerprint follows the
quantization, and a missing library is one line naming the extra to install (issue 32)."""
from __future__ import annotations

import importlib.util
import json
import sys
from functools import partial
from pathlib import Path
from typing import Any

import kit.checkpoints
import numpy as np
import pytest
from kit.models import save_model, tiny_qwen3
from kit.needs import needs

import quantized_variants  # benchmarks/quantized_variants.py: imports each library only when it makes its kind
from pytest_longctx.backends import base, load_backend
from pytest_longctx.backends import quantization_words as quantized
from pytest_longctx.backends.hf import TransformersBackend, weights_fingerprint
from pytest_longctx.errors import LongctxError

pytestmark = needs("torch", "transformers", install='pip install -e ".[hf]"')

VOCAB = 128
needs_torchao = needs("torchao", install="pip install 'pytest-longctx[torchao]'")
needs_bitsandbytes = needs("bitsandbytes", install="pip install 'pytest-longctx[bitsandbytes]'")
needs_compressed_tensors = needs("compressed_tensors", install="pip install 'pytest-longctx[compressed-tensors]'")
needs_auto_round = needs("auto_round", install="pip install 'pytest-longctx[auto-round]'")


@pytest.fixture(scope="module")
def float_folder(tmp_path_factory) -> Path:
    """A tiny random qwen3, wide enough (64) for groups of 16 and 32, at transformers' default initialisation,
    saved in float32."""
    return save_model(tmp_path_factory.mktemp("float"), tiny_qwen3(VOCAB, width=64, init=0.02, context=4096))


W4A16_G16, W8_CHANNEL, A8_TOKEN = quantized_variants.w4a16(16), quantized_variants.W8_CHANNEL, quantized_variants.A8_TOKEN


# kind -> (its library's test mark, its description, the library's distribution)
KINDS = {
    "torchao-int8": (needs_torchao, "torchao int8 weight-only", "torchao"),
    "torchao-int4-g32": (needs_torchao, "torchao int4 weight-only, groups of 32", "torchao"),
    "torchao-int8-dynamic": (needs_torchao, "torchao int8 weights, int8 activations rounded per token as they run", "torchao"),
    "autoround-g32": (needs_auto_round, "auto-round int4, groups of 32, auto_round:auto_gptq packing, by auto-round {version}; "
                                        "run by its {kernel} kernel", "auto-round"),
    "bnb-nf4": (needs_bitsandbytes, "bitsandbytes nf4", "bitsandbytes"),
    "bnb-int8": (needs_bitsandbytes, "bitsandbytes int8 (LLM.int8(), outlier threshold 6.0)", "bitsandbytes"),
    "ct-w4a16-g16": (needs_compressed_tensors, "compressed-tensors W4A16, groups of 16", "compressed-tensors"),
    "ct-w4a16-g32": (needs_compressed_tensors, "compressed-tensors W4A16, groups of 32", "compressed-tensors"),
    "ct-w8a8": (needs_compressed_tensors, "compressed-tensors W8A8, int8 weights per channel, int8 activations dynamic per "
                                          "token, rounded as they run", "compressed-tensors"),
}


@pytest.fixture(scope="module")
def checkpoints(float_folder, tmp_path_factory):
    """Each kind's checkpoint folder, made on first use."""
    made: dict[str, Path] = {}

    def get(kind: str) -> Path:
        if kind not in made:
            made[kind] = quantized_variants.make(kind, float_folder, tmp_path_factory.mktemp(kind))
        return made[kind]

    return get


@pytest.fixture(scope="module")
def loaded(checkpoints):
    """Each kind loaded through the backend, kept for the module, so naive.reads' memo (per live model) serves its later reads."""
    backends: dict[str, TransformersBackend] = {}

    def get(kind: str) -> TransformersBackend:
        if kind not in backends:
            backend, _ = load_backend(str(checkpoints(kind)), "hf", "float32", "cpu")
            backends[kind] = backend
        return backends[kind]

    return get


IDS = np.random.default_rng(0).integers(0, VOCAB, 300).tolist()
POSITIONS = list(range(0, 299, 7))
CUT = 150


# the reads at POSITIONS through the backend (IDS in two pieces, cut at CUT) and naively
backend_reads = partial(kit.checkpoints.backend_reads, ids=IDS, positions=POSITIONS, cut=CUT)
naive_reads = partial(kit.checkpoints.naive_reads, ids=IDS, positions=POSITIONS)

# The largest gap allowed between the backend's reads and one full pass, 1e-5 unless said. torchao's
# int8 activations are rounded from numbers that the backend's two pieces through a KV cache and one
# full pass compute ~1e-8 apart (attention over another shape). Traced on a tiny qwen3 of width 128: a
# 1.5e-8 difference in layer 1's down_proj input moved one number across an int8 rounding boundary,
# 5e-5 at that layer's output and 3e-4 nats at the reads; here the largest gap is 4e-4 nats, and most
# reads stay within 1e-5.
ROUNDING_GAP = {"torchao-int8-dynamic": 1e-3}


def each_kind(*kinds: str):
    return pytest.mark.parametrize("kind", [pytest.param(k, marks=KINDS[k][0]) for k in kinds])


@each_kind(*(k for k in KINDS if not k.startswith("autoround")))
def test_a_saved_checkpoint_reads_what_a_naive_pass_of_it_reads_and_says_what_it_is(kind, loaded, float_folder):
    backend = loaded(kind)
    top1, logprobs = backend_reads(backend)
    want_top1, want_logprobs = naive_reads(backend.model)
    assert top1 == want_top1
    gaps = np.abs(logprobs - want_logprobs)
    assert np.max(gaps) <= ROUNDING_GAP.get(kind, 1e-5) and np.mean(gaps <= 1e-5) >= 0.5
    _, description, library = KINDS[kind]
    described = backend.describe()
    assert described["quantization"] == description
    assert described["dtype"] == "float32"  # not its integer storage: a float32 baseline is not warned of another dtype
    assert set(described["versions"]) == {"torch", "transformers", library}
    # its quantization ran: the float model reads otherwise
    plain = TransformersBackend.load(str(float_folder), dtype="float32", device="cpu")
    assert np.max(np.abs(backend_reads(plain)[1] - logprobs)) > 1e-4
    assert plain.describe()["quantization"] == "none" and set(plain.describe()["versions"]) == {"torch", "transformers"}


@pytest.mark.parametrize("pair", [
    pytest.param(("bnb-int8", "bnb-nf4"), marks=needs_bitsandbytes),
    pytest.param(("ct-w4a16-g16", "ct-w4a16-g32"), marks=needs_compressed_tensors),
])
def test_the_fingerprint_follows_the_quantization(pair, loaded):
    first, second = (loaded(kind).describe() for kind in pair)
    assert first["weights"] != second["weights"] and first["config"] != second["config"]


@each_kind("torchao-int8", "bnb-nf4", "ct-w8a8")
def test_the_fingerprint_of_a_checkpoint_is_the_same_however_it_was_used(kind, checkpoints):
    """The same folder loaded twice, fingerprinted before any read and after one (compressed-tensors
    unpacks its weights on the first forward pass), is one fingerprint."""
    fresh = TransformersBackend.load(str(checkpoints(kind)), dtype="float32", device="cpu").describe()
    used = TransformersBackend.load(str(checkpoints(kind)), dtype="float32", device="cpu")
    backend_reads(used)
    assert used.describe()["weights"] == fresh["weights"] and used.describe()["config"] == fresh["config"]


@each_kind("ct-w4a16-g16", "ct-w8a8")
def test_compressed_tensors_weights_are_de_quantized_to_exactly_the_quantized_values(kind, loaded):
    """transformers runs them de-quantized: fine, because each weight is its integer times its scale."""
    import torch

    backend = loaded(kind)
    layer = backend.model.model.layers[0].self_attn.q_proj
    weight, scale = layer.weight.detach(), layer.weight_scale.detach()
    grouped = weight.unflatten(-1, (scale.shape[-1], -1))  # [out, groups, per group]
    steps = (grouped / scale[..., None]).round()
    assert torch.equal(steps * scale[..., None], grouped)
    bits = 4 if kind == "ct-w4a16-g16" else 8
    assert steps.min() >= -(2 ** (bits - 1)) and steps.max() <= 2 ** (bits - 1) - 1
    assert steps.abs().max() >= 2 ** (bits - 1) - 1  # the range is used: rounded to these bits, not stored in float


@needs_compressed_tensors
def test_w8a8_activations_are_rounded_as_they_run(loaded):
    """transformers on the CPU runs a W8A8 checkpoint through compressed-tensors' forward, which
    rounds each token's input to int8 before every linear layer, as vLLM's int8 kernels do:
    switched off, the reads move."""
    backend = loaded("ct-w8a8")
    rounded = backend_reads(backend)[1]
    layers = [m for m in backend.model.modules() if getattr(m, "quantization_scheme", None) is not None]
    try:
        for layer in layers:
            layer.quantization_enabled = False
        weights_only = backend_reads(backend)[1]
    finally:
        for layer in layers:
            layer.quantization_enabled = True
    assert np.max(np.abs(rounded - weights_only)) > 1e-4


def test_a_scheme_whose_activations_are_not_rounded_says_the_weights_alone_were_judged():
    config = {"quant_method": "compressed-tensors", "config_groups": {"group_0": {"weights": W8_CHANNEL, "input_activations": A8_TOKEN}}}
    assert quantized.describe(config, activations_rounded=False) == (
        "compressed-tensors W8A8, int8 weights per channel, int8 activations dynamic per token, not rounded here: the "
        "weights alone are judged (vLLM's backend runs the activations too)")


FP8_CHANNEL = {"num_bits": 8, "type": "float", "symmetric": True, "strategy": "channel"}
FP8_TOKEN = {"num_bits": 8, "type": "float", "symmetric": True, "strategy": "token", "dynamic": True}


@pytest.mark.parametrize("config, words", [
    ({}, "none"),
    ({"quant_method": "torchao", "quant_type": {"default": {"_type": "Int4WeightOnlyConfig", "_data": {"group_size": 128}}}},
     "torchao int4 weight-only, groups of 128"),
    ({"quant_method": "torchao", "quant_type": {"default": {"_type": "Float8DynamicActivationFloat8WeightConfig", "_data": {}}}},
     "torchao float8 weights, float8 activations rounded as they run"),
    ({"quant_method": "torchao", "quant_type": {"default": {"_type": "IntxWeightOnlyConfig", "_data": {
        "weight_dtype": {"_type": "torch.dtype", "_data": "int4"}, "granularity": {"_type": "PerGroup", "_data": {"group_size": 32}}}}}},
     "torchao int4 weight-only, groups of 32"),
    ({"quant_method": "torchao", "quant_type": {"default": {"_type": "Int8DynamicActivationIntxWeightConfig", "_data": {
        "weight_dtype": {"_type": "torch.dtype", "_data": "int2"}, "weight_granularity": {"_type": "PerAxis", "_data": {"axis": 0}}}}}},
     "torchao int2 weights, int8 activations rounded per token as they run"),
    ({"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "fp4", "bnb_4bit_use_double_quant": True},
     "bitsandbytes fp4, double quantization"),
    ({"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4", "bnb_4bit_compute_dtype": "bfloat16"},
     "bitsandbytes nf4, computed in bfloat16"),
    ({"quant_method": "compressed-tensors", "config_groups": {"group_0": {"weights": FP8_CHANNEL, "input_activations": FP8_TOKEN}}},
     "compressed-tensors W8A8, float8 weights per channel, float8 activations dynamic per token, rounded as they run"),
    ({"quant_method": "compressed-tensors", "config_groups": {
        "group_0": {"weights": {**FP8_CHANNEL, "strategy": "block", "block_structure": [128, 128]},
                    "input_activations": {**FP8_TOKEN, "strategy": "group", "group_size": 128}}}},
     "compressed-tensors W8A8, float8 weights in blocks of 128x128, float8 activations dynamic per group of 128, rounded as they run"),
    ({"quant_method": "compressed-tensors", "config_groups": {"group_0": {"format": "nvfp4-pack-quantized", "weights": {
        "num_bits": 4, "type": "float", "symmetric": True, "strategy": "tensor_group", "group_size": 16}}}},
     "compressed-tensors W4A16, float4 weights in groups of 16 with a scale per tensor too (NVFP4)"),
    ({"quant_method": "compressed-tensors", "config_groups": {"group_0": {"format": "mxfp4-pack-quantized", "weights": {
        "num_bits": 4, "type": "float", "symmetric": True, "strategy": "group", "group_size": 32}}}},
     "compressed-tensors W4A16, float4 weights in groups of 32 (MXFP4)"),
    ({"quant_method": "compressed-tensors", "config_groups": {"group_0": {"weights": {**W8_CHANNEL, "num_bits": 4}}}},
     "compressed-tensors W4A16, per channel"),
    ({"quant_method": "compressed-tensors", "config_groups": {"group_0": {"weights": {**W4A16_G16, "symmetric": False}}}},
     "compressed-tensors W4A16, groups of 16, asymmetric"),
    ({"quant_method": "gptq", "bits": 4, "group_size": 128}, "gptq 4-bit, groups of 128"),
])
def test_each_quantization_is_said_in_words(config, words):
    assert quantized.describe(config) == words


# --------------------------------------------------------------- a library missing, a GPU kernel on a CPU


QUANTIZATION_CONFIGS = {
    "torchao": {"quant_method": "torchao", "quant_type": {"default": {"_type": "Int8WeightOnlyConfig", "_data": {}}}},
    "bitsandbytes": {"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4"},
    "compressed_tensors": {"quant_method": "compressed-tensors", "config_groups": {"group_0": {"weights": W4A16_G16}}},
    "auto_round": {"quant_method": "auto-round", "bits": 4, "group_size": 32, "sym": True, "data_type": "int",
                   "packing_format": "auto_round:auto_gptq", "autoround_version": "0.15.1"},
    "gptqmodel": {"quant_method": "gptq", "bits": 4, "group_size": 32, "sym": True, "desc_act": False},
}


def with_quantization(float_folder: Path, out: Path, quantization_config: dict[str, Any]) -> str:
    """The float model's folder with ``quantization_config`` written into its config: what a checkpoint
    of that library looks like before its weights are read."""
    import shutil

    shutil.copytree(float_folder, out)
    config = json.loads((out / "config.json").read_text())
    (out / "config.json").write_text(json.dumps({**config, "quantization_config": quantization_config}))
    return str(out)


@pytest.mark.parametrize("module, extra, what", [
    ("torchao", "torchao", "torchao int8 weight-only"),
    ("bitsandbytes", "bitsandbytes", "bitsandbytes nf4"),
    ("compressed_tensors", "compressed-tensors", "compressed-tensors W4A16, groups of 16"),
    ("auto_round", "auto-round", "auto-round int4, groups of 32, auto_round:auto_gptq packing, by auto-round 0.15.1"),
    ("gptqmodel", "gptqmodel", "gptq 4-bit, groups of 32"),
])
def test_a_checkpoint_whose_library_is_missing_names_the_extra(module, extra, what, float_folder, tmp_path, monkeypatch):
    folder = with_quantization(float_folder, tmp_path / "quantized", QUANTIZATION_CONFIGS[module])
    monkeypatch.setitem(sys.modules, module, None)  # as if not installed: importing it raises ImportError
    with pytest.raises(LongctxError) as exc:
        load_backend(folder, "hf", "float32", "cpu")
    message = str(exc.value)
    assert message.startswith(f"--model {folder}: its weights are quantized by {extra} ({what}), which does not import "
                              f"here (import of {module} halted")
    assert message.endswith(f"): pip install 'pytest-longctx[{extra}]'") and "damaged" not in message and "\n" not in message


@needs_compressed_tensors
def test_a_library_transformers_finds_too_old_names_the_extra(checkpoints, monkeypatch):
    """It imports, so it is not missing: transformers refuses its version (ImportError), and the line
    says so with the extra, not that the weights file is damaged."""
    from transformers.quantizers import quantizer_compressed_tensors

    monkeypatch.setattr(quantizer_compressed_tensors, "is_compressed_tensors_available", lambda: False)
    folder = str(checkpoints("ct-w4a16-g16"))
    with pytest.raises(LongctxError) as exc:
        load_backend(folder, "hf", "float32", "cpu")
    assert str(exc.value).startswith(f"--model {folder}: its quantization (compressed-tensors W4A16, groups of 16) needs a "
                                     "library that is missing here or too old: Using `compressed_tensors` quantized models "
                                     "requires compressed-tensors>=")
    assert str(exc.value).endswith("; pip install 'pytest-longctx[compressed-tensors]'")


def test_a_checkpoint_that_runs_only_on_a_gpu_says_so_on_a_cpu(float_folder, tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is here: the checkpoint would load")
    folder = with_quantization(float_folder, tmp_path / "fp8", {"quant_method": "fbgemm_fp8", "activation_scale_ub": 1200.0})
    with pytest.raises(LongctxError) as exc:
        load_backend(folder, "hf", "float32", "cpu")
    message = str(exc.value)
    assert message.startswith(f"--model {folder}: its quantization (fbgemm_fp8) runs only on a GPU kernel, and this run is "
                              "on the CPU (")
    assert message.endswith("; score it on a GPU (--device cuda)") and "damaged" not in message


# --------------------------------------------------------------- what the reports say


@needs_bitsandbytes
def test_the_gate_says_what_the_candidate_is_in_its_summary_junit_and_results(qwen_tokenizer, data_dir, tmp_path, pytester):
    """A bitsandbytes nf4 checkpoint of the benchmark's vocabulary, gated by the plugin: the summary names
    its quantization beside the model, as do the junit properties and the results' meta."""
    import xml.etree.ElementTree as ET

    # 64 wide: bitsandbytes packs nf4 for a CPU with AVX-512 BF16 in blocks of 64 inputs, and fails on a narrower layer
    plain = save_model(tmp_path / "plain", tiny_qwen3(len(qwen_tokenizer), width=64))
    folder = quantized_variants.make("bnb-nf4", plain, tmp_path / "nf4")
    junit, out = tmp_path / "junit.xml", tmp_path / "results.json"
    result = pytester.runpytest_inprocess(
        "-p", "no:cacheprovider", "--longctx-only", f"--longctx-model={folder}", f"--longctx-data={data_dir}",
        "--longctx-sets=facts", "--longctx-lengths=2k", "--longctx-limit=1", "--longctx-update-baseline",
        f"--longctx-baseline={tmp_path / 'b.json.gz'}", f"--junitxml={junit}", f"--longctx-out={out}")
    assert result.ret == 0, result.stdout.str()[-2000:]
    head = next(line for line in result.stdout.lines if line.startswith("longctx gate: "))
    assert head.startswith(f"longctx gate: {folder} (bitsandbytes nf4)") and " against itself" in head
    properties = {p.get("name"): p.get("value") for p in ET.parse(junit).iter("property")}
    assert properties["longctx.quantization"] == "bitsandbytes nf4"
    meta = json.loads(out.read_text())["meta"]
    assert meta["quantization"] == "bitsandbytes nf4" and "bitsandbytes" in meta["versions"]


def pair_of(plain: TransformersBackend, candidate: TransformersBackend, kind: str) -> Any:
    """Blame's pair of the float model and a candidate, each fingerprinted as loaded (its backend's, kept from then)."""
    from pytest_longctx.backends.hybrids.transformers import StateDictPair

    fingerprints = (plain.weights_fingerprint(), candidate.weights_fingerprint())
    return StateDictPair(plain.model, candidate.model, None, ("float", kind), fingerprints)


@each_kind("ct-w4a16-g16", "ct-w8a8", "torchao-int8", "torchao-int4-g32", "torchao-int8-dynamic", "bnb-nf4", "bnb-int8")
def test_blame_swaps_every_part_of_a_checkpoint_whichever_way_its_library_runs_it(kind, loaded, checkpoints, float_folder):
    """The float model given every part of the candidate reads as the candidate, and the candidate given every
    part back as the float model: compressed-tensors, loaded de-quantized, by its weights (and its input
    rounding); bitsandbytes' packed nf4 and int8 and torchao's int8 tensors, run as stored, by whole layers,
    costed in the bytes they are stored in."""
    import torch

    from pytest_longctx.backends.hybrids.pair import select_parts

    plain = TransformersBackend.load(str(float_folder), dtype="float32", device="cpu")
    pair = pair_of(plain, loaded(kind), kind)
    assert bool(pair.swapped) == (not kind.startswith("ct-"))
    kit.checkpoints.check_every_part_swaps(pair, plain, loaded(kind), backend_reads)
    if kind.startswith("bnb-"):  # a layer's cost in the bytes bitsandbytes stores: 4 or 8 bits a weight, with its scales
        fresh, _ = load_backend(str(checkpoints(kind)), "hf", "float32", "cpu")  # as loaded: no forward pass has repacked it
        pair = pair_of(plain, fresh, kind)
        layer = plain.model.model.layers[0]
        linear = [m.weight for m in layer.modules() if isinstance(m, torch.nn.Linear)]
        weights, rows = sum(w.numel() for w in linear), sum(w.shape[0] for w in linear)
        norms = sum(p.numel() for n, p in layer.named_parameters() if "norm" in n) * 4  # float32, as they were
        stored = weights // 2 + weights // 64 * 4 if kind == "bnb-nf4" else weights + rows * 4  # absmax a block of 64; SCB a row
        assert pair.cost(select_parts(pair.parts("layer"), ["layer.0"], "layer")).candidate_bytes == stored + norms


@needs_bitsandbytes
def test_blames_hybrids_leave_a_bitsandbytes_candidate_reading_as_loaded(checkpoints, float_folder):
    """bitsandbytes 0.50, on a CPU with AVX-512 BF16, repacks its nf4 weights on the first forward pass, and its
    state_dict() unpacks the weights again but leaves the layer's quant state packed: a model fingerprinted after a
    read then reads garbage (SmolLM2's far drift went from 0.075 to 19 nats). Blame's hybrids carry their
    fingerprint (the pair's, taken as loaded, and the parts'), so scoring them, which describes each, leaves the
    candidate as it was; the candidate as the pair holds it keeps the fingerprint it was loaded with. Asked for
    after such a read, a fingerprint is refused in one line instead of corrupting the model."""
    from pytest_longctx.backends.hybrids.pair import CANDIDATE, select_parts

    plain = TransformersBackend.load(str(float_folder), dtype="float32", device="cpu")
    candidate, _ = load_backend(str(checkpoints("bnb-nf4")), "hf", "float32", "cpu")
    pair = pair_of(plain, candidate, "bnb-nf4")
    want_top1, want = backend_reads(candidate)  # the first read: the weights are repacked where the CPU can
    if any(getattr(getattr(p, "quant_state", None), "packing_format_for_cpu", False) for p in candidate.model.parameters()):
        with pytest.raises(LongctxError, match=r"^model\.layers\.0\.self_attn\.q_proj\.weight: bitsandbytes repacked this layer"):
            weights_fingerprint(candidate.model)  # would corrupt it: refused in one line instead
    for name in ("layer.0", "layer.1"):
        with pair.hybrid(CANDIDATE, select_parts(pair.parts("layer"), [name], "layer"), name) as hybrid:
            assert base.describe(hybrid)["weights"] != candidate.describe()["weights"]
            backend_reads(hybrid)
    with pair.hybrid(CANDIDATE, [], "the candidate") as again:
        assert base.describe(again)["weights"] == candidate.describe()["weights"]
        top1, logprobs = backend_reads(again)
    assert top1 == want_top1 and np.max(np.abs(logprobs - want)) <= 1e-5


@each_kind("torchao-int8", "torchao-int4-g32", "bnb-nf4", "bnb-int8")
def test_blames_fix_set_as_the_config_that_transformers_quantizes_with_makes_the_hybrid_it_measured(
        kind, loaded, float_folder, tmp_path, monkeypatch):
    """The candidate with layer 0's MLP and layer 1's attention kept in float: blame's recipe, the candidate's own
    quantization config with those layers added to the modules it skips, run as printed (Python), makes the
    checkpoint that reads as the hybrid blame measured."""
    from pytest_longctx.backends.hybrids.pair import CANDIDATE, select_parts

    plain = TransformersBackend.load(str(float_folder), dtype="float32", device="cpu")
    pair = pair_of(plain, loaded(kind), kind)
    assert pair.recipe_tool == "transformers"
    kept = select_parts(pair.parts("block"), ["layer.0.mlp", "layer.1.attn"], "block")
    lines = pair.recipe(kept)
    added = [f"model.layers.0.mlp.{m}_proj" for m in ("gate", "up", "down")] + [f"model.layers.1.self_attn.{m}_proj" for m in "qkvo"]
    key = "modules_to_not_convert" if kind.startswith("torchao") else "llm_int8_skip_modules"
    stored = json.loads(json.loads(lines[3].partition("json.loads(")[2].rpartition("))")[0]))
    assert stored[key] == ["lm_head", *added] and lines[0].startswith(f"# transformers: {float_folder} quantized on load again")
    monkeypatch.chdir(tmp_path)
    exec("\n".join(lines), {})  # writes ./fixed
    fixed, _ = load_backend(str(tmp_path / "fixed"), "hf", "float32", "cpu")
    kept_in_float = {n for n, m in fixed.model.named_modules() if type(m).__name__ == "Linear" and type(m.weight.data).__name__ == "Tensor"}
    assert kept_in_float == {"lm_head", *added}
    with pair.hybrid(CANDIDATE, kept, "the fix set") as hybrid:
        top1, logprobs = backend_reads(hybrid)
    want_top1, want = backend_reads(fixed)
    assert top1 == want_top1 and np.max(np.abs(logprobs - want)) <= 1e-5


def test_a_checkpoint_transformers_de_quantizes_on_load_says_so_and_reads_its_weights_exactly(float_folder, tmp_path):
    """transformers' own fp8 format (float8 e4m3 weights, a float32 scale per block of 32x32), written here from
    its definition: the weight is the fp8 value times its block's scale (``weight_scale_inv``). With no fp8 kernel
    on the CPU transformers de-quantizes it on load and drops its quantization_config; the backend still says what
    it is (from the stored config) and that its activations are not rounded, its config digest differs from the
    float model's, and its reads are those of the float model given the de-quantized weights by hand."""
    import shutil

    import torch
    from safetensors.torch import load_file, save_file

    folder = tmp_path / "fp8"
    shutil.copytree(float_folder, folder)
    tensors = load_file(folder / "model.safetensors")
    by_hand = {}
    for name in [n for n in tensors if n.endswith("_proj.weight")]:
        rows, columns = tensors[name].shape
        blocks = tensors[name].float().reshape(rows // 32, 32, columns // 32, 32)
        scale = blocks.abs().amax(dim=(1, 3)) / torch.finfo(torch.float8_e4m3fn).max  # [rows/32, columns/32]
        stored = (blocks / scale[:, None, :, None]).to(torch.float8_e4m3fn)
        tensors[name], tensors[name.replace(".weight", ".weight_scale_inv")] = stored.reshape(rows, columns), scale
        by_hand[name] = (stored.float() * scale[:, None, :, None]).reshape(rows, columns)
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    config = json.loads((folder / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [32, 32]}
    (folder / "config.json").write_text(json.dumps(config))

    backend, _ = load_backend(str(folder), "hf", "float32", "cpu")
    described = backend.describe()
    assert described["quantization"] == ("fp8 e4m3 weights in blocks of 32x32, de-quantized on load: its weights are judged, "
                                         "not its activation rounding (dynamic) (transformers has no kernel for it here)")
    plain = TransformersBackend.load(str(float_folder), dtype="float32", device="cpu")
    assert described["config"] != plain.describe()["config"]
    top1, logprobs = backend_reads(backend)
    with torch.no_grad():
        for name, weight in by_hand.items():
            plain.model.get_parameter(name).copy_(weight)
    want_top1, want = naive_reads(plain.model)
    assert top1 == want_top1 and np.max(np.abs(logprobs - want)) <= 1e-5


# --------------------------------------------------------------- auto-round's own format


@needs_auto_round
def test_an_auto_round_checkpoint_runs_in_float16_on_its_kernel_and_reads_its_weights(loaded, checkpoints, float_folder):
    """auto-round's own format, run by transformers through auto-round's kernel: on the CPU it picks one
    that computes in float16 whatever dtype was asked for, and the backend says so (the dtype, the kernel
    in the description, the kernel in the config digest). Its reads are the float model given the weights
    multiplied out by hand, read in float32 with one full pass, to float16's rounding (6 u ln V, as
    tests/test_dtypes.py derives it); far closer than the float model's own reads."""
    from importlib.metadata import version

    backend = loaded("autoround-g32")
    described = backend.describe()
    kernel = described["quantization"].rpartition("run by its ")[2].partition(" kernel")[0]
    assert kernel.startswith("auto_round:")
    assert described["quantization"] == KINDS["autoround-g32"][1].format(version=version("auto-round"), kernel=kernel)
    assert described["dtype"] == "float16" and described["versions"]["auto-round"] == version("auto-round")
    top1, logprobs = backend_reads(backend)

    model = TransformersBackend.load(str(float_folder), dtype="float32", device="cpu").model
    model.load_state_dict(kit.checkpoints.gptq_packed_by_hand(checkpoints("autoround-g32")), strict=True)
    want_top1, want = naive_reads(model)
    plain = backend_reads(TransformersBackend.load(str(float_folder), dtype="float32", device="cpu"))[1]
    kit.checkpoints.check_float16_reads("auto-round reads against its weights by hand", logprobs, want, plain, VOCAB)


@needs_auto_round
def test_an_auto_round_checkpoint_whose_layers_no_kernel_here_takes_is_refused_not_read_at_random(float_folder, tmp_path):
    """auto-round's own format with zero points (asymmetric) packs its layers as AWQ does; without gptqmodel, auto-round
    0.16 on the CPU picks no kernel that takes them ("auto_round:fake"), and transformers loads every linear layer
    random (its report: MISSING) and reads on. The gate refuses it in one line that says so and where it loads. This
    test fails once auto-round loads the format here: then read it like the symmetric one."""
    pytest.importorskip("auto_round")
    if importlib.util.find_spec("gptqmodel") is not None:
        pytest.skip("gptqmodel is installed: auto-round runs this packing through its kernels (tests/test_gptqmodel_checkpoints.py)")
    folder = quantized_variants.saved_by_auto_round(float_folder, tmp_path / "asymmetric", 32, symmetric=False)
    with pytest.raises(LongctxError) as exc:
        TransformersBackend.load(str(folder), dtype="float32", device="cpu")
    message = str(exc.value)
    assert message.startswith(f"--model {folder}: 14 of its tensors are not in its weights files (model.layers.0.mlp.down_proj.weight")
    assert ("would hold random values and the gate would judge a model nobody made: its quantization (auto-round int4, groups "
            "of 32, asymmetric, auto_round:auto_awq packing, by auto-round ") in message
    assert "did not take those layers here" in message and "pip install 'pytest-longctx[gptqmodel]'" in message


@needs_auto_round
def test_blame_on_an_auto_round_checkpoint_is_one_line_that_says_why_not(loaded, float_folder):
    """auto-round's kernel holds each layer packed (``qweight``, a buffer) under names the float model does not
    have: blame cannot split it into parts, and says so in one line that names the packed tensor, not that the
    two are of different architectures."""
    from pytest_longctx.backends.hybrids.transformers import check_compatible

    plain = TransformersBackend.load(str(float_folder), dtype="float32", device="cpu")
    with pytest.raises(LongctxError) as exc:
        check_compatible(plain.model, loaded("autoround-g32").model, "float", "rounded")
    message = str(exc.value)
    assert message.startswith("--model rounded runs its layers packed (auto-round int4, groups of 32, auto_round:auto_gptq "
                              "packing, by auto-round ")
    assert "; model.layers.0.self_attn.q_proj.qweight): blame " in message and message.endswith("stands without blame")
    assert "architecture" not in message and "\n" not in message


# --------------------------------------------------------------- a config.json edited, a weights file cut short


def edited(source: Path, out: Path, change) -> str:
    """``source`` copied to ``out`` with ``change`` applied to its config.json's dict."""
    import shutil

    shutil.copytree(source, out)
    config = json.loads((out / "config.json").read_text())
    change(config)
    (out / "config.json").write_text(json.dumps(config))
    return str(out)


def load_error(folder: str) -> str:
    """The one line loading ``folder`` through the backend gives."""
    with pytest.raises(LongctxError) as exc:
        load_backend(folder, "hf", "float32", "cpu")
    message = str(exc.value)
    assert "\n" not in message and "offline" not in message and "Traceback" not in message
    return message


def set_in(*path: str, value: Any):
    def change(config: dict[str, Any]) -> None:
        *parents, leaf = path
        for key in parents:
            config = config[key]
        config[leaf] = value

    return change


@pytest.mark.parametrize("path, value, field, found", [
    (("quantization_config",), "compressed-tensors", "quantization_config", "a string"),
    (("quantization_config", "config_groups"), [{"targets": ["Linear"], "weights": W4A16_G16}],
     "quantization_config.config_groups", "a list"),
])
@needs_compressed_tensors
def test_a_quantization_config_of_the_wrong_shape_names_the_file_and_the_field(path, value, field, found, checkpoints, tmp_path):
    folder = edited(checkpoints("ct-w4a16-g16"), tmp_path / "edited", set_in(*path, value=value))
    message = load_error(folder)
    assert message.startswith(f"--model {folder}: {folder}/config.json, field '{field}': expected an object")
    assert f"found {found}" in message and "re-save" in message


@pytest.mark.parametrize("where, field", [
    (("quantization_config", "format"), "quantization_config.format"),
    (("quantization_config", "config_groups", "group_0", "format"), "quantization_config.config_groups.group_0.format"),
])
@needs_compressed_tensors
def test_a_compressed_tensors_format_that_does_not_exist_names_the_field_and_the_formats(where, field, checkpoints, tmp_path):
    from compressed_tensors import CompressionFormat

    folder = edited(checkpoints("ct-w4a16-g16"), tmp_path / "edited", set_in(*where, value="frobnicated"))
    message = load_error(folder)
    assert message.startswith(f"--model {folder}: {folder}/config.json, field '{field}': 'frobnicated' is not a format "
                              "compressed-tensors ")
    assert all(f.value in message for f in CompressionFormat) and "validation error" not in message


@needs_compressed_tensors
def test_num_bits_edited_names_the_field_and_the_bits_its_weights_are_packed_in(checkpoints, tmp_path):
    """compressed-tensors packs 3 bits too: the stored tensors are 4-bit packed, so the config does not describe
    them; no other library version wrote it otherwise."""
    folder = edited(checkpoints("ct-w4a16-g16"), tmp_path / "bits3",
                    set_in("quantization_config", "config_groups", "group_0", "weights", "num_bits", value=3))
    message = load_error(folder)
    assert message.startswith(f"--model {folder}: {folder}/config.json, field "
                              "'quantization_config.config_groups.group_0.weights.num_bits': 3, but ")
    assert f"{folder}/model.safetensors holds its layers packed in 4 bits" in message
    assert "version that wrote it" not in message and "set it back to 4" in message


def without(source: Path, out: Path, dropped: list[str]) -> Path:
    """``source`` copied to ``out`` with ``dropped`` deleted from its model.safetensors (its metadata kept)."""
    import shutil

    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    shutil.copytree(source, out)
    with safe_open(str(out / "model.safetensors"), "pt") as handle:
        metadata = handle.metadata()
    tensors = load_file(out / "model.safetensors")
    assert set(dropped) <= set(tensors)
    save_file({k: v for k, v in tensors.items() if k not in dropped}, out / "model.safetensors", metadata=metadata)
    return out


DOWN = "model.layers.0.mlp.down_proj"


@pytest.mark.parametrize("kind, dropped", [
    pytest.param("ct-w4a16-g16", [f"{DOWN}.weight_packed"], marks=needs_compressed_tensors),
    pytest.param("torchao-int8", [f"{DOWN}._weight_qdata", f"{DOWN}._weight_scale", f"{DOWN}._weight_zero_point"],
                 marks=needs_torchao),
    pytest.param("torchao-int8", [f"{DOWN}._weight_qdata"], marks=needs_torchao),
])
def test_a_quantized_weights_file_missing_a_layers_weight_says_which_and_that_the_file_is_incomplete(
        kind, dropped, checkpoints, tmp_path):
    """Not that the layer's format has no kernel here: the file lacks tensors the other layers hold."""
    folder = without(checkpoints(kind), tmp_path / "holed", dropped)
    message = load_error(str(folder))
    assert message.startswith(f"--model {folder}: {folder}/model.safetensors lacks {', '.join(sorted(dropped))}")
    assert "the file is incomplete" in message and "re-download or re-save" in message
    assert "kernel" not in message and "GPU" not in message


def test_an_unknown_quant_method_names_the_field_and_is_described_as_not_applied(float_folder, tmp_path):
    """transformers warns that it skips a quant_method it does not know and loads the weights as stored: gated
    so, a float model would be judged as a quantization it is not. The load is one line naming the field; a
    model loaded by hand that way is described as unquantized, from its modules."""
    import transformers
    from transformers import AutoModelForCausalLM

    folder = with_quantization(float_folder, tmp_path / "frobnicated", {"quant_method": "frobnicate", "bits": 4})
    message = load_error(folder)
    assert message.startswith(f"--model {folder}: {folder}/config.json, field 'quantization_config.quant_method': "
                              f"'frobnicate' is not a quantization method transformers {transformers.__version__} knows (")
    assert "compressed-tensors" in message and "delete quantization_config" in message
    by_hand = TransformersBackend(AutoModelForCausalLM.from_pretrained(folder))
    assert by_hand.describe()["quantization"].startswith("none: config.json's quantization_config (frobnicate 4-bit) was not "
                                                          "applied")


FP8_CONFIGS = {
    "fp8": {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [32, 32]},
    "compressed-tensors": {"quant_method": "compressed-tensors", "format": "float-quantized", "ignore": ["lm_head"],
                           "quantization_status": "compressed",
                           "config_groups": {"group_0": {"targets": ["Linear"], "format": "float-quantized",
                                                         "weights": FP8_CHANNEL, "input_activations": FP8_TOKEN}}},
}


@pytest.mark.parametrize("method", [
    "fp8", pytest.param("compressed-tensors", marks=needs_compressed_tensors),
])
def test_an_fp8_config_over_float_weights_is_refused_and_described_as_not_applied(method, float_folder, tmp_path):
    """The weights file holds the float model's float32 tensors bit for bit, the config says fp8: transformers'
    fp8 loads them as stored on a CPU (it 'de-quantizes'), compressed-tensors misses its scales. Either way
    nothing is quantized, and the line says the config claims what the weights do not hold."""
    import torch
    from transformers import AutoModelForCausalLM

    if torch.cuda.is_available():
        pytest.skip("a GPU is here: transformers' fp8 would quantize on load")
    folder = with_quantization(float_folder, tmp_path / "fp8", FP8_CONFIGS[method])
    message = load_error(folder)
    assert message.startswith(f"--model {folder}: {folder}/config.json, field 'quantization_config': it says the weights "
                              f"are quantized ({quantized.describe(FP8_CONFIGS[method])}), but {folder}/model.safetensors "
                              "holds them in float (F32)")
    assert "delete quantization_config" in message and "de-quantized on load" not in message
    if method == "fp8":  # a model loaded by hand so is described from its modules and weights, not from its config
        described = TransformersBackend(AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)).describe()
        assert described["quantization"].startswith("none: config.json's quantization_config (fp8 e4m3 weights in blocks of "
                                                    "32x32) was not applied")


@needs_compressed_tensors
def test_a_scheme_group_that_takes_no_module_is_not_described(checkpoints, loaded, tmp_path):
    """A second group whose targets match no layer of the model quantizes nothing: the description says what the
    loaded modules carry, the first group's scheme alone."""
    def add_group(config: dict[str, Any]) -> None:
        groups = config["quantization_config"]["config_groups"]
        groups["group_1"] = {**groups["group_0"], "targets": ["re:.*experts.*"], "weights": {**groups["group_0"]["weights"], "num_bits": 8}}

    folder = edited(checkpoints("ct-w4a16-g16"), tmp_path / "two-groups", add_group)
    backend, _ = load_backend(folder, "hf", "float32", "cpu")
    assert backend.describe()["quantization"] == KINDS["ct-w4a16-g16"][1]
    assert backend.weights_fingerprint() == loaded("ct-w4a16-g16").weights_fingerprint()
