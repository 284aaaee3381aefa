"""Checkpoints made by llm-compressor itself, in its own environment (it pins an older
transformers and compressed-tensors), read here in the main one through the transformers
backend as a user's would be (issue 32). CI makes them first:

    bash scripts/setup-venv.sh .llmcompressor-venv llmcompressor
    .llmcompressor-venv/bin/python benchmarks/llmcompressor_variants.py --out DIR
    LONGCTX_LLMCOMPRESSOR_CHECKPOINTS=DIR python -m pytest tests/test_llmcompressor_checkpoints.py

Without that variable these tests skip, saying so; with LONGCTX_TEST_LLMCOMPRESSOR=1 a missing
checkpoint fails them. The independent check: each checkpoint's integers and scales are read
from its safetensors file here with numpy and multiplied out by hand (4-bit values unpacked from
their int32 words), the result loaded into the plain float model, and that model read with one
full forward pass and a full-vocabulary log-softmax (tests/kit/naive.py). W8A8 also rounds each
token's input to every quantized layer to int8, written here from the format's definition."""
from __future__ import annotations

import json
import os
from functools import partial
from pathlib import Path
from typing import Any

import kit.checkpoints
import numpy as np
import pytest
from kit.needs import needs, skip_unless

from pytest_longctx.backends import base
from pytest_longctx.backends.hf import TransformersBackend

pytestmark = [needs("torch", "transformers", install='pip install -e ".[hf]"'),
              needs("compressed_tensors", install="pip install 'pytest-longctx[compressed-tensors]'")]

MAKE = ("bash scripts/setup-venv.sh .llmcompressor-venv llmcompressor && .llmcompressor-venv/bin/python "
        "benchmarks/llmcompressor_variants.py --out DIR, then LONGCTX_LLMCOMPRESSOR_CHECKPOINTS=DIR")
RTN, GPTQ, SQ = "round to nearest", "GPTQ", "SmoothQuant, round to nearest"
W8A8 = "W8A8, int8 weights per channel, int8 activations dynamic per token, rounded as they run"
# kind -> what the backend says it is, before "by llm-compressor (compressed-tensors X wrote it)"
KINDS = {
    "w4a16": f"W4A16, groups of 128; {RTN}",
    "w4a16-g32": f"W4A16, groups of 32; {RTN}",
    "w4a16-ignore": f"W4A16, groups of 128; {RTN}",
    "w8a8": f"{W8A8}; {RTN}",
    "w8a8-smoothquant": f"{W8A8}; {SQ}",
    "w4a16-gptq": f"W4A16, groups of 128; {GPTQ}",
    "w4a16-awq-g32": f"W4A16, groups of 32; AWQ, {RTN}",
    "w4a16-autoround-g32": "W4A16, groups of 32; AutoRound",
    "w8a16": f"W8A16, groups of 128; {RTN}",
    "fp8-dynamic": f"W8A8, float8 weights per channel, float8 activations dynamic per token, rounded as they run; {RTN}",
    "fp8-block": f"W8A8, float8 weights in blocks of 128x128, float8 activations dynamic per group of 128, rounded as they run; {RTN}",
    "nvfp4a16": f"W4A16, float4 weights in groups of 16 with a scale per tensor too (NVFP4); {RTN}",
    "mxfp4a16": f"W4A16, float4 weights in groups of 32 (MXFP4); {RTN}",
    "w8a8-kv-fp8": f"{W8A8}; float8 KV cache per tensor, rounded as it runs; {RTN}",
}
# the kinds that round their activations (or keys and values) as they run
ROUNDING = ("w8a8", "w8a8-smoothquant", "fp8-dynamic", "fp8-block", "w8a8-kv-fp8")
IDS = np.random.default_rng(0).integers(0, 128, 300).tolist()  # the tiny model's 128 tokens
POSITIONS = list(range(0, 299, 7))
CUT = 150


