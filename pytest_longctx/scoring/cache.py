"""Answers of past forward passes on disk, so re-running an unchanged model costs only
look-ups.

A request's key digests the backend's identity — the fingerprints of its weights and its
configuration (never the model's name), dtype, device kind and settings — with the
request's token ids and reads. A changed checkpoint has other weights or another
configuration, hence other keys: it is never served a stale answer. Backends that do
not fingerprint their weights (a served model) are not cached, unless the user declares
what they serve: the key then holds that declaration, and each run says it is trusted.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import sqlite3
import sys
from pathlib import Path
from typing import Callable

from pytest_longctx.backends.base import DECLARED, Backend, describe
from pytest_longctx.errors import LongctxError
from pytest_longctx.paths import cache_dir, unwritable
from pytest_longctx.scoring.answers import Answers
from pytest_longctx.scoring.engine import Request

IDENTITY = ("backend", "weights", "config", "dtype", "device", "chunk_size")
OFF = ("off", "none", "")
Warn = Callable[[str], None]


def print_warning(message: str) -> None:
    print(f"longctx: warning: {message}", file=sys.stderr, flush=True)


class ScoreCache:
    """Answers of past forward passes in an sqlite file, keyed by the backend's identity and the
    request."""

    def __init__(self, path: Path, identity: str, warn: Warn = print_warning):
        """Opens the file and tries a write (rolled back): a cache that cannot be written or is
        damaged raises ``sqlite3.Error`` here, before any forward pass, not after the scoring."""
        self.path = path
        self.identity = identity
        self.warn = warn
        self.hits = self.misses = 0
        self.db: sqlite3.Connection | None = _connect(path)
        try:
            self.db.execute("CREATE TABLE IF NOT EXISTS answers (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            self.db.execute("BEGIN")
            self.db.execute("INSERT OR REPLACE INTO answers VALUES ('', '')")
            self.db.execute("ROLLBACK")
        except sqlite3.Error:
            self.db.close()
            raise

    @classmethod
    def for_backend(cls, backend: Backend, folder: str | os.PathLike | None = None, warn: Warn = print_warning) -> ScoreCache | None:
        """The cache for this backend in ``folder`` (default: the user cache); None when the
        backend has no weight fingerprint or ``folder`` is 'off', and, with one ``warn``ing, when
        the cache cannot be made, written or read: the run goes on without it."""
        if folder is not None and str(folder).lower() in OFF:
            return None
        info = describe(backend)
        if not info.get("weights"):
            return None
        if str(info["weights"]).startswith(DECLARED):
            warn(f"the score cache reuses answers for {info.get('model')} on your word: it is taken to serve what was declared "
                 f"as {info['weights'].removeprefix(DECLARED)!r}, which the cache cannot check; declare a new name whenever "
                 "what it serves changes (docs/backends.md#vllm)")
        identity = json.dumps({k: info.get(k) for k in IDENTITY}, sort_keys=True)
        try:
            where = Path(folder) if folder is not None else cache_dir("scores")
            where.mkdir(parents=True, exist_ok=True)
        except (OSError, LongctxError) as exc:  # LongctxError: the user cache (cache_dir) cannot be made
            reason = unwritable(folder, folder=True) if folder is not None else None
            why = f"score cache folder {folder}: cannot be made ({reason or getattr(exc, 'strerror', exc)})" if folder else str(exc)
            warn(f"{why}; scoring without a cache (--cache-dir / --longctx-cache-dir: another folder, or 'off')")
            return None
        try:
            return cls(where / "answers.sqlite", identity, warn)
        except sqlite3.Error as exc:
            warn(_unusable(where / "answers.sqlite", exc))
            return None

    def _broken(self, exc: sqlite3.Error) -> None:
        """A failure mid-run (the disk filled, another process damaged the file): one warning,
        then no cache for the rest of the run; what was scored is kept."""
        self.warn(_unusable(self.path, exc))
        self.db = None

    def key(self, request: Request, top_k: int = 0) -> str:
        """The request's key: its tokens and the positions it reads, not which tokens it reads there (a
        gate asks at each read for its baseline's most likely tokens besides the target's, a baseline
        update for the target's alone: the same forward pass). Answers with the top-k tokens are kept
        apart from those without."""
        digest = hashlib.sha256(self.identity.encode())
        digest.update(request.ids.astype("<i8").tobytes())
        digest.update(repr(sorted(request.reads)).encode())
        if request.context:  # under a KV-cache press: where the compressed context ends
            digest.update(f"context={request.context}".encode())
        if top_k:
            digest.update(f"top_k={top_k}".encode())
        return digest.hexdigest()

    def get(self, request: Request, top_k: int = 0) -> Answers | None:
        """The kept answers of ``request``, when they hold every token it reads at each position (among
        the tokens read before, or the top-k kept there); else None, and the request is computed again."""
        if self.db is None:
            return None
        try:
            row = self.db.execute("SELECT value FROM answers WHERE key = ?", (self.key(request, top_k),)).fetchone()
        except sqlite3.Error as exc:
            self._broken(exc)
            return None
        answers: Answers = {}
        for i, (top1, lps, *rest) in (json.loads(row[0]).items() if row is not None else ()):  # before top-k: (top1, logprobs)
            top = rest[0] if rest else None
            known = {int(t): _from_json(lp) for t, lp in lps.items()}
            if top is not None:
                known.update({t: _from_json(lp) for t, lp in zip(top[0], top[1]) if t not in known})
            answers[int(i)] = (top1, known, None if top is None else (top[0], [_from_json(lp) for lp in top[1]]))
        if row is None or any(i not in answers or not tokens <= answers[i][1].keys() for i, tokens in request.reads.items()):
            self.misses += 1
            return None
        self.hits += 1
        return answers

    def put(self, request: Request, answers: Answers, top_k: int = 0) -> None:
        if self.db is None:
            return
        value = json.dumps({i: (top1, {t: _to_json(lp) for t, lp in lps.items()},
                                None if top is None else (top[0], [_to_json(lp) for lp in top[1]]))
                            for i, (top1, lps, top) in answers.items()})
        try:
            self.db.execute("INSERT OR REPLACE INTO answers VALUES (?, ?)", (self.key(request, top_k), value))
        except sqlite3.Error as exc:
            self._broken(exc)


def _to_json(logprob: float) -> float | None:
    """JSON has no NaN or infinity: a non-finite log-probability is kept as null."""
    return logprob if math.isfinite(logprob) else None


def _from_json(logprob: float | None) -> float:
    return float("nan") if logprob is None else logprob


def _connect(path: Path) -> sqlite3.Connection:
    """Read-only when the file is (SQLite falls back to that by itself; asked for here, the
    write tried in ``ScoreCache`` says so at once)."""
    if path.exists() and not os.access(path, os.W_OK):
        return sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True, timeout=60, isolation_level=None)
    return sqlite3.connect(path, timeout=60, isolation_level=None)  # autocommit; xdist workers share it


def _unusable(path: Path, exc: sqlite3.Error) -> str:
    """The warning for a cache file that cannot be used: damaged, or not writable."""
    if getattr(exc, "sqlite_errorname", "") in ("SQLITE_NOTADB", "SQLITE_CORRUPT"):
        return (f"score cache {path}: damaged ({exc}); scoring without a cache; deleting the file is safe "
                "(it holds only answers of past forward passes, computed again when missing)")
    return (f"score cache {path}: cannot be written ({exc}); scoring without a cache "
            "(--cache-dir / --longctx-cache-dir: another folder, or 'off')")
