"""tool_calls (docs/metrics.md#tool_calls): top-1 accuracy of the token that starts at each target."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from pytest_longctx.data.records import TOOL_KINDS, ToolItem, ToolTarget
from pytest_longctx.metrics.raw import Record, is_nonfinite, is_scored, mean, ratio

GROUPS = ("far", "fresh", "near")


def _in_group(target: ToolTarget, group: str) -> bool:
    return {"far": target.far, "fresh": target.far and target.fresh, "near": not target.far}[group]


@dataclass(frozen=True)
class Calls:
    """The targets of one group (far, fresh or near) of some items: scored (``count``), right (``correct``), the
    mean log-probability of the token read, and per target in order right (True/False) or not scored (None)."""

    count: int
    correct: int
    mean_logprob: float | None
    target_hits: tuple[bool | None, ...]

    @property
    def accuracy(self) -> float | None:
        return ratio(self.correct, self.count)

    def to_json(self, flags: bool = True) -> dict[str, Any]:
        """``flags``: with ``target_hits`` (an item's groups; a set's leave them out)."""
        found: dict[str, Any] = {"count": self.count, "correct": self.correct, "accuracy": self.accuracy,
                                 "mean_logprob": self.mean_logprob}
        if flags:
            found["target_hits"] = list(self.target_hits)
        return found

    @classmethod
    def from_json(cls, found: Mapping[str, Any]) -> Calls:
        return cls(found["count"], found["correct"], found["mean_logprob"], tuple(found["target_hits"]))


def group(pairs: Iterable[tuple[ToolTarget, Record]]) -> Calls:
    pairs = list(pairs)
    scored = [r for _, r in pairs if is_scored(r)]
    return Calls(count=len(scored), correct=sum(r["hits"][0] for r in scored),
                 mean_logprob=mean([r["logprobs"][0] for r in scored]),
                 target_hits=tuple(bool(r["hits"][0]) if is_scored(r) else None for _, r in pairs))


@dataclass(frozen=True)
class ToolGroups:
    """One item's targets by group."""

    far: Calls
    fresh: Calls
    near: Calls

    def to_json(self) -> dict[str, Any]:
        return {"far": self.far.to_json(), "fresh": self.fresh.to_json(), "near": self.near.to_json()}

    @classmethod
    def from_json(cls, found: Mapping[str, Any]) -> ToolGroups:
        return cls(*(Calls.from_json(found[name]) for name in GROUPS))


def _groups(pairs: list[tuple[ToolTarget, Record]]) -> dict[str, dict[str, Any]]:
    return {name: group((t, r) for t, r in pairs if _in_group(t, name)).to_json(flags=False) for name in GROUPS}


def item_groups(item: ToolItem, records: Sequence[Record]) -> ToolGroups:
    pairs = list(zip(item.targets, records))
    return ToolGroups(*(group((t, r) for t, r in pairs if _in_group(t, name)) for name in GROUPS))


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
    }
