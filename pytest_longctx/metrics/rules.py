"""rules_en / rules_cs / rules_de (docs/metrics.md#rules): effects of a rule, relative to a reference.

``eff = score_with - score_without`` (log p of the rule's first token); a target counts
when the reference reacts, ``|eff_ref| >= 1`` nat (``min_effect``; ``--longctx-min-effect``). ``follow`` = share of counted
targets with ``eff / eff_ref >= 0.5``; ``retained`` = ``sum(eff) / sum(eff_ref)``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from pytest_longctx.data.records import FAMILIES, PLACEMENTS, RuleItem
from pytest_longctx.metrics.raw import Record, is_nonfinite, is_scored, mean, ratio
from pytest_longctx.options.table import MIN_EFFECT

COUNT_NATS = MIN_EFFECT  # the card's: the default of --min-effect (options/table.py)
FOLLOW_SHARE = 0.5


@dataclass(frozen=True)
class Effect:
    """A rule's effect on one target, for the model and for the reference, in nats."""

    item: RuleItem
    target: int
    eff: float
    eff_ref: float
    min_effect: float = COUNT_NATS  # the reference's effect a target needs to count, in nats

    @property
    def counted(self) -> bool:
        return abs(self.eff_ref) >= self.min_effect

    @property
    def followed(self) -> bool:
        return self.eff / self.eff_ref >= FOLLOW_SHARE


def _eff(record: Record) -> float:
    return record["score_with"] - record["score_without"]


def effect_loss(mine: Record, theirs: Record, min_effect: float = COUNT_NATS) -> tuple[float, float, float] | None:
    """(the rule effect lost in the direction of the reference's effect, eff_ref, eff) of one target scored on
    both sides; None when the reference's effect is too small to count."""
    eff, eff_ref = _eff(mine), _eff(theirs)
    if abs(eff_ref) < min_effect:
        return None
    return (eff_ref - eff) * (1.0 if eff_ref > 0 else -1.0), eff_ref, eff


def counts(theirs: Record, min_effect: float = COUNT_NATS) -> bool:
    """Whether a target the reference scored counts: the reference reacts to the rule by ``min_effect`` or more."""
    return is_scored(theirs) and abs(_eff(theirs)) >= min_effect


def effects(items: Sequence[RuleItem], records: dict[str, list[Record]],
            reference: dict[str, list[Record]] | None, min_effect: float = COUNT_NATS) -> list[Effect]:
    """Targets scored (and finite) under both the model and its reference."""
    found = []
    for item in items:
        own = records[item.id]
        ref = own if reference is None else reference[item.id]
        for index, (mine, theirs) in enumerate(zip(own, ref)):
            if is_scored(mine) and is_scored(theirs):
                found.append(Effect(item, index, _eff(mine), _eff(theirs), min_effect))
    return found


@dataclass(frozen=True)
class Effects:
    """``follow`` / ``retained`` over the counted targets of some effects (an item's, a cell's), with their
    numerators and denominators (``followed`` of ``counted``; ``eff_sum`` of ``eff_ref_sum``: what the gate's
    bootstrap resamples per item): None where no target is counted."""

    counted: int
    followed: int
    eff_sum: float
    eff_ref_sum: float
    targets: int  # scored on both sides, counted or not
    eff_mean: float | None
    eff_ref_mean: float | None

    @property
    def follow(self) -> float | None:
        return ratio(self.followed, self.counted)

    @property
    def retained(self) -> float | None:
        return ratio(self.eff_sum, self.eff_ref_sum) if self.counted else None

    def to_json(self) -> dict[str, Any]:
        return {"follow": self.follow, "retained": self.retained, "counted": self.counted, "followed": self.followed,
                "eff_sum": self.eff_sum, "eff_ref_sum": self.eff_ref_sum, "targets": self.targets,
                "eff_mean": self.eff_mean, "eff_ref_mean": self.eff_ref_mean}

    @classmethod
    def from_json(cls, found: Mapping[str, Any]) -> Effects:
        return cls(found["counted"], found["followed"], found["eff_sum"], found["eff_ref_sum"], found["targets"],
                   found["eff_mean"], found["eff_ref_mean"])


def cell(found: Sequence[Effect]) -> Effects:
    """The effects of ``found`` over its counted targets."""
    counted = [e for e in found if e.counted]
    return Effects(counted=len(counted), followed=sum(e.followed for e in counted),
                   eff_sum=sum(e.eff for e in counted), eff_ref_sum=sum(e.eff_ref for e in counted), targets=len(found),
                   eff_mean=mean([e.eff for e in counted]), eff_ref_mean=mean([e.eff_ref for e in counted]))


def item_effects(item: RuleItem, records: Sequence[Record], reference: Sequence[Record] | None,
                 min_effect: float = COUNT_NATS) -> Effects:
    """One item's effects against its reference's (without one, its own)."""
    return cell(effects([item], {item.id: list(records)}, None if reference is None else {item.id: list(reference)},
                        min_effect))


def set_metrics(items: Sequence[RuleItem], records: dict[str, list[Record]],
                reference: dict[str, list[Record]] | None, min_effect: float = COUNT_NATS) -> dict[str, Any]:
    found = effects(items, records, reference, min_effect)
    every = [r for item in items for r in records[item.id]]
    ref_every = every if reference is None else [r for item in items for r in reference[item.id]]
    cells = {
        placement: {
            "all": cell([e for e in found if e.item.placement == placement]).to_json(),
            **{family: cell([e for e in found if e.item.placement == placement and e.item.family == family]).to_json()
               for family in FAMILIES},
        }
        for placement in PLACEMENTS
    }
    return {
        "items": len(items),
        "targets": len(every),
        "scored": len(found),
        "unaligned": sum("unaligned" in r for r in every),
        "reference_unaligned": sum("unaligned" in r for r in ref_every) if reference is not None else 0,
        "nonfinite": sum(is_nonfinite(r) for r in every),
        "cells": cells,
    }
