"""Runs the forward passes the planned reads need, and nothing more."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from .errors import LongctxError
from .progress import Progress
from .tokens import ItemReads


@dataclass(frozen=True)
class ReadScore:
    top1: int
    logprob: float


# Per item, per target: one ReadScore per read of the target, or None when unaligned.
ItemScores = list[list[ReadScore] | None]


def forwarded_tokens(plan: ItemReads) -> int:
    """Tokens one item costs when each sequence runs up to its last read position."""
    ends: dict[int, int] = {}
    for target in plan.targets:
        for read in target.reads:
            ends[read.seq] = max(ends.get(read.seq, 0), read.pos)  # read at pos-1: run pos tokens
    return sum(ends.values())


def run(backend: Any, plans: Sequence[ItemReads], progress: Progress | None = None) -> list[ItemScores]:
    """Scores of every read of every planned item, one ``backend.read`` per sequence."""
    results: list[ItemScores] = []
    for plan in plans:
        per_read: dict[tuple[int, int], ReadScore] = {}
        for seq_index, ids in enumerate(plan.sequences):
            reads = [(t, r) for t, target in enumerate(plan.targets) for r, read in enumerate(target.reads) if read.seq == seq_index]
            if not reads:
                continue
            positions = [plan.targets[t].reads[r].pos - 1 for t, r in reads]
            tokens = [[plan.targets[t].reads[r].token] for t, r in reads]
            result = backend.read(ids, positions, tokens)
            if len(result.top1) != len(reads) or len(result.logprobs) != len(reads):
                raise LongctxError(f"backend {type(backend).__name__}: read() returned {len(result.top1)} results for {len(reads)} positions")
            for (t, r), top1, logprobs in zip(reads, result.top1, result.logprobs):
                per_read[(t, r)] = ReadScore(int(top1), float(logprobs[0]))
        results.append(
            [None if target.unaligned else [per_read[(t, r)] for r in range(len(target.reads))] for t, target in enumerate(plan.targets)]
        )
        if progress:
            progress.advance(items=1, tokens=forwarded_tokens(plan))
    return results
