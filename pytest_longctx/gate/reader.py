"""How a model gate run reads the model (``GateReader``): each unit's needed items once, every one
(``--longctx-sequential off``) or a group at a time until the selected tests are settled (gate/sequential/); what
it read (the scores), how (each unit's ``Reading``), the tokens it forwarded, and one progress line for the run.

A unit is what is read together: ``facts``, ``tool_calls``, ``faithfulness``, and ``rules`` (the three languages
share their agent sessions, only the rule line differs)."""
from __future__ import annotations

import time
from typing import Any, Callable, Iterable, Sequence

from pytest_longctx.backends.base import Backend, tokenizer_of
from pytest_longctx.data.records import ItemKey
from pytest_longctx.errors import LongctxError
from pytest_longctx.gate.inputs import GateInputs
from pytest_longctx.gate.run_options import GateOptions
from pytest_longctx.gate.sequential.driver import read_unit
from pytest_longctx.gate.sequential.reading import Reading
from pytest_longctx.gate.shards import ShardPart, reading_mode
from pytest_longctx.metrics.item_figures import ItemFigures
from pytest_longctx.options.table import Sequential
from pytest_longctx.progress import RunProgress
from pytest_longctx.scoring.cache import ScoreCache
from pytest_longctx.scoring.engine import how_read
from pytest_longctx.scoring.fingerprint import tokenizer_fingerprint
from pytest_longctx.scoring.groups import Groups
from pytest_longctx.scoring.identity import compare_judged
from pytest_longctx.scoring.modes import choose_mode
from pytest_longctx.scoring.pipeline import Scored, compute_sets, item_entry, planned_reads, read_plans
from pytest_longctx.scoring.scores_file import ScoresFile, check_fits, scores_from_json

Progress = Callable[[int, int], Any] | bool  # a factory of progress displays; False: none


