"""``longctx compress-bench``: context compressors swept over their knobs on the same
sessions, compared at matched realized savings (the Pareto table)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pytest_longctx.backends import load_backend
from pytest_longctx.backends.base import close
from pytest_longctx.cli.args import loaded
from pytest_longctx.compress.bench import Bench
from pytest_longctx.compress.sweep import full_context_line, matched_table, pareto_table
from pytest_longctx.errors import LongctxError
from pytest_longctx.paths import check_outputs, local_files
from pytest_longctx.reports.format import write_json


def run(args: argparse.Namespace) -> int:
    def note(message: str) -> None:
        if not args.quiet:
            print(f"compress-bench: {message}", file=sys.stderr, flush=True)

    check_outputs([("--out", args.out)], local_files(loaded(args)))
    bench = Bench.prepare(args.methods, args.sweep, args.data, args.limit, args.suites, args.model, Path.cwd())
    backend = None
    if args.kv_press:
        raise LongctxError(f"--kv-press {args.kv_press}: compress-bench does not run KV-cache presses yet; gate a press with "
                           "longctx score --kv-press or pytest --longctx-kv-press")
    if args.model:
        backend, _ = load_backend(args.model, args.backend, args.dtype, args.device, args.backend_option,
                                  args.trust_remote_code)
    try:
        result = bench.run(backend, args.cache_dir, progress=not args.quiet, note=note)
    finally:
        if backend is not None:
            close(backend)
    print(f"{result.sessions} sessions from {result.source}; savings in tokens of {result.tokenizer}; "
          f"Layer B: {f'read by {args.model}' if result.layer_b else 'none (give --model)'}")
    print("savings: of the rendered chat, summed over the sessions [95 % bootstrap interval over sessions]; content: of "
          "the messages' contents alone; per-session: the mean of each session's own; n: sessions per cell")
    if result.layer_b and result.points:
        print(full_context_line(result.points[0]))
    print(pareto_table(result.points, result.layer_b, result.cells))
    print()
    print(matched_table(result.points))
    if args.out:
        write_json(args.out, result.to_json())
    return 0
