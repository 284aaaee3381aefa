"""``compress-bench``'s run: every method at every point of its knob sweep, over the same
sessions; each point measured (Layer A, realized savings, with a model Layer B) and made a
``Point`` of the Pareto and matched-savings tables (``sweep``)."""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from pytest_longctx.backends.base import Backend
from pytest_longctx.compress.cache import CompressionCache
from pytest_longctx.compress.evaluate import Compressed, Reader, compress_all, read_answers
from pytest_longctx.compress.interface import Compressor, resolve
from pytest_longctx.compress.intervals import retention_interval, savings_interval
from pytest_longctx.compress.rows import ANSWER_ROWS, ROWS, RowSpec, row_values
from pytest_longctx.compress.sweep import Point, cell_sizes, knob_grid, method_sweeps, short_names
from pytest_longctx.data.faithfulness import load_sessions, sessions
from pytest_longctx.data.load import Dataset
from pytest_longctx.data.records import SUITES, FaithfulnessItem, session_text
from pytest_longctx.errors import LongctxError
from pytest_longctx.metrics.faithfulness import compression_metrics, compression_summary
from pytest_longctx.progress import labelled
from pytest_longctx.scoring.cache import ScoreCache

Note = Callable[[str], None]


@dataclass
class BenchResult:
    """Every point of a bench, in the compressors' order, and what they were measured on."""

    source: str  # the data the sessions came from
    sessions: int
    tokenizer: str  # what counted the savings
    model: str | None
    layer_b: bool  # the answers were read by the model
    cells: dict[str, int]  # row key -> the sessions it covers
    points: list[Point]
    specs: list[str]  # each point's compressor

    def to_json(self) -> dict[str, Any]:
        """The meta and every point's metrics, with their breakdowns (``--out``)."""
        return {
            "meta": {"data": self.source, "sessions": self.sessions, "tokenizer": self.tokenizer, "model": self.model,
                     "cells": self.cells},
            "points": [{"method": p.method, "spec": spec, "knobs": p.knobs, "seconds": p.seconds,
                        "rows": {k: list(v) for k, v in p.rows.items()}, "intervals": p.intervals, "summary": p.overall,
                        "sets": p.metrics} for p, spec in zip(self.points, self.specs)],
        }


@dataclass
class Bench:
    """The compressors (one per method and point of its sweep) and the sessions they run on."""

    compressors: list[Compressor]
    dataset: Dataset
    pairs: list[tuple[str, FaithfulnessItem]]  # (split, item) of every session run
    model: str | None = None  # the reader of Layer B, loaded by the caller

    @classmethod
    def prepare(cls, methods: Sequence[str] | None = None, sweeps: Sequence[str] = (), data: str = "builtin",
                limit: int | None = None, suites: Sequence[str] | None = None, model: str | None = None,
                search: Path | None = None) -> Bench:
        """The methods (default: the built-ins) swept as the ``--sweep`` texts say, each at
        every combination of its knobs' values (``search``: where a module:function may be
        found), over the first ``limit`` sessions of ``data``, then only those of ``suites``."""
        compressors = [resolve(method, knobs, search) for method, sweep in method_sweeps(methods, sweeps, bool(model)).items()
                       for knobs in knob_grid(sweep)]
        if suites and (unknown := [s for s in suites if s not in SUITES]):
            raise LongctxError(f"--suites {','.join(suites)}: no suite {', '.join(unknown)}; the suites are {', '.join(SUITES)}")
        dataset = load_sessions(data, limit)
        pairs = [(split, item) for split, item in sessions(dataset) if not suites or item.suite in suites]
        if not pairs:
            raise LongctxError(f"--data {data}: no session" + (f" of the suites {','.join(suites)}" if suites else ""))
        return cls(compressors, dataset, pairs, model)

    def run(self, backend: Backend | None = None, cache_dir: str | None = None, progress: bool = False,
            note: Note = lambda message: None) -> BenchResult:
        """Every compressor over every session, timed; with ``backend`` (the model's),
        self-information and Layer B read by it. ``note`` is told each compressor's time and
        failures, and the cache's warnings; ``progress`` shows the model's reads on stderr."""
        reader = Reader.of(backend, self.model)
        reader.cache = CompressionCache.at(cache_dir, lambda warning: note(f"warning: {warning}"))
        if reader.scorer is not None and any("scorer" in c.needs for c in self.compressors):
            reader.scorer.prepare([session_text(item.messages) for _, item in self.pairs],
                                  labelled("self-information") if progress else None)
        for split, item in self.pairs:  # counted once, before any compressor's time is taken
            reader.full_tokens(split, item)
        runs = [_timed(compressor, self.pairs, reader, note) for compressor in self.compressors]
        if backend is not None:
            read_answers(reader, [c for _, done, _ in runs for c in done], labelled("layer B") if progress else None,
                         ScoreCache.for_backend(backend, cache_dir))
        specs = list(ROWS) + (list(ANSWER_ROWS) if backend is not None else [])
        shown = short_names([compressor.spec for compressor in self.compressors])
        points = [_point(shown[compressor.spec], compressor, done, seconds, specs) for compressor, done, seconds in runs]
        return BenchResult(self.dataset.source, len(self.pairs), reader.tokenizer_name, self.model, backend is not None,
                           cell_sizes([item for _, item in self.pairs], ROWS), points, [c.spec for c in self.compressors])


def _timed(compressor: Compressor, pairs: Sequence[tuple[str, FaithfulnessItem]], reader: Reader,
           note: Note) -> tuple[Compressor, list[Compressed], float]:
    """One compressor over every session, and the seconds it took; ``note`` told both."""
    started = time.perf_counter()
    done = compress_all(compressor, pairs, reader)
    seconds = time.perf_counter() - started
    errors = sum(c.outcome["error"] is not None for c in done)
    note(f"{compressor.label}: {len(done)} sessions in {seconds:.1f}s"
         + (f", {errors} failed (first: {next(c.outcome['error'] for c in done if c.outcome['error'])})" if errors else ""))
    return compressor, done, seconds


def _point(method: str, compressor: Compressor, done: Sequence[Compressed], seconds: float, specs: Sequence[RowSpec]) -> Point:
    """A compressor's point: its rows, metrics per split, summary and intervals over the sessions."""
    outcomes = [c.outcome for c in done]
    return Point(method, dict(compressor.knobs), {spec.key: row_values(spec, [(c.item, c.outcome) for c in done]) for spec in specs},
                 _metrics(done), compression_summary(outcomes),
                 {"retention": retention_interval(outcomes), "savings": savings_interval(outcomes)}, seconds)


def _metrics(done: Sequence[Compressed]) -> dict[str, Any]:
    """Every metric with its breakdowns, per split."""
    splits: dict[str, list[Compressed]] = {}
    for c in done:
        splits.setdefault(c.split, []).append(c)
    return {split: compression_metrics([c.item for c in chosen], {c.item.id: c.outcome for c in chosen})
            for split, chosen in splits.items()}
