"""facts (docs/metrics.md#facts): a query is recalled when every answer token is the top-1 prediction."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from pytest_longctx.data.records import FactItem
from pytest_longctx.metrics.raw import Record, is_scored, mean, ratio, recall_counts


@dataclass(frozen=True)
class Recall:
    """One item's queries recalled (facts, agent sessions): the scored ones, those recalled, the mean
    log-probability of their answer tokens, and per target in item order recalled (True/False) or not scored
    (None), which McNemar pairs with the baseline's."""

    scored: int
    recalled: int
    mean_logprob: float | None
    target_hits: tuple[bool | None, ...]

    @property
    def query_accuracy(self) -> float | None:
        return ratio(self.recalled, self.scored)

    def to_json(self) -> dict[str, Any]:
        return {"scored": self.scored, "recalled": self.recalled, "query_accuracy": self.query_accuracy,
                "mean_logprob": self.mean_logprob, "target_hits": list(self.target_hits)}

    @classmethod
    def from_json(cls, found: Mapping[str, Any]) -> Recall:
        return cls(found["scored"], found["recalled"], found["mean_logprob"], tuple(found["target_hits"]))


def item_recall(records: Sequence[Record]) -> Recall:
    scored = [r for r in records if is_scored(r)]
    return Recall(scored=len(scored), recalled=sum(all(r["hits"]) for r in scored),
                  mean_logprob=mean([lp for r in scored for lp in r["logprobs"]]),
                  target_hits=tuple(all(r["hits"]) if is_scored(r) else None for r in records))


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
    }
