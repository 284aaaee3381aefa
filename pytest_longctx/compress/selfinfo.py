"""Self-information of every token of a text under the evaluated model, read through
its backend (``read(ids, positions, tokens)``): no second model is loaded."""
from __future__ import annotations

import math
from typing import Any, Callable, Iterable

from pytest_longctx.backends.base import Backend

Token = tuple[int, int, float]  # character start, end, -log p(token | text before) in nats


class SelfInformation:
    """``scorer(text)`` -> the text's tokens with their self-information; the first
    token, which nothing predicts, gets ``inf``. Answers are kept per text, so a knob
    sweep of a query-agnostic method reads each session once."""

    def __init__(self, backend: Backend, tokenizer: Any):
        self.backend = backend
        self.tokenizer = tokenizer
        self.known: dict[str, list[Token]] = {}

    def __call__(self, text: str) -> list[Token]:
        if text not in self.known:
            encoded = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
            ids = [int(i) for i in encoded["input_ids"]]
            nats = [math.inf]
            if len(ids) > 1:
                result = self.backend.read(ids, list(range(len(ids) - 1)), [[token] for token in ids[1:]])
                nats += [-float(lps[0]) for lps in result.logprobs]
            self.known[text] = [(int(s), int(e), n) for (s, e), n in zip(encoded["offset_mapping"], nats)]
        return self.known[text]

    def prepare(self, texts: Iterable[str], progress: Callable[[int, int], Any] | None = None) -> None:
        """Read these texts now (before a sweep), showing progress if asked."""
        todo = list(dict.fromkeys(t for t in texts if t not in self.known))
        sizes = [len(self.tokenizer(t, add_special_tokens=False)["input_ids"]) for t in todo]
        shown = progress(len(todo), sum(sizes)) if progress else None
        for text, size in zip(todo, sizes):
            self(text)
            if shown:
                shown.advance(items=1, tokens=size)
        if shown:
            shown.close()
