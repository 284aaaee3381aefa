"""Per-target raw scores: what the metrics are computed from and what a reference
scores file keeps (docs/metrics.md#files).

facts / tool_calls: ``{"hits": [bool, ...], "logprobs": [float, ...]}``, one entry per
scored token; rules: ``{"score_without": float, "score_with": float}``; a target that
could not be scored: ``{"unaligned": reason}``. A NaN or infinite log-probability is
kept as ``None`` (JSON has no NaN): the target is counted as ``nonfinite``.
"""
from __future__ import annotations

from typing import Any

Record = dict[str, Any]


def values(record: Record) -> list[float | None]:
    if "unaligned" in record:
        return []
    if "logprobs" in record:
        return list(record["logprobs"])
    return [record["score_without"], record["score_with"]]


def is_scored(record: Record) -> bool:
    """Scored and finite: a target that enters the metrics."""
    return "unaligned" not in record and None not in values(record)


def is_nonfinite(record: Record) -> bool:
    return "unaligned" not in record and None in values(record)


def recall_counts(every: list[Record]) -> tuple[list[Record], dict[str, int]]:
    """(the scored records, counts of scored, unaligned, non-finite and recalled ones):
    a recalled answer has every one of its tokens as the top-1 prediction."""
    scored = [r for r in every if is_scored(r)]
    return scored, {
        "scored": len(scored),
        "unaligned": sum("unaligned" in r for r in every),
        "nonfinite": sum(is_nonfinite(r) for r in every),
        "recalled": sum(all(r["hits"]) for r in scored),
    }


def mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def ratio(part: int | float, whole: int | float) -> float | None:
    return part / whole if whole else None
