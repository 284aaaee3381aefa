"""The verdicts of every row and rules cell of a run against the baseline (thresholds: ``gate/thresholds.py``;
one check's verdict: ``gate/verdict.py``; the keys of checks: ``gate/keys.py``), and the evaluation that holds them."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from pytest_longctx.data.records import config_kind
from pytest_longctx.gate.drift import Drift, far_sample, row_drift, summaries_of
from pytest_longctx.gate.keys import cell_key, cell_metrics, cells
from pytest_longctx.gate.losses import accuracy_losers, rules_losers
from pytest_longctx.gate.thresholds import Thresholds
from pytest_longctx.gate.uncertainty import difference, measure, upper_bound
from pytest_longctx.gate.verdict import Verdict, too_small
from pytest_longctx.metrics.rows import RowSource, headline

Sets = dict[str, dict[str, dict[str, Any]]]  # config -> length -> metrics


def with_uncertainty(verdict: Verdict, config: str, length: str | None, model_sets: dict, baseline_sets: dict,
                     keep: Any, relative_drop: float | None, alpha: float | None) -> Verdict:
    """``verdict`` with its interval, McNemar counts and (with ``alpha``) bound, from both
    sides' per-item figures of ``config``/``length`` (the items ``keep`` accepts)."""
    if length is None or verdict.model is None or verdict.baseline is None:
        return verdict
    mine = model_sets[config][length].get("per_item", {})
    theirs = baseline_sets[config][length].get("per_item", {})
    found = measure(config_kind(config), verdict.metric, mine, theirs, keep, verdict.threshold, relative_drop, alpha)
    if found is None:
        return verdict
    verdict.interval, verdict.items, verdict.mdd = found.interval, found.items, found.mdd
    verdict.lost, verdict.gained, verdict.p = found.lost, found.gained, found.p
    verdict.alpha, verdict.bound = alpha, found.bound
    return verdict


DRIFT_GATED = ("facts", "tool_calls")  # configs whose rows gate drift by default (they have control reads)
DRIFT_LABEL = ": drift at far reads"  # a row's drift check is labelled with the row's name and this


def row_of(label: str) -> str:
    """The row a check's label belongs to: the row itself, or the row of its drift check."""
    return label.removesuffix(DRIFT_LABEL)


def drift_verdicts(name: str, source: RowSource, model_sets: dict, thresholds: Thresholds,
                   row: list[Verdict]) -> tuple[Drift | None, list[Verdict]]:
    """(the row's drift, its drift check): mean KL_K at far reads at most ``kl`` (by default on
    facts and tool calls; elsewhere where an override names the row). The row's own
    verdicts (``row``) get the drift too, so a failing one says what kind of damage it is."""
    config, length = source.config, source.length
    if length is None or "drift" not in model_sets[config][length]:  # a worst case with no counted cell has no length
        return None, []
    key = source.key
    threshold = thresholds.get(key, "kl")
    assert threshold is not None  # kl has a global value
    summaries = summaries_of(model_sets[config][length], source.covers_entry)
    found = row_drift(summaries, threshold)
    if found is None:
        return None, []
    for verdict in row:
        verdict.damage = found
    if thresholds.get(key, "kl", default=config_kind(config) in DRIFT_GATED) is None:
        return found, []
    far = found.far.kl
    verdict = Verdict(key, f"{name}{DRIFT_LABEL}", "kl", far, None if far is None else 0.0, threshold,
                      f"kl <= {threshold:g}", at_most=True, damage=found, reference="baseline itself")
    if far is not None:
        sample = far_sample(summaries)
        spread = difference(sample)
        verdict.items = sample.items
        verdict.interval = spread[0] if spread else None
        verdict.alpha = thresholds.alpha
        if thresholds.alpha is not None:
            verdict.bound = upper_bound(sample, threshold, None, thresholds.alpha, at_most=True)
    return found, [verdict]


def row_verdict(name: str, source: RowSource, model_sets: dict, baseline_sets: dict,
                model_rows: dict, baseline_rows: dict, thresholds: Thresholds) -> Verdict:
    key = source.key
    model, baseline = model_rows.get(name), baseline_rows.get(name)
    config, length = source.config, source.length
    if not source.is_rules:
        drop = thresholds.get(key, "drop")
        threshold = (baseline if baseline is not None else 0.0) - drop
        rule = f"baseline - {drop:g}"
        losers = accuracy_losers(source, model_sets, baseline_sets)
        verdict = Verdict(key, name, "accuracy", model, baseline, threshold, rule, losers, floor=0.0)
        return with_uncertainty(verdict, config, length, model_sets, baseline_sets, source.covers_entry, drop, thresholds.alpha)
    metric, cell = source.metric, source.cell
    threshold = thresholds.get(key, metric)
    losers = rules_losers(model_sets, config, *cell) if cell is not None else []  # a worst case with no counted cell has none
    verdict = Verdict(key, name, metric, model, baseline, threshold, f"{metric} >= {threshold:g}", losers,
                      floor=0.0 if metric == "follow" else None)
    if cell is None:
        return verdict
    return with_uncertainty(verdict, config, length, model_sets, baseline_sets, source.covers_entry, None, thresholds.alpha)


