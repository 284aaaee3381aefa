"""``longctx build`` and ``longctx validate``."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pytest_longctx.data.builtin.build import build
from pytest_longctx.data.lengths import check_buildable
from pytest_longctx.data.records import ALL_CONFIGS, CONFIGS
from pytest_longctx.data.validate import validate_dir
from pytest_longctx.errors import LongctxError
from pytest_longctx.paths import check_writable


def run_build(args: argparse.Namespace) -> int:
    lengths = args.lengths
    for length in lengths:
        check_buildable(length)
    sets = args.sets or list(ALL_CONFIGS)
    out = Path(args.out)
    check_writable(out, "--out", folder=True)
    if out.is_dir() and any(out.iterdir()) and not args.force:
        raise LongctxError(f"--out {args.out}: the folder is not empty, and building replaces its README.md and parquet files; "
                           "pass --force to build into it anyway, or give a new folder")
    build(out, lengths, args.seed, sets, args.limit)
    at = f" at {', '.join(lengths)}" if any(s in CONFIGS for s in sets) else ""
    print(f"longctx: wrote {', '.join(sets)}{at} to {args.out}", file=sys.stderr)
    return 0


def run_validate(args: argparse.Namespace) -> int:
    root = Path(args.dir)
    if not root.is_dir():
        raise LongctxError(f"{args.dir}: no such folder; give a benchmark folder (<dir>/<config>/<split>-*.parquet)")
    problems = 0
    for line in validate_dir(root):
        print(line)
        problems += 1
    print(f"longctx: {problems} problem{'s' if problems != 1 else ''} in {root}", file=sys.stderr)
    return 1 if problems else 0

