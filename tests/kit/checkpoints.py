"""A checkpoint read both ways, for the quantized-checkpoint tests: through the backend's read
session in two pieces over its KV cache, and by kit/naive.py's full forward pass."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np


def backend_reads(backend: Any, ids: list[int], positions: list[int], cut: int) -> tuple[list[int], np.ndarray]:
    """(top-1, log p of the next token) at ``positions``, read as ids[:cut] then ids[cut:]."""
    session = backend.session()
    top1: list[int] = []
    logprobs: list[float] = []
    for start, stop in ((0, cut), (cut, len(ids))):
        here = [p for p in positions if start <= p < stop]
        found = session.advance(ids[start:stop], [p - start for p in here], [[ids[p + 1]] for p in here])
        top1 += found.top1
        logprobs += [values[0] for values in found.logprobs]
    return top1, np.array(logprobs)


def naive_reads(model: Any, ids: list[int], positions: list[int]) -> tuple[list[int], np.ndarray]:
    """The same reads from one plain forward pass of ``model`` (kit/naive.py)."""
    from kit import naive  # imports torch: only once a test runs

    found = naive.reads(model, ids, [(p, ids[p + 1]) for p in positions])
    return [top for top, _ in found], np.array([logprob for _, logprob in found])


def check_every_part_swaps(pair: Any, original: Any, candidate: Any, reads: Any) -> None:
    """Blame's hybrids of ``pair`` with every part taken from the other side read as that side does: the candidate
    given every part back as ``original``, the original given every part of the candidate as ``candidate``
    (``reads``: a backend -> (top-1, log-probabilities))."""
    from pytest_longctx.backends.hybrids.pair import CANDIDATE, ORIGINAL

    every = pair.parts("layer")
    for base, other in ((CANDIDATE, original), (ORIGINAL, candidate)):
        with pair.hybrid(base, every, "hybrid") as hybrid:
            top1, logprobs = reads(hybrid)
        want_top1, want = reads(other)
        assert top1 == want_top1 and np.max(np.abs(logprobs - want)) <= 1e-5, f"{base} with every part of the other side"


def gptq_packed_by_hand(folder: Path) -> dict[str, Any]:
    """The weights of a checkpoint in GPTQ's packing (the GPTQ format; auto-round's own) multiplied out here, as float32
    tensors by name: each quantized layer's ``qweight`` holds eight 4-bit values a 32-bit word along
    its input dimension (the first in the lowest bits), ``qzeros`` eight zero points a word along
    its output dimension, stored less one, ``scales`` one per group of inputs and output; the weight
    is (value - zero point) x scale, transposed to [output, input]. ``g_idx`` (each input's group) is
    left out: without activation order the groups are the inputs in order. The other tensors are
    widened from the dtype they are stored in."""
    import torch
    from safetensors.torch import load_file

    stored = {n: (t.float() if t.is_floating_point() else t).numpy() for n, t in load_file(folder / "model.safetensors").items()}
    weights: dict[str, Any] = {}
    for name, tensor in stored.items():
        layer, _, kind = name.rpartition(".")
        if kind in ("qzeros", "scales", "g_idx"):
            continue
        if kind != "qweight":
            weights[name] = torch.from_numpy(tensor.astype(np.float32))
            continue
        words = tensor.astype(np.int64) & 0xFFFFFFFF  # [input / 8, output]
        values = np.stack([(words >> (4 * k)) & 0xF for k in range(8)], axis=1).reshape(-1, words.shape[1])  # [input, output]
        zero_words = stored[f"{layer}.qzeros"].astype(np.int64) & 0xFFFFFFFF  # [groups, output / 8]
        zeros = np.stack([(zero_words >> (4 * k)) & 0xF for k in range(8)], axis=-1).reshape(zero_words.shape[0], -1) + 1
        scales = stored[f"{layer}.scales"]  # [groups, output]
        group = values.shape[0] // scales.shape[0]
        weight = (values - np.repeat(zeros, group, axis=0)) * np.repeat(scales, group, axis=0)  # [input, output]
        weights[f"{layer}.weight"] = torch.from_numpy(weight.T.astype(np.float32).copy())
    return weights


def check_float16_reads(label: str, logprobs: np.ndarray, want: np.ndarray, plain: np.ndarray, vocab: int) -> None:
    """Reads of a model that computes in float16 against ``want`` (the same model computed otherwise): within
    float16's rounding of a log-softmax over ``vocab`` words (6 ulps of log V), and at least 3 times closer than the
    float model's reads (``plain``), so the check could tell them apart."""
    tolerance = 6 * 2.0**-11 * np.log(vocab)
    gap, away = float(np.max(np.abs(logprobs - want))), float(np.max(np.abs(plain - want)))
    print(f"\n{label}: {gap:.5f} nats (float16's tolerance {tolerance:.4f}); the float model's: {away:.5f}")
    assert gap <= tolerance and away > 3 * gap
