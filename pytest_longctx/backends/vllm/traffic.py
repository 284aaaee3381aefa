"""What the vLLM backends sent and what vLLM's prefix cache served: requests, prompt tokens,
cached prompt tokens (so, tokens computed), requests in flight; the progress line's detail
and the run's speed report."""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Sequence

from pytest_longctx.backends.vllm.queries import Query, Reply


@dataclass
class Traffic:
    requests: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    uncounted: int = 0  # requests whose reply did not say how much the cache served
    in_flight: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def sending(self, count: int) -> None:
        with self.lock:
            self.in_flight += count

    def answered(self, query: Query, reply: Reply) -> None:
        with self.lock:
            self.in_flight -= 1
            self.requests += 1
            self.prompt_tokens += len(query.prompt)
            if reply.cached is None:
                self.uncounted += 1
            else:
                self.cached_tokens += reply.cached

    def failed(self, count: int = 1) -> None:
        with self.lock:
            self.in_flight -= count

    def record(self, queries: Sequence[Query], replies: Sequence[Reply]) -> None:
        """Requests sent and answered together (in process)."""
        self.sending(len(queries))
        for query, reply in zip(queries, replies):
            self.answered(query, reply)

    @property
    def computed_tokens(self) -> int | None:
        """Prompt tokens vLLM had to compute (not served from its cache); None when unknown."""
        return None if self.uncounted else self.prompt_tokens - self.cached_tokens

    def line(self) -> str:
        """The progress line's detail: requests in flight and what the cache served."""
        served = (f"{self.cached_tokens:,} of {self.prompt_tokens:,} prompt tokens from vLLM's prefix cache" if not self.uncounted
                  else f"{self.prompt_tokens:,} prompt tokens (the server does not report its cache hits: start it with "
                       "--enable-prompt-tokens-details)")
        return f"{self.in_flight} requests in flight, {self.requests:,} answered, {served}"

    def to_json(self) -> dict[str, int | None]:
        return {"requests": self.requests, "prompt_tokens": self.prompt_tokens,
                "cached_tokens": None if self.uncounted else self.cached_tokens, "computed_tokens": self.computed_tokens}
