"""Char -> token alignment: a text under the model's tokenizer, and which token starts at,
or covers, a character of it (docs/metrics.md#tokenization-modes)."""
from __future__ import annotations

import bisect
import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from pytest_longctx.errors import LongctxError
from pytest_longctx.scoring.reads import Read


@dataclass(frozen=True, eq=False)
class TextTokens:
    """A text under a tokenizer: ids and where each token starts in the text.

    Tokens partition the text: a token starts where the previous one ended, so
    whitespace a tokenizer trims from its offsets belongs to the token that follows.
    A token whose offsets overlap the previous one (a byte piece of a character split
    over several tokens) starts nowhere: a target cannot begin inside it.
    """

    ids: np.ndarray
    starts: list[int]  # character start of each token that starts a character run, ascending
    token_of_start: dict[int, int]  # character offset -> token index for those tokens

    @classmethod
    def encode(cls, tokenizer: Any, text: str) -> TextTokens:
        encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        ids = np.asarray(encoded["input_ids"], dtype=np.int64)
        token_of_start: dict[int, int] = {}
        previous_end = 0
        for index, (start, end) in enumerate(encoded["offset_mapping"]):
            if start >= previous_end and end > start:
                token_of_start.setdefault(previous_end, index)
            previous_end = max(previous_end, end)
        return cls(ids=ids, starts=sorted(token_of_start), token_of_start=token_of_start)

    def token_at(self, char: int) -> int | None:
        """The token that starts exactly at ``char``, else None (unaligned)."""
        return self.token_of_start.get(char)

    def last_token_before(self, char_end: int) -> int:
        """The token that covers the character just before ``char_end``."""
        index = bisect.bisect_left(self.starts, char_end) - 1
        return self.token_of_start[self.starts[max(index, 0)]]

    def run_at(self, char: int) -> range:
        """The tokens that make up the run covering character ``char`` of the text: one token, or
        the byte pieces of a character split over several."""
        index = bisect.bisect_right(self.starts, char) - 1
        if index < 0:
            return range(0)
        end = self.token_of_start[self.starts[index + 1]] if index + 1 < len(self.starts) else len(self.ids)
        return range(self.token_of_start[self.starts[index]], end)

    def span_reads(self, seq: int, char_start: int, char_end: int) -> tuple[Read, ...] | None:
        """The reads of every token of the text's ``[char_start, char_end)`` (an answer), as
        sequence ``seq``: from the token that starts at ``char_start`` through the one that
        covers its end. None when no token starts there, or only the first (nothing predicts it)."""
        first = self.token_at(char_start)
        if not first:
            return None
        last = self.last_token_before(char_end)
        return tuple(Read(seq, p, int(self.ids[p])) for p in range(first, last + 1))


@functools.lru_cache(maxsize=4096)
def first_token(tokenizer: Any, text: str) -> int:
    """The first token of ``text`` alone (a rules target's expected token)."""
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if not ids:
        raise LongctxError(f"expected_text {text!r} tokenizes to nothing under the model's tokenizer")
    return int(ids[0])
