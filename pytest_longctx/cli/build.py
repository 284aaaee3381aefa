"""``longctx build`` and ``longctx validate``."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pytest_longctx.data.builtin.build import DEFAULT_SEED, build
from pytest_longctx.data.builtin.plan import DEFAULT_LENGTHS
from pytest_longctx.data.lengths import length_tokens
from pytest_longctx.data.records import ALL_CONFIGS, CONFIGS
from pytest_longctx.data.validate import validate_dir
from pytest_longctx.errors import LongctxError
from pytest_longctx.parse import check_limit, comma_list

MIN_TOKENS = 2048


def _build(args: argparse.Namespace) -> int:
    lengths = comma_list(args.lengths)
    for length in lengths:
        if length_tokens(length) < MIN_TOKENS:
            raise LongctxError(f"--lengths {length}: the builder needs at least 2k tokens (a rule and its targets lie 512+ tokens apart)")
    sets = comma_list(args.sets) if args.sets else list(ALL_CONFIGS)
    check_limit(args.limit)
    build(Path(args.out), lengths, args.seed, sets, args.limit)
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
    builder.set_defaults(run=_build)
    validate = subparsers.add_parser("validate", help="check a benchmark folder against the schema and for internal consistency")
    validate.add_argument("dir", help="the benchmark folder (builtin or published)")
    validate.set_defaults(run=_validate)