def cell_verdicts(config: str, length: str, placement: str, family: str, model_sets: dict, baseline_sets: dict,
                  thresholds: Thresholds) -> list[Verdict]:
    key = cell_key(config, length, placement, family)
    model_cell = model_sets[config][length]["cells"][placement][family]
    base_cell = baseline_sets[config][length]["cells"][placement][family]
    label = f"{config} {length} {placement} prompt, {'all families' if family == 'all' else family}"
    return [
        with_uncertainty(
            Verdict(key, label, metric, model_cell[metric], base_cell[metric], value, f"{metric} >= {value:g}",
                    rules_losers(model_sets, config, length, placement, family), floor=0.0 if metric == "follow" else None),
            config, length, model_sets, baseline_sets,
            RowSource(config, metric, length, placement, family).covers_entry, None, thresholds.alpha)
        for metric, value in cell_metrics(thresholds, key, family, placement).items()
    ]


def uncounted(config: str, length: str, metrics: dict[str, Any]) -> str | None:
    """Where a rules set's headline rows are n/a because their cells hold no counted target (the baseline's
    rule effect below the min effect: the follow row's system-prompt cell, or every family cell the worst
    case reads), how many of its targets count and how many items would give every cell one at that rate."""
    cells = metrics["cells"]
    per_cell = [cell for by_family in cells.values() for family, cell in by_family.items() if family != "all"]
    if cells["system"]["all"]["counted"] and any(cell["counted"] for cell in per_cell):
        return None
    items = len(metrics["per_item"])
    targets, counted = sum(cell["targets"] for cell in per_cell), sum(cell["counted"] for cell in per_cell)
    said = (f"{config} {length}: {sum(1 for c in per_cell if not c['counted'])} of its {len(per_cell)} placement x family "
            f"cells have no counted target (the baseline's rule effect >= the min effect), so their checks are n/a; "
            f"{counted} of the {targets} targets of its {items} items count")
    if not counted:
        return f"{said}: more items (--longctx-limit) may count some, or this model barely follows the rules at this length"
    return f"{said}: about {math.ceil(len(per_cell) * items / counted)} items would give every cell one at that rate"

@dataclass
class Evaluation:
    """Model and baseline metrics over complete sets, and the verdicts of every check."""

    sets: Sets
    rows: dict[str, float | None]
    row_sources: dict[str, RowSource]
    baseline_sets: Sets
    baseline_rows: dict[str, float | None]
    verdicts: list[Verdict] = field(default_factory=list)
    drift: dict[str, Drift] = field(default_factory=dict)  # row name -> its drift, where the baseline kept its top-k

    @property
    def warnings(self) -> list[str]:
        """Checks the selection is too small to gate (``too_small``), rows first."""
        return [w for w in (too_small(v) for v in self.verdicts) if w]

    @property
    def notes(self) -> list[str]:
        """Why rules rows are n/a where the selection leaves their cells without a counted target (``uncounted``)."""
        return [n for config, by_length in self.baseline_sets.items() if config_kind(config) == "rules"
                for length, metrics in by_length.items() if (n := uncounted(config, length, metrics))]

    def verdicts_json(self) -> list[dict[str, Any]]:
        """Every check as the results files keep it, each with its row's damage kind where the row fails."""
        return [v.to_json(self.damage_kind(row_of(v.label)) if v.damage is not None else None) for v in self.verdicts]

    def failing_rows(self) -> set[str]:
        """The rows with a failing check (the row's own, or its drift check)."""
        return {row_of(v.label) for v in self.verdicts if v.applicable and not v.passed}

    def drift_items(self, name: str) -> list[str]:
        """The ids of the items row ``name``'s drift is computed over: its set's items with a drift summary that
        belong to the row (its suite, or its rules cell)."""
        source = self.row_sources[name]
        keep = source.covers_entry
        per_item = self.sets[source.config][source.length].get("per_item", {})
        return [item_id for item_id, entry in per_item.items() if "drift" in entry and keep(entry)]

    def damage_kind(self, name: str) -> str | None:
        """The damage kind every report names for a row: a failing row's, None for a passing
        row (docs/metrics.md#far-specific-drift-and-damage-kinds) or one without far reads."""
        found = self.drift.get(name)
        return (found.kind or None) if found is not None and name in self.failing_rows() else None


def evaluate(sets: Sets, baseline_sets: Sets, thresholds: Thresholds) -> Evaluation:
    """Rows of both sides and the verdict of every row and rules cell."""
    rows, row_sources = headline(sets)
    baseline_rows, _ = headline(baseline_sets)
    evaluation = Evaluation(sets, rows, row_sources, baseline_sets, baseline_rows)
    for name, source in row_sources.items():
        row = [row_verdict(name, source, sets, baseline_sets, rows, baseline_rows, thresholds)]
        found, checks = drift_verdicts(name, source, sets, thresholds, row)
        if found is not None:
            evaluation.drift[name] = found
        evaluation.verdicts.extend(row + checks)
    for config, by_length in sets.items():
        if config_kind(config) == "rules":
            for cell in cells(config, list(by_length)):
                evaluation.verdicts.extend(cell_verdicts(*cell, sets, baseline_sets, thresholds))
    return evaluation

