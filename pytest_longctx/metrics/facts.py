"""facts (docs/metrics.md#facts): a query is recalled when every answer token is the top-1 prediction."""
from __future__ import annotations

from typing import Any, Sequence

from pytest_longctx.data.records import FactItem
from pytest_longctx.metrics.raw import Record, is_scored, mean, ratio, recall_counts


def item_summary(records: Sequence[Record]) -> dict[str, Any]:
    scored = [r for r in records if is_scored(r)]
    recalled = sum(all(r["hits"]) for r in scored)
    return {
        "scored": len(scored),
        "recalled": recalled,
        "query_accuracy": ratio(recalled, len(scored)),
        "mean_logprob": mean([lp for r in scored for lp in r["logprobs"]]),
        # per target, in item order: recalled (True/False) or not scored (None); McNemar pairs them with the baseline's
        "target_hits": [all(r["hits"]) if is_scored(r) else None for r in records],
    }


def set_metrics(items: Sequence[FactItem], records: dict[str, list[Record]]) -> dict[str, Any]:
    every = [r for item in items for r in records[item.id]]
    scored, counts = recall_counts(every)
    hits = [h for r in scored for h in r["hits"]]
    return {
        "items": len(items),
        "targets": len(every),
        **counts,
        "query_accuracy": ratio(counts["recalled"], len(scored)),
        "answer_tokens": len(hits),
        "token_accuracy": ratio(sum(hits), len(hits)),
        "mean_logprob": mean([lp for r in scored for lp in r["logprobs"]]),
        "per_item": {item.id: item_summary(records[item.id]) for item in items},
    }
