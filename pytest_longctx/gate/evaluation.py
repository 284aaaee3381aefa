"""The verdicts of every row and rules cell of a run against the baseline, and the evaluation that holds them
(thresholds: ``gate/thresholds.py``; one check's verdict: ``gate/verdict.py``; what each check reads:
``gate/specs.py``; the keys of checks: ``gate/keys.py``).

Both sides are taken over the same items: the model's values and the baseline's beside them, their intervals
and McNemar counts pair the items the model read. A threshold relative to the baseline is the baseline's value
over the whole selection less the allowed drop (``whole``): the threshold of a run that reads every item, which
sequential reading bounds the model's value against (under ``off`` the two baselines are one)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

from pytest_longctx.data.records import Kind, config_kind
from pytest_longctx.gate.damage import Drift, row_drift, summaries_of
from pytest_longctx.gate.keys import cell_key, cell_metrics, cells
from pytest_longctx.gate.losses import accuracy_losers, rules_losers
from pytest_longctx.gate.specs import ACCURACY, BY_NAME, KL, CheckSpec
from pytest_longctx.gate.thresholds import Thresholds
from pytest_longctx.gate.uncertainty import measure
from pytest_longctx.gate.verdict import Verdict, checks_word, too_small
from pytest_longctx.metrics.item_figures import ItemFigures, Sets
from pytest_longctx.metrics.rows import RowSource, headline
from pytest_longctx.numbers import NA

DRIFT_GATED = (Kind.FACTS, Kind.TOOL_CALLS)  # configs whose rows gate drift by default (they have control reads)
DRIFT_LABEL = ": drift at far reads"  # a row's drift check is labelled with the row's name and this


def row_of(label: str) -> str:
    """The row a check's label belongs to: the row itself, or the row of its drift check."""
    return label.removesuffix(DRIFT_LABEL)


def drift_gated(thresholds: Thresholds, source: RowSource) -> float | None:
    """The row's drift threshold where its drift is gated: by default on facts and tool calls, elsewhere where an
    override names the row."""
    return thresholds.get(source.key, KL.threshold, default=config_kind(source.config) in DRIFT_GATED)


@dataclass(frozen=True)
class Sides:
    """What a run's verdicts are computed from: the model's sets over the items it read, the baseline's over the
    same items, and the baseline's over the whole selection (the relative thresholds')."""

    model: Sets
    baseline: Sets
    whole: Sets

    def items(self, config: str, length: str) -> tuple[dict[str, ItemFigures], dict[str, ItemFigures]]:
        return self.model[config][length]["per_item"], self.baseline[config][length]["per_item"]


def with_uncertainty(verdict: Verdict, spec: CheckSpec, sides: Sides, config: str, length: str | None,
                     keep: Callable[[ItemFigures], bool], relative_drop: float | None, alpha: float | None) -> Verdict:
    """``verdict`` with its interval, McNemar counts and (with ``alpha``) bound, from both sides' items of
    ``config``/``length`` (those ``keep`` accepts)."""
    if length is None or verdict.model is None or verdict.baseline is None:
        return verdict
    found = measure(spec, *sides.items(config, length), keep, verdict.threshold, relative_drop, alpha)
    # a minimum detectable drop is of a value that drops; a check bounded from above (drift) has none
    verdict.interval, verdict.items, verdict.mdd = found.interval, found.items, None if spec.at_most else found.mdd
    verdict.lost, verdict.gained, verdict.p = found.lost, found.gained, found.p
    verdict.alpha, verdict.bound = alpha, found.bound
    return verdict


def drift_verdicts(name: str, source: RowSource, sides: Sides, thresholds: Thresholds,
                   row: list[Verdict]) -> tuple[Drift | None, list[Verdict]]:
    """(the row's drift, its drift check): mean KL_K at far reads at most ``kl`` where it is gated
    (``drift_gated``). The row's own verdicts (``row``) get the drift too, so a failing one says what kind of
    damage it is."""
    config, length = source.config, source.length
    if length is None or "drift" not in sides.model[config][length]:  # a worst case with no counted cell has no length
        return None, []
    threshold = thresholds.get(source.key, KL.threshold)
    assert threshold is not None  # kl has a global value
    found = row_drift(summaries_of(sides.model[config][length]["per_item"], source.counts), threshold)
    if found is None:
        return None, []
    for verdict in row:
        verdict.damage = found
    if drift_gated(thresholds, source) is None:
        return found, []
    far = found.far.kl
    verdict = Verdict(source.key, f"{name}{DRIFT_LABEL}", KL.name, far, None if far is None else 0.0, threshold,
                      f"{KL.name} <= {threshold:g}", at_most=True, damage=found, reference="baseline itself")
    if far is not None:
        with_uncertainty(verdict, KL, sides, config, length, source.counts, None, thresholds.alpha)
    return found, [verdict]


