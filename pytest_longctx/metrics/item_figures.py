"""One item's figures (``ItemFigures``): everything a check, an interval, a loser list or a report reads of one
scored item, made in one place from its per-target records and its reference's (``item_figures``), written in
one place (``to_json``: the item's entry in its set's ``per_item`` in every results file) and read back from
there (``from_json``). Everything else reads them by attribute.

A check reads an item as a ``Share``, a numerator over a denominator: its value over items is the sum of the
one over the sum of the other (queries recalled of those scored; far targets right of those scored; rules
followed of those counted; rule effect kept, ``eff_sum`` of ``eff_ref_sum``; KL_K summed over far reads)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from pytest_longctx.data.records import FaithfulnessItem, Item, Kind, RuleItem, ToolItem, config_kind
from pytest_longctx.metrics.drift import ItemDrift
from pytest_longctx.metrics.facts import Recall, item_recall
from pytest_longctx.metrics.faithfulness import labels
from pytest_longctx.metrics.raw import Record, is_nonfinite, is_scored
from pytest_longctx.metrics.rules import COUNT_NATS, Effects, counts, effect_loss, item_effects
from pytest_longctx.metrics.tool_calls import ToolGroups, item_groups


@dataclass(frozen=True)
class Share:
    """One item's part of a check's value: its numerator and its denominator."""

    part: float
    whole: float


@dataclass(frozen=True)
class ItemFigures:
    """The figures of one scored item (see the module docstring): what it recalled (facts, agent sessions), its
    tool-call targets by group, its rule effects against the reference, its drift against the baseline's reads,
    and the labels rows select items by."""

    kind: Kind
    recall: Recall | None = None  # facts, faithfulness
    calls: ToolGroups | None = None  # tool_calls
    effects: Effects | None = None  # rules
    drift: ItemDrift | None = None  # against a baseline that kept its most likely tokens, read at its places
    placement: str | None = None  # rules: system or user; faithfulness: where the fact sits
    family: str | None = None  # rules
    suite: str | None = None  # faithfulness
    probe_type: str | None = None  # faithfulness
    depth: str | None = None  # faithfulness
    # the item check's figures (``item_loss``; not written to ``per_item``: a results file keeps the raw scores they come from)
    loss: float | None = None
    nonfinite: int = 0  # targets whose log-probabilities are NaN or infinite

    @property
    def accuracy(self) -> Share | None:
        """Queries recalled of those scored (facts, agent sessions), far targets right of those scored (tool calls)."""
        if self.recall is not None:
            return Share(self.recall.recalled, self.recall.scored)
        if self.calls is not None:
            return Share(self.calls.far.correct, self.calls.far.count)
        return None

    @property
    def target_hits(self) -> tuple[bool | None, ...] | None:
        """Per target the accuracy counts, hit (True/False) or not scored (None): what McNemar pairs."""
        if self.recall is not None:
            return self.recall.target_hits
        if self.calls is not None:
            return self.calls.far.target_hits
        return None

    @property
    def follow(self) -> Share | None:
        """Rules followed of those counted."""
        return Share(self.effects.followed, self.effects.counted) if self.effects is not None else None

    @property
    def retained(self) -> Share | None:
        """The rule effect kept: the model's effects summed over the counted targets, of the reference's."""
        return Share(self.effects.eff_sum, self.effects.eff_ref_sum) if self.effects is not None else None

    @property
    def far_kl(self) -> Share | None:
        """KL_K summed over the far reads, of their count (no drift: None)."""
        return Share(self.drift.far.kl, self.drift.far.reads) if self.drift is not None else None

    @property
    def own_value(self) -> float | None:
        """The item's own headline metric: queries recalled (facts, agent sessions), far accuracy (tool calls),
        retained (rules)."""
        if self.recall is not None:
            return self.recall.query_accuracy
        if self.calls is not None:
            return self.calls.far.accuracy
        return self.effects.retained if self.effects is not None else None

    def to_json(self) -> dict[str, Any]:
        """The item's entry in its set's ``per_item``."""
        found: dict[str, Any] = {}
        if self.recall is not None:
            found.update(self.recall.to_json())
        if self.calls is not None:
            found.update(self.calls.to_json())
        if self.effects is not None:
            found.update(self.effects.to_json())
        labelled = {"probe_type": self.probe_type, "depth": self.depth, "placement": self.placement, "family": self.family,
                    "suite": self.suite}
        found.update({name: value for name, value in labelled.items() if value is not None})
        if self.drift is not None:
            found["drift"] = self.drift.to_json()
        return found

    @classmethod
    def from_json(cls, kind: Kind, found: Mapping[str, Any]) -> ItemFigures:
        """What ``to_json`` wrote, for an item of a config of ``kind``."""
        drift = ItemDrift.from_json(found["drift"]) if "drift" in found else None
        return cls(
            kind,
            recall=Recall.from_json(found) if kind in (Kind.FACTS, Kind.FAITHFULNESS) else None,
            calls=ToolGroups.from_json(found) if kind == Kind.TOOL_CALLS else None,
            effects=Effects.from_json(found) if kind == Kind.RULES else None,
            drift=drift, placement=found.get("placement"), family=found.get("family"), suite=found.get("suite"),
            probe_type=found.get("probe_type"), depth=found.get("depth"))


def item_loss(kind: Kind, mine: Sequence[Record], theirs: Sequence[Record], min_effect: float = COUNT_NATS) -> float | None:
    """An item's mean loss against its baseline, in nats (the item check's figure): facts, tool calls and agent
    sessions, the log-probability lost per token scored on both sides; rules, the rule effect lost per counted
    target. None when nothing is counted."""
    losses = []
    for a, b in zip(mine, theirs):
        if not (is_scored(a) and is_scored(b)):
            continue
        if kind == Kind.RULES:
            counted = effect_loss(a, b, min_effect)
            if counted is not None:
                losses.append(counted[0])
        else:
            losses.extend(lb - la for la, lb in zip(a["logprobs"], b["logprobs"]))
    return sum(losses) / len(losses) if losses else None


def countable(kind: Kind, theirs: Sequence[Record], min_effect: float = COUNT_NATS) -> int:
    """How many of an item's targets its loss can count, known from the baseline's records before the model
    reads it: those the baseline scored (rules: whose rule effect counts)."""
    return sum(counts(r, min_effect) if kind == Kind.RULES else is_scored(r) for r in theirs)


def item_figures(kind: Kind, item: Item, records: Sequence[Record], reference: Sequence[Record] | None,
                 drift: ItemDrift | None, min_effect: float = COUNT_NATS) -> ItemFigures:
    """The figures of ``item`` (of a config of ``kind``) from its records, its reference's (rules: the rule
    effects are relative to them; None: the item is its own reference, and has no loss) and its drift."""
    loss = item_loss(kind, records, reference, min_effect) if reference is not None else None
    common = {"drift": drift, "loss": loss, "nonfinite": sum(is_nonfinite(r) for r in records)}
    if kind == Kind.TOOL_CALLS:
        assert isinstance(item, ToolItem)
        return ItemFigures(kind, calls=item_groups(item, records), **common)
    if kind == Kind.RULES:
        assert isinstance(item, RuleItem)
        return ItemFigures(kind, effects=item_effects(item, records, reference, min_effect),
                           placement=item.placement, family=item.family, **common)
    if kind == Kind.FAITHFULNESS:
        assert isinstance(item, FaithfulnessItem)
        return ItemFigures(kind, recall=item_recall(records), **labels(item), **common)
    return ItemFigures(kind, recall=item_recall(records), **common)


# config -> length -> a set's metrics, its items' figures under ``per_item`` (item id -> ``ItemFigures``)
Sets = dict[str, dict[str, dict[str, Any]]]


def sets_json(sets: Sets) -> Sets:
    """``sets`` as every results file writes them: each item's figures as its entry (``ItemFigures.to_json``)."""
    return {config: {length: {**metrics, "per_item": {i: f.to_json() for i, f in metrics["per_item"].items()}}
                     for length, metrics in by_length.items()} for config, by_length in sets.items()}


def sets_from_json(found: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> Sets:
    """The sets a results file holds (``sets_json``), each item's entry read back as its figures."""
    return {config: {length: {**metrics, "per_item": {i: ItemFigures.from_json(config_kind(config), entry)
                                                      for i, entry in metrics.get("per_item", {}).items()}}
                     for length, metrics in by_length.items()} for config, by_length in found.items()}
