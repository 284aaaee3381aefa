"""Answers of past forward passes on disk, so re-running an unchanged model costs only
look-ups.

A request's key digests the backend's identity — the fingerprints of its weights and its
configuration (never the model's name), dtype, device kind and settings — with the
request's token ids and reads. A changed checkpoint has other weights or another
configuration, hence other keys: it is never served a stale answer. Backends that do
not fingerprint their weights are not cached.
"""
from __future__ import annotations

import hashlib
import json
import os
import sqlite3
from pathlib import Path
from typing import Any

from pytest_longctx.backends.base import describe
from pytest_longctx.paths import cache_dir
from pytest_longctx.scoring.engine import Answers, Request

IDENTITY = ("backend", "weights", "config", "dtype", "device", "chunk_size")
OFF = ("off", "none", "")


class ScoreCache:
    """Answers of past forward passes in an sqlite file, keyed by the backend's identity and the
    request."""

    def __init__(self, path: Path, identity: str):
        self.path = path
        self.identity = identity
        self.db = sqlite3.connect(path, timeout=60, isolation_level=None)  # autocommit; xdist workers share it
        self.db.execute("CREATE TABLE IF NOT EXISTS answers (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        self.hits = self.misses = 0

    @classmethod
    def for_backend(cls, backend: Any, folder: str | os.PathLike | None = None) -> ScoreCache | None:
        """The cache for this backend in ``folder`` (default: the user cache); None when the
        backend has no weight fingerprint or ``folder`` is 'off'."""
        if folder is not None and str(folder).lower() in OFF:
            return None
        info = describe(backend)
        if not info.get("weights"):
            return None
        identity = json.dumps({k: info.get(k) for k in IDENTITY}, sort_keys=True)
        where = Path(folder) if folder is not None else cache_dir("scores")
        where.mkdir(parents=True, exist_ok=True)
        return cls(where / "answers.sqlite", identity)

    def key(self, request: Request) -> str:
        digest = hashlib.sha256(self.identity.encode())
        digest.update(request.ids.astype("<i8").tobytes())
        digest.update(repr(sorted((i, sorted(t)) for i, t in request.reads.items())).encode())
        return digest.hexdigest()

    def get(self, request: Request) -> Answers | None:
        row = self.db.execute("SELECT value FROM answers WHERE key = ?", (self.key(request),)).fetchone()
        if row is None:
            self.misses += 1
            return None
        self.hits += 1
        return {int(i): (top1, {int(t): (float("nan") if lp is None else lp) for t, lp in lps.items()})
                for i, (top1, lps) in json.loads(row[0]).items()}

    def put(self, request: Request, answers: Answers) -> None:
        value = json.dumps({i: (top1, {t: (lp if lp == lp and abs(lp) != float("inf") else None) for t, lp in lps.items()})
                            for i, (top1, lps) in answers.items()})
        self.db.execute("INSERT OR REPLACE INTO answers VALUES (?, ?)", (self.key(request), value))
