"""The ``longctx`` command. Its parser is made from the declared options and commands (options/table.py) alone, so
that ``longctx --help`` and ``--version`` load nothing else; a subcommand's module (one per subcommand in this folder,
with what it imports: the engine, scipy, torch) is imported when that subcommand runs."""
from __future__ import annotations

import argparse
import sys
from typing import Callable, NoReturn

from pytest_longctx import __version__
from pytest_longctx.backends.builtin import check_backend_settings
from pytest_longctx.errors import LongctxError
from pytest_longctx.options.fronts import add_command_arguments
from pytest_longctx.options.table import BENCH, BLAME, BUILD, COMMAND_TEXTS, COMPARE, GGUF_FIX_SET, LADDER, MERGE, SCORE, VALIDATE
from pytest_longctx.reports.format import visible

Run = Callable[[argparse.Namespace], int]


class UsageError(LongctxError):
    """A command line the parser refuses: a value of the wrong kind, a blank one, a missing argument."""


class Parser(argparse.ArgumentParser):
    """argparse's parser, whose refusals are the command's one error line (exit status 2), as every
    other bad input is, instead of the usage block and a line of argparse's own."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message.removeprefix("argument "))


def _score() -> Run:
    from pytest_longctx.cli import score

    return score.run


def _compare() -> Run:
    from pytest_longctx.cli import compare

    return compare.run


def _ladder() -> Run:
    from pytest_longctx.cli import ladder

    return ladder.run


def _blame() -> Run:
    from pytest_longctx.cli import blame

    return blame.run


def _merge() -> Run:
    from pytest_longctx.cli import merge

    return merge.run


def _gguf_fix_set() -> Run:
    from pytest_longctx.cli import gguf_fix_set

    return gguf_fix_set.run


def _build() -> Run:
    from pytest_longctx.cli import build

    return build.run_build


def _validate() -> Run:
    from pytest_longctx.cli import build

    return build.run_validate


def _compress_bench() -> Run:
    from pytest_longctx.cli import compress_bench

    return compress_bench.run


RUNS: dict[str, Callable[[], Run]] = {SCORE: _score, COMPARE: _compare, MERGE: _merge, LADDER: _ladder, BLAME: _blame,
                                      GGUF_FIX_SET: _gguf_fix_set, BUILD: _build, VALIDATE: _validate, BENCH: _compress_bench}


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="longctx", description="Long-context agent benchmark and gate: "
                                                + ", ".join(command.name for command in COMMAND_TEXTS) + ".")
    parser.add_argument("--version", action="version", version=f"longctx (pytest-longctx) {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMAND_TEXTS:
        add_command_arguments(sub.add_parser(command.name, help=command.help, description=command.description), command.name)
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
        return int(RUNS[args.command]()(args) or 0)
    except LongctxError as exc:
        print(f"longctx: error: {visible(str(exc))}", file=sys.stderr)  # one line, whatever an id in it holds
        return 2
    except KeyboardInterrupt:
        print("longctx: interrupted", file=sys.stderr)
        return 130
