"""What the tool_calls and rules sessions share: growing a session to a token length,
cutting it exactly, and the char -> token bookkeeping of its targets."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from pytest_longctx.data.builtin.chat import Doc
from pytest_longctx.data.builtin.documents import session_tokens
from pytest_longctx.data.builtin.fit import Encoding, SegmentEncoder

# A rough size of a session in Qwen3.5 tokens while it is written; the exact count
# comes from the tokenizer afterwards.
CHARS_PER_TOKEN = 3.3


def estimated_tokens(doc: Doc) -> float:
    return doc.length / CHARS_PER_TOKEN


@dataclass(frozen=True)
class CutSession:
    text: str
    encoding: Encoding


def grow_and_cut(doc: Doc, add_turn: Callable[[], None], n_tokens: int, encoder: SegmentEncoder,
                 add_document: Callable[[], None] | None = None) -> CutSession:
    """Add turns until the session fills its share of ``n_tokens`` (``session_tokens``),
    then documents (``add_document``) until the text holds more than ``n_tokens``
    tokens, then cut it to exactly that many. Raises ``CutError`` where no cut has that
    many tokens."""
    session_goal = session_tokens(n_tokens) * (1.08 if session_tokens(n_tokens) == n_tokens else 1.0)
    while estimated_tokens(doc) < session_goal:
        add_turn()
    add = add_document or add_turn
    goal = n_tokens * 1.08
    while True:
        while estimated_tokens(doc) < goal:
            add()
        full = doc.text
        encoding = encoder.encode(full)
        if len(encoding) > n_tokens:
            text, encoding = encoder.fit(full, n_tokens, encoding)  # CutError: the caller starts anew
            return CutSession(text, encoding)
        goal *= 1.1


def token_span(encoding: Encoding, char: int) -> tuple[int, int, int]:
    """(index, start char, end char) of the token holding ``char``."""
    index = encoding.covering(char)
    return index, int(encoding.starts[index]), int(encoding.ends[index])
