"""docs/options.md's option tables, made from the declared options (options/) and the keys of each
built-in backend (backends/builtin.py), which is why they are made up here, above both: each table
stands between ``<!-- options: NAME -->`` and ``<!-- /options -->`` and is written anew by
``python -m pytest_longctx.cli.options_docs docs/options.md`` (``--check``: exit 1 when the file is
not what the declarations make; the tests run it)."""
from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Callable, Sequence

from pytest_longctx.backends.builtin import BUILTIN
from pytest_longctx.options.keys import KeyTable
from pytest_longctx.options.table import COMMANDS, PLUGIN_SPELLED, PYTEST, Option, taken_by

BLOCK = re.compile(r"(<!-- options: (?P<name>[\w.:-]+) -->\n)(?P<body>.*?)(<!-- /options -->)", re.S)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _code(text: str) -> str:
    return f"`{text}`" if text else ""


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    return "\n".join(lines + ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]) + "\n"


def _shown(option: Option, flag: str) -> str:
    metavar = f" {option.value.metavar}" if option.value is not None and option.repeat else ""
    return _code(f"{flag}{metavar}")


def plugin_table(section: str) -> str:
    options = [o for o in taken_by(PYTEST) if o.section == section]
    return _table(["option", "ini name", "default", "meaning"],
                  [[_shown(o, o.plugin_flag), _code(o.plugin_dest if o.ini else ""), _code(o.shown_default()), o.doc or o.help]
                   for o in options])


def command_table(command: str) -> str:
    rows = [[_code(o.flag) + (" (required)" if o.required else ""), _code(o.shown_default()), o.doc or o.help]
            for o in taken_by(command)]
    if command in PLUGIN_SPELLED:
        flags = ", ".join(_code(o.plugin_flag) for o in taken_by(PYTEST))
        rows.append(["the plugin's options", "", f"as pytest takes them ([above](#the-pytest-plugin)): {flags}"])
    return _table(["option", "default", "meaning"], rows)


def keys_table(table: KeyTable) -> str:
    rows = [[_code(k.name), k.value.says, _code("" if k.default in (None, "") else str(k.default)), k.help] for k in table.keys]
    if table.others:
        rows.append(["any other", "", "", table.others])
    return _table(["key", "value", "default", "meaning"], rows)


def tables() -> dict[str, Callable[[], str]]:
    """Every table docs/options.md may hold, by its block's name."""
    made: dict[str, Callable[[], str]] = {}
    for option in taken_by(PYTEST):
        made.setdefault(f"plugin:{option.section}", lambda s=option.section: plugin_table(s))
    for command in COMMANDS:
        made[f"command:{command}"] = lambda c=command: command_table(c)
    for backend in BUILTIN:
        made[f"keys:{backend.name}"] = lambda t=backend.keys: keys_table(t)
    return made


def render(text: str) -> str:
    """``text`` with every table block written anew; an unknown block name is an error."""
    made = tables()

    def write(match: re.Match[str]) -> str:
        name = match["name"]
        if name not in made:
            raise ValueError(f"no options table is called {name!r}; there are {', '.join(made)}")
        return f"{match[1]}{made[name]()}{match[4]}"

    return BLOCK.sub(write, text)


def missing(text: str) -> list[str]:
    """The tables ``text`` has no block for."""
    named = {match["name"] for match in BLOCK.finditer(text)}
    return [name for name in tables() if name not in named]


def main(argv: Sequence[str]) -> int:
    path = Path(argv[0])
    text = path.read_text()
    made = render(text)
    if "--check" in argv[1:]:
        lacking = missing(text)
        if made != text or lacking:
            print(f"{path}: not what the declared options make" + (f" (no block for {', '.join(lacking)})" if lacking else "")
                  + f"; run python -m pytest_longctx.cli.options_docs {path}", file=sys.stderr)
            return 1
        return 0
    path.write_text(made)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
