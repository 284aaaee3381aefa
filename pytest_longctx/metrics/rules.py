"""rules_en / rules_cs / rules_de (docs/metrics.md#rules): effects of a rule, relative to a reference.

``eff = score_with - score_without`` (log p of the rule's first token); a target counts
when the reference reacts, ``|eff_ref| >= 1`` nat (``min_effect``; ``--longctx-min-effect``). ``follow`` = share of counted
targets with ``eff / eff_ref >= 0.5``; ``retained`` = ``sum(eff) / sum(eff_ref)``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

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


def cell(found: Sequence[Effect]) -> dict[str, Any]:
    """follow / retained over the counted targets; ``None`` when none is counted. ``followed``,
    ``eff_sum`` and ``eff_ref_sum`` are their numerators and denominators (what the gate's
    bootstrap resamples per item)."""
    counted = [e for e in found if e.counted]
    followed = sum(e.followed for e in counted)
    eff_sum, eff_ref_sum = sum(e.eff for e in counted), sum(e.eff_ref for e in counted)
    return {
        "follow": ratio(followed, len(counted)),
        "retained": ratio(eff_sum, eff_ref_sum) if counted else None,
        "counted": len(counted),
        "followed": followed,
        "eff_sum": eff_sum,
        "eff_ref_sum": eff_ref_sum,
        "targets": len(found),
        "eff_mean": mean([e.eff for e in counted]),
        "eff_ref_mean": mean([e.eff_ref for e in counted]),
    }


def set_metrics(items: Sequence[RuleItem], records: dict[str, list[Record]],
                reference: dict[str, list[Record]] | None, min_effect: float = COUNT_NATS) -> dict[str, Any]:
    found = effects(items, records, reference, min_effect)
    every = [r for item in items for r in records[item.id]]
    ref_every = every if reference is None else [r for item in items for r in reference[item.id]]
    cells = {
        placement: {
            "all": cell([e for e in found if e.item.placement == placement]),
            **{family: cell([e for e in found if e.item.placement == placement and e.item.family == family]) for family in FAMILIES},
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
        "per_item": {
            item.id: {**cell([e for e in found if e.item is item]), "placement": item.placement, "family": item.family}
            for item in items
        },
    }
