"""The servers a vllm-server backend reads through: one, or several replicas of one deployment
(``--model http://a:8000/v1,http://b:8000/v1``) read as one.

Several servers are checked alike before any read: the model each serves (its name, root and
``max_model_len``), vLLM's version, its tokenizer's ids for the check text and its answer to the
identity probe; a server unlike the rest is one line naming it and what differs. A read's requests
are then spread over them by free capacity: each server takes the next request whenever one of its
``concurrency`` slots is free, so a faster server answers more. A server that stops answering (its
requests failing on the way however often they are tried) leaves the fleet: the request it was
answering goes back to the others, which read it and everything after it, and the backend reports
it (``incidents``); once no server is left, the read fails naming what was not answered. Every
request is a greedy generation with the same prompt on a deterministic server, so which server
answers it does not change the answer."""
from __future__ import annotations

import threading
from collections import deque
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Any, Sequence

from pytest_longctx.backends.vllm.endpoint import Endpoint, Unanswered, kept_scores
from pytest_longctx.backends.vllm.queries import Query, Reply
from pytest_longctx.errors import LongctxError


def identity(endpoint: Endpoint) -> dict[str, Any]:
    """What must be the same on every server of a fleet, as the lines name it."""
    return {"served model": endpoint.served_model, "root": endpoint.root, "max_model_len": endpoint.max_model_len,
            "vLLM version": endpoint.version,
            "tokenizer (its ids for a check text)": endpoint.served_ids, "identity probe's answer": endpoint.probe()}


def check_alike(endpoints: Sequence[Endpoint]) -> None:
    """Refuse a mixed fleet: the servers unlike the most of them (unlike the first, where none is most), each named
    with what differs."""
    records = [identity(endpoint) for endpoint in endpoints]
    groups: dict[str, list[int]] = {}
    for n, record in enumerate(records):
        groups.setdefault(repr(record), []).append(n)
    if len(groups) == 1:
        return
    common = records[max(groups.values(), key=len)[0]]
    odd = [n for n, record in enumerate(records) if record != common]
    usual = next(n for n, record in enumerate(records) if record == common)
    said = "; ".join(f"{endpoints[n].where} differs in {', '.join(_differences(records[n], common))}" for n in odd)
    raise LongctxError(f"the vLLM servers are not alike, so their answers could not be read as one model's: "
                       f"{said} (from {endpoints[usual].where}, as the others); point the gate at replicas of one deployment "
                       "(the same model, tokenizer and vLLM version on the same hardware)")


def _differences(record: dict[str, Any], common: dict[str, Any]) -> list[str]:
    return [f"{key} ({_shown(record[key])} against {_shown(common[key])})" for key in record if record[key] != common[key]]


def _shown(value: Any) -> str:
    return f"{len(value)} ids" if isinstance(value, list) else "none" if value is None else str(value)


class Fleet:
    """The servers still answering, and the requests of a read spread over them; see the module docstring."""

    def __init__(self, endpoints: Sequence[Endpoint], concurrency: int):
        self.endpoints = list(endpoints)
        self.alive = list(endpoints)
        self.concurrency = concurrency
        self.incidents: list[str] = []  # a line for each server that left, as the run's warnings say it
        self.lost: list[str] = []  # each server that left and why, as the results record it
        self.lock = threading.Lock()
        self.pool = ThreadPoolExecutor(max_workers=concurrency * len(self.endpoints), thread_name_prefix="longctx-vllm")

    def answer(self, queries: Sequence[Query]) -> list[Reply]:
        """The replies to ``queries``, in their order: each server takes the next whenever it has a slot free."""
        jobs: deque[tuple[int, Query]] = deque(enumerate(queries))
        replies: list[Reply | None] = [None] * len(queries)
        failed: list[BaseException] = []
        while jobs and not failed:  # again where a server left after the others had found no work left
            wait([self.pool.submit(self._work, endpoint, jobs, replies, failed)
                  for endpoint in list(self.alive) for _ in range(min(self.concurrency, len(jobs)))])
        if failed:
            raise self._unread(failed[0], jobs) if isinstance(failed[0], Unanswered) else failed[0]
        return [reply for reply in replies if reply is not None]

    def _work(self, endpoint: Endpoint, jobs: deque[tuple[int, Query]], replies: list[Reply | None],
              failed: list[BaseException]) -> None:
        """One slot of ``endpoint``: the next request, until none is left, the read failed or the server left (its
        request then goes back to the others)."""
        while not failed and endpoint in self.alive:
            try:
                n, query = jobs.popleft()
            except IndexError:
                return
            try:
                replies[n] = endpoint.complete(query)
            except Unanswered as exc:
                jobs.append((n, query))
                if not self._leave(endpoint, exc):
                    failed.append(exc)
            except BaseException as exc:  # noqa: BLE001 - handed to the caller, which raises it
                failed.append(exc)

    def _leave(self, endpoint: Endpoint, why: Unanswered) -> bool:
        """``endpoint`` stopped answering: it reads nothing more in this run, where another server is left to read
        (True); the last one left stays, to be tried again by the next read (False: this read fails)."""
        with self.lock:
            if endpoint not in self.alive:
                return True
            if len(self.alive) == 1:
                return False
            self.alive.remove(endpoint)
            self.lost.append(f"{why.short()}, having answered {endpoint.answered} of the run's requests")
            others = ", ".join(other.where for other in self.alive)
            self.incidents.append(f"the vLLM server at {endpoint.where} stopped answering ({why.short()}), having answered "
                                  f"{endpoint.answered} of the run's requests; {others} read its requests and every later "
                                  f"one, so the run was read on {len(self.alive)} of {len(self.endpoints)} servers")
            return True

    def _unread(self, last: Unanswered, jobs: deque[tuple[int, Query]]) -> LongctxError:
        """The error of a read whose last server stopped answering: one server's own, or one line naming every server
        of a fleet and the requests not answered."""
        if len(self.endpoints) == 1:
            return last
        lengths = sorted(len(query.prompt) for _, query in jobs)
        return LongctxError(f"every vLLM server stopped answering ({'; '.join([*self.lost, last.short()])}): "
                            f"{len(jobs)} requests of the read in progress were not answered (prompts of {lengths[0]} to "
                            f"{lengths[-1]} tokens), nor anything after it; start the servers again and rerun "
                            f"({kept_scores(self.endpoints[0].settings)})")

    def close(self) -> None:
        self.pool.shutdown(wait=False)
        for endpoint in self.endpoints:
            endpoint.close()
