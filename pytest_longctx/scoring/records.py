"""Per-target records from the engine's read scores: what the metrics are computed from
and what a scores file keeps (the formats are described in ``metrics/raw.py`` and
``metrics/drift.py``)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from pytest_longctx.data.records import RuleItem
from pytest_longctx.metrics.drift import block
from pytest_longctx.metrics.raw import Record
from pytest_longctx.scoring.engine import ItemReadScores, ReadScore
from pytest_longctx.scoring.reads import ItemReads, TargetReads


def _number(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _record(plan: ItemReads, target: TargetReads, read_scores: list[ReadScore] | None) -> Record:
    if read_scores is None:
        return {"unaligned": target.unaligned}
    if isinstance(plan.item, RuleItem):  # no control reads
        without, with_rule = read_scores
        return {"score_without": _number(without.logprob), "score_with": _number(with_rule.logprob)}
    return {
        "hits": [s.top1 == r.token for s, r in zip(read_scores, target.reads)],
        "logprobs": [_number(s.logprob) for s in read_scores],
    }


@dataclass
class ItemRecords:
    """One item's records: per target, per control read, and its drift block (or None)."""

    targets: list[Record]
    controls: list[Record]
    drift: dict[str, Any] | None


def item_records(plan: ItemReads, scores: ItemReadScores, top_k: int) -> ItemRecords:
    """The records of one planned item. The drift block covers every read in order, with the
    model's top-k where the backend gave them and the log-probabilities of the reference's
    ids where the reads asked for them (``Read.also``)."""
    records = [_record(plan, target, found) for target, found in zip(plan.every, scores)]
    reads = [(read, score) for target, found in zip(plan.every, scores) if found is not None
             for read, score in zip(target.reads, found)]
    drift = None
    if reads and top_k:
        tops = [score.top for _, score in reads]
        top = tops if all(t is not None for t in tops) else None
        asked = all(read.also for read, _ in reads)
        ref = [score.also for _, score in reads] if asked else None
        if top is not None or ref is not None:
            drift = block([(read.seq, read.pos) for read, _ in reads], [score.top1 for _, score in reads], top, ref, top_k)
    return ItemRecords(records[:len(plan.targets)], records[len(plan.targets):], drift)
