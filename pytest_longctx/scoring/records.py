"""Per-target records from the engine's read scores: what the metrics are computed from
and what a scores file keeps (the format is described in ``metrics/raw.py``)."""
from __future__ import annotations

import math

from pytest_longctx.data.records import RuleItem
from pytest_longctx.metrics.raw import Record
from pytest_longctx.scoring.engine import ItemReadScores
from pytest_longctx.scoring.reads import ItemReads


def _number(value: float) -> float | None:
    return value if math.isfinite(value) else None


def target_records(plan: ItemReads, scores: ItemReadScores) -> list[Record]:
    records: list[Record] = []
    for target, read_scores in zip(plan.targets, scores):
        if read_scores is None:
            records.append({"unaligned": target.unaligned})
        elif isinstance(plan.item, RuleItem):
            without, with_rule = read_scores
            records.append({"score_without": _number(without.logprob), "score_with": _number(with_rule.logprob)})
        else:
            records.append({
                "hits": [s.top1 == r.token for s, r in zip(read_scores, target.reads)],
                "logprobs": [_number(s.logprob) for s in read_scores],
            })
    return records
