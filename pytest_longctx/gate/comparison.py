"""A model against its baseline: every row and cell side by side with the gate's verdicts,
and what was lost item by item and target by target. Built from a gate run (the
plugin's reports) or from files (``longctx compare``)."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from pytest_longctx.data.load import Dataset
from pytest_longctx.data.records import Kind, config_kind
from pytest_longctx.errors import LongctxError
from pytest_longctx.gate.distance import KINDS
from pytest_longctx.gate.evaluation import Evaluation, evaluate
from pytest_longctx.gate.losses import ItemLoss, TargetLoss, losses
from pytest_longctx.gate.model_run import GateRun
from pytest_longctx.gate.outcome import Happened
from pytest_longctx.gate.results_file import ResultsFile, find_data
from pytest_longctx.gate.sequential.reading import Totals, totals
from pytest_longctx.gate.thresholds import Thresholds
from pytest_longctx.gate.verdict import Verdict
from pytest_longctx.metrics.drift import ReadDrift, item_reads
from pytest_longctx.metrics.item_figures import Sets, sets_from_json, sets_json
from pytest_longctx.scoring.identity import compare_judged, header
from pytest_longctx.scoring.pipeline import compute_sets
from pytest_longctx.scoring.scores_file import ScoresFile, check_fits


@dataclass
class Comparison:
    """A model against its baseline: every row and cell with its verdict, and what was lost item by
    item and target by target; what every report renders."""

    model: str  # the candidate's name
    header: str  # what every report's header says of the candidate and its baseline (scoring/identity.py)
    mode: str
    evaluation: Evaluation
    thresholds: Thresholds
    items: list[ItemLoss]  # worst first
    targets: list[TargetLoss]  # worst first
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # the run's and the comparison's (a compressed baseline, a small selection)
    errors: list[str] = field(default_factory=list)  # what kept the gate from judging (no baseline, scoring failed)
    reads: dict[str, list[ReadDrift]] = field(default_factory=dict)  # facts / tool_calls -> every read's drift
    sequential: Totals | None = None  # what sequential reading read of the selection (gate/sequential/ totals)
    happened: Happened = field(default_factory=Happened)  # what the front end saw of the run (gate/outcome.py)

    @property
    def failing(self) -> list[Verdict]:
        return [v for v in self.evaluation.verdicts if v.applicable and not v.passed]

    @property
    def failing_items(self) -> list[ItemLoss]:
        return [i for i in self.items if not i.passed]

    @property
    def passed(self) -> bool:
        return not self.errors and not self.failing and not self.failing_items

    @property
    def verdict(self) -> str:
        """PASS only where every selected check was judged and passed; else FAIL, or what happened instead."""
        return self.happened.word(not self.passed)

    @property
    def not_judged(self) -> str | None:
        """Why some selected check was not judged (the model did not load, the run stopped, nothing was selected)."""
        return self.happened.incomplete()

    def to_json(self, count: int = 0) -> dict[str, Any]:
        """Everything compared; ``count`` > 0 keeps the worst ``count`` items and targets."""
        evaluation = self.evaluation
        shown = (lambda xs: xs[:count]) if count > 0 else (lambda xs: xs)
        return {
            "model": self.model, "header": self.header, "mode": self.mode, "passed": self.passed,
            "outcome": self.verdict, "not_judged": self.not_judged,
            "notes": self.notes, "errors": self.errors, "thresholds": self.thresholds.describe(),
            "rows": evaluation.rows, "baseline_rows": evaluation.baseline_rows,
            "row_sources": {name: source.to_json() for name, source in evaluation.row_sources.items()},
            "verdicts": evaluation.verdicts_json(),
            "sets": sets_json(evaluation.sets), "baseline_sets": sets_json(evaluation.baseline_sets),
            "items": [{"key": i.key, **asdict(i), "passed": i.passed} for i in shown(self.items)],
            "targets": [{"where": t.where, **asdict(t)} for t in shown(self.targets)],
            "counts": {"items": len(self.items), "failing_items": len(self.failing_items), "targets": len(self.targets)},
            "drift": {name: {**asdict(found), "kind": evaluation.damage_kind(name)} for name, found in evaluation.drift.items()},
        }


def read_drift(model: ScoresFile | None, baseline: ScoresFile, dataset: Dataset | None) -> dict[str, list[ReadDrift]]:
    """Every read of the facts and tool-call items both sides have drift blocks for, by kind:
    what the drift-by-distance view shows."""
    found: dict[str, list[ReadDrift]] = {}
    if model is None or dataset is None:
        return found
    for config, length, item in dataset.items():
        kind = config_kind(config)
        mine = model.scores.get(config, {}).get(length, {}).get(item.id)
        theirs = baseline.scores.get(config, {}).get(length, {}).get(item.id)
        if kind in KINDS and mine is not None and theirs is not None:
            found.setdefault(kind, []).extend(item_reads(item, mine, theirs) or [])
    return {kind: reads for kind, reads in found.items() if reads}


def model_name(meta: dict[str, Any]) -> str:
    return str(meta.get("model") or meta.get("backend") or "unnamed model")


def from_gate_run(run: GateRun, evaluation: Evaluation, happened: Happened | None = None) -> Comparison:
    """The comparison of a finished model gate run; ``happened``: what the front end saw of it."""
    baseline = run.baseline if run.baseline is not None else run.scores
    items, targets = losses(run.scores, baseline, evaluation.sets, evaluation.baseline_sets, run.thresholds,
                            run.dataset)
    against = (f"baseline {run.options.baseline}" if run.baseline is not None else
               "itself (updating the baseline)" if run.options.update_baseline else "no baseline")
    errors = [e for e in (run.missing_baseline, run.failure) if e]
    said = header(run.scores.meta, run.baseline.meta if run.baseline is not None else None, against, str(run.options.model))
    return Comparison(str(run.options.model), said, run.scores.mode or "n/a", evaluation, run.thresholds,
                      items, targets, notes=evaluation.notes, warnings=[*run.warnings, *evaluation.warnings], errors=errors,
                      reads=read_drift(run.scores, baseline, run.dataset), sequential=totals(run.readings.values()),
                      happened=happened or Happened())


def _stored_sets(results: ResultsFile, baseline: ScoresFile) -> tuple[Sets, Sets]:
    """Both sides' metrics as their files stored them, on the same items."""
    recompute = "pass --data DIR (the data they were scored on) so both are computed from the raw scores"
    if results.sets is None:
        raise LongctxError(f"results {results.path}: a scores file without metrics; {recompute}")
    if baseline.sets is None:
        raise LongctxError(f"baseline {baseline.path}: holds no metrics (made by --save_scores); {recompute}")
    chosen: dict[str, dict[str, Any]] = {}
    for config, by_length in results.sets.items():
        for length, metrics in by_length.items():
            theirs = baseline.sets.get(config, {}).get(length)
            if theirs is None:
                raise LongctxError(f"baseline {baseline.path}: has no metrics for {config}/{length}; {recompute}")
            if set(theirs["per_item"]) != set(metrics["per_item"]):
                raise LongctxError(f"baseline {baseline.path} and results {results.path}: their {config}/{length} "
                                   f"metrics cover different items; {recompute}")
            chosen.setdefault(config, {})[length] = theirs
    found = []
    for path, stored in ((results.path, results.sets), (baseline.path, chosen)):
        try:
            found.append(sets_from_json(stored))
        except (KeyError, TypeError, ValueError) as exc:
            raise LongctxError(f"{path}: its stored metrics lack an item's figure ({exc}; written by another version of "
                               f"pytest-longctx); {recompute}") from None
    return found[0], found[1]


