"""``longctx compress-bench``: context compressors swept over their knobs on the same
sessions, compared at matched realized savings (the Pareto table)."""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from pytest_longctx.backends import load_backend
from pytest_longctx.cli.args import add_reader_arguments, names
from pytest_longctx.compress.cache import CompressionCache
from pytest_longctx.compress.evaluate import Compressed, Reader, compress_all, read_answers
from pytest_longctx.compress.interface import resolve
from pytest_longctx.compress.intervals import retention_interval, savings_interval
from pytest_longctx.compress.rows import ANSWER_ROWS, ROWS, row_values
from pytest_longctx.compress.sweep import (
    DEFAULT_METHODS,
    DEFAULT_SWEEPS,
    Point,
    cell_sizes,
    full_context_line,
    knob_grid,
    matched_table,
    pareto_table,
    parse_sweep,
    short_names,
)
from pytest_longctx.data.records import SUITES, session_text
from pytest_longctx.data.sessions import load_sessions, sessions
from pytest_longctx.errors import LongctxError
from pytest_longctx.metrics.faithfulness import compression_metrics, compression_summary
from pytest_longctx.paths import check_writable
from pytest_longctx.progress import Progress
from pytest_longctx.reports.format import write_json
from pytest_longctx.scoring.cache import ScoreCache


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("compress-bench", help="compare context compressors at matched savings (knob sweeps, Pareto table)",
                       description="Run context compressors over the faithfulness sessions, each over a sweep of one "
                                   "knob; print retention (Layer A), realized savings and, with --model, the change in "
                                   "the answer's teacher-forced recall and log-probability (Layer B) per point, the "
                                   "Pareto front, and each method's retention at matched savings.")
    p.add_argument("--methods", type=names, help="comma-separated built-ins, adapters (ctxgate, tooltrim, llmlingua) or "
                   f"module:function (default: {', '.join(DEFAULT_METHODS)}; selective_context only with --model)")
    p.add_argument("--sweep", action="append", default=[], metavar="METHOD:KNOB=V1,V2,...",
                   help="the knob values to run a method with (replaces its default sweep; several for one method "
                        "run every combination); repeatable")
    p.add_argument("--data", default="builtin", help="'builtin' (default), a benchmark folder, the faithfulness "
                   "dataset's folder or file, or a hub id")
    p.add_argument("--limit", type=int, help="the first N sessions (the builtin order covers every probe type x depth "
                   "x placement evenly)")
    p.add_argument("--suites", type=names, help=f"only the sessions of these suites ({', '.join(SUITES)}), after --limit")
    p.add_argument("--model", help="the reader for Layer B and the tokenizer for savings (else Qwen3.5, Layer A only)")
    p.add_argument("--out", metavar="PATH", help="write every point's metrics (with breakdowns) as JSON")
    add_reader_arguments(p)
    p.set_defaults(run=run)


def _sweeps(args: argparse.Namespace) -> dict[str, dict[str, list[Any]]]:
    methods = args.methods or [m for m in DEFAULT_METHODS if args.model or m != "selective_context"]
    given: dict[str, dict[str, list[Any]]] = {}
    for text in args.sweep:
        method, knob, values = parse_sweep(text)
        if method not in methods:
            raise LongctxError(f"--sweep {text}: {method} is not among the methods ({', '.join(methods)})")
        given.setdefault(method, {})[knob] = values
    return {m: given.get(m, DEFAULT_SWEEPS.get(m, {})) for m in methods}


def _metrics(done: list[Compressed]) -> dict[str, Any]:
    """Every metric with its breakdowns, per split."""
    splits: dict[str, list[Compressed]] = {}
    for c in done:
        splits.setdefault(c.split, []).append(c)
    return {split: compression_metrics([c.item for c in chosen], {c.item.id: c.outcome for c in chosen})
            for split, chosen in splits.items()}


