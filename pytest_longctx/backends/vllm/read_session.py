"""The vLLM backends' ``ReadSession``: the token ids read so far, on the client side; vLLM's
prefix cache holds the state. A host that reads prompt rows (``Host.rows``: vLLM in process
with prompt-rows=true) answers a piece's reads with one request whose prompt ends at the
piece's furthest read: it computes the piece once, past the blocks its prefix cache holds,
and returns the log-probabilities at every position it computed. Otherwise (a server), or
for a read whose row vLLM served from its cache, each read is one query (``queries``) whose
prompt ends at the read, sent so that the cache can serve it: in a piece, the read furthest
on first (its prompt computes the whole piece up to there), then every other read at once
(vLLM batches them; each computes at most the partial block past its cached prefix). Then
the follow-ups for the ids that neither returned. The engine's prefix tree sends the pieces shared prefix
first, then each continuation, so a continuation finds its prefix in the cache."""
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

    def rows(self, prompt: tuple[int, ...], at: Sequence[int], top_k: int) -> list[Reply | None] | None:
        """One request for ``prompt``: for each position of ``at``, the reply a read there would get (the
        ``top_k`` most likely, at least the top-1, and the next prompt token), or None where vLLM served
        that position from its prefix cache and returned no row; None where the host reads no rows."""
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
        at = [len(full) - len(ids) + int(p) for p in positions]
        prompts = [full[:end + 1] for end in at]
        asked = [list(t) for t in tokens]
        replies: list[list[Reply]] = [[] for _ in positions]
        rows = self.host.rows(full[:max(at) + 1], at, top_k) or [None] * len(at)
        for n, row in enumerate(rows):
            replies[n] += [row] if row is not None else []
        left = [n for n in range(len(positions)) if not replies[n]]
        if left:
            last = max(left, key=lambda n: positions[n])
            for wave in ([last], [n for n in left if n != last]):
                self._send(wave, [first_queries(prompts[n], asked[n], top_k, self.host.max_ids) for n in wave], replies)
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
