"""A checkpoint read both ways, for the quantized-checkpoint tests: through the backend's read
session in two pieces over its KV cache, and by tests/naive.py's full forward pass."""
from __future__ import annotations

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
    """The same reads from one plain forward pass of ``model`` (tests/naive.py)."""
    import naive  # imports torch: only once a test runs

    found = naive.reads(model, ids, [(p, ids[p + 1]) for p in positions])
    return [top for top, _ in found], np.array([logprob for _, logprob in found])


def check_every_part_swaps(pair: Any, original: Any, candidate: Any, reads: Any) -> None:
    """Blame's hybrids of ``pair`` with every part taken from the other side read as that side does: the candidate
    given every part back as ``original``, the original given every part of the candidate as ``candidate``
    (``reads``: a backend -> (top-1, log-probabilities))."""
    from pytest_longctx.backends.hybrids.parts import CANDIDATE, ORIGINAL

    every = pair.parts("layer")
    for base, other in ((CANDIDATE, original), (ORIGINAL, candidate)):
        with pair.hybrid(base, every, "hybrid") as hybrid:
            top1, logprobs = reads(hybrid)
        want_top1, want = reads(other)
        assert top1 == want_top1 and np.max(np.abs(logprobs - want)) <= 1e-5, f"{base} with every part of the other side"
