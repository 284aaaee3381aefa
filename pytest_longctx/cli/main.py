"""The ``longctx`` command: one module per subcommand in this folder, each registering its parser here."""
from __future__ import annotations

import argparse
import sys
from typing import NoReturn

from pytest_longctx.backends.builtin import check_backend_settings
from pytest_longctx.cli import blame, build, compare, compress_bench, gguf_fix_set, ladder, score
from pytest_longctx.errors import LongctxError
from pytest_longctx.reports.format import visible


class UsageError(LongctxError):
    """A command line the parser refuses: a value of the wrong kind, a blank one, a missing argument."""


class Parser(argparse.ArgumentParser):
    """argparse's parser, whose refusals are the command's one error line (exit status 2), as every
    other bad input is, instead of the usage block and a line of argparse's own."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message.removeprefix("argument "))


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="longctx", description="Long-context agent benchmark: score, compare, ladder, blame, gguf-fix-set, build, validate, "
                                    "compress-bench."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in (score, compare, ladder, blame, gguf_fix_set, build, compress_bench):
        command.register(sub)
    return parser


def check_settings(args: argparse.Namespace) -> None:
    """The KEY=VALUE settings of the backend (and of blame's original), checked against the backend's
    declared keys before any data is built or model loaded."""
    for option in ("backend_option", "reference_option"):
        if getattr(args, option, None):
            check_backend_settings(args.backend, getattr(args, option), f"--{option.replace('_', '-')}")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        check_settings(args)
        return int(args.run(args) or 0)
    except LongctxError as exc:
        print(f"longctx: error: {visible(str(exc))}", file=sys.stderr)  # one line, whatever an id in it holds
        return 2
    except KeyboardInterrupt:
        print("longctx: interrupted", file=sys.stderr)
        return 130
