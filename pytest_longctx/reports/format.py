"""Plain-text tables and JSON files, as every report and command writes them, and text from
data (ids, answers, targets, names from options) escaped for where it lands: the terminal,
markdown, HTML and XML (docs/reports.md). JSON keeps it exactly."""
from __future__ import annotations

import html
import json
import os
import re
from typing import Any, Sequence

from pytest_longctx.paths import write_text_atomically

# C0 controls, DEL and C1 controls: a terminal acts on them (ESC starts a sequence, CR moves
# back), markdown and HTML end lines on them or show nothing, XML 1.0 forbids most of them
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
# what GitHub-flavoured markdown acts on within a line: emphasis, code, links, images, raw
# HTML, entities, strikethrough, table cells, math, autolinks (``http://``, ``www.``, e-mail)
MARKDOWN = re.compile(r"[\\`*~|$]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])|\](?=[(\[:])|<(?=[A-Za-z/!?])"
                      r"|&(?=[#A-Za-z0-9])|:(?=//)|(?<=[Ww]{3})\.")
# GitHub links references in the rendered text (``#123``, ``owner/repo#7``, ``GH-9``, ``@user``) and
# turns ``:rocket:`` into an emoji, whatever markdown escapes stand in it: an empty comment, shown
# as nothing, cuts the text there into two pieces that neither pattern matches
REFERENCE = re.compile(r"[#@](?=[A-Za-z0-9])|(?<![A-Za-z0-9])[Gg][Hh](?=-[0-9])|:(?=[A-Za-z0-9_+-]+:)")
CUT = "<!-- -->"


def visible(text: str, keep: str = "") -> str:
    """``text`` with every control character but those in ``keep`` written out (``\\n``,
    ``\\x1b``), so it is shown and never acted on."""
    return CONTROL.sub(lambda m: m.group() if m.group() in keep else NAMED.get(m.group(), f"\\x{ord(m.group()):02x}"), text)


def markdown_text(text: str) -> str:
    """``text`` shown literally in markdown, on one line, after other text or in a table cell:
    no emphasis, link, reference, emoji, HTML tag or table cell of its own."""
    escaped = MARKDOWN.sub(lambda m: "\\" + m.group(), visible(text))
    return REFERENCE.sub(lambda m: m.group() + CUT, escaped)


def backticks(text: str, least: int = 1) -> str:
    """A run of backticks longer than any in ``text``: a code fence ``text`` cannot close."""
    return "`" * max(least, 1 + max((len(run) for run in re.findall(r"`+", text)), default=0))


def markdown_code(text: str) -> str:
    """``text`` as an inline code span, on one line, whatever backticks it holds."""
    text = visible(text)
    fence, pad = backticks(text), " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def html_text(text: str, keep: str = "") -> str:
    """``text`` shown literally in HTML, in an element or a quoted attribute (``keep``: the
    control characters left as they are, e.g. the newlines of a ``<pre>``)."""
    return html.escape(visible(text, keep), quote=True)


def size_text(value: int) -> str:
    """A size in bytes as people read it: ``1.5 GiB``, ``812.0 KiB``, ``90 B``."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if value >= size:
            return f"{value / size:.1f} {unit}"
    return f"{value} B"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A plain-text table: first column left-aligned, the others right-aligned; control
    characters in a cell are written out."""
    shown = [[visible(str(c)) for c in r] for r in [headers, *rows]]
    widths = [max(len(r[i]) for r in shown) for i in range(len(headers))]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    return "\n".join([line(shown[0]), line(["-" * w for w in widths]), *(line(r) for r in shown[1:])])


def write_json(path: str | os.PathLike, body: dict[str, Any]) -> None:
    """Indented JSON (no NaN), written whole or not at all."""
    write_text_atomically(path, json.dumps(body, indent=2, allow_nan=False) + "\n")
