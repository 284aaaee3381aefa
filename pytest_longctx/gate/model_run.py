"""One gate run (a ``GateSession``): what the selected tests need, read once, and their verdicts. No pytest here: the
plugin drives it, and xdist workers hand what they read to the controller, which evaluates the same way.

It holds its collaborators: the data and the baseline (``GateInputs``), the reading (``GateReader``: each unit
read on first need, every item or under ``--longctx-sequential`` until the selected tests are settled), and
evaluates what is read: the verdicts of rows and cells (gate/evaluation.py) and each item's own check."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from pytest_longctx.backends.base import Backend
from pytest_longctx.data.records import ItemKey, Kind, config_kind
from pytest_longctx.errors import LongctxError
from pytest_longctx.gate.evaluation import Evaluation, evaluate
from pytest_longctx.gate.gate_session import Case, Progress, unit_of
from pytest_longctx.gate.inputs import GateInputs
from pytest_longctx.gate.keys import cell_key, cell_metrics, cells, dataset_keys, item_key
from pytest_longctx.gate.reader import GateReader
from pytest_longctx.gate.run_options import GateOptions
from pytest_longctx.gate.specs import ITEM
from pytest_longctx.gate.verdict import FAIL, PASS
from pytest_longctx.metrics.item_figures import countable, sets_json
from pytest_longctx.metrics.rows import row_specs
from pytest_longctx.numbers import NA
from pytest_longctx.scoring.fingerprint import data_fingerprint
from pytest_longctx.scoring.pipeline import compute_sets
from pytest_longctx.scoring.scores_file import ScoresFile, UnknownLoss, dropped_items


@dataclass(frozen=True)
class Outcome:
    """What one generated test comes to: PASS, FAIL or n/a, the lines it fails or is skipped with, its junit
    properties."""

    word: str
    lines: list[str] = field(default_factory=list)
    properties: list[tuple[str, Any]] = field(default_factory=list)


class GateRun:
    """The model gate's run (a ``GateSession``): its inputs, what the selected tests need, the reading, the verdicts."""

    def __init__(self, options: GateOptions, invocation_dir: Path, inputs: GateInputs | None = None):
        """``inputs``: the data and baseline already loaded, which a ladder's rungs share (gate/ladder_run.py)."""
        self.options = options
        self.thresholds = options.thresholds
        self.inputs = inputs if inputs is not None else GateInputs(options, invocation_dir)
        # a pattern is checked against the checks of the data, which a run without a baseline does not build
        self.warnings: list[str] = self.inputs.warnings + (self.thresholds.check_patterns(self.check_keys())
                                                           if not self.inputs.missing_baseline else [])
        self.reader = GateReader(self.inputs, options, self.warnings)
        self.needed: dict[str, set[ItemKey]] = {}
        self.tests: frozenset[str] = frozenset()  # the keys of the selected tests: what sequential reading settles
        self.read_all = False  # a user's fixture asked for every result: nothing is left unread from then on
        self._evaluations: dict[tuple[frozenset[ItemKey], frozenset[ItemKey]], Evaluation] = {}
        self.unloaded: str | None = None  # why the model did not load, where it did not (a ladder's rung; see not_loaded)

    # what the reports and blame read of the run, held by its collaborators
    dataset = property(lambda self: self.inputs.dataset)
    baseline = property(lambda self: self.inputs.baseline)
    baseline_path = property(lambda self: self.inputs.baseline_path)
    missing_baseline = property(lambda self: self.inputs.missing_baseline)
    scores = property(lambda self: self.reader.scores)
    readings = property(lambda self: self.reader.readings)
    failure = property(lambda self: self.unloaded or self.reader.failure)

    # -------------------------------------------------------------- cases

    def cases(self) -> list[Case]:
        if self.missing_baseline:  # one test, which fails saying how to make the baseline
            return [Case("baseline", "baseline", frozenset(), "")]
        found: list[Case] = [Case("item", item_key(c, n, item.id), frozenset({(c, n, item.id)}), c, n, item_id=item.id)
                             for c, n, item in self.dataset.items()]
        for config, by_length in self.dataset.configs.items():
            if config_kind(config) != Kind.RULES:
                continue
            for _, length, placement, family in cells(config, by_length):
                key = cell_key(config, length, placement, family)
                if cell_metrics(self.thresholds, key, family, placement):
                    found.append(Case("cell", key, self.inputs.keys(config, length), config, length))
        selection = {config: list(by_length) for config, by_length in self.dataset.configs.items()}
        for _, source in row_specs(selection):
            found.append(Case("row", source.key, self.inputs.keys(source.config, source.length), source.config, source.length))
        return found

    def check_keys(self) -> dict[str, frozenset[Any]]:
        """The key of every check the run can make, thresholded or not (what a ``--longctx-threshold`` pattern may
        name), with the metrics a threshold may set there."""
        return dataset_keys(self.dataset)

    def select(self, cases: Iterable[Case]) -> None:
        """Record what the selected tests need: reading covers exactly that, and settles exactly their checks."""
        self.needed = {}
        tests = set()
        for case in cases:
            self.needed.setdefault(case.unit, set()).update(case.needs)
            tests.add(case.key)
        self.tests = frozenset(tests)

    def need_everything(self) -> None:
        for key in self.inputs.fingerprints:
            self.needed.setdefault(unit_of(key[0]), set()).add(key)
        self.read_all = True

    # -------------------------------------------------------------- reading

    def ensure(self, units: Iterable[str], backend: Backend, progress: Progress = True) -> None:
        """Read the needed items of these units that are not read yet, once."""
        if self.missing_baseline or self.unloaded:
            raise LongctxError(self.missing_baseline or self.unloaded)
        self.reader.ensure(units, backend, self.needed, self.tests, self.read_all, progress)

    def is_read(self, key: ItemKey) -> bool:
        return self.reader.is_read(key)

    def not_applicable(self, key: ItemKey) -> str | None:
        """Why an item's own check is n/a (its baseline counts none of its targets: nothing it could lose), or None.
        Known from the baseline alone, so every mode says the same whether the item is read or not."""
        config, length, item_id = key
        if self.baseline is None:
            return None
        kind = config_kind(config)
        if countable(kind, self.baseline.scores[config][length][item_id].targets, self.thresholds.min_effect):
            return None
        counted = (f"none of its targets has a rule effect of {self.thresholds.min_effect:g} nat or more in the baseline"
                   if kind == Kind.RULES else "the baseline scored none of its targets")
        return f"{counted}, so it has no loss to check (its targets count in no row either)"

    def complete(self) -> dict[str, list[str]]:
        """config -> lengths whose every selected item is read, or left unread by the reading (none in a shard: a set
        is judged over every shard, by longctx merge)."""
        done: dict[str, list[str]] = {}
        if self.reader.part is not None:
            return done
        for config, by_length in self.dataset.configs.items():
            for length, items in by_length.items():
                keys = [(config, length, i.id) for i in items]
                if keys and all(self.is_read(k) or k in self.reader.unread for k in keys):
                    done.setdefault(config, []).append(length)
        return done

    # -------------------------------------------------------------- evaluation

    def evaluate(self, configs: Iterable[str] | None = None) -> Evaluation:
        """Metrics of the complete sets (of ``configs``), the model's and the baseline's over the items read, the
        thresholds from the baseline over every item (in update mode the model is its own baseline), and every
        applicable verdict, each annotated with how sequential reading settled it."""
        done = {c: n for c, n in self.complete().items() if configs is None or c in configs}
        keys = {k for k in self.inputs.fingerprints if k[1] in done.get(k[0], ())}
        read = frozenset(k for k in keys if self.is_read(k))
        memo = (frozenset(keys), read)  # items are read once, so complete sets never change
        if memo in self._evaluations:  # the cell and row tests of one set ask for the same numbers
            return self._evaluations[memo]
        min_effect = self.thresholds.min_effect
        every_set = {(c, n) for c, lengths in done.items() for n in lengths}
        chosen = self.dataset.select(set(read), keep=every_set)  # a set read of nothing still has its (n/a) rows
        sets = compute_sets(chosen, self.scores, self.baseline, min_effect)
        if self.baseline is None:
            evaluation = evaluate(sets, sets, self.thresholds)
        else:
            evaluation = evaluate(sets, compute_sets(chosen, self.baseline, None, min_effect), self.thresholds,
                                  compute_sets(self.dataset.select(keys, keep=every_set), self.baseline, None, min_effect))
        settled = {found: how for reading in self.readings.values() for found, how in reading.settlings().items()}
        for verdict in evaluation.verdicts:
            verdict.settling = settled.get((verdict.key, verdict.metric), verdict.settling)
        self._evaluations[memo] = evaluation
        return evaluation

    def judge(self, case: Case) -> Outcome:
        """The outcome of one generated test whose unit is read (``ensure``): its word, the lines it fails or is
        skipped with, and the junit properties it records."""
        elsewhere = self.reader.part.elsewhere(case.kind, case.item if case.kind == "item" else None) if self.reader.part else None
        if elsewhere:  # a shard judges the items it reads; longctx merge the rest
            return Outcome(NA, [f"{case.key}: {elsewhere}"])
        if case.kind == "item":
            not_applicable = self.not_applicable(case.item)
            if not_applicable:  # in every mode, read or not: nothing of the item is counted
                return Outcome(NA, [f"{case.key}: n/a: {not_applicable}"])
            problems, properties = self.item_report(case.item)
            return Outcome(FAIL if problems else PASS, [f"{case.key}: " + "; ".join(problems)] if problems else [],
                           [(f"longctx.{name}", value) for name, value in properties.items()])
        verdicts = [v for v in self.evaluate([case.config]).verdicts if v.key == case.key]
        assert verdicts, f"{case.key}: no verdict was computed (a bug in pytest-longctx)"
        properties = [(f"longctx.{prefix}{v.metric}", value) for v in verdicts
                      for prefix, value in (("", v.model), ("baseline_", v.baseline), ("threshold_", v.threshold))]
        if not any(v.applicable for v in verdicts):
            why = verdicts[0].why_not_applicable(self.thresholds.min_effect)
            return Outcome(NA, [f"{case.key}: {why}, nothing to check"], properties)
        failed = [v.message() for v in verdicts if v.applicable and not v.passed]
        return Outcome(FAIL if failed else PASS, failed, properties)

    def item_report(self, key: ItemKey) -> tuple[list[str], dict[str, Any]]:
        """(problems, properties: its metrics and counts) of one read item whose own check applies."""
        config, length, item_id = key
        mine = self.scores.scores[config][length][item_id].targets
        figures = self.reader.figures(key)
        limit = self.thresholds.get(item_key(config, length, item_id), ITEM.threshold)
        assert limit is not None  # every item has its loss checked by default
        problems = []
        unaligned = sum("unaligned" in r for r in mine)
        if unaligned == len(mine):
            problems.append(f"none of its {len(mine)} targets could be scored: {mine[0]['unaligned'] if mine else 'no targets'}")
        if figures.nonfinite:
            problems.append(f"{figures.nonfinite} target(s) gave NaN or infinite log-probabilities (check the dtype)")
        if figures.loss is not None and figures.loss > limit:
            problems.append(f"lost {figures.loss:.3f} nats per scored token against the baseline (allowed {limit:g}, "
                            "--longctx-item-max-drop)")
        properties = {"targets": len(mine), "unaligned": unaligned, "nonfinite": figures.nonfinite,
                      "item_drop_nats": None if figures.loss is None else round(figures.loss, 6), **figures.to_json()}
        return problems, properties

    def not_loaded(self, why: str) -> None:
        """The model did not load (a ladder's rung, whose run goes on with the other candidates): every test of it
        fails saying why, and the reports say it of its rung."""
        self.unloaded = why

    # -------------------------------------------------------------- xdist

    def export(self) -> str:
        """What a worker hands the controller, as JSON text (execnet carries plain types only)."""
        return json.dumps({**self.reader.export(), "warnings": self.warnings, "tests": sorted(self.tests),
                           "needed": {unit: sorted(keys) for unit, keys in self.needed.items()}, "unloaded": self.unloaded})

    def absorb(self, exported_text: str) -> None:
        """A worker's reading; and the tests it selected and the items they need, which the controller, collecting
        nothing itself, records as its selection (a shard's file names it: gate/shard_file.py)."""
        exported = json.loads(exported_text)
        self.reader.absorb(exported)
        self.warnings.extend(w for w in exported["warnings"] if w not in self.warnings)
        self.tests |= frozenset(exported["tests"])
        for unit, keys in exported["needed"].items():
            self.needed.setdefault(unit, set()).update((str(c), str(n), str(i)) for c, n, i in keys)
        self.unloaded = self.unloaded or exported["unloaded"]

    # -------------------------------------------------------------- the baseline

    def baseline_update(self, stopped: str | None) -> tuple[str | None, str | None]:
        """Whether this run may replace the baseline: (why not, or None; what it drops of the old baseline, or None).
        Only a complete run does: not one ``stopped`` early (interrupted, erroring, ``-x``; the plugin says why), nor
        one whose reading failed or read nothing, nor one that would drop items the old baseline holds (``-k``,
        ``--longctx-sets``, ``--longctx-lengths``, a smaller ``--longctx-limit``) unless ``--longctx-narrow-baseline``
        says it is meant, nor one over a file that cannot be read (a Git LFS pointer, a newer format, damage): what it
        would drop of that is unknown."""
        if stopped or self.failure:
            return stopped or self.failure, None
        if not any(True for _ in self.scores.items()):
            return "nothing was scored", None
        try:
            dropped = dropped_items(self.baseline_path, self.is_read) if self.baseline_path is not None else None
        except UnknownLoss as exc:
            return exc.reason, None
        except LongctxError as exc:  # a limit on reading set wrong (LONGCTX_MAX_FILE_BYTES=lots)
            return str(exc), None
        if dropped and not self.options.narrow_baseline:
            return (f"this run would drop {dropped}; give --longctx-narrow-baseline to narrow it on purpose, or update "
                    "it with the selection it was made with (no -k, the same --longctx-sets, --longctx-lengths and "
                    "--longctx-limit)"), None
        return None, dropped

    def baseline_file(self) -> ScoresFile:
        """The run's own scores as a baseline: raw scores plus its rows and sets."""
        evaluation = self.evaluate()
        scored = [(c, n, i, s.fingerprint) for c, n, i, s in self.scores.items()]
        return ScoresFile(mode=self.scores.mode, meta={**self.scores.meta, "data": data_fingerprint(scored)},
                          scores=self.scores.scores, rows=evaluation.rows, sets=sets_json(evaluation.sets))
