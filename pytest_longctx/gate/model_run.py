"""One gate run: the data and baseline, what the selected tests need, scoring it once,
and the verdicts. No pytest here: the plugin drives it, and xdist workers hand their
raw scores to the controller, which evaluates the same way.

Scoring happens per unit — ``facts``, ``tool_calls``, and ``rules`` (the three
languages together, as they share their agent sessions) — the first time a test needs it,
and covers every item the selected tests of that unit need; under ``--longctx-sequential``
(exact by default) it reads them one at a time until every selected row and cell of the unit
is settled (gate/sequential/), and the items left unread are skipped by their tests.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable

from pytest_longctx.backends.aliases import is_model_name
from pytest_longctx.backends.base import Backend, tokenizer_of
from pytest_longctx.data.load import Dataset, load_dataset
from pytest_longctx.data.records import ItemKey, config_kind
from pytest_longctx.errors import LongctxError, without_credentials
from pytest_longctx.gate.gate_session import Case, Progress, unit_of
from pytest_longctx.gate.keys import cell_key, cell_metrics, cells, dataset_keys, item_key
from pytest_longctx.gate.losses import item_drop
from pytest_longctx.gate.options import OFF, GateOptions
from pytest_longctx.gate.sequential.checks import checks_of
from pytest_longctx.gate.sequential.reading import annotate, read
from pytest_longctx.gate.verdicts import Evaluation, evaluate
from pytest_longctx.metrics.raw import is_nonfinite
from pytest_longctx.metrics.rows import row_specs
from pytest_longctx.scoring.cache import ScoreCache
from pytest_longctx.scoring.fingerprint import data_fingerprint, item_fingerprint, tokenizer_fingerprint
from pytest_longctx.scoring.identity import compare_judged
from pytest_longctx.scoring.modes import choose_mode
from pytest_longctx.scoring.pipeline import compute_sets, item_entry, item_tokens, score_items
from pytest_longctx.scoring.scores_file import (
    ScoresFile,
    UnknownLoss,
    check_coverage,
    check_fits,
    dropped_items,
    load_scores,
    scores_from_json,
)


class GateRun:
    """The model gate's run (a ``GateSession``): the data and the baseline, what the
    selected tests need, the scores, and the verdicts."""

    def __init__(self, options: GateOptions, invocation_dir: Path):
        self.options = options
        self.thresholds = options.thresholds
        # what the run writes was checked against what it reads by the front end (GateOptions.files); the baseline
        # comes first: one that is missing or cannot be read is said before any data is built
        self.baseline_path = options.baseline_file(invocation_dir)
        if options.update_baseline and self.baseline_path is None:
            raise LongctxError("--longctx-update-baseline: also give the file to write, --longctx-baseline PATH "
                               "(e.g. baselines/my-model.json.gz)")
        if options.update_baseline:  # a file there that cannot be read is refused now, not once the scoring is done
            try:
                dropped_items(self.baseline_path, lambda key: True)
            except UnknownLoss as exc:
                raise LongctxError(f"--longctx-update-baseline: baseline {exc}") from None
        self.baseline: ScoresFile | None = None
        self.missing_baseline: str | None = None
        if not options.update_baseline:
            if self.baseline_path is None or not self.baseline_path.exists():
                self.missing_baseline = self._missing_baseline_message()
            else:
                self.baseline = load_scores(self.baseline_path, "baseline")
        # without a baseline the one test says how to make it: no data is built for it
        self.dataset = (load_dataset(options.data, options.sets, options.lengths, options.limit) if not self.missing_baseline
                        else Dataset(str(options.data)))
        left_out = self._leave_out_configs_without_baseline()
        if self.baseline is not None and not self.baseline.has_drift:
            left_out.append(f"baseline {self.baseline_path} keeps no most likely tokens (made before drift rows, or by a "
                            "backend without top_k), so there are no drift rows; recreate it (--longctx-update-baseline) "
                            "to compare distributions at every read")
        self.fingerprints = {(c, n, item.id): item_fingerprint(item) for c, n, item in self.dataset.items()}
        if self.baseline is not None:  # before any model is loaded: a baseline of a narrower selection, or stale
            check_coverage(self.baseline, self.fingerprints, "baseline")
        self.needed: dict[str, set[ItemKey]] = {}
        self.tests: set[str] = set()  # the keys of the selected row and cell tests: what sequential reading settles
        self.readings: dict[str, dict[str, Any]] = {}  # unit -> the stopping record of its sequential reading
        self.unread: set[ItemKey] = set()  # needed items sequential reading settled every check without
        self.read_all = False  # a user's fixture asked for every result: nothing is left unread from then on
        self.scores = ScoresFile(mode="", meta={})
        self.scored_units: set[str] = set()
        self.failure: str | None = None  # a scoring failure, repeated by later tests
        self.cache: Any = None
        self._evaluations: dict[tuple[frozenset[ItemKey], frozenset[ItemKey]], Evaluation] = {}
        # a pattern is checked against the checks of the data, which a run without a baseline does not build
        self.warnings: list[str] = left_out + (self.thresholds.check_patterns(self.check_keys()) if not self.missing_baseline else [])

    def _leave_out_configs_without_baseline(self) -> list[str]:
        """Without --longctx-sets, a config the baseline has no scores for at all (a baseline
        made before the config existed, e.g. faithfulness) is left out with a warning."""
        if self.baseline is None or self.options.sets:
            return []
        lacking = [c for c in self.dataset.configs if c not in self.baseline.scores]
        for config in lacking:
            del self.dataset.configs[config]
        return [f"config {config}: it has none of its scores, so {config} is not gated; recreate the baseline "
                "(--longctx-update-baseline) to gate it" for config in lacking]

    # -------------------------------------------------------------- cases

    def _missing_baseline_message(self) -> str:
        path = self.options.baseline or "baselines/<original-model>.json.gz"
        # a local path in the hint would be copied into CI, where it names nothing: name the
        # model as given only when it is an id or alias
        named = is_model_name(str(self.options.model))
        model = self.options.model if named else "<original-model-id-or-alias>"
        command = " ".join(["pytest", f"--longctx-model {model}", f"--longctx-baseline {path}",
                            "--longctx-update-baseline", *self.options.data_args()])
        where = (
            f"baseline {self.baseline_path} does not exist"
            if self.baseline_path
            else "no baseline given (--longctx-baseline or ini longctx_baseline)"
        )
        return (
            f"{where}; create it from the original (uncompressed) model, then commit it: {command} "
            + ("(put the original model's id in --longctx-model if this one is a compressed candidate)" if named else
               f"(in --longctx-model put the original model's hub id or alias, not a local path like "
               f"{without_credentials(str(self.options.model))})")
        )

    def _keys(self, config: str, length: str | None = None) -> frozenset[ItemKey]:
        return frozenset(k for k in self.fingerprints if k[0] == config and length in (None, k[1]))

    def cases(self) -> list[Case]:
        if self.missing_baseline:  # one test, which fails saying how to make the baseline
            return [Case("baseline", "baseline", frozenset(), "")]
        return self._checks()

    def check_keys(self) -> dict[str, frozenset[str]]:
        """The key of every check the run can make, thresholded or not (what a
        ``--longctx-threshold`` pattern may name), with the metrics a threshold may set there."""
        return dataset_keys(self.dataset)

    def _checks(self) -> list[Case]:
        """Items, rules cells with a threshold, and headline rows."""
        found: list[Case] = []
        for config, length, item in self.dataset.items():
            found.append(
                Case("item", item_key(config, length, item.id), frozenset({(config, length, item.id)}), config, length, item_id=item.id)
            )
        for config, by_length in self.dataset.configs.items():
            if config_kind(config) != "rules":
                continue
            for _, length, placement, family in cells(config, by_length):
                key = cell_key(config, length, placement, family)
                if cell_metrics(self.thresholds, key, family, placement):
                    found.append(Case("cell", key, self._keys(config, length), config, length))
        selection = {config: list(by_length) for config, by_length in self.dataset.configs.items()}
        for _, source in row_specs(selection):
            found.append(Case("row", source.key, self._keys(source.config, source.length), source.config, source.length))
        return found

    def select(self, cases: Iterable[Case]) -> None:
        """Record what the selected tests need: scoring covers exactly that."""
        self.needed = {}
        self.tests = set()
        for case in cases:
            self.needed.setdefault(case.unit, set()).update(case.needs)
            if case.kind in ("row", "cell"):
                self.tests.add(case.key)

    def need_everything(self) -> None:
        for key in self.fingerprints:
            self.needed.setdefault(unit_of(key[0]), set()).add(key)
        self.read_all = True

    # -------------------------------------------------------------- scoring

    def ensure(self, units: Iterable[str], backend: Backend, progress: Progress = True) -> None:
        """Score the needed items of these units that are not scored yet, once."""
        if self.failure:
            raise LongctxError(f"scoring failed earlier in this session: {self.failure}")
        if self.missing_baseline:
            raise LongctxError(self.missing_baseline)
        try:
            for unit in units:
                keys = {k for k in self.needed.get(unit, ()) if not self.is_read(k)}
                if not self.read_all:
                    keys -= self.unread
                if keys and self._sequential(unit):
                    self._read_sequentially(unit, keys, backend, progress)
                elif keys:
                    self._score(keys, backend, progress)
                self.scored_units.add(unit)
        except LongctxError as exc:
            self.failure = str(exc)
            raise

    def is_read(self, key: ItemKey) -> bool:
        """Whether the item is scored in this run (read, or answered from the score cache)."""
        config, length, item_id = key
        return item_id in self.scores.scores.get(config, {}).get(length, {})

    def _sequential(self, unit: str) -> bool:
        """Whether the unit is read sequentially: a mode other than off, a baseline to judge against, no fixture
        asking for every result, and not read so already."""
        return (self.options.sequential != OFF and self.baseline is not None and not self.read_all
                and unit not in self.readings)

    def _read_sequentially(self, unit: str, keys: set[ItemKey], backend: Backend, progress: Progress) -> None:
        """Read the unit's items one at a time, in the fixed order, until every selected row and cell is settled
        (gate/sequential/); the needed items no check counts are read first, whole."""
        assert self.baseline is not None
        configs = {config for config in self.dataset.configs if unit_of(config) == unit}
        unit_data = self.dataset.select({k for k in self.fingerprints if k[0] in configs})
        checks, order = checks_of(unit_data, self.baseline, self.thresholds, frozenset(self.tests))
        if keys - set(order):
            self._score(keys - set(order), backend, progress)
        if not order:
            return
        self._choose_mode(backend)
        tokens = item_tokens(self.dataset.select(set(order)), self.scores.mode, tokenizer_of(backend))

        def score(key: ItemKey) -> dict[str, Any] | None:
            if not self.is_read(key):
                self._score({key}, backend, progress)
            return self._entry(key)

        reading = read(self.options.sequential, self.thresholds.alpha, checks, order, tokens, score)
        self.readings[unit] = reading.record()
        self.unread |= {key for key in order if key not in reading.read}

    def _entry(self, key: ItemKey) -> dict[str, Any] | None:
        """A scored item's entry in its set's ``per_item``, against the baseline: the figures its checks count."""
        return item_entry(self.dataset, self.scores, self.baseline, key, self.thresholds.min_effect)

    def not_read(self, key: ItemKey) -> str | None:
        """Why sequential reading left an item unread (its test is skipped with it), or None."""
        if key not in self.unread or self.is_read(key):
            return None
        config, length, _ = key
        record = self.readings.get(unit_of(config), {})
        of_set = [k for k in map(tuple, record.get("order", ())) if k[:2] == key[:2]]
        read = sum(1 for k in map(tuple, record.get("read", ())) if k[:2] == key[:2])
        return (f"not read: {config} {length}'s selected rows and cells were settled after {read} of its {len(of_set)} "
                f"items (--longctx-sequential {record.get('mode', self.options.sequential)}; off reads every item)")

    def _choose_mode(self, backend: Backend) -> None:
        """The tokenization mode, chosen once, on the first item scored (a fallback to text says so), and the
        baseline checked against it."""
        tokenizer = tokenizer_of(backend)
        if not self.scores.mode:
            self.scores.mode = choose_mode(self.options.mode, tokenizer, self.dataset, self.warnings)  # a fallback to text says so
            if self.baseline is not None:
                check_fits(
                    self.baseline, self.scores.mode, tokenizer_fingerprint(tokenizer, self.scores.mode), self.fingerprints, what="baseline"
                )

    def _score(self, keys: set[ItemKey], backend: Backend, progress: Progress) -> None:
        tokenizer = tokenizer_of(backend)
        self._choose_mode(backend)
        if self.cache is None:
            self.cache = ScoreCache.for_backend(backend, self.options.cache_dir, warn=self.warnings.append) or False
        notes: list[str] = []
        part = score_items(backend, tokenizer, self.dataset.select(keys), self.scores.mode, progress,
                           cache=self.cache or None, beyond_context=self.options.allow_beyond_context,
                           reference=self.baseline, notes=notes)
        self.warnings.extend(n for n in notes if n not in self.warnings)
        if not self.scores.meta:
            self.scores.meta = {k: v for k, v in part.meta.items() if k != "data"}
            if self.baseline is not None:
                self.warnings.extend(compare_judged(self.baseline.meta, self.scores.meta).warnings)
        self.merge(part)

    def merge(self, part: ScoresFile) -> None:
        for config, length, item_id, scores in part.items():
            self.scores.scores.setdefault(config, {}).setdefault(length, {})[item_id] = scores

    # -------------------------------------------------------------- xdist

    def export(self) -> str:
        """What a worker hands the controller, as JSON text (execnet carries plain types only)."""
        return json.dumps({"scores": self.scores.to_json(), "warnings": self.warnings, "failure": self.failure,
                           "readings": self.readings, "unread": sorted(self.unread)})

    def absorb(self, exported_text: str) -> None:
        exported = json.loads(exported_text)
        body = exported["scores"]
        part = scores_from_json(body)
        if part.mode:
            self.scores.mode = self.scores.mode or part.mode
            self.scores.meta = self.scores.meta or part.meta
        self.merge(part)
        self.warnings.extend(w for w in exported["warnings"] if w not in self.warnings)
        self.failure = self.failure or exported["failure"]
        self.readings.update(exported.get("readings", {}))
        self.unread |= {tuple(key) for key in exported.get("unread", ())}

    # -------------------------------------------------------------- evaluation

    def complete(self) -> dict[str, list[str]]:
        """config -> lengths whose every selected item is scored, or left unread by sequential reading."""
        done: dict[str, list[str]] = {}
        for config, by_length in self.dataset.configs.items():
            for length, items in by_length.items():
                if items and all(self.is_read((config, length, i.id)) or (config, length, i.id) in self.unread
                                 for i in items):
                    done.setdefault(config, []).append(length)
        return done

    def evaluate(self, configs: Iterable[str] | None = None) -> Evaluation:
        """Metrics of the complete sets (of ``configs``), the baseline's on the same items
        (in update mode the model is its own baseline), and every applicable verdict."""
        done = {c: n for c, n in self.complete().items() if configs is None or c in configs}
        keys = {k for k in self.fingerprints if k[1] in done.get(k[0], ())}
        read = frozenset(k for k in keys if self.is_read(k))
        memo = (frozenset(keys), read)  # items are scored once, so complete sets never change
        if memo in self._evaluations:  # the cell and row tests of one set ask for the same numbers
            return self._evaluations[memo]
        reference = self.baseline
        min_effect = self.thresholds.min_effect
        # the model over what it read; the baseline, and so each threshold, over the whole selection, as off has it
        sets = compute_sets(self.dataset.select(set(read)), self.scores, reference, min_effect)
        baseline_sets = compute_sets(self.dataset.select(keys), reference, None, min_effect) if reference is not None else sets
        evaluation = self._evaluations[memo] = evaluate(sets, baseline_sets, self.thresholds)
        annotate(evaluation.verdicts, self.readings.values())
        return evaluation

    def item_report(self, key: ItemKey) -> tuple[list[str], dict[str, Any]]:
        """(problems, properties: its metrics and counts) of one scored item."""
        config, length, item_id = key
        mine = self.scores.scores[config][length][item_id].targets
        theirs = self.baseline.scores[config][length][item_id].targets if self.baseline is not None else None
        problems = []
        unaligned = sum("unaligned" in r for r in mine)
        nonfinite = sum(is_nonfinite(r) for r in mine)
        if unaligned == len(mine):
            problems.append(f"none of its {len(mine)} targets could be scored: {mine[0]['unaligned'] if mine else 'no targets'}")
        if nonfinite:
            problems.append(f"{nonfinite} target(s) gave NaN or infinite log-probabilities (check the dtype)")
        drop = item_drop(config, mine, theirs, self.thresholds.min_effect)
        limit = self.thresholds.get(item_key(config, length, item_id), "item_drop")
        if drop is not None and drop > limit:
            problems.append(f"lost {drop:.3f} nats per scored token against the baseline (allowed {limit:g}, --longctx-item-max-drop)")
        properties = {
            "targets": len(mine),
            "unaligned": unaligned,
            "nonfinite": nonfinite,
            "item_drop_nats": None if drop is None else round(drop, 6),
            **(self._entry(key) or {}),
        }
        return problems, properties

    def baseline_update(self, stopped: str | None) -> tuple[str | None, str | None]:
        """Whether this run may replace the baseline: (why not, or None; what it drops of
        the old baseline, or None). Only a complete run does: not one ``stopped`` early
        (interrupted, erroring, ``-x``; the plugin says why), nor one whose scoring failed or
        scored nothing, nor one that would drop items the old baseline holds (``-k``,
        ``--longctx-sets``, ``--longctx-lengths``, a smaller ``--longctx-limit``) unless
        ``--longctx-narrow-baseline`` says it is meant, nor one over a file that cannot be read (a
        Git LFS pointer, a newer format, damage): what it would drop of that is unknown."""
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
        return ScoresFile(
            mode=self.scores.mode,
            meta={**self.scores.meta, "data": data_fingerprint(scored)},
            scores=self.scores.scores,
            rows=evaluation.rows,
            sets=evaluation.sets,
        )
