"""The gate's tokenizer in the shape of a tiktoken ``Encoding`` (``encode``, ``decode``,
``n_vocab``, ``name``), which compressor libraries count their budgets with: given to a
compressor that takes ``encoding``, its budgets are in the tokens savings are counted in.

Special-token markup is tokenized as plain text (``allowed_special`` and
``disallowed_special`` are accepted and do nothing): a session's contents are text.
Libraries count the same texts again and again while they fit a budget, so the ids of
the last ``KNOWN`` texts are kept."""
from __future__ import annotations

import functools
from typing import Any, Iterable, Sequence

KNOWN = 4096


class Encoding:
    def __init__(self, tokenizer: Any, name: str):
        self.tokenizer = tokenizer
        self.name = name
        self._ids = functools.lru_cache(maxsize=KNOWN)(self._tokenize)

    def _tokenize(self, text: str) -> tuple[int, ...]:
        return tuple(int(i) for i in self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def encode(self, text: str, *, allowed_special: Any = None, disallowed_special: Any = None) -> list[int]:
        return list(self._ids(text))

    def encode_ordinary(self, text: str) -> list[int]:
        return self.encode(text)

    def encode_batch(self, texts: Iterable[str], **options: Any) -> list[list[int]]:
        return [self.encode(text) for text in texts]

    def decode(self, tokens: Sequence[int], errors: str = "replace") -> str:
        return self.tokenizer.decode(list(tokens), skip_special_tokens=False, clean_up_tokenization_spaces=False)

    @property
    def n_vocab(self) -> int:
        return len(self.tokenizer)

    def __repr__(self) -> str:
        return f"<Encoding {self.name}>"
