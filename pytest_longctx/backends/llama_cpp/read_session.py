"""The llama.cpp backend's ``ReadSession``: one sequence in the backend's context, read piece
by piece; a branch point is its length where the KV cache can be cut back to it, or a copy of
the sequence's state where it cannot (recurrent layers)."""
from __future__ import annotations

from typing import Protocol, Sequence

import numpy as np

from pytest_longctx.backends.base import Prediction, ReadResult, advance_in_calls
from pytest_longctx.backends.llama_cpp.context import Context
from pytest_longctx.backends.llama_cpp.settings import Settings
from pytest_longctx.errors import LongctxError


class Host(Protocol):
    """What a session needs of the backend it reads in (``LlamaCppBackend``)."""

    settings: Settings
    n_vocab: int
    cuttable: bool  # whether the cache can be cut back to a branch point (else the state is copied there)
    current: Context | None  # the context made so far
    reader: LlamaCppReadSession | None  # the session reading in it now

    def context(self, length: int, keep: bool) -> Context: ...


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """Natural-log softmax over the last axis, in float64."""
    wide = logits.astype(np.float64)
    top = wide.max(axis=-1, keepdims=True)
    return wide - (top + np.log(np.exp(wide - top).sum(axis=-1, keepdims=True)))


def most_likely(logp: np.ndarray, k: int) -> tuple[list[int], list[float]]:
    """The ``k`` most likely ids of one row and their log-probabilities, most likely first
    (ties: the lower id first)."""
    k = min(k, len(logp))
    picked = np.argpartition(-logp, k - 1)[:k]
    picked = picked[np.lexsort((picked, -logp[picked]))]
    return picked.tolist(), logp[picked].tolist()


class LlamaCppReadSession:
    """A ``ReadSession``: one sequence in the backend's context, the tokens read so far (its KV cache)."""

    def __init__(self, backend: Host):
        self.backend = backend
        self.length = 0
        backend.reader = self
        if backend.current is not None:
            backend.current.forget(0)

    def advance(self, ids: Sequence[int], positions: Sequence[int], tokens: Sequence[Sequence[int]], top_k: int = 0) -> ReadResult:
        """Run ``ids`` after what was read so far; ``positions`` index into ``ids``; ``top_k``: also
        the ``top_k`` most likely next tokens at each position."""
        backend = self.backend
        if backend.reader is not self:
            raise LongctxError("this llama.cpp session was superseded by a newer one of the same backend; read one at a time")
        ids = np.asarray(ids, dtype=np.int64)
        if len(ids) and (ids.min() < 0 or ids.max() >= backend.n_vocab):
            raise LongctxError(f"token id outside the model's vocabulary of {backend.n_vocab}")
        context = backend.context(self.length + len(ids), keep=self.length > 0)

        def forward(start: int, stop: int, rows: list[int], asked: list[Sequence[int]], top_k: int) -> list[Prediction]:
            context.decode(ids[start:stop], self.length + start, np.asarray(rows, dtype=np.int64))  # logits at the reads only
            if not rows:
                return []
            logp = log_softmax(np.stack([context.logits(row) for row in rows]))  # [reads, vocab]
            return [(int(np.argmax(row_logp)), row_logp[np.asarray(list(wanted), dtype=np.int64)].tolist(),
                     most_likely(row_logp, top_k) if top_k else None) for row_logp, wanted in zip(logp, asked)]

        result = advance_in_calls(len(ids), positions, tokens, top_k, backend.settings.batch_size, forward)
        self.length += len(ids)
        return result

    def snapshot(self) -> tuple[int, bytes | None]:
        """The state here: its length when the cache can be cut back to it, else a copy."""
        context = self.backend.current
        if self.backend.cuttable or context is None or self.length == 0:
            return self.length, None
        return self.length, context.state()

    def restore(self, snapshot: tuple[int, bytes | None], last: bool = False) -> None:
        """Back to a snapshot (``last``, the engine's hint that no later restore needs it, changes
        nothing here: a copied state is set, not handed over)."""
        length, saved = snapshot
        context = self.backend.current
        if context is not None:
            if saved is None:
                context.forget(length)
            else:
                context.set_state(saved)
        self.length = length
