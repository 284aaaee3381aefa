"""``longctx build`` and ``longctx validate``."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pytest_longctx.data.builtin.build import DEFAULT_SEED, build
from pytest_longctx.data.builtin.plan import DEFAULT_LENGTHS
from pytest_longctx.data.lengths import check_buildable
from pytest_longctx.data.records import ALL_CONFIGS, CONFIGS
from pytest_longctx.data.validate import validate_dir
from pytest_longctx.errors import LongctxError
from pytest_longctx.parse import check_limit, comma_list, option_value
from pytest_longctx.paths import check_writable


def _build(args: argparse.Namespace) -> int:
    lengths = option_value("--lengths", args.lengths, comma_list)
    for length in lengths:
        check_buildable(length)
    sets = option_value("--sets", args.sets, comma_list) if args.sets is not None else list(ALL_CONFIGS)
    check_limit(args.limit)
    out = Path(args.out)
    check_writable(out, "--out", folder=True)
    if out.is_dir() and any(out.iterdir()) and not args.force:
        raise LongctxError(f"--out {args.out}: the folder is not empty, and building replaces its README.md and parquet files; "
                           "pass --force to build into it anyway, or give a new folder")
    build(out, lengths, args.seed, sets, args.limit)
    at = f" at {', '.join(lengths)}" if any(s in CONFIGS for s in sets) else ""
    print(f"longctx: wrote {', '.join(sets)}{at} to {args.out}", file=sys.stderr)
    return 0


def _validate(args: argparse.Namespace) -> int:
    root = Path(args.dir)
    if not root.is_dir():
        raise LongctxError(f"{args.dir}: no such folder; give a benchmark folder (<dir>/<config>/<split>-*.parquet)")
    problems = 0
    for line in validate_dir(root):
        print(line)
        problems += 1
    print(f"longctx: {problems} problem{'s' if problems != 1 else ''} in {root}", file=sys.stderr)
    return 1 if problems else 0


def register(subparsers: argparse._SubParsersAction) -> None:
    builder = subparsers.add_parser("build", help="build the benchmark (all six configs) from the shipped real texts")
    builder.add_argument("--out", required=True, help="folder to write <config>/<length>-00000-of-00001.parquet and README.md into")
    builder.add_argument(
        "--lengths", default=",".join(DEFAULT_LENGTHS), help="comma-separated lengths in Qwen3.5 tokens (default: %(default)s)"
    )
    builder.add_argument("--seed", type=int, default=DEFAULT_SEED, help="the same seed gives the same bytes (default: %(default)s)")
    builder.add_argument("--sets", default=None, help=f"comma-separated configs (default: all of {', '.join(ALL_CONFIGS)})")
    builder.add_argument(
        "--limit",
        type=int,
        default=None,
        help="at most this many items (rules: sessions) per config and length, for quick builds (faithfulness: 300 by default)",
    )
    builder.add_argument("--force", action="store_true",
                         help="build into a folder that is not empty, replacing its README.md and the parquet files built")
    builder.set_defaults(run=_build)
    validate = subparsers.add_parser("validate", help="check a benchmark folder against the schema and for internal consistency")
    validate.add_argument("dir", help="the benchmark folder (builtin or published)")
    validate.set_defaults(run=_validate)