def row_verdict(name: str, source: RowSource, sides: Sides, rows: tuple[dict, dict, dict], thresholds: Thresholds) -> Verdict:
    """A headline row's own check; ``rows``: the model's, the baseline's and the whole selection's baseline rows."""
    model_rows, baseline_rows, whole_rows = rows
    key, config, length = source.key, source.config, source.length
    model, baseline = model_rows.get(name), baseline_rows.get(name)
    if not source.is_rules:
        drop = thresholds.get(key, ACCURACY.threshold)
        assert drop is not None
        whole = whole_rows.get(name)
        threshold = (whole if whole is not None else 0.0) - drop
        losers = accuracy_losers(source, sides.model, sides.baseline)
        verdict = Verdict(key, name, ACCURACY.name, model, baseline, threshold, f"baseline - {drop:g}", losers,
                          floor=ACCURACY.floor)
        return with_uncertainty(verdict, ACCURACY, sides, config, length, source.counts, drop, thresholds.alpha)
    spec = BY_NAME[source.metric]
    threshold = thresholds.get(key, spec.threshold)
    assert threshold is not None
    cell = source.cell
    losers = rules_losers(sides.model, config, *cell) if cell is not None else []  # a worst case with no counted cell has none
    verdict = Verdict(key, name, spec.name, model, baseline, threshold, f"{spec.name} >= {threshold:g}", losers,
                      floor=spec.floor)
    if cell is None:
        return verdict
    return with_uncertainty(verdict, spec, sides, config, length, source.counts, None, thresholds.alpha)


def cell_verdicts(config: str, length: str, placement: str, family: str, sides: Sides,
                  thresholds: Thresholds) -> list[Verdict]:
    key = cell_key(config, length, placement, family)
    model_cell = sides.model[config][length]["cells"][placement][family]
    base_cell = sides.baseline[config][length]["cells"][placement][family]
    label = f"{config} {length} {placement} prompt, {'all families' if family == 'all' else family}"
    found = []
    for spec, value in cell_metrics(thresholds, key, family, placement).items():
        verdict = Verdict(key, label, spec.name, model_cell[spec.name], base_cell[spec.name], value, f"{spec.name} >= {value:g}",
                          rules_losers(sides.model, config, length, placement, family), floor=spec.floor)
        source = RowSource(config, spec.name, length, placement, family)
        found.append(with_uncertainty(verdict, spec, sides, config, length, source.counts, None, thresholds.alpha))
    return found


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
    """Model and baseline metrics over the same items, and the verdicts of every check."""

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
        return [n for config, by_length in self.baseline_sets.items() if config_kind(config) == Kind.RULES
                for length, metrics in by_length.items() if (n := uncounted(config, length, metrics))]

    def verdicts_json(self) -> list[dict[str, Any]]:
        """Every check as the results files keep it, each with its row's damage kind where the row fails."""
        return [v.to_json(self.damage_kind(row_of(v.label)) if v.damage is not None else None) for v in self.verdicts]

    def failing_rows(self) -> set[str]:
        """The rows with a failing check (the row's own, or its drift check)."""
        return {row_of(v.label) for v in self.verdicts if v.applicable and not v.passed}

    def row_checks(self, name: str) -> list[Verdict]:
        """Row ``name``'s checks: its own and its drift check."""
        return [v for v in self.verdicts if row_of(v.label) == name and v.key == self.row_sources[name].key]

    def row_word(self, name: str) -> str:
        """A row's verdict, that of all its checks: FAIL when any fails (its own or its drift), PASS when every one
        that applies passes, n/a when none applies."""
        return checks_word(self.row_checks(name)) or NA

    def drift_items(self, name: str) -> list[str]:
        """The ids of the items row ``name``'s drift is computed over: its set's items with a drift summary that
        belong to the row (its suite, or its rules cell)."""
        source = self.row_sources[name]
        per_item = self.sets[source.config][source.length].get("per_item", {})
        return [item_id for item_id, figures in per_item.items() if figures.drift is not None and source.counts(figures)]

    def damage_kind(self, name: str) -> str | None:
        """The damage kind every report names for a row: a failing row's, None for a passing
        row (docs/metrics.md#far-specific-drift-and-damage-kinds) or one without far reads."""
        found = self.drift.get(name)
        return (found.kind or None) if found is not None and name in self.failing_rows() else None


def evaluate(sets: Sets, baseline_sets: Sets, thresholds: Thresholds, whole: Sets | None = None) -> Evaluation:
    """Rows of both sides and the verdict of every row and rules cell: ``sets`` the model's, ``baseline_sets`` the
    baseline's over the same items, ``whole`` the baseline's over the whole selection (default: the same)."""
    sides = Sides(sets, baseline_sets, whole if whole is not None else baseline_sets)
    rows, row_sources = headline(sets)
    baseline_rows, _ = headline(baseline_sets)
    whole_rows = baseline_rows if whole is None else headline(whole)[0]
    evaluation = Evaluation(sets, rows, row_sources, baseline_sets, baseline_rows)
    for name, source in row_sources.items():
        row = [row_verdict(name, source, sides, (rows, baseline_rows, whole_rows), thresholds)]
        found, checks = drift_verdicts(name, source, sides, thresholds, row)
        if found is not None:
            evaluation.drift[name] = found
        evaluation.verdicts.extend(row + checks)
    for config, by_length in sets.items():
        if config_kind(config) == Kind.RULES:
            for cell in cells(config, list(by_length)):
                evaluation.verdicts.extend(cell_verdicts(*cell, sides, thresholds))
    return evaluation

