"""Qwen3.5 token counting for the builder: fast, cached, and exact.

Special tokens (``<|im_start|>``, ``<tool_call>``, ...) split a text into segments
that the tokenizer encodes independently, so a text's ids are the concatenation of
its segments' ids. The builder's texts share most segments (a session with and
without a rule line, cut at different lengths), so each distinct segment is
tokenized once. ``fit`` cuts a text at a token boundary to an exact token count and
re-tokenizes the cut, since a cut can change how the last characters tokenize.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from pytest_longctx.data.qwen import qwen35_tokenizer
from pytest_longctx.errors import LongctxError


@dataclass(frozen=True)
class Encoding:
    """Token ids of a text and each token's character span."""

    ids: np.ndarray  # int32 [n]
    starts: np.ndarray  # int64 [n]
    ends: np.ndarray  # int64 [n]

    def __len__(self) -> int:
        return len(self.ids)

    def covering(self, char: int) -> int:
        """Index of the token that holds character ``char`` (the first, if bytes of
        one character are split over several tokens)."""
        index = int(np.searchsorted(self.starts, char, side="right")) - 1
        first = int(np.searchsorted(self.starts, self.starts[index], side="left"))
        return first

    def before(self, char: int) -> int:
        """Number of tokens that start before ``char``: the index of the first token
        at or after it. Distances count from here."""
        return int(np.searchsorted(self.starts, char, side="left"))

    def starts_at(self, char: int) -> bool:
        index = self.before(char)
        return index < len(self.starts) and int(self.starts[index]) == char


class CutError(LongctxError):
    """No prefix near the wanted length tokenizes to exactly that many tokens: the
    count jumps by two there (e.g. a run of spaces that splits once a digit follows)."""


SEARCH_TOKENS = 12  # how far from the n-th token a cut is looked for
_EMPTY = (np.zeros(0, np.int32), np.zeros(0, np.int64), np.zeros(0, np.int64))


class SegmentEncoder:
    """Encodes texts as the Qwen3.5 tokenizer does (no special tokens added)."""

    def __init__(self) -> None:
        self.tokenizer = qwen35_tokenizer()
        specials = sorted(self.tokenizer.get_added_vocab().items(), key=lambda kv: -len(kv[0]))
        self.special_ids = dict(specials)
        self.split_pattern = re.compile("|".join(re.escape(token) for token, _ in specials))
        self.cache: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {"": _EMPTY}

    def _pieces(self, text: str) -> list[tuple[int, str, bool]]:
        """(offset, piece, is_special) in text order."""
        pieces, pos = [], 0
        for match in self.split_pattern.finditer(text):
            if match.start() > pos:
                pieces.append((pos, text[pos : match.start()], False))
            pieces.append((match.start(), match.group(), True))
            pos = match.end()
        if pos < len(text):
            pieces.append((pos, text[pos:], False))
        return pieces

    def _fill(self, segments: set[str]) -> None:
        todo = sorted(s for s in segments if s not in self.cache)
        if not todo:
            return
        batch = self.tokenizer(todo, add_special_tokens=False, return_offsets_mapping=True)
        for segment, ids, offsets in zip(todo, batch["input_ids"], batch["offset_mapping"]):
            spans = np.asarray(offsets, dtype=np.int64).reshape(-1, 2)
            self.cache[segment] = (np.asarray(ids, dtype=np.int32), spans[:, 0].copy(), spans[:, 1].copy())

    def encode_many(self, texts: Sequence[str]) -> list[Encoding]:
        split = [self._pieces(t) for t in texts]
        self._fill({piece for pieces in split for _, piece, special in pieces if not special})
        return [self._assemble(pieces) for pieces in split]

    def encode(self, text: str) -> Encoding:
        return self.encode_many([text])[0]

    def _assemble(self, pieces: list[tuple[int, str, bool]]) -> Encoding:
        ids, starts, ends = [], [], []
        for offset, piece, special in pieces:
            if special:
                ids.append(np.asarray([self.special_ids[piece]], np.int32))
                starts.append(np.asarray([offset], np.int64))
                ends.append(np.asarray([offset + len(piece)], np.int64))
            else:
                seg_ids, seg_starts, seg_ends = self.cache[piece]
                ids.append(seg_ids)
                starts.append(seg_starts + offset)
                ends.append(seg_ends + offset)
        if not ids:
            return Encoding(*_EMPTY)
        return Encoding(np.concatenate(ids), np.concatenate(starts), np.concatenate(ends))

    def fit(self, text: str, n_tokens: int, full: Encoding | None = None) -> tuple[str, Encoding]:
        """The longest prefix of ``text`` cut at a token boundary that tokenizes to
        exactly ``n_tokens`` tokens, and its encoding."""
        full = full if full is not None else self.encode(text)
        if len(full) < n_tokens:
            raise LongctxError(f"builder: a text has {len(full)} tokens, fewer than the {n_tokens} it must fill")
        if len(full) == n_tokens:
            return text, full
        # A cut can change how the last characters tokenize (and so the count), so try
        # the token boundaries near the n-th token, then every character near it.
        near = sorted(range(-SEARCH_TOKENS, SEARCH_TOKENS + 1), key=lambda d: (abs(d), d))
        chars = [int(full.starts[n_tokens + d]) for d in near if 0 < n_tokens + d < len(full)]
        lo = int(full.starts[max(n_tokens - SEARCH_TOKENS, 1)])
        hi = int(full.starts[min(n_tokens + SEARCH_TOKENS, len(full) - 1)])
        tried = set(chars)
        chars += [c for c in range(hi, lo, -1) if c not in tried]
        for cut in chars:
            encoding = self.encode(text[:cut])
            if len(encoding) == n_tokens:
                return text[:cut], encoding
        raise CutError(f"builder: no prefix of this text has exactly {n_tokens} tokens near its {n_tokens}th token")
