"""The ``longctx`` command. Each subcommand lives beside what it drives and registers here."""
from __future__ import annotations

import argparse
import sys

from pytest_longctx.errors import LongctxError


def build_parser() -> argparse.ArgumentParser:
    from pytest_longctx.cli import build as bench_commands
    from pytest_longctx.cli import compress_bench as compress_command
    from pytest_longctx.cli import compare as compare_command, score as score_command

    parser = argparse.ArgumentParser(prog="longctx", description="Long-context agent benchmark: score, compare, build, validate, compress-bench.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    score_command.register(sub)
    compare_command.register(sub)
    bench_commands.register(sub)
    compress_command.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.run(args) or 0)
    except LongctxError as exc:
        print(f"longctx: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("longctx: interrupted", file=sys.stderr)
        return 130