@pytest.fixture(scope="module")
def made() -> Path:
    """The folder benchmarks/llmcompressor_variants.py wrote, every kind in it."""
    where = os.environ.get("LONGCTX_LLMCOMPRESSOR_CHECKPOINTS")
    folder = Path(where) if where else None
    missing = [k for k in ("float", *KINDS) if folder is None or not (folder / k / "config.json").is_file()]
    problem = ("LONGCTX_LLMCOMPRESSOR_CHECKPOINTS is not set" if folder is None
               else f"LONGCTX_LLMCOMPRESSOR_CHECKPOINTS={folder} lacks {', '.join(missing)}" if missing else None)
    skip_unless(problem, f"make them: {MAKE}", required_by="LONGCTX_TEST_LLMCOMPRESSOR")
    return folder


@pytest.fixture(scope="module")
def loaded(made):
    backends: dict[str, TransformersBackend] = {}

    def get(kind: str) -> TransformersBackend:
        if kind not in backends:
            backends[kind] = TransformersBackend.load(str(made / kind), dtype="float32", device="cpu")
        return backends[kind]

    return get


# the reads at POSITIONS through the backend (IDS in two pieces, cut at CUT) and naively
backend_reads = partial(kit.checkpoints.backend_reads, ids=IDS, positions=POSITIONS, cut=CUT)
naive_reads = partial(kit.checkpoints.naive_reads, ids=IDS, positions=POSITIONS)


# --------------------------------------------------------------- the same model, made by hand


E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6], dtype=np.float32)  # float4's magnitudes by their three low bits
FLOAT8_MAX = 448.0  # the largest float8 e4m3 number


