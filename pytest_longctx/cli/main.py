"""The ``longctx`` command: one module per subcommand in this folder, each registering its parser here."""
from __future__ import annotations

import argparse
import sys

from pytest_longctx.cli import blame, build, compare, compress_bench, score
from pytest_longctx.errors import LongctxError
from pytest_longctx.reports.format import visible


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="longctx", description="Long-context agent benchmark: score, compare, blame, build, validate, compress-bench."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in (score, compare, blame, build, compress_bench):
        command.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.run(args) or 0)
    except LongctxError as exc:
        print(f"longctx: error: {visible(str(exc))}", file=sys.stderr)  # one line, whatever an id in it holds
        return 2
    except KeyboardInterrupt:
        print("longctx: interrupted", file=sys.stderr)
        return 130