def compare_files(baseline: ScoresFile, results: ResultsFile, data: str | None, thresholds: Thresholds) -> Comparison:
    """Recomputed from both sides' raw scores when the items are at hand (exactly as the
    gate computes them), else from the metrics the files stored."""
    notes: list[str] = []
    dataset = None
    read = results.sequential
    if read is not None and read.get("items") != read.get("of_items"):
        notes.append(f"results {results.path}: read sequentially ({read.get('mode')}), {read.get('items')} of "
                     f"{read.get('of_items')} items: compared on the items read, against the baseline on the same "
                     "items (the gate's thresholds came from the baseline over every item)")
    if results.scores is not None:
        needed = {(c, n, i): s.fingerprint for c, n, i, s in results.scores.items()}
        check_fits(baseline, results.scores.mode, results.scores.meta.get("tokenizer", ""), needed, what="baseline")
        dataset, note = find_data(data, needed, results, baseline)
    else:
        note = (f"results {results.path} holds no per-target scores (written by an older pytest-longctx): "
                "only the metrics are compared; for per-target losses give its scores file (--save_scores)")
    notes += [note] if note else []
    if dataset is not None and results.scores is not None:
        sets = compute_sets(dataset, results.scores, baseline, thresholds.min_effect)
        baseline_sets = compute_sets(dataset, baseline, None, thresholds.min_effect)
    else:
        sets, baseline_sets = _stored_sets(results, baseline)
        if any(config_kind(c) == Kind.RULES for c in sets):
            notes.append(f"rules metrics as stored in {results.path}, measured against "
                         f"{results.reference or 'the model itself'}")
    items, targets = losses(results.scores, baseline, sets, baseline_sets, thresholds, dataset)
    evaluation = evaluate(sets, baseline_sets, thresholds)
    return Comparison(model_name(results.meta), header(results.meta, baseline.meta, f"baseline {baseline.path}"),
                      results.mode, evaluation, thresholds, items, targets, [*notes, *evaluation.notes],
                      [*compare_judged(baseline.meta, results.meta).warnings, *evaluation.warnings],
                      reads=read_drift(results.scores, baseline, dataset),
                      # a run that did not judge every check wrote what it judged: no PASS from it either
                      happened=Happened(stopped=f"the run that wrote {results.path} did not judge every check: "
                                                f"{results.not_judged}" if results.not_judged else None))