def run(args: argparse.Namespace) -> int:
    def note(message: str) -> None:
        if not args.quiet:
            print(f"compress-bench: {message}", file=sys.stderr, flush=True)

    if args.out:
        check_writable(args.out, "--out")
    sweeps = _sweeps(args)
    compressors = [resolve(method, knobs, Path.cwd()) for method, sweep in sweeps.items() for knobs in knob_grid(sweep)]
    if args.suites and (unknown := [s for s in args.suites if s not in SUITES]):
        raise LongctxError(f"--suites {','.join(args.suites)}: no suite {', '.join(unknown)}; the suites are {', '.join(SUITES)}")
    dataset = load_sessions(args.data, args.limit)
    pairs = [(split, item) for split, item in sessions(dataset) if not args.suites or item.suite in args.suites]
    if not pairs:
        raise LongctxError(f"--data {args.data}: no session" + (f" of the suites {','.join(args.suites)}" if args.suites else ""))
    backend = None
    if args.model:
        backend, _ = load_backend(args.model, args.backend, args.dtype, args.device, args.backend_option,
                                  args.trust_remote_code)
    reader = Reader.of(backend, args.model)
    reader.cache = CompressionCache.at(args.cache_dir, lambda warning: note(f"warning: {warning}"))
    progress = None if args.quiet else Progress
    if reader.scorer is not None and any("scorer" in c.needs for c in compressors):
        reader.scorer.prepare([session_text(item.messages) for _, item in pairs], progress and
                              (lambda items, tokens: Progress(items, tokens, label="self-information")))
    for split, item in pairs:  # counted once, before any compressor's time is taken
        reader.full_tokens(split, item)
    runs: list[tuple[Any, list[Compressed], float]] = []
    for compressor in compressors:
        started = time.perf_counter()
        done = compress_all(compressor, pairs, reader)
        seconds = time.perf_counter() - started
        errors = sum(c.outcome["error"] is not None for c in done)
        note(f"{compressor.label}: {len(done)} sessions in {seconds:.1f}s"
             + (f", {errors} failed (first: {next(c.outcome['error'] for c in done if c.outcome['error'])})" if errors else ""))
        runs.append((compressor, done, seconds))
    if backend is not None:
        read_answers(reader, [c for _, done, _ in runs for c in done], progress and
                     (lambda items, tokens: Progress(items, tokens, label="layer B")),
                     ScoreCache.for_backend(backend, args.cache_dir))
    specs = list(ROWS) + (list(ANSWER_ROWS) if backend is not None else [])
    shown = short_names([compressor.spec for compressor, _, _ in runs])
    points = []
    for compressor, done, seconds in runs:
        outcomes = [c.outcome for c in done]
        points.append(Point(shown[compressor.spec], dict(compressor.knobs),
                            {spec.key: row_values(spec, [(c.item, c.outcome) for c in done]) for spec in specs},
                            _metrics(done), compression_summary(outcomes),
                            {"retention": retention_interval(outcomes), "savings": savings_interval(outcomes)}, seconds))
    sizes = cell_sizes([item for _, item in pairs], ROWS)
    print(f"{len(pairs)} sessions from {dataset.source}; savings in tokens of {reader.tokenizer_name}; "
          f"Layer B: {f'read by {args.model}' if backend is not None else 'none (give --model)'}")
    print("savings: of the rendered chat, summed over the sessions [95 % bootstrap interval over sessions]; content: of "
          "the messages' contents alone; per-session: the mean of each session's own; n: sessions per cell")
    if backend is not None and points:
        print(full_context_line(points[0]))
    print(pareto_table(points, backend is not None, sizes))
    print()
    print(matched_table(points))
    if args.out:
        write_json(args.out, {
            "meta": {"data": dataset.source, "sessions": len(pairs), "tokenizer": reader.tokenizer_name,
                     "model": args.model, "cells": sizes},
            "points": [{"method": p.method, "spec": compressor.spec, "knobs": p.knobs, "seconds": p.seconds,
                        "rows": {k: list(v) for k, v in p.rows.items()}, "intervals": p.intervals, "summary": p.overall,
                        "sets": p.metrics} for p, (compressor, _, _) in zip(points, runs)],
        })
    return 0
