"""faithfulness (docs/metrics.md#faithfulness-of-context-compressors): answer recall under a session, and what compression keeps.

Model gate: each item is one query, its answer scored teacher-forced after the full
session: recalled when every answer token is the top-1 prediction.

Compressor gate: per item an outcome ``{"facts", "retained", "tokens_full",
"tokens_compressed", "content_full", "content_compressed", "structure", "error", "full",
"compressed"}`` (``retained_expanded`` too for a compressor that expands references; the
last two: Layer B raw records, present when a model reads). Retention = retained facts /
facts; an item whose compression failed keeps no fact. Savings = 1 - compressed tokens /
full tokens, summed over the items compressed: of the rendered chat (``savings``) and of
the messages' contents alone (``content_savings``); ``session_savings`` is the mean of
each item's own. ``structure`` counts the messages merged, roles changed and system
messages inserted. Layer B pairs each item's answer under both contexts.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping, Sequence

from pytest_longctx.data.records import DEPTHS, FACT_PLACEMENTS, PROBE_TYPES, SUITES, FaithfulnessItem
from pytest_longctx.metrics.raw import Record, is_scored, mean, ratio, recall_counts

GROUPS: dict[str, tuple[str, ...]] = {"probe_type": PROBE_TYPES, "depth": DEPTHS, "placement": FACT_PLACEMENTS,
                                      "suite": SUITES}
Outcome = dict[str, Any]
RETAINED_FACTS = "retained"  # an outcome's facts its compressed context still holds
STRUCTURE = ("merged", "roles_changed", "system_inserted")  # what compress/structure.py counts per item


def labels(item: FaithfulnessItem) -> dict[str, str]:
    return {group: getattr(item, group) for group in GROUPS}


def _breakdown(items: Sequence[FaithfulnessItem], summary: Callable[[list[FaithfulnessItem]], dict[str, Any]]) -> dict[str, Any]:
    """``by_<group>``: the summary of the items of each value, for every group."""
    return {f"by_{group}": {value: summary([i for i in items if getattr(i, group) == value]) for value in values}
            for group, values in GROUPS.items()}


# ------------------------------------------------------------------ model gate


def _recall(records: Iterable[Record]) -> dict[str, Any]:
    every = list(records)
    scored, counts = recall_counts(every)
    return {
        "items": len(every),
        **counts,
        "recall": ratio(counts["recalled"], len(scored)),
        "mean_logprob": mean([lp for r in scored for lp in r["logprobs"]]),
    }


def set_metrics(items: Sequence[FaithfulnessItem], records: Mapping[str, list[Record]]) -> dict[str, Any]:
    def summary(chosen: list[FaithfulnessItem]) -> dict[str, Any]:
        return _recall(r for item in chosen for r in records[item.id])

    return {
        "targets": sum(len(records[item.id]) for item in items),
        **summary(list(items)),
        **_breakdown(items, summary),
    }


# ------------------------------------------------------------------ compressor gate


def _paired(outcomes: list[Outcome]) -> list[Outcome]:
    return [o for o in outcomes if o.get("full") and o.get("compressed") and is_scored(o["full"]) and is_scored(o["compressed"])]


def _delta(compressed: float | None, full: float | None) -> float | None:
    return None if compressed is None or full is None else compressed - full


def _savings(done: Sequence[Outcome], full: str, compressed: str) -> float | None:
    total = sum(o[full] for o in done)
    return None if not total else 1 - sum(o[compressed] for o in done) / total


def compression_summary(outcomes: Sequence[Outcome]) -> dict[str, Any]:
    """Retention, savings and (with a model) Layer B over some items' outcomes."""
    done = [o for o in outcomes if o["error"] is None]
    facts = sum(o["facts"] for o in outcomes)
    tokens_full = sum(o["tokens_full"] for o in done)
    tokens_compressed = sum(o["tokens_compressed"] for o in done)
    expanding = [o for o in done if "retained_expanded" in o]
    paired = _paired(list(done))
    recall_full = ratio(sum(all(o["full"]["hits"]) for o in paired), len(paired))
    recall_compressed = ratio(sum(all(o["compressed"]["hits"]) for o in paired), len(paired))
    logprob_full = mean([lp for o in paired for lp in o["full"]["logprobs"]])
    logprob_compressed = mean([lp for o in paired for lp in o["compressed"]["logprobs"]])
    return {
        "items": len(outcomes),
        "errors": len(outcomes) - len(done),
        "facts": facts,
        RETAINED_FACTS: sum(o[RETAINED_FACTS] for o in done),
        "retention": ratio(sum(o[RETAINED_FACTS] for o in done), facts),
        "tokens_full": tokens_full,
        "tokens_compressed": tokens_compressed,
        "savings": _savings(done, "tokens_full", "tokens_compressed"),
        "content_savings": _savings(done, "content_full", "content_compressed"),
        "session_savings": mean([1 - o["tokens_compressed"] / o["tokens_full"] for o in done if o["tokens_full"]]),
        "retention_expanded": ratio(sum(o["retained_expanded"] for o in expanding), facts) if expanding else None,
        "structure": {change: sum(o["structure"][change] for o in done) for change in STRUCTURE},
        "sessions_restructured": sum(any(o["structure"].values()) for o in done),
        "answers_scored": len(paired),
        "answer_unaligned": sum("unaligned" in (o.get("full") or {}) for o in done),
        "recall_full": recall_full,
        "recall_compressed": recall_compressed,
        "recall_delta": _delta(recall_compressed, recall_full),
        "logprob_full": logprob_full,
        "logprob_compressed": logprob_compressed,
        "logprob_delta": _delta(logprob_compressed, logprob_full),
    }


def compression_metrics(items: Sequence[FaithfulnessItem], outcomes: Mapping[str, Outcome]) -> dict[str, Any]:
    def summary(chosen: list[FaithfulnessItem]) -> dict[str, Any]:
        return compression_summary([outcomes[item.id] for item in chosen])

    return {**summary(list(items)), **_breakdown(items, summary)}