def unpack_ints(words: np.ndarray, columns: int, bits: int) -> np.ndarray:
    """Signed ``bits``-bit values from int32 words, 32 / bits a word, the first in the lowest bits,
    each stored plus 2**(bits - 1) (0..15 for -8..7 at 4 bits): [rows, words] -> [rows, columns]."""
    unsigned = words.astype(np.int64) & 0xFFFFFFFF  # [rows, words]
    values = np.stack([(unsigned >> (bits * k)) & ((1 << bits) - 1) for k in range(32 // bits)], axis=-1)
    return values.reshape(words.shape[0], -1)[:, :columns] - (1 << (bits - 1))


def unpack_float4(packed: np.ndarray) -> np.ndarray:
    """float4 (e2m1) values from bytes, two a byte, the first in the low four bits, each a sign bit
    over three bits that index E2M1: [rows, bytes] -> [rows, 2 * bytes]."""
    nibbles = np.stack([packed & 0xF, packed >> 4], axis=-1).reshape(packed.shape[0], -1)
    return np.where(nibbles & 0x8, -1.0, 1.0).astype(np.float32) * E2M1[nibbles & 0x7]


def scales(tensors: dict[str, np.ndarray], layer: str, weights: dict[str, Any]) -> np.ndarray:
    """A layer's weight scales as float32 [rows, groups] (one group a row: per channel); MXFP4's
    are stored as exponents (2**(e - 127)), NVFP4's are divided by the layer's global scale."""
    scale = tensors[f"{layer}.weight_scale"]
    if weights.get("scale_dtype") == "torch.uint8":
        return np.exp2(scale.astype(np.float32) - 127)
    global_scale = tensors.get(f"{layer}.weight_global_scale")
    return scale.astype(np.float32) / (global_scale if global_scale is not None else 1)


def de_quantized(folder: Path) -> tuple[dict[str, np.ndarray], set[str]]:
    """The checkpoint's weights as float32, each quantized one its integers (or float8 / float4
    values) times its scale (per output row, per group of inputs or per block), and the names of
    the quantized layers. NVFP4's are rounded to bfloat16 after, as compressed-tensors hands them
    over (the product of three scales is not a bfloat16 number in general)."""
    import torch
    from safetensors.torch import load_file

    config_groups = json.loads((folder / "config.json").read_text())["quantization_config"]["config_groups"]
    weights_scheme = next(iter(config_groups.values()))["weights"]  # every kind here has one scheme
    # numpy has neither bfloat16 (AutoRound stores the layers it leaves alone in it) nor float8: widened exactly
    tensors = {name: (t.float() if t.dtype in (torch.bfloat16, torch.float8_e4m3fn) else t).numpy()
               for name, t in load_file(folder / "model.safetensors").items()}
    weights: dict[str, np.ndarray] = {}
    quantized: set[str] = set()
    for name, tensor in tensors.items():
        layer, _, kind = name.rpartition(".")
        if kind == "weight_packed" and tensor.dtype == np.uint8:
            values = unpack_float4(tensor)  # [rows, columns]
        elif kind == "weight_packed":
            columns = int(tensors[f"{layer}.weight_shape"][1])
            values = unpack_ints(tensor, columns, weights_scheme["num_bits"]).astype(np.float32)
        elif kind == "weight" and f"{layer}.weight_scale" in tensors:
            values = tensor.astype(np.float32)  # int8 or float8 stored as is
        else:
            # the KV cache's scales (k_scale, v_scale) round no weight
            if kind not in ("weight_scale", "weight_shape", "weight_zero_point", "weight_global_scale", "k_scale", "v_scale"):
                weights[name] = tensor.astype(np.float32)
            continue
        scale = scales(tensors, layer, weights_scheme)  # [rows, groups], or [row blocks, column blocks]
        if weights_scheme["strategy"] == "block":
            rows, columns = weights_scheme["block_structure"]
            scale = np.repeat(np.repeat(scale, rows, axis=0), columns, axis=1)[:values.shape[0], :values.shape[1]]
        groups = values.reshape(values.shape[0], scale.shape[1], -1)  # [rows, groups, per group]
        weight = (groups * scale[..., None]).reshape(values.shape)
        if weights_scheme["strategy"] == "tensor_group":
            weight = torch.from_numpy(weight).to(torch.bfloat16).float().numpy()
        weights[f"{layer}.weight"] = weight
        quantized.add(layer)
    return weights, quantized


def round_per_token(x: Any, divisor: float) -> Any:
    """Each token's vector rounded to int8 steps of (its largest magnitude / divisor), kept in [-128, 127]."""
    import torch

    step = (x.abs().amax(dim=-1, keepdim=True) / divisor).clamp_min(torch.finfo(x.dtype).eps)  # [..., 1]
    return torch.clamp(torch.round(x / step), -128, 127) * step


def to_float8(x: Any, scale: Any) -> Any:
    """``x`` on float8 e4m3's grid times ``scale``: the nearest float8 number to x / scale, scaled back."""
    import torch

    return (x / scale).clamp(-FLOAT8_MAX, FLOAT8_MAX).to(torch.float8_e4m3fn).to(x.dtype) * scale


def round_to_float8(x: Any, group: int | None = None) -> Any:
    """Each token's vector (or each group of ``group`` of its numbers) scaled so that its largest
    magnitude is float8's largest, 448, rounded to the nearest float8 e4m3 number and scaled back."""
    import torch

    pieces = x.reshape(*x.shape[:-1], -1, group or x.shape[-1])  # [..., groups, per group]
    scale = (pieces.abs().amax(dim=-1, keepdim=True) / FLOAT8_MAX).clamp_min(torch.finfo(x.dtype).eps)
    return to_float8(pieces, scale).reshape(x.shape)


def hand_made(folder: Path, rounding: Any = None) -> Any:
    """The plain float model of ``folder``'s config with its de-quantized weights; with ``rounding``
    (a function of a tensor) every quantized layer's input rounded by it first."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    stored = json.loads((folder / "config.json").read_text())
    stored.pop("quantization_config")
    config = AutoConfig.for_model(stored.pop("model_type"), **stored)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    weights, quantized = de_quantized(folder)
    model.load_state_dict({name: torch.from_numpy(w) for name, w in weights.items()}, strict=True)
    if rounding is not None:
        for name in quantized:
            model.get_submodule(name).register_forward_pre_hook(lambda _, args: (rounding(args[0]),))
    return model


def test_the_checkpoints_record_what_made_them(made):
    record = json.loads((made / "made.json").read_text())
    assert set(KINDS) <= set(record["kinds"]) and record["versions"]["llmcompressor"]
    for kind in KINDS:
        quantization = json.loads((made / kind / "config.json").read_text())["quantization_config"]
        assert quantization["quant_method"] == "compressed-tensors"
        assert quantization["version"] == record["versions"]["compressed-tensors"]
        assert (made / kind / "recipe.yaml").is_file()


@pytest.mark.parametrize("kind", [k for k in KINDS if k not in ROUNDING])
def test_weight_only_reads_equal_a_naive_pass_of_the_model_de_quantized_by_hand(kind, made, loaded):
    backend = loaded(kind)
    # what it computes in: float4 weights widened, their bfloat16 scales (not computed with) left out
    assert backend.describe()["dtype"] == "float32"
    top1, logprobs = backend_reads(backend)
    want_top1, want_logprobs = naive_reads(hand_made(made / kind))
    assert top1 == want_top1
    assert np.max(np.abs(logprobs - want_logprobs)) <= 1e-5
    float_logprobs = backend_reads(TransformersBackend.load(str(made / "float"), dtype="float32", device="cpu"))[1]
    assert np.max(np.abs(float_logprobs - logprobs)) > 1e-3  # rounded weights: far from the float model


@pytest.mark.parametrize("kind, group", [("fp8-dynamic", None), ("fp8-block", 128)])
def test_float8_activations_are_rounded_to_float8_as_they_run(kind, group, made, loaded):
    """FP8_DYNAMIC rounds each token's input to every quantized layer to float8 e4m3 on a scale of its
    largest magnitude / 448, FP8_BLOCK each group of 128 of its numbers: the reads are the hand-made
    model rounding so, to float32 rounding; the same model with its activations left alone reads
    measurably otherwise."""
    top1, logprobs = backend_reads(loaded(kind))
    want_top1, want = naive_reads(hand_made(made / kind, partial(round_to_float8, group=group)))
    unrounded = naive_reads(hand_made(made / kind))[1]
    gap, weights_only = float(np.max(np.abs(logprobs - want))), float(np.max(np.abs(logprobs - unrounded)))
    print(f"\n{kind} reads against the hand-made model, largest gap in nats: {gap} (its weights alone: {weights_only})")
    assert top1 == want_top1 and gap <= 1e-5
    assert weights_only > 10 * max(gap, 1e-6)


@pytest.mark.parametrize("kind", ["w8a8", "w8a8-smoothquant"])
def test_w8a8_activations_are_rounded_on_compressed_tensors_grid_not_vllms(kind, made, loaded):
    """transformers runs a W8A8 checkpoint through compressed-tensors' forward, which rounds each
    token's input to int8 in steps of its largest magnitude / 127.5 (its symmetric range, 255 steps,
    halved) and clips the largest to 127; vLLM's int8 kernels step by the largest / 127. The reads
    are the hand-made model rounding as compressed-tensors does, to float32 rounding; rounding as
    vLLM does, or not at all, reads measurably otherwise."""
    top1, logprobs = backend_reads(loaded(kind))
    folder = made / kind
    gaps = {}
    for name, divisor in (("compressed-tensors", 127.5), ("vLLM", 127.0), ("weights only", None)):
        want_top1, want = naive_reads(hand_made(folder, divisor and partial(round_per_token, divisor=divisor)))
        gaps[name] = float(np.max(np.abs(logprobs - want)))
        if name == "compressed-tensors":
            assert top1 == want_top1
    print(f"\n{kind} reads against the hand-made model, largest gap in nats: {gaps}")
    assert gaps["compressed-tensors"] <= 1e-5
    assert gaps["vLLM"] > 10 * max(gaps["compressed-tensors"], 1e-6)
    assert gaps["weights only"] > 10 * max(gaps["compressed-tensors"], 1e-6)


def test_a_float8_kv_cache_is_rounded_with_the_checkpoints_scales(made, loaded, monkeypatch):
    """W8A8 with llm-compressor's float8 KV cache: transformers drops the k_scale / v_scale it saved beside
    each attention layer and would read with a full-precision cache. The reads, in two pieces over the
    backend's KV cache, are the hand-made W8A8 model with every key rounded by hand to float8 on its
    layer's k_scale as the rotary embedding returns it (what the cache holds) and every value on v_scale
    as v_proj makes it, to float32 rounding; the same model without the cache's rounding reads
    measurably otherwise."""
    import torch
    from safetensors import safe_open
    from transformers.models.qwen3 import modeling_qwen3

    folder = made / "w8a8-kv-fp8"
    with safe_open(str(folder / "model.safetensors"), "np") as stored:
        scales = {name: torch.from_numpy(stored.get_tensor(name)) for name in stored.keys() if name.endswith(("k_scale", "v_scale"))}
    top1, logprobs = backend_reads(loaded("w8a8-kv-fp8"))
    activations = partial(round_per_token, divisor=127.5)  # W8A8's, as compressed-tensors rounds them
    unrounded = naive_reads(hand_made(folder, activations))[1]
    model, layer = hand_made(folder, activations), {}
    for index, decoder in enumerate(model.model.layers):
        attention = f"model.layers.{index}.self_attn"
        decoder.self_attn.register_forward_pre_hook(lambda *_, index=index: layer.update(index=index))
        decoder.self_attn.v_proj.register_forward_hook(lambda _, __, out, s=scales[f"{attention}.v_scale"]: to_float8(out, s))
    rotate = modeling_qwen3.apply_rotary_pos_emb

    def rotated_then_rounded(q: Any, k: Any, cos: Any, sin: Any, *args: Any) -> Any:
        q, k = rotate(q, k, cos, sin, *args)
        return q, to_float8(k, scales[f"model.layers.{layer['index']}.self_attn.k_scale"])

    monkeypatch.setattr(modeling_qwen3, "apply_rotary_pos_emb", rotated_then_rounded)
    want_top1, want = naive_reads(model)
    gap, cache_exact = float(np.max(np.abs(logprobs - want))), float(np.max(np.abs(logprobs - unrounded)))
    print(f"\nw8a8-kv-fp8 reads against the hand-made model, largest gap in nats: {gap} (a full-precision cache: {cache_exact})")
    assert top1 == want_top1 and gap <= 1e-5
    assert cache_exact > 10 * max(gap, 1e-6)


@pytest.mark.parametrize("cache_dtype, said", [("fp8", "rounded as it runs"), ("auto", "not rounded here")])
def test_under_vllm_the_kv_cache_scheme_is_said_rounded_only_with_a_float8_cache(made, cache_dtype, said):
    """vLLM uses a checkpoint's KV cache scales only when its cache is float8 (kv-cache-dtype=fp8); with its default
    cache the description must not claim the rounding. The vLLM backend's description, without vLLM: its engine's
    settings as vLLM holds them."""
    from types import SimpleNamespace

    from pytest_longctx.backends.vllm.in_process import VllmBackend

    folder = made / "w8a8-kv-fp8"
    stored = json.loads((folder / "config.json").read_text())["quantization_config"]
    engine = SimpleNamespace(vllm_config=SimpleNamespace(cache_config=SimpleNamespace(cache_dtype=cache_dtype)))
    served = SimpleNamespace(model_config=SimpleNamespace(hf_config=SimpleNamespace(quantization_config=stored), model=str(folder),
                                                          quantization="compressed-tensors"),
                             llm=SimpleNamespace(llm_engine=engine))
    assert f"; float8 KV cache per tensor, {said}" in VllmBackend.quantization(served)


def test_under_vllm_int8_activations_in_float32_on_an_amx_cpu_are_refused_before_the_engine_starts(made):
    """vLLM's CPU build runs int8 W8A8 layers with its AMX kernel where the CPU has AMX tiles, and that kernel takes
    bfloat16 or float16 activations only: in float32 the engine started, then died at the first read (seen in CI on
    such a CPU). The refusal names the model and what to do, and only where that kernel would run: int8 activations,
    float32, AMX; not float8 activations, weight-only schemes, bfloat16 or a CPU without AMX."""
    from pytest_longctx.backends.vllm.in_process import amx_int8_refusal

    def refused(kind: str, dtype: str = "float32", amx: bool = True) -> str | None:
        stored = json.loads((made / kind / "config.json").read_text())["quantization_config"]
        return amx_int8_refusal(str(made / kind), stored, dtype, amx)

    for kind in ("w8a8", "w8a8-smoothquant", "w8a8-kv-fp8"):
        said = refused(kind)
        assert said is not None and str(made / kind) in said and "bfloat16" in said and "AMX" in said
    assert refused("w8a8", amx=False) is None and refused("w8a8", dtype="bfloat16") is None
    assert all(refused(kind) is None for kind in ("w4a16", "w8a16", "fp8-dynamic", "w4a16-gptq"))
    assert amx_int8_refusal("plain", {}, "float32", True) is None


def test_a_kv_cache_scheme_the_backend_cannot_run_is_one_line(made, tmp_path):
    """A dynamic KV cache scheme, or one whose scales the weights do not hold, stops the load with one line
    naming the scheme or the missing tensor and what to do; kv-cache=fp8 on top of the checkpoint's own
    cache is refused, and so is blame, whose hybrids cannot take that rounding apart."""
    import shutil

    from pytest_longctx.backends.hf import factory
    from pytest_longctx.errors import LongctxError

    dynamic, unscaled = tmp_path / "dynamic", tmp_path / "unscaled"
    shutil.copytree(made / "w8a8-kv-fp8", dynamic)
    config = json.loads((dynamic / "config.json").read_text())
    config["quantization_config"]["kv_cache_scheme"]["dynamic"] = True
    (dynamic / "config.json").write_text(json.dumps(config))
    with pytest.raises(LongctxError, match=r'kv_cache_scheme \(.*"dynamic": true.*only static symmetric.*kv-cache-dtype=fp8'):
        TransformersBackend.load(str(dynamic), dtype="float32", device="cpu")
    shutil.copytree(made / "w8a8", unscaled)  # its weights hold no k_scale
    config = json.loads((made / "w8a8-kv-fp8" / "config.json").read_text())
    (unscaled / "config.json").write_text(json.dumps(config))
    with pytest.raises(LongctxError, match=r"hold no model\.layers\.0\.self_attn\.k_scale: re-save it"):
        TransformersBackend.load(str(unscaled), dtype="float32", device="cpu")
    with pytest.raises(LongctxError, match="has a KV cache scheme of its own"):
        factory(str(made / "w8a8-kv-fp8"), dtype="float32", device="cpu", options={"kv-cache": "fp8"})
    with pytest.raises(LongctxError, match="rounds its keys and values as its kv_cache_scheme says: blame's hybrids"):
        fix_set_pair(made, "w8a8-kv-fp8")


def test_an_asymmetric_checkpoint_this_stack_cannot_load_is_one_line_not_a_damaged_file(made):
    """W4A16_ASYM packs its zero points eight to an int32 word as compressed-tensors 0.19 writes them;
    transformers 5.25 with compressed-tensors 0.20 expects them unpacked and refuses the shapes. The
    line says what the checkpoint is, which versions disagree, and where to gate it instead. When a
    later version loads it, this test fails: then add it to KINDS, read like the others."""
    from pytest_longctx.errors import LongctxError

    folder = made / "w4a16-asym"
    skip_unless(None if (folder / "config.json").is_file() else f"{folder} is missing", f"make it: {MAKE}",
                required_by="LONGCTX_TEST_LLMCOMPRESSOR")
    with pytest.raises(LongctxError) as exc:
        TransformersBackend.load(str(folder), dtype="float32", device="cpu")
    message = str(exc.value)
    assert message.startswith(f"--model {folder}: its quantized tensors (compressed-tensors W4A16, groups of 128, asymmetric) "
                              "are stored in shapes that transformers with compressed-tensors ")
    assert "wrote it: the format as written and as read here differ, the file is not damaged" in message
    assert "damaged or partly downloaded" not in message and "\n" not in message


def test_the_ignore_list_leaves_those_layers_in_float(made, loaded):
    """``w4a16-ignore`` ignored layer 0's attention and every down_proj: their weights are the float
    model's bit for bit, in the file and as loaded; every other linear layer is 4-bit."""
    from safetensors.numpy import load_file

    plain = load_file(made / "float" / "model.safetensors")
    stored = load_file(made / "w4a16-ignore" / "model.safetensors")
    model = loaded("w4a16-ignore").model
    layers = [name for name in plain if name.endswith("_proj.weight")]
    ignored = [n for n in layers if n.startswith("model.layers.0.self_attn.") or n.endswith("down_proj.weight")]
    assert len(ignored) == 6 and len(layers) == 14
    for name in layers:
        here = model.get_parameter(name).detach().numpy()
        if name in ignored:
            assert np.array_equal(stored[name], plain[name]) and np.array_equal(here, plain[name])
        else:
            assert name not in stored and f"{name.removesuffix('.weight')}.weight_packed" in stored
            assert not np.array_equal(here, plain[name]) and len(np.unique(here[0, :128])) <= 16  # 4 bits a group


def test_the_backend_says_what_each_is_and_who_made_it(made, loaded):
    written = json.loads((made / "made.json").read_text())["versions"]["compressed-tensors"]
    for kind, words in KINDS.items():
        backend = loaded(kind)
        said = f"compressed-tensors {words}, by llm-compressor (compressed-tensors {written} wrote it)"
        meta = base.describe(backend)  # the results' meta and junit properties are made of it
        assert meta["quantization"] == said
        assert set(meta["versions"]) == {"torch", "transformers", "compressed-tensors"}
    assert TransformersBackend.load(str(made / "float"), dtype="float32", device="cpu").describe()["quantization"] == "none"


def test_each_quantization_has_its_own_fingerprint(loaded):
    """The same float model made fourteen ways: the weight digests differ but for W8A8 with and without
    a float8 KV cache (the same weights), whose config digests differ (the cache's scales are not
    weights); the config digest follows the scheme (GPTQ's records its activation order, the ignore
    list its layers), so the methods that change only weights share the config of round to nearest
    in the same scheme: SmoothQuant W8A8's, AWQ's and AutoRound's groups of 32 that of w4a16-g32."""
    described = {kind: loaded(kind).describe() for kind in KINDS}
    assert len({d["weights"] for d in described.values()}) == len(KINDS) - 1
    assert described["w8a8"]["weights"] == described["w8a8-kv-fp8"]["weights"]
    assert len({d["config"] for d in described.values()}) == len(KINDS) - 3
    assert described["w8a8"]["config"] == described["w8a8-smoothquant"]["config"]
    assert described["w4a16-g32"]["config"] == described["w4a16-awq-g32"]["config"] == described["w4a16-autoround-g32"]["config"]


def test_a_recipe_names_its_methods_in_order_and_nothing_is_said_without_one(tmp_path):
    """made_by reads the modifiers' names from the recipe's text as llm-compressor writes it; an
    unknown one is named without its suffix."""
    from pytest_longctx.backends import quantization_words as quantized

    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("default_stage:\n  default_modifiers:\n    AWQModifier:\n      scheme: W4A16\n"
                      "    FancyNewModifier:\n      ignore: [lm_head]\n")
    config = {"quant_method": "compressed-tensors"}
    assert quantized.made_by(recipe, config, "0.21.0") == "AWQ, FancyNew, by llm-compressor (compressed-tensors 0.21.0 wrote it)"
    assert quantized.made_by(None, config) == "" and quantized.made_by(tmp_path / "absent.yaml", config) == ""
    assert quantized.made_by(recipe, {"quant_method": "torchao"}) == ""


# --------------------------------------------------------------- blame's recipe, re-made by llm-compressor


def fix_set_pair(made: Path, kind: str) -> Any:
    from pytest_longctx.backends.hybrids.transformers import StateDictPair

    original, candidate = (TransformersBackend.load(str(made / k), dtype="float32", device="cpu") for k in ("float", kind))
    return StateDictPair(original.model, candidate.model, None, (str(made / "float"), str(made / kind)))


def ignore_lists(lines: list[str]) -> dict[str, list[str]]:
    """Each modifier's ignore list in a recipe's YAML, by the modifier's name."""
    import yaml

    found: dict[str, list[str]] = {}

    def visit(node: Any) -> None:
        for key, value in node.items() if isinstance(node, dict) else ():
            if key.endswith("Modifier"):
                found[key] = value.get("ignore")
            else:
                visit(value)

    visit(yaml.safe_load("\n".join(lines)))
    return found


def test_a_recipe_with_tuples_keeps_them_and_says_its_calibration_moves_the_other_layers(made):
    """SmoothQuant's recipe holds its mappings as Python tuples (``!!python/tuple``): the fix set's recipe is
    the same document, tuples and all, with the layers added to the quantizing modifier's ignore list only
    (SmoothQuant's is left as it was), after a comment that says SmoothQuant calibrates."""
    import yaml

    from pytest_longctx.backends.hybrids import recipes as quantized

    written = made / "w8a8-smoothquant" / "recipe.yaml"
    keep = ["model.layers.0.mlp.up_proj", "model.layers.1.self_attn.k_proj"]
    lines = quantized.recipe_keeping(written, keep, "my/float")
    comments = [line for line in lines if line.startswith("#")]
    assert comments == ['# llm-compressor: oneshot(model="my/float", recipe="fix.yaml", dataset=<the calibration data the '
                        'candidate was made with>), then save_pretrained(..., save_compressed=True)',
                        "# the candidate's recipe.yaml with the fix set's 2 linear layers added to each ignore list",
                        "# SmoothQuant quantizes each layer on what the layers before it compute: re-made, the other layers "
                        "differ from the candidate's too; gate the result"]
    want = yaml.full_load(written.read_text())  # PyYAML's full loader makes the tuples itself
    modifiers = want["default_stage"]["default_modifiers"]
    assert isinstance(modifiers["SmoothQuantModifier"]["mappings"][0], tuple)
    modifiers["QuantizationModifier"]["ignore"] += keep
    assert yaml.full_load("\n".join(lines)) == want


@pytest.mark.parametrize("kind", ["w4a16", "w8a8", "w8a8-smoothquant", "fp8-dynamic", "nvfp4a16"])
def test_blames_hybrids_with_every_part_swapped_read_as_the_other_model(kind, made, loaded):
    """A compressed-tensors layer rounds as it runs (its weight to its scheme, W8A8 also its input): the
    candidate with every part restored reads as the float model (no layer rounds any more), and the
    float model with every part of the candidate as the candidate (each layer then rounds its input
    as the candidate's does), which hybrids that only moved weights would not."""
    kit.checkpoints.check_every_part_swaps(fix_set_pair(made, kind), loaded("float"), loaded(kind), backend_reads)


def test_blames_recipe_made_by_llm_compressor_computes_what_the_fix_set_hybrid_did(made, tmp_path):
    """The round-to-nearest candidate with layer 0's MLP and layer 1's attention kept: blame's recipe, run by
    llm-compressor itself (in its own environment, LONGCTX_LLMCOMPRESSOR_PYTHON), makes the checkpoint whose
    every weight is the hybrid's, bit for bit, and whose reads are the hybrid's (rounding to nearest treats
    each layer on its own, so leaving some in float changes no other)."""
    import subprocess

    import torch

    from pytest_longctx.backends.hybrids.pair import CANDIDATE, select_parts

    python = os.environ.get("LONGCTX_LLMCOMPRESSOR_PYTHON")
    skip_unless(None if python else "LONGCTX_LLMCOMPRESSOR_PYTHON is not set",
                "point it at the python of the environment scripts/setup-venv.sh DIR llmcompressor makes",
                required_by="LONGCTX_TEST_LLMCOMPRESSOR")
    pair = fix_set_pair(made, "w4a16")
    kept = select_parts(pair.parts("block"), ["layer.0.mlp", "layer.1.attn"], "block")
    lines = pair.recipe(kept)
    added = [f"model.layers.0.mlp.{m}_proj" for m in ("gate", "up", "down")] + [
        f"model.layers.1.self_attn.{m}_proj" for m in "qkvo"]
    assert ignore_lists(lines) == {"QuantizationModifier": ["lm_head", *added]}
    assert not any(line.startswith("# not kept") or "calibrate" in line for line in lines)
    (tmp_path / "fix.yaml").write_text("\n".join(lines) + "\n")
    done = subprocess.run([python, str(Path(__file__).parents[1] / "benchmarks" / "llmcompressor_variants.py"),
                           "--model", str(made / "float"), "--recipe", str(tmp_path / "fix.yaml"), "--out", str(tmp_path / "fixed")],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    fixed = TransformersBackend.load(str(tmp_path / "fixed"), dtype="float32", device="cpu")
    def weights(model: Any) -> dict[str, Any]:  # the tensors it computes with: not a quantized layer's scales and shape
        return {n: p.detach().clone() for n, p in model.named_parameters() if not n.endswith(("_scale", "_shape", "_zero_point"))}

    with pair.hybrid(CANDIDATE, kept, "hybrid") as hybrid:
        held = weights(hybrid.model)
        want_top1, want = backend_reads(hybrid)
    mine = weights(fixed.model)
    assert set(mine) == set(held) and len(held) == 25
    assert [n for n, w in held.items() if not torch.equal(mine[n], w)] == []
    top1, logprobs = backend_reads(fixed)
    assert top1 == want_top1 and np.array_equal(logprobs, want)
    assert np.max(np.abs(logprobs - backend_reads(TransformersBackend.load(str(made / "w4a16"), dtype="float32"))[1])) > 1e-3
