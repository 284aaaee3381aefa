"""bfloat16 and float16 against float32, on tiny models: the log-probabilities a half-precision
model reads, their tolerances, its top-1, and what separates the dtypes in caches and baselines.

The tolerances follow from the formats. A half-precision number keeps 8 significant bits
(bfloat16: 7 stored + 1 implied) or 11 (float16), so each rounding moves it by up to a
relative u = 2**-8 (0.0039) or 2**-11 (0.00049). The logits come out of the LM head rounded so
(log-softmax and top-k then run in float32 from them, backends/hf/), after every layer's
activations were rounded the same way; a log-probability is a difference of logits, so its
error scales with the logits' spread, here about ln(vocabulary) (the log-probabilities of
these near-uniform models lie around -ln 4096 = -8.3). Measured on them (2 layers,
initialiser range 0.2, 600 tokens read in 128-token calls over a cached prefix, seeds 0-3),
the largest |logp_half - logp_float32| is 1.7-3.4 u*ln(V) in bfloat16 (up to 0.11 nats) and
2.5-4.6 in float16 (up to 0.017 nats); the tests allow 6 u*ln(V): 0.20 nats in bfloat16,
0.024 in float16. Larger weights are amplified more (at initialiser range 1.0: 0.57 nats in
bfloat16, 0.14 in float16), which is why the gate compares a model with a baseline of its
own dtype (``compare_judged``).
"""
from __future__ import annotations

import copy
import json

import numpy as np
import pytest
from kit.models import save_model, tiny_qwen3

from pytest_longctx.backends.base import describe
from pytest_longctx.backends.hf import TransformersBackend
from pytest_longctx.scoring.cache import IDENTITY
from pytest_longctx.scoring.identity import compare_judged

torch = pytest.importorskip("torch")

VOCAB = 4096
UNIT_ROUNDOFF = {"bfloat16": 2.0**-8, "float16": 2.0**-11}
TOLERANCE = 6  # in units of u*ln(VOCAB): at most 4.6 measured (the module docstring)


def reads(model, seed: int, chunk_size: int = 128):
    """600 random ids read at every third position: the next token's and one fixed token's
    log-probabilities, with the top 2."""
    ids = np.random.default_rng(seed).integers(0, VOCAB, 600).tolist()
    positions = list(range(0, 599, 3))
    tokens = [[ids[p + 1], 5] for p in positions]
    return TransformersBackend(model, chunk_size=chunk_size).read(ids, positions, tokens, top_k=2)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_half_precision_reads_float32_log_probabilities_within_its_rounding(dtype, seed):
    model = tiny_qwen3(VOCAB, seed=seed)
    exact = reads(model, seed)
    half = reads(copy.deepcopy(model).to(getattr(torch, dtype)), seed)

    want, got = np.array(exact.logprobs), np.array(half.logprobs)
    tolerance = TOLERANCE * UNIT_ROUNDOFF[dtype] * np.log(VOCAB)
    assert np.all(np.isfinite(got))
    worst = float(np.max(np.abs(got - want)))
    assert worst <= tolerance, f"{dtype}: {worst:.4f} nats off, {worst / tolerance * TOLERANCE:.1f} u*ln(V)"
    # top-1 moves only at near ties: where float32's best two are within the tolerance
    gap = np.array([values[0] - values[1] for _, values in exact.top])
    near_tie = gap < tolerance
    moved = np.array(half.top1) != np.array(exact.top1)
    assert not np.any(moved & ~near_tie), f"{dtype}: top-1 moved at float32 gaps {gap[moved & ~near_tie]}"
    # (seed 0: bfloat16 moves 8 of 200 among 108 near ties, float16 3 among 19)
    # the top-k is read from the same float32 log-softmax: where the order holds, within the tolerance
    for (ids, values), (exact_ids, exact_values) in zip(half.top, exact.top):
        assert values == sorted(values, reverse=True) and len(ids) == 2
        if ids == exact_ids:
            assert np.max(np.abs(np.array(values) - exact_values)) <= tolerance


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_the_log_softmax_of_half_precision_logits_runs_in_float32(dtype):
    """Read as the half-precision logits' float32 log-softmax, not rounded again to the half
    format (bfloat16 would round a log-probability of -8 to a multiple of 1/32)."""
    model = tiny_qwen3(VOCAB).to(getattr(torch, dtype))
    result = reads(model, seed=0, chunk_size=1024)  # one call: the same logits as a whole forward
    ids = np.random.default_rng(0).integers(0, VOCAB, 600).tolist()
    positions = list(range(0, 599, 3))
    # over the tokens the backend runs (cut after the last read): in bfloat16 the CPU's matrix
    # kernels may block a 598-row product otherwise than a 600-row one (0.009 nats at the last
    # read on a CPU without AVX-512)
    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([ids[: positions[-1] + 1]])).logits[0]
    assert logits.dtype == getattr(torch, dtype)
    logp = torch.log_softmax(logits.float(), dim=-1)
    want = [[logp[p, ids[p + 1]].item(), logp[p, 5].item()] for p in positions]
    assert np.max(np.abs(np.array(result.logprobs) - want)) < 1e-5


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> str:
    return str(save_model(tmp_path_factory.mktemp("tiny"), tiny_qwen3(VOCAB)))


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_a_half_precision_load_says_its_dtype_and_keys_its_own_cache(saved, dtype):
    exact = TransformersBackend.load(saved, dtype="float32", device="cpu")
    half = TransformersBackend.load(saved, dtype=dtype, device="cpu")
    assert {p.dtype for p in half.model.parameters()} == {getattr(torch, dtype)}
    assert describe(half)["dtype"] == dtype and describe(exact)["dtype"] == "float32"
    # the score cache's identity (its keys' prefix) and the baseline's meta tell them apart
    identity = {k: describe(exact)[k] for k in IDENTITY}
    assert {k: describe(half)[k] for k in IDENTITY} != identity
    assert json.dumps(identity, sort_keys=True) != json.dumps({k: describe(half)[k] for k in IDENTITY}, sort_keys=True)


def test_a_baseline_of_the_same_model_in_another_dtype_is_said_to_drift_by_rounding():
    def rounding(baseline: dict, candidate: dict) -> list[str]:
        return [w for w in compare_judged(baseline, candidate).warnings if "rounding" in w]

    baseline = {"model": "m", "config": "c1", "weights": "w1", "dtype": "float32"}
    said = rounding(baseline, {**baseline, "weights": "w2", "dtype": "bfloat16"})
    assert len(said) == 1 and "float32" in said[0] and "bfloat16" in said[0]
    assert rounding(baseline, {**baseline, "model": "other", "dtype": "bfloat16"}) == []  # another model: its own drift
    assert rounding(baseline, {**baseline, "config": "c2", "dtype": "bfloat16"}) == []
    assert rounding(baseline, baseline) == []
