"""The ``longctx`` command: one module per subcommand in this folder, each registering its parser here."""
from __future__ import annotations

import argparse
import sys

from pytest_longctx.cli import blame, build, compare, compress_bench, quantize, score
from pytest_longctx.errors import LongctxError
from pytest_longctx.parse import refuse_blank
from pytest_longctx.reports.format import visible


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="longctx", description="Long-context agent benchmark: score, compare, blame, quantize, build, validate, compress-bench."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in (score, compare, blame, quantize, build, compress_bench):
        command.register(sub)
    return parser


def given(parser: argparse.ArgumentParser, args: argparse.Namespace) -> dict[str, object]:
    """The chosen subcommand's options and arguments by their first spelling, with the values parsed."""
    command = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[args.command]
    return {(action.option_strings or [action.metavar or action.dest.upper()])[0]: getattr(args, action.dest, None)
            for action in command._actions if action.dest not in ("help", "run")}


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        refuse_blank(given(parser, args))
        return int(args.run(args) or 0)
    except LongctxError as exc:
        print(f"longctx: error: {visible(str(exc))}", file=sys.stderr)  # one line, whatever an id in it holds
        return 2
    except KeyboardInterrupt:
        print("longctx: interrupted", file=sys.stderr)
        return 130
