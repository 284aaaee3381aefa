"""Plain-text tables and JSON files, as every report and command writes them."""
from __future__ import annotations

import json
import os
from typing import Any, Sequence

from pytest_longctx.paths import write_text_atomically


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A plain-text table: first column left-aligned, the others right-aligned."""
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(str(c).ljust(w) if i == 0 else str(c).rjust(w) for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def write_json(path: str | os.PathLike, body: dict[str, Any]) -> None:
    """Indented JSON (no NaN), written whole or not at all."""
    write_text_atomically(path, json.dumps(body, indent=2, allow_nan=False) + "\n")
