"""Checks of rows, cells and items against the baseline (thresholds: ``gate/thresholds.py``):
their keys (a row's: ``RowSource.key``), their verdicts, and the items that lost the most."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from pytest_longctx.data.load import Dataset
from pytest_longctx.data.records import FAMILIES, PLACEMENTS, config_kind
from pytest_longctx.gate.drift import Drift, far_sample, row_drift, summaries_of
from pytest_longctx.gate.thresholds import Thresholds
from pytest_longctx.gate.uncertainty import difference, measure, needed_items, upper_bound
from pytest_longctx.metrics.raw import is_scored
from pytest_longctx.metrics.rows import RowSource, headline, row_specs
from pytest_longctx.metrics.rules import COUNT_NATS
from pytest_longctx.numbers import NA, meets, number

Sets = dict[str, dict[str, dict[str, Any]]]  # config -> length -> metrics


# ------------------------------------------------------------------ keys


def cell_key(config: str, length: str, placement: str, family: str) -> str:
    return f"{config}-{length}-{placement}-{family}"


def item_key(config: str, length: str, item_id: str) -> str:
    """``facts-8k-<id>``; an id that already starts so (the builtin's ``facts-8k-00``) is its own key."""
    prefix = f"{config}-{length}-"
    return item_id if item_id.startswith(prefix) else prefix + item_id


def cell_metrics(thresholds: Thresholds, key: str, family: str, placement: str) -> dict[str, float]:
    """Thresholds that apply to a cell: retained in every family cell and follow in the
    system-prompt cell of all families by default, anything an override adds."""
    found = {
        "retained": thresholds.get(key, "retained", default=family != "all"),
        "follow": thresholds.get(key, "follow", default=family == "all" and placement == "system"),
    }
    return {metric: value for metric, value in found.items() if value is not None}


def cells(config: str, lengths: Iterable[str]) -> list[tuple[str, str, str, str]]:
    return [(config, length, placement, family) for length in lengths for placement in PLACEMENTS
            for family in ("all", *FAMILIES)]


ITEM_METRICS = frozenset({"item_drop"})
CELL_METRICS = frozenset({"retained", "follow"})  # by default retained in family cells, follow in the system-all cell


def row_metrics(source: RowSource) -> frozenset[str]:
    """What a row's checks can bound: accuracy rows their drop, rules rows their own metric, and
    every row with a length its drift (``kl``: by default on facts and tool calls)."""
    own = source.metric if source.is_rules else "drop"
    return frozenset({own, "kl"} if source.length is not None else {own})


def check_keys(selection: Mapping[str, Mapping[str, Iterable[str]]]) -> dict[str, frozenset[str]]:
    """The key of every check a gate on ``selection`` (config -> length -> item ids) can make, thresholded
    or not (what a ``--threshold`` pattern may name), with the metrics a threshold may set there: its
    items, rules cells and headline rows."""
    found = {item_key(config, length, i): ITEM_METRICS
             for config, by_length in selection.items() for length, ids in by_length.items() for i in ids}
    found.update({cell_key(*cell): CELL_METRICS for config, by_length in selection.items() if config_kind(config) == "rules"
                  for cell in cells(config, list(by_length))})
    found.update({source.key: row_metrics(source)
                  for _, source in row_specs({config: list(by_length) for config, by_length in selection.items()})})
    return found


def dataset_keys(dataset: Dataset) -> dict[str, frozenset[str]]:
    """The key of every check a gate on ``dataset`` can make, with its metrics (``check_keys``)."""
    return check_keys({config: {length: [item.id for item in items] for length, items in by_length.items()}
                       for config, by_length in dataset.configs.items()})


# ------------------------------------------------------------------ verdicts

PASS, FAIL = "PASS", "FAIL"
NOT_NEEDED = "not needed"  # the word of a check sequential reading left open: its test fails on another check

# how sequential reading (gate/sequential/) settled a check
BOUNDS = "bounds"  # exact: no outcome of the unread items can change its verdict
TESTED = "confidence sequence"  # confident: an anytime-valid test at alpha shows it within or beyond its threshold
READ_THROUGH = "read through"  # exact: its every item read; the verdict is the point estimate's
NOT_SETTLED = "not settled"  # confident: the selection ran out first; the point estimate's verdict stands
MOOT = "moot"  # left open: its test (the row or cell) already fails on another check


def verdict_word(passed: bool | None) -> str:
    """PASS, FAIL, or n/a for a check that does not apply (None)."""
    return NA if passed is None else PASS if passed else FAIL


@dataclass(frozen=True)
class Settling:
    """How sequential reading settled a check (docs/metrics.md#sequential-reading): after how many of its items
    and their tokens, how, on which word, and the figures it rests on."""

    mode: str  # exact or confident
    how: str  # BOUNDS, TESTED, READ_THROUGH, NOT_SETTLED or MOOT
    word: str | None  # the verdict settled on; None where the point estimate over the items read stands (or, MOOT, none)
    items: int  # the check's items read when it was settled
    of_items: int  # the check's items in the selection
    tokens: int  # the tokens of those read
    of_tokens: int  # of all its items
    detail: str = ""  # what it rests on: the range still possible, or the test's e-values

    def text(self) -> str:
        """``settled FAIL after 1 of 8 items (2,101 of 16,790 tokens), exact: lowest possible far KL 0.225 > 0.050``."""
        read = f"{self.items} of {self.of_items} items ({self.tokens:,} of {self.of_tokens:,} tokens)"
        said = {BOUNDS: f"settled {self.word} after {read}, {self.mode}",
                TESTED: f"settled {self.word} after {read}, {self.mode} ({TESTED})",
                READ_THROUGH: f"read through ({read}), {self.mode}",
                NOT_SETTLED: f"not settled after {read}, {self.mode}; the point estimate decides",
                MOOT: f"not needed after {read}, {self.mode}"}[self.how]
        return f"{said}: {self.detail}" if self.detail else said

    def to_json(self) -> dict[str, Any]:
        return {"mode": self.mode, "how": self.how, "word": self.word, "items": self.items, "of_items": self.of_items,
                "tokens": self.tokens, "of_tokens": self.of_tokens, "detail": self.detail}


@dataclass
class Verdict:
    """One check of a row, cell or item: the model's and the baseline's values, the threshold, pass
    or fail."""

    key: str
    label: str  # the row name or a cell's description
    metric: str
    model: float | None
    baseline: float | None
    threshold: float  # the model value must reach this
    rule: str  # how the threshold came about
    losers: list[str] = field(default_factory=list)
    reference: str = "baseline"  # what ``baseline`` is the value of (compressor gate: the full context)
    # uncertainty (gate/uncertainty.py), where the per-item figures are at hand
    interval: tuple[float, float] | None = None  # paired bootstrap 95 % interval of model - baseline over items
    items: int | None = None  # the items sampled
    mdd: float | None = None  # minimum detectable drop of the selection
    lost: int | None = None  # McNemar, hit rows: targets the baseline hit and the model missed
    gained: int | None = None  # and the reverse
    p: float | None = None  # the two-sided exact McNemar p
    alpha: float | None = None  # --longctx-alpha: fail only on a significant shortfall
    bound: float | None = None  # with alpha: the one-sided (1 - alpha) upper bound of the margin (model - threshold)
    at_most: bool = False  # the value must stay at or below the threshold (drift), not reach it
    damage: Drift | None = None  # the row's drift figures and damage kind, where known
    floor: float | None = None  # the least value the metric can take (an accuracy's or a share's 0), where it has one
    settling: Settling | None = None  # sequential reading: how the check was settled (gate/sequential/)

    @property
    def vacuous(self) -> bool:
        """The threshold lies at or below any value the model can take: the check cannot fail (the
        baseline leaves no more than the allowed drop to lose). A model with no value where the baseline
        has one (its targets non-finite) still fails."""
        return self.model is not None and not self.at_most and self.floor is not None and self.threshold <= self.floor

    @property
    def applicable(self) -> bool:
        """n/a when neither side has a value (e.g. a rules cell with no counted target), or when the
        check cannot fail."""
        return (self.model is not None or self.baseline is not None) and not self.vacuous and not self.moot

    @property
    def moot(self) -> bool:
        """Sequential reading left it open: its test already fails on another check."""
        return self.settling is not None and self.settling.how == MOOT

    def why_not_applicable(self, min_effect: float) -> str:
        """Why the check is n/a, for the test that skips it."""
        if self.vacuous:
            return (f"the baseline's {self.metric} {number(self.baseline)} leaves no more than the allowed drop to lose "
                    f"(threshold {self.threshold:g}): the check cannot fail")
        return (f"no counted target (|eff_ref| >= {min_effect:g} nat)" if self.metric in ("retained", "follow")
                else "no scored item")

    @property
    def within(self) -> bool:
        """The point estimate is on the right side of the threshold."""
        assert self.model is not None
        return meets(self.model, self.threshold, self.at_most)

    @property
    def passed(self) -> bool:
        """A value the baseline has and the model cannot produce (every target non-finite or
        unscored) fails."""
        if self.settling is not None and self.settling.word in (PASS, FAIL):  # what sequential reading settled
            return self.settling.word == PASS
        if self.model is None:
            return self.baseline is None
        if self.within:
            return True
        # --longctx-alpha: beyond the threshold, but not significantly (without a bound: the point rule)
        return self.alpha is not None and self.bound is not None and self.bound >= 0

    @property
    def allowed(self) -> float | None:
        """How far the value may move from the baseline's: the allowed drop of a relative
        threshold, the distance from the baseline to an absolute one (drift: the rise allowed)."""
        if self.baseline is None:
            return None
        return self.threshold - self.baseline if self.at_most else self.baseline - self.threshold

    @property
    def needs(self) -> str:
        """``>= 0.512`` or, for a value that must stay low, ``<= 0.050``."""
        return f"{'<=' if self.at_most else '>='} {self.threshold:.3f}"

    def uncertainty_text(self) -> str:
        """``interval [-0.19, -0.04] over 8 items; McNemar lost 5 / gained 1, p = 0.22``."""
        parts = []
        if self.interval is not None:
            parts.append(f"interval [{self.interval[0]:.2f}, {self.interval[1]:.2f}] over {self.items} items")
        elif self.items is not None:
            parts.append(f"no interval ({self.items} item{'' if self.items == 1 else 's'} to resample)")
        if self.lost is not None and self.gained is not None and self.p is not None:
            parts.append(f"McNemar lost {self.lost} / gained {self.gained}, p = {self.p:.2g}")
        if self.alpha is not None and self.model is not None and not self.within:
            if self.bound is None:
                parts.append(f"alpha {self.alpha:g}: no bound, judged by the point estimate")
            else:
                significant = "significant" if self.bound < 0 else "not significant"
                margin = f"threshold - {self.metric}" if self.at_most else f"{self.metric} - threshold"
                parts.append(f"alpha {self.alpha:g}: shortfall {significant} (upper {1 - self.alpha:.0%} bound of "
                             f"{margin} {self.bound:+.3f})")
        return "; ".join(parts)

    @property
    def word(self) -> str:
        """PASS, FAIL, n/a when the model has no value to judge, or ``not needed`` (sequential reading left it open)."""
        return NOT_NEEDED if self.moot else verdict_word(self.passed if self.applicable else None)

    def to_json(self, damage: str | None = None) -> dict[str, Any]:
        """The check as every results file keeps it: its values, threshold and word, its uncertainty, and
        ``damage``, its row's damage kind where the row fails (``Evaluation.verdicts_json``)."""
        return {"key": self.key, "label": self.label, "metric": self.metric, "model": self.model, "baseline": self.baseline,
                "reference": self.reference, "threshold": self.threshold, "rule": self.rule, "at_most": self.at_most,
                "verdict": self.word, "interval": self.interval, "items": self.items, "mdd": self.mdd, "lost": self.lost,
                "gained": self.gained, "p": self.p, "alpha": self.alpha, "bound": self.bound, "losers": self.losers,
                "damage": damage, "settled": self.settling.to_json() if self.settling is not None else None}

    def message(self) -> str:
        head = (f"{self.label}: {self.metric} {number(self.model)} ({self.reference} {number(self.baseline)}), "
                f"needs {self.needs} ({self.rule})")
        if self.model is None and self.baseline is not None:
            head += f"; the model has no value where the {self.reference} has one (its targets were non-finite or unscored)"
        uncertainty = self.uncertainty_text()
        if uncertainty:
            head += f"; {uncertainty}"
        if self.damage is not None and self.damage.kind:
            head += f"; damage {self.damage.text()}"
        if self.losers:
            head += "; lost the most: " + "; ".join(self.losers)
        if self.settling is not None:
            head += f"; {self.settling.text()}"
        return head


def checks_word(verdicts: list[Verdict]) -> str:
    """The word of several checks of one place: FAIL when any fails, PASS when all that
    apply pass, n/a when none applies, nothing when there is no check."""
    applicable = [v for v in verdicts if v.applicable]
    if not applicable:
        return NA if verdicts else ""
    return verdict_word(all(v.passed for v in applicable))


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


def _row_items(source: RowSource) -> Any:
    """Which of a row's set's per-item entries the row is computed over (``RowSource.covers``)."""
    return lambda entry: source.covers(entry.get("placement"), entry.get("family"), entry.get("suite"))


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
    summaries = summaries_of(model_sets[config][length], _row_items(source))
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
        return with_uncertainty(verdict, config, length, model_sets, baseline_sets, _row_items(source), drop, thresholds.alpha)
    metric, cell = source.metric, source.cell
    threshold = thresholds.get(key, metric)
    losers = rules_losers(model_sets, config, *cell) if cell is not None else []  # a worst case with no counted cell has none
    verdict = Verdict(key, name, metric, model, baseline, threshold, f"{metric} >= {threshold:g}", losers,
                      floor=0.0 if metric == "follow" else None)
    if cell is None:
        return verdict
    return with_uncertainty(verdict, config, length, model_sets, baseline_sets, _row_items(source), None, thresholds.alpha)


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
            _row_items(RowSource(config, metric, length, placement, family)), None, thresholds.alpha)
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


