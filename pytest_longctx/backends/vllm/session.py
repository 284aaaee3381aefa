"""The vLLM backends' ``ReadSession``: the token ids read so far, on the client side; vLLM's
prefix cache holds the state. Each read is one query (``queries``) whose prompt ends at the
read, sent so that the cache can serve it: in a piece, the read furthest on first (its
prompt computes the whole piece up to there), then every other read at once (vLLM batches
them; each computes at most the partial block past its cached prefix), then the follow-ups
for the ids that the top-k did not return. The engine's prefix tree sends the pieces shared
prefix first, then each continuation, so a continuation finds its prefix in the cache."""
from __future__ import annotations

from typing import Protocol, Sequence

from pytest_longctx.backends.base import Prediction, ReadResult
from pytest_longctx.backends.vllm.queries import Query, Reply, first_queries, follow_ups, prediction
from pytest_longctx.errors import LongctxError


class Host(Protocol):
    """What a session needs of the backend it reads through."""

    max_ids: int  # log-probabilities vLLM returns per request at most
    max_model_len: int | None  # the longest prompt vLLM takes

    def answer(self, queries: Sequence[Query]) -> list[Reply]:
        """The replies to ``queries``, in their order; sent together, so that vLLM may batch them."""
        ...


class VllmReadSession:
    """A ``ReadSession`` over a vLLM engine or server: the ids read so far."""

    def __init__(self, host: Host):
        self.host = host
        self.ids: tuple[int, ...] = ()

    def advance(self, ids: Sequence[int], positions: Sequence[int], tokens: Sequence[Sequence[int]], top_k: int = 0) -> ReadResult:
        """Read ``ids`` after what was read so far; ``positions`` index into ``ids``."""
        if any(not 0 <= position < len(ids) for position in positions):
            raise LongctxError(f"read position outside the {len(ids)} tokens given")
        full = self.ids + tuple(int(t) for t in ids)
        limit = self.host.max_model_len
        longest = len(self.ids) + max(positions, default=-1) + 1
        if positions and limit is not None and longest >= limit:  # the generated token needs a place too
            raise LongctxError(f"a read needs a prompt of {longest} tokens and the token vLLM generates after it, beyond vLLM's "
                               f"max_model_len of {limit}: start vLLM with a larger --max-model-len (or score shorter lengths)")
        self.ids = full
        if not positions:
            return ReadResult([], [], [] if top_k else None)
        prompts = [full[:len(full) - len(ids) + int(p) + 1] for p in positions]
        asked = [list(t) for t in tokens]
        replies: list[list[Reply]] = [[] for _ in positions]
        last = max(range(len(positions)), key=lambda n: positions[n])
        waves = [[last], [n for n in range(len(positions)) if n != last]]
        for wave in waves:
            self._send(wave, [first_queries(prompts[n], asked[n], top_k, self.host.max_ids) for n in wave], replies)
        if top_k:
            wave = list(range(len(positions)))
            self._send(wave, [follow_ups(prompts[n], asked[n], replies[n], self.host.max_ids) for n in wave], replies)
        answers: list[Prediction] = [prediction(replies[n], asked[n], top_k, f"at the read after {len(prompts[n])} prompt tokens")
                                     for n in range(len(positions))]
        return ReadResult([a[0] for a in answers], [a[1] for a in answers], [a[2] for a in answers] if top_k else None)

    def _send(self, reads: list[int], queries: list[list[Query]], replies: list[list[Reply]]) -> None:
        flat = [(n, query) for n, wanted in zip(reads, queries) for query in wanted]
        if not flat:
            return
        for (n, _), reply in zip(flat, self.host.answer([query for _, query in flat])):
            replies[n].append(reply)

    def snapshot(self) -> int:
        return len(self.ids)

    def restore(self, snapshot: int, last: bool = False) -> None:
        self.ids = self.ids[:snapshot]
