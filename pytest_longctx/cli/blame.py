"""``longctx blame --reference ORIGINAL --model CANDIDATE``: which parts of the candidate make
the gate fail, and which to keep from the original (gate/blame/, docs/blame.md)."""
from __future__ import annotations

import argparse
import signal
import sys
from typing import Any

from pytest_longctx.backends.hybrids import load_models
from pytest_longctx.backends.hybrids.pair import Pair
from pytest_longctx.cli.args import loaded, thresholds_of
from pytest_longctx.data.load import load_dataset
from pytest_longctx.errors import LongctxError
from pytest_longctx.gate.blame import BlameReport, blame_pair
from pytest_longctx.gate.keys import dataset_keys
from pytest_longctx.paths import check_outputs, check_writable, local_files, write_text_atomically
from pytest_longctx.reports.blame import blame_html, blame_markdown, blame_text
from pytest_longctx.reports.format import write_json
from pytest_longctx.scoring.scores_file import load_scores


def run(args: argparse.Namespace) -> int:
    check_outputs([("--out", args.out), ("--markdown", args.markdown), ("--html", args.html)],
                  [("--baseline", args.baseline), *local_files([("--reference", args.reference), *loaded(args)])])
    thresholds = thresholds_of(args)
    dataset = load_dataset(args.data, sets=args.sets, lengths=args.lengths, limit=args.limit)
    thresholds.check_patterns(dataset_keys(dataset))  # a pattern naming nothing is refused before any model is loaded
    baseline = load_scores(args.baseline, "baseline") if args.baseline else None
    latest: list[BlameReport] = []

    def hand_on(report: BlameReport) -> None:  # after each model scored: a run stopped early keeps what it measured
        latest[:] = [report]
        if args.out:
            write_json(args.out, report.to_json())

    previous = signal.signal(signal.SIGTERM, _interrupt)  # a CI job's timeout: as Ctrl-C, the report written first
    try:
        found = blame_pair(pair_of(args), dataset, baseline, thresholds=thresholds, granularity=args.granularity,
                           parts=args.parts, rows=args.rows, progress=not args.quiet, beyond_context=args.allow_beyond_context,
                           cache_dir=args.cache_dir, fix_budget=args.fix_budget,
                           reuse=False if args.boundary_every == 0 else None, reuse_every=args.boundary_every or 1,
                           search=args.search, budget=args.budget, report_to=hand_on)
    except KeyboardInterrupt:
        if not latest:
            raise
        print(blame_text(latest[0]))
        if args.out:
            print(f"longctx: the partial blame is in {args.out}", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)
    print(blame_text(found))
    if args.out:
        write_json(args.out, found.to_json())
        print(f"longctx: blame written to {args.out}", file=sys.stderr)
    for path, render in ((args.markdown, blame_markdown), (args.html, blame_html)):
        if path:
            write_text_atomically(path, render(found))
            print(f"longctx: blame report written to {path}", file=sys.stderr)
    return 0


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def pair_of(args: argparse.Namespace) -> Pair:
    """The original and the candidate as ``--backend`` loads them, once the flags are known to fit it."""
    if args.backend == "llama.cpp" and (args.dtype != "auto" or args.device not in ("auto", "cpu")):
        raise LongctxError(f"--dtype {args.dtype} --device {args.device}: blame --backend llama.cpp runs the files' own "
                           "types on the CPU; leave both auto (layers on a GPU: --backend-option gpu-layers=N)")
    if args.backend == "llama.cpp" and args.trust_remote_code:
        raise LongctxError("--trust-remote-code: llama.cpp runs no model code of its own, so it does not apply; leave it out")
    if args.backend != "llama.cpp" and args.reference_option:
        raise LongctxError(f"--reference-option {args.reference_option[0]}: for --backend llama.cpp only; transformers loads "
                           "both checkpoints with the same --backend-option values")
    if args.backend != "llama.cpp" and args.work_dir:
        raise LongctxError(f"--work-dir {args.work_dir}: for --backend llama.cpp only; transformers makes hybrids in memory")
    if args.work_dir:
        check_writable(args.work_dir, "--work-dir", folder=True)
    return load_models(args.backend, args.reference, args.model, args.dtype, args.device, args.backend_option,
                       args.reference_option, args.trust_remote_code, work_dir=args.work_dir)