def too_small(verdict: Verdict) -> str | None:
    """A warning when the selection cannot detect the drop the check allows: its minimum
    detectable drop exceeds the allowed one (docs/metrics.md#uncertainty)."""
    allowed = verdict.allowed
    if verdict.mdd is None or verdict.items is None or allowed is None or allowed <= 0 or verdict.mdd <= allowed:
        return None
    return (f"{verdict.key}: the selection is too small to gate it: over {verdict.items} items it detects a drop of "
            f"{verdict.mdd:.3f} (power 0.8 at 0.05), the check allows {allowed:.3f}; about "
            f"{needed_items(verdict.items, verdict.mdd, allowed)} items would be needed")


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
        keep = _row_items(source)
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


def item_metric(config: str, entry: dict[str, Any]) -> tuple[str, float | None]:
    """An item's headline metric in a set's ``per_item`` (facts-like configs: queries recalled)."""
    kind = config_kind(config)
    if kind == "tool_calls":
        return "far accuracy", entry["far"]["accuracy"]
    if kind == "rules":
        return "retained", entry["retained"]
    return "query accuracy", entry["query_accuracy"]


def accuracy_losers(source: RowSource, model_sets: dict, baseline_sets: dict, top: int = 3) -> list[str]:
    """Items whose accuracy fell the most (facts: queries recalled; tool calls: far targets)."""
    config, length = source.config, source.length
    mine, theirs = model_sets[config][length]["per_item"], baseline_sets[config][length]["per_item"]

    drops = []
    for item_id, entry in mine.items():
        a, b = item_metric(config, entry)[1], item_metric(config, theirs.get(item_id, entry))[1]
        if a is not None and b is not None and a < b:
            drops.append((b - a, item_id, b, a))
    drops.sort(key=lambda d: (-d[0], d[1]))
    return [f"{item_id} {b:.2f} -> {a:.2f}" for _, item_id, b, a in drops[:top]]


