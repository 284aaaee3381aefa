"""tool_calls (docs/metrics.md#tool_calls): top-1 accuracy of the token that starts at each target."""
from __future__ import annotations

from typing import Any, Iterable, Sequence

from pytest_longctx.data.records import TOOL_KINDS, ToolItem, ToolTarget
from pytest_longctx.metrics.raw import Record, is_nonfinite, is_scored, mean, ratio

GROUPS = ("far", "fresh", "near")


def _in_group(target: ToolTarget, group: str) -> bool:
    return {"far": target.far, "fresh": target.far and target.fresh, "near": not target.far}[group]


def group(pairs: Iterable[tuple[ToolTarget, Record]], flags: bool = False) -> dict[str, Any]:
    """count (scored), correct, accuracy, mean log-prob; ``flags``: also ``target_hits``, per
    target of the group in order, right (True/False) or not scored (None)."""
    pairs = list(pairs)
    scored = [r for _, r in pairs if is_scored(r)]
    correct = sum(r["hits"][0] for r in scored)
    found = {
        "count": len(scored),
        "correct": correct,
        "accuracy": ratio(correct, len(scored)),
        "mean_logprob": mean([r["logprobs"][0] for r in scored]),
    }
    if flags:
        found["target_hits"] = [bool(r["hits"][0]) if is_scored(r) else None for _, r in pairs]
    return found


def _groups(pairs: list[tuple[ToolTarget, Record]], flags: bool = False) -> dict[str, dict[str, Any]]:
    return {name: group(((t, r) for t, r in pairs if _in_group(t, name)), flags) for name in GROUPS}


def set_metrics(items: Sequence[ToolItem], records: dict[str, list[Record]]) -> dict[str, Any]:
    pairs = [(t, r) for item in items for t, r in zip(item.targets, records[item.id])]
    groups = _groups(pairs)
    return {
        "items": len(items),
        "targets": len(pairs),
        "scored": sum(is_scored(r) for _, r in pairs),
        "unaligned": sum("unaligned" in r for _, r in pairs),
        "nonfinite": sum(is_nonfinite(r) for _, r in pairs),
        **{f"{name}_accuracy": groups[name]["accuracy"] for name in GROUPS},
        **groups,
        "by_kind": {
            kind: _groups([(t, r) for t, r in pairs if t.kind == kind]) for kind in TOOL_KINDS
        },
        "per_item": {
            item.id: {name: g for name, g in _groups(list(zip(item.targets, records[item.id])), flags=True).items()}
            for item in items
        },
    }
