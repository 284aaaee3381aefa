"""The front ends' options, made from the table (options/table.py): pytest's (``--longctx-*``
with their ini names) and each ``longctx`` subcommand's arguments, and their values read back
with errors that name the option and where its value came from."""
from __future__ import annotations

import argparse
from typing import Any, Callable

from pytest_longctx.errors import LongctxError
from pytest_longctx.options.table import PLUGIN_SPELLED, PYTEST, Option, taken_by
from pytest_longctx.options.values import BLANK, Value, is_blank

GROUP = "longctx"


def help_text(option: Option) -> str:
    """The help as ``--help`` shows it: with the default where there is one; ``%`` escaped, as
    argparse formats help with it."""
    shown = option.shown_default()
    said = option.help if not shown or "default" in option.help else f"{option.help} (default {shown})"
    return said.replace("%", "%%")


# ------------------------------------------------------------------ pytest


def add_plugin_options(parser: Any) -> None:
    """Every option the plugin takes, in one ``longctx`` group, each with its ini name where it has one."""
    group = parser.getgroup(GROUP, "long-context regression gate (pytest-longctx)")
    for option in taken_by(PYTEST):
        kwargs: dict[str, Any] = {"dest": option.plugin_dest, "help": help_text(option)}
        if option.value is None:
            kwargs["action"] = "store_true"
        else:
            kwargs["metavar"] = option.value.metavar
            if option.repeat:
                kwargs["action"] = "append"
        group.addoption(option.plugin_flag, **kwargs)
        if option.ini:
            parser.addini(option.plugin_dest, option.help, type="linelist" if option.repeat else "string")


class _PytestSpelled:
    """An argparse parser as ``add_plugin_options`` sees pytest's: its group is the parser itself; the ini file is
    left to pytest, which reads it when the command runs pytest."""

    def __init__(self, parser: argparse.ArgumentParser):
        self.parser = parser

    def getgroup(self, name: str, description: str = "") -> _PytestSpelled:
        return self

    def addoption(self, *flags: str, **kwargs: Any) -> None:
        self.parser.add_argument(*flags, **kwargs)

    def addini(self, *args: Any, **kwargs: Any) -> None:
        """pytest reads the ini file itself."""


class Given(dict):
    """The plugin's options by name, each knowing where its value came from, so that a value refused later (a
    combination of options) is named as it was given: ``--longctx-sequential confident``, or
    ``longctx_sequential = confident (ini file pytest.ini)``."""

    def __init__(self) -> None:
        super().__init__()
        self.ini: dict[str, str] = {}  # the options whose value the ini file gave, and that file

    def said(self, name: str) -> str:
        option = next(o for o in taken_by(PYTEST) if o.name == name)
        if name in self.ini:
            return f"{option.plugin_dest} = {self[name]} (ini file {self.ini[name]})"
        return f"{option.plugin_flag} {self[name]}"


def read_plugin_options(getoption: Callable[[str], Any], getini: Callable[[str], Any], inipath: Any) -> Given:
    """Each option's value by name: from the command line, else the ini file, else its default.
    A value the option's kind refuses, a blank one among them, is one line naming the option and
    where the value came from. A repeatable option with an ini name takes both, the ini file's first."""
    values = Given()
    for option in taken_by(PYTEST):
        given = getoption(option.plugin_dest)
        source = "on the command line"
        if option.value is None:
            values[option.name] = bool(given)
            continue
        if option.repeat:
            from_ini = list(getini(option.plugin_dest) or []) if option.ini else []
            values[option.name] = [*(_read(option, line, f"from ini option {option.plugin_dest} in {inipath}") for line in from_ini),
                                   *(_read(option, item, source) for item in given or [])]
            continue
        if given is None and option.ini and getini(option.plugin_dest) not in (None, ""):
            given, source = getini(option.plugin_dest), f"from ini option {option.plugin_dest} in {inipath}"
            values.ini[option.name] = str(inipath)
        values[option.name] = option.default if given is None else _read(option, given, source)
    return values


def _read(option: Option, raw: Any, source: str) -> Any:
    assert option.value is not None
    try:
        return option.value.parse(raw)
    except ValueError as exc:
        raise LongctxError(f"{option.plugin_flag} {raw!r} ({source}): {exc}") from None


def refuse_blank_plugin_values(getoption: Callable[[str], Any]) -> None:
    """Before anything else: a plugin option given a blank value (``--longctx-model=`` from an unset
    ``$MODEL``) is refused, even where it would otherwise make the gate do nothing."""
    blank = [option.plugin_flag for option in taken_by(PYTEST)
             if is_blank(given := getoption(option.plugin_dest)) or (isinstance(given, list) and any(map(is_blank, given)))]
    if blank:
        raise LongctxError(f"{', '.join(blank)}: {BLANK}")


# ------------------------------------------------------------------ the longctx commands


def _argparse_type(value: Value) -> Callable[[str], Any]:
    def convert(raw: str) -> Any:
        if is_blank(raw):
            raise argparse.ArgumentTypeError(BLANK)
        try:
            return value.parse(raw)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"{exc} (given {raw!r})") from None

    convert.__name__ = value.says  # argparse names a failing type by it
    return convert


def add_command_arguments(parser: argparse.ArgumentParser, command: str) -> None:
    """Every option ``command`` takes, as the table declares it."""
    for option in taken_by(command):
        kwargs: dict[str, Any] = {"help": help_text(option)}
        if option.value is None:
            kwargs["action"] = "store_true"
        else:
            kwargs.update(type=_argparse_type(option.value), metavar=option.value.metavar)
            if option.repeat and option.positional:
                kwargs["nargs"] = "+"
            elif option.repeat:
                kwargs.update(action="append", default=[])
            else:
                kwargs["default"] = option.default
        if option.positional:
            parser.add_argument(option.command_dest, **kwargs)
            continue
        if option.required:
            kwargs["required"] = True
        parser.add_argument(option.flag, *option.also, dest=option.command_dest, **kwargs)
    if command in PLUGIN_SPELLED:
        add_plugin_options(_PytestSpelled(parser))