def rules_losers(model_sets: dict, config: str, length: str, placement: str, family: str, top: int = 3) -> list[str]:
    """Items of a cell with the lowest retained effect."""
    per_item = model_sets[config][length]["per_item"]
    counts = _row_items(RowSource(config, "retained", length, placement, family))
    found = [(cell["retained"], item_id) for item_id, cell in per_item.items() if cell["retained"] is not None and counts(cell)]
    found.sort()
    return [f"{item_id} retained {value:.2f}" for value, item_id in found[:top] if value < 1.0]


# ------------------------------------------------------------------ items


def rule_effect_loss(mine: dict, theirs: dict, min_effect: float = COUNT_NATS) -> tuple[float, float, float] | None:
    """(rule effect lost in the direction of the reference's effect, eff_ref, eff) of one
    rules target scored on both sides; None when the reference's effect is too small to count."""
    eff = mine["score_with"] - mine["score_without"]
    eff_ref = theirs["score_with"] - theirs["score_without"]
    if abs(eff_ref) < min_effect:
        return None
    return (eff_ref - eff) * (1.0 if eff_ref > 0 else -1.0), eff_ref, eff


def item_drop(config: str, mine: list[dict], theirs: list[dict] | None, min_effect: float = COUNT_NATS) -> float | None:
    """Mean loss of one item against the baseline, in nats: facts and tool calls, the
    log-probability lost per scored token; rules, the rule effect lost per counted target."""
    if theirs is None:
        return None
    losses = []
    for a, b in zip(mine, theirs):
        if not (is_scored(a) and is_scored(b)):
            continue
        if config_kind(config) == "rules":
            counted = rule_effect_loss(a, b, min_effect)
            if counted is not None:
                losses.append(counted[0])
        else:
            losses.extend(lb - la for la, lb in zip(a["logprobs"], b["logprobs"]))
    return sum(losses) / len(losses) if losses else None
