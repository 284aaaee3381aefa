"""Accuracy and drift by how far back the needed text lies (``distance_tokens`` of the
targets): facts recalled and tool-call targets right, model against baseline, and the
model's drift from the baseline's distribution, per distance bucket."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable

from pytest_longctx.data.records import FAR_TOKENS, config_kind
from pytest_longctx.gate.losses import TargetLoss
from pytest_longctx.metrics.drift import ReadDrift
from pytest_longctx.metrics.raw import mean

# Bucket edges in tokens; the last bucket is open. The second is where a tool-call target counts as far.
EDGES = (0, FAR_TOKENS, 1024, 2048, 4096, 8192, 16384, 32768)
KINDS = {"facts": "Facts recalled", "tool_calls": "Tool-call targets right"}


def _tokens(n: int) -> str:
    return f"{n // 1024}k" if n >= 1024 else str(n)


def bucket_label(index: int) -> str:
    low = EDGES[index]
    if index + 1 == len(EDGES):
        return f">= {_tokens(low)}"
    return f"< {_tokens(EDGES[1])}" if index == 0 else f"{_tokens(low)}-{_tokens(EDGES[index + 1])}"


def bucket_of(distance: int) -> int:
    return max(i for i, edge in enumerate(EDGES) if distance >= edge)


@dataclass(frozen=True)
class Bucket:
    """Hits by how far back the needed text lies: one distance bucket, baseline against model."""

    label: str
    count: int  # targets scored on both sides
    baseline: float  # share hit under the baseline
    model: float


def buckets(targets: Iterable[TargetLoss], kind: str) -> list[Bucket]:
    """The distance buckets of one kind (``facts`` or ``tool_calls``) that hold targets, nearest first."""
    found: dict[int, list[TargetLoss]] = {}
    for target in targets:
        if config_kind(target.config) == kind and target.distance_tokens is not None:
            found.setdefault(bucket_of(target.distance_tokens), []).append(target)
    return [
        Bucket(bucket_label(i), len(group), sum(t.hit_baseline for t in group) / len(group),
               sum(t.hit_model for t in group) / len(group))
        for i, group in sorted(found.items())
    ]


@dataclass(frozen=True)
class DriftBucket:
    """Drift by how far back the needed text lies: one distance bucket (or the control reads)."""

    label: str
    reads: int  # reads with a finite KL_K
    kl: float | None  # mean KL_K against the baseline
    baseline: float | None  # mean log-probability of the token read, baseline
    model: float | None  # the same, model


CONTROL_LABEL = "control (first 512)"


def drift_buckets(reads: Iterable[ReadDrift]) -> list[DriftBucket]:
    """The control reads, then the distance buckets that hold reads, nearest first."""
    found: dict[int, list[ReadDrift]] = {}
    for read in reads:
        if read.group == "control":
            found.setdefault(-1, []).append(read)
        elif read.distance is not None:
            found.setdefault(bucket_of(read.distance), []).append(read)
    buckets = []
    for index, group in sorted(found.items()):
        finite = [r.kl for r in group if math.isfinite(r.kl)]
        pairs = [(r.base_lp, r.model_lp) for r in group if r.dlogp is not None]
        buckets.append(DriftBucket(CONTROL_LABEL if index < 0 else bucket_label(index), len(finite), mean(finite),
                                   mean([b for b, _ in pairs]), mean([m for _, m in pairs])))
    return buckets