class GateReader:
    """What a gate run has read and how (see the module docstring)."""

    def __init__(self, inputs: GateInputs, options: GateOptions, warnings: list[str]):
        self.inputs, self.options, self.warnings = inputs, options, warnings
        self.scores = ScoresFile(mode="", meta={})
        self.readings: dict[str, Reading] = {}  # unit -> its sequential reading
        self.unread: set[ItemKey] = set()  # needed items no selected test needed read
        self.done: set[str] = set()  # units read
        self.forwarded = 0  # tokens the model ran over (the score cache's answers not)
        self.whole = 0  # the tokens reading every needed item of the units read at once forwards (off, no cache)
        self.seconds = 0.0  # spent reading (planning, the engine, the figures), in every process together
        self.failure: str | None = None  # a reading failure, repeated by later tests
        self.cache: ScoreCache | None = None
        self.groups: dict[str, Groups] = {}  # unit -> its needed items as the engine reads them
        self.refused: dict[str, str] = {}  # unit -> why it cannot be read
        self.progress: RunProgress | None = None
        self.within: Callable[[ItemKey], Any] | None = None  # the order within each set (default: by digest)
        self.source: Callable[..., Scored] = read_plans  # what reads planned items: the engine through the backend
        # --longctx-shard: this run reads its part of the selection (gate/shards.py)
        self.part = ShardPart(options.shard) if options.shard is not None else None

    def is_read(self, key: ItemKey) -> bool:
        """Whether the item is scored in this run (read, or answered from the score cache)."""
        config, length, item_id = key
        return item_id in self.scores.scores.get(config, {}).get(length, {})

    def figures(self, key: ItemKey) -> ItemFigures:
        """A read item's figures against the baseline."""
        return item_entry(self.inputs.dataset, self.scores, self.inputs.baseline, key, self.options.thresholds.min_effect)

    def ensure(self, units: Iterable[str], backend: Backend, needed: dict[str, set[ItemKey]], tests: frozenset[str],
               read_all: bool, progress: Progress) -> None:
        """Read the needed items of these units not read yet, once; ``read_all``: every one, whatever is settled."""
        if self.failure:
            raise LongctxError(f"scoring failed earlier in this session: {self.failure}")
        started = time.perf_counter()
        try:
            self._plan(backend, needed, progress)
            for unit in units:
                if unit in self.refused:
                    raise LongctxError(self.refused[unit])
                keys = {k for k in needed.get(unit, ()) if not self.is_read(k)}
                if not read_all:
                    keys -= self.unread
                if keys and self._sequential(unit, read_all):
                    self._read_sequentially(unit, keys, backend, tests)
                elif keys:
                    mine = self.part.slice(keys) if self.part is not None else keys
                    self._read(mine, backend, self.groups[unit])
                    self.whole += self.groups[unit].whole(sorted(mine))
                self.done.add(unit)
                self._bound(needed)
        except LongctxError as exc:
            self.failure = str(exc)
            raise
        finally:
            self.seconds += time.perf_counter() - started
            if self.progress is not None and set(needed) <= self.done:
                self.progress.close()
                self.progress = None

    def _sequential(self, unit: str, read_all: bool) -> bool:
        """Whether the unit is read sequentially: a mode other than off, a baseline to judge against, no fixture
        asking for every result, and not read so already."""
        return (self.options.sequential != Sequential.OFF and self.inputs.baseline is not None and not read_all
                and unit not in self.readings)

    def _plan(self, backend: Backend, needed: dict[str, set[ItemKey]], progress: Progress) -> None:
        """Every needed unit planned once (the engine's groups and costs; a unit that cannot be read, such as one past
        the model's context window, keeps why, for its own tests), and the run's one progress line."""
        self._choose_mode(backend)
        tokenizer, notes, how = tokenizer_of(backend), [], how_read(backend)
        for unit, keys in needed.items():
            if unit in self.refused or (unit in self.groups and keys <= set(self.groups[unit].plans)):
                continue
            try:
                plans = planned_reads(backend, tokenizer, self.inputs.dataset.select(keys), self.scores.mode,
                                      self.inputs.baseline, notes, self.options.allow_beyond_context)
            except LongctxError as exc:
                self.refused[unit] = str(exc)
                continue
            self.groups[unit] = Groups.of(plans, how)
        if self.part is not None:
            self.part.plan(self.groups, needed)
        self.warnings.extend(n for n in notes if n not in self.warnings)
        if progress and callable(progress) and self.progress is None and not set(needed) <= self.done:
            self.progress = RunProgress(progress(0, 0))
            self._bound(needed)

    def _bound(self, needed: dict[str, set[ItemKey]]) -> None:
        """The run's progress line: the items and tokens read, of the most that may be read (what is read, and
        every item still needed at what reading it would forward)."""
        if self.progress is None:
            return
        left = {unit: [k for k in keys if not self.is_read(k) and k not in self.unread
                       and (self.part is None or self.part.mine(k))] for unit, keys in needed.items()}
        read = sum(1 for keys in needed.values() for k in keys if self.is_read(k))
        tokens = self.forwarded + sum(self.groups[u].cost(keys, u not in self.readings) for u, keys in left.items()
                                      if keys and u in self.groups)
        self.progress.bound(read + sum(map(len, left.values())), tokens)

    def _read_sequentially(self, unit: str, keys: set[ItemKey], backend: Backend, tests: frozenset[str]) -> None:
        """Read the unit's needed items a group at a time until every selected test of it is settled (gate/sequential/)."""
        inputs, groups = self.inputs, self.groups[unit]
        selection = inputs.dataset.select(keys)
        baseline_sets = compute_sets(selection, inputs.baseline, None, self.options.thresholds.min_effect)

        def read(batch: Sequence[ItemKey]) -> dict[ItemKey, ItemFigures]:
            self._read(set(batch) - {k for k in batch if self.is_read(k)}, backend, groups)
            return {key: self.figures(key) for key in batch}

        mode, only = Sequential(self.options.sequential), None
        if self.part is not None:  # a shard reads its part in the global order (gate/shards.py)
            mode, only = reading_mode(mode), self.part.slice(keys)
        reading = read_unit(mode, self.options.thresholds, selection, inputs.baseline, baseline_sets, tests, groups, read,
                            self.within, only)
        self.readings[unit] = reading
        self.whole += reading.whole if only is None else groups.whole(sorted(only))
        self.unread |= (keys if only is None else only) - set(reading.read)

    def _choose_mode(self, backend: Backend) -> None:
        """The tokenization mode, chosen once, before the first item is planned (a fallback to text says so), and
        the baseline checked against it."""
        if self.scores.mode:
            return
        tokenizer = tokenizer_of(backend)
        self.scores.mode = choose_mode(self.options.mode, tokenizer, self.inputs.dataset, self.warnings)
        if self.inputs.baseline is not None:
            check_fits(self.inputs.baseline, self.scores.mode, tokenizer_fingerprint(tokenizer, self.scores.mode),
                       self.inputs.fingerprints, what="baseline")

    def _read(self, keys: set[ItemKey], backend: Backend, groups: Groups) -> None:
        """Read these items at once (their shared prefix from the unit's kept state)."""
        if not keys:
            return
        if self.cache is None:
            self.cache = ScoreCache.for_backend(backend, self.options.cache_dir, warn=self.warnings.append) or False
        notes: list[str] = []
        chosen = sorted(keys)
        scored = self.source(backend, tokenizer_of(backend), self.inputs.dataset.select(keys), self.scores.mode,
                            [groups.plans[key] for key in chosen], self.progress.part if self.progress else False,
                            cache=self.cache or None, notes=notes, shared=groups.shared)
        self.forwarded += scored.forwarded
        self.warnings.extend(n for n in notes if n not in self.warnings)
        first = not self.scores.meta
        self.scores.meta = {k: v for k, v in scored.scores.meta.items() if k != "data"}  # the latest: a server that left
        if first and self.inputs.baseline is not None:
            self.warnings.extend(compare_judged(self.inputs.baseline.meta, self.scores.meta).warnings)
        self.merge(scored.scores)

    def release(self) -> None:
        """Let go of what the reading keeps of the model (each unit's shared prefix, run once and kept for the unit's
        next group of items), so that the model can be freed: a ladder's candidate, before the next is loaded."""
        for groups in self.groups.values():
            if groups.shared is not None:
                groups.shared.release()

    def merge(self, part: ScoresFile) -> None:
        for config, length, item_id, scores in part.items():
            self.scores.scores.setdefault(config, {}).setdefault(length, {})[item_id] = scores

    # -------------------------------------------------------------- xdist

    def export(self) -> dict[str, Any]:
        """What a worker hands the controller (execnet carries plain types only)."""
        return {"scores": self.scores.to_json(), "failure": self.failure, "forwarded": self.forwarded, "whole": self.whole,
                "seconds": self.seconds,
                "readings": {unit: reading.to_json() for unit, reading in self.readings.items()},
                "unread": sorted(self.unread), "part": self.part.to_json() if self.part is not None else None}

    def absorb(self, exported: dict[str, Any]) -> None:
        part = scores_from_json(exported["scores"])
        if part.mode:
            self.scores.mode = self.scores.mode or part.mode
            self.scores.meta = self.scores.meta or part.meta
        self.merge(part)
        self.failure = self.failure or exported["failure"]
        self.forwarded += exported["forwarded"]
        self.whole += exported["whole"]
        self.seconds += exported["seconds"]
        self.readings.update({unit: Reading.from_json(found) for unit, found in exported["readings"].items()})
        self.unread |= {tuple(key) for key in exported["unread"]}
        if self.part is not None and exported.get("part"):
            self.part.absorb(exported["part"])

