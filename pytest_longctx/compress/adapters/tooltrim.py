"""tooltrim's ``ToolCompressor`` on every tool message (``pip install
"pytest-longctx[tooltrim]"``), named ``tooltrim``.

Each tool output longer than ``max_tokens`` is compressed by tooltrim for its content
type (HTML, JSON, logs, tables, text), with the probe as its ``query`` (``use_probe=False``
leaves the query out); the other messages are kept as they are. tooltrim appends a footer
with a reference to the full output (``add_footer``); the gate expands these references
through tooltrim's own store, so retention is counted both without and with expansion.
tooltrim counts tokens with tiktoken's cl100k_base when it can load it and characters / 4
otherwise; here it counts with the gate's tokenizer while it compresses, so
``max_tokens`` is in the tokens savings are measured in.
"""
from __future__ import annotations

import contextlib
import functools
from typing import Any, Iterator

from pytest_longctx.compress.conventions import conventions

STORED = 4096  # full outputs kept for expansion: far more than one session holds


@functools.lru_cache(maxsize=1)
def _store() -> Any:
    from tooltrim import OutputStore

    return OutputStore(max_entries=STORED)


def expand(ref: str) -> str | None:
    return _store().expand(ref)


@contextlib.contextmanager
def _counting_with(encoding: Any) -> Iterator[None]:
    """tooltrim's token counter uses ``encoding`` inside the block (it has no argument for it)."""
    import tooltrim.tokens

    before, tooltrim.tokens._ENCODER = tooltrim.tokens._ENCODER, encoding
    try:
        yield
    finally:
        tooltrim.tokens._ENCODER = before


@conventions(expand=expand, refs=r"ref=([0-9a-f]{8})\]", requires="tooltrim", extra="tooltrim", ranges={"max_tokens": (16, None)})
def compress(messages: list[dict], probe: str, *, max_tokens: int = 512, add_footer: bool = True, use_probe: bool = True,
             encoding: Any) -> list[dict]:
    from tooltrim import ToolCompressor

    trimmer = ToolCompressor(max_tokens=max_tokens, store=_store(), add_footer=add_footer)
    out = []
    with _counting_with(encoding):
        for message in messages:
            if message["role"] == "tool":
                message = {**message, "content": trimmer.compress(message["content"], query=probe if use_probe else None).text}
            out.append(message)
    return out
