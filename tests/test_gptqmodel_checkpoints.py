"""Checkpoints in the GPTQ and AWQ formats (``quant_method`` gptq, awq), which transformers runs
through gptqmodel, gated in gptqmodel's own environment (it pins numpy 2.2.6, older than the main
environment's; issue 32):

    bash scripts/setup-venv.sh .gptqmodel-venv gptqmodel
    LONGCTX_TEST_GPTQMODEL=1 .gptqmodel-venv/bin/python -m pytest tests/test_gptqmodel_checkpoints.py

Elsewhere these tests skip, saying so; with LONGCTX_TEST_GPTQMODEL=1 a missing library fails them.
The checkpoints are made here by auto-round (round to nearest, int4 in groups of 32) exporting
each format, as ``benchmarks/quantized_variants.py --only gptq-g32,awq-g32`` does. The independent
checks: the GPTQ checkpoint's packed integers multiplied out by hand (tests/kit/checkpoints.py) and
read by one full forward pass of the float model given them; both formats' reads against a naive
full pass of the loaded model."""
from __future__ import annotations

from functools import partial
from pathlib import Path

import kit.checkpoints
import numpy as np
import pytest
from kit.models import save_model, tiny_qwen3
from kit.needs import needs

from pytest_longctx.backends.hf import TransformersBackend

SETUP = ("bash scripts/setup-venv.sh DIR gptqmodel, then LONGCTX_TEST_GPTQMODEL=1 DIR/bin/python -m pytest "
         "tests/test_gptqmodel_checkpoints.py")
pytestmark = [needs("torch", "transformers", install='pip install -e ".[hf]"'),
              needs("gptqmodel", "optimum", "auto_round", install=SETUP, required_by="LONGCTX_TEST_GPTQMODEL")]

VOCAB = 128
IDS = np.random.default_rng(0).integers(0, VOCAB, 300).tolist()
POSITIONS = list(range(0, 299, 7))
backend_reads = partial(kit.checkpoints.backend_reads, ids=IDS, positions=POSITIONS, cut=150)
naive_reads = partial(kit.checkpoints.naive_reads, ids=IDS, positions=POSITIONS)
# kind -> what the backend says it is
KINDS = {"gptq-g32": "gptq 4-bit, groups of 32, by auto-round {version}; run by its TorchAtenLinear kernel",
         "awq-g32": "awq 4-bit, groups of 32, gemm packing, by auto-round {version}; run by its TorchAtenAwqLinear kernel"}


@pytest.fixture(scope="module")
def float_folder(tmp_path_factory) -> Path:
    return save_model(tmp_path_factory.mktemp("float"), tiny_qwen3(VOCAB, width=64))


@pytest.fixture(scope="module")
def made(float_folder, tmp_path_factory):
    import quantized_variants

    return {kind: quantized_variants.make(kind, float_folder, tmp_path_factory.mktemp(kind)) for kind in KINDS}


@pytest.mark.parametrize("kind", KINDS)
def test_a_gptq_or_awq_checkpoint_loads_reads_as_a_naive_pass_and_says_what_it_is(kind, made, float_folder):
    from importlib.metadata import version

    backend = TransformersBackend.load(str(made[kind]), dtype="float32", device="cpu")
    described = backend.describe()
    assert described["quantization"] == KINDS[kind].format(version=version("auto-round"))
    assert described["dtype"] == "float32" and described["versions"]["gptqmodel"] == version("gptqmodel")
    top1, logprobs = backend_reads(backend)
    want_top1, want = naive_reads(backend.model)
    assert top1 == want_top1 and np.max(np.abs(logprobs - want)) <= 1e-5
    plain = backend_reads(TransformersBackend.load(str(float_folder), dtype="float32", device="cpu"))[1]
    assert np.max(np.abs(plain - logprobs)) > 1e-4  # 4-bit weights: not the float model


def test_a_gptq_checkpoint_reads_its_weights_multiplied_out_by_hand_in_bfloat16(made, float_folder):
    """gptqmodel's CPU kernel (torch's int4 matrix product) computes with exactly the weights the GPTQ
    packing stores, but takes each layer's input in bfloat16 and gives its output in bfloat16, whatever
    the model's dtype: the float32 model given the weights multiplied out by hand, each quantized layer's
    input and output rounded to bfloat16, read by one full pass, reads what the backend reads; without
    that rounding it reads measurably otherwise."""
    import torch

    top1, logprobs = backend_reads(TransformersBackend.load(str(made["gptq-g32"]), dtype="float32", device="cpu"))
    gaps = {}
    for rounded in (True, False):
        model = TransformersBackend.load(str(float_folder), dtype="float32", device="cpu").model
        model.load_state_dict(kit.checkpoints.gptq_packed_by_hand(made["gptq-g32"]), strict=True)
        for name, layer in model.named_modules():
            if rounded and name.startswith("model.layers.") and name.endswith("_proj"):
                layer.register_forward_pre_hook(lambda _, args: (args[0].to(torch.bfloat16).float(),))
                layer.register_forward_hook(lambda _, args, out: out.to(torch.bfloat16).float())
        want_top1, want = naive_reads(model)
        gaps[rounded] = float(np.max(np.abs(logprobs - want)))
        if rounded:
            assert top1 == want_top1
    print(f"\nGPTQ reads against its weights by hand, largest gap in nats: {gaps[True]} in bfloat16, {gaps[False]} in float32")
    assert gaps[True] <= 1e-5 and gaps[False] > 100 * max(gaps[True], 1e-6)


def test_the_two_formats_of_one_rounding_have_their_own_fingerprints(made):
    gptq, awq = (TransformersBackend.load(str(made[k]), dtype="float32", device="cpu").describe() for k in KINDS)
    assert gptq["weights"] != awq["weights"] and gptq["config"] != awq["config"]


def test_an_asymmetric_auto_round_checkpoint_runs_on_gptqmodels_awq_kernel(float_folder, tmp_path):
    """auto-round's own format with zero points packs its layers as AWQ does; where gptqmodel is installed auto-round
    runs them on gptqmodel's AWQ kernel (without it, nothing here takes them: tests/test_quantized_checkpoints.py). It
    computes in float16: its reads equal a naive full pass of the loaded model within float16's rounding of a
    log-softmax over the vocabulary (6 ulps of log V), and are measurably not the float model's."""
    from importlib.metadata import version

    import quantized_variants

    folder = quantized_variants.saved_by_auto_round(float_folder, tmp_path / "asymmetric", 32, symmetric=False)
    backend = TransformersBackend.load(str(folder), dtype="float32", device="cpu")
    described = backend.describe()
    assert described["quantization"] == (f"auto-round int4, groups of 32, asymmetric, auto_round:auto_awq packing, by auto-round "
                                         f"{version('auto-round')}; run by its gptqmodel:awq_torch kernel")
    assert described["dtype"] == "float16"
    top1, logprobs = backend_reads(backend)
    want_top1, want = naive_reads(backend.model)
    plain = backend_reads(TransformersBackend.load(str(float_folder), dtype="float32", device="cpu"))[1]
    kit.checkpoints.check_float16_reads("asymmetric auto-round reads against a naive pass", logprobs, want, plain, VOCAB)
