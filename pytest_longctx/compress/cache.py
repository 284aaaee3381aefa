"""Outputs of slow compressors on disk, so a second run of the same compressor on the same
sessions costs only look-ups (a compressor asks for it with ``conventions(cache=...)``).

A key digests everything the output depends on: the compressor's name, knobs and the
source of the module that defines it, the versions of the distributions it declared,
the session (its item fingerprint) and what the compressor is given (the tokenizer, and
the model behind the scorer). Each output is one JSON file, written atomically; one
that cannot be read is computed again."""
from __future__ import annotations

import hashlib
import inspect
import json
import os
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Callable

from pytest_longctx.compress.interface import Compression, Compressor
from pytest_longctx.data.records import FaithfulnessItem, Message
from pytest_longctx.errors import LongctxError
from pytest_longctx.paths import cache_dir, unwritable, write_atomically
from pytest_longctx.scoring.cache import OFF
from pytest_longctx.scoring.fingerprint import item_fingerprint

Warn = Callable[[str], None]


def _version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "missing"


def _source(compressor: Compressor) -> str:
    module = inspect.getmodule(compressor.function)
    try:
        return inspect.getsource(module) if module is not None else repr(compressor.function)
    except (OSError, TypeError):  # defined where no source can be read
        return repr(compressor.function)


class CompressionCache:
    def __init__(self, folder: Path, warn: Warn):
        self.folder = folder
        self.warn = warn
        self.hits = self.misses = 0
        self.writable = True
        self.sources: dict[str, str] = {}  # compressor label -> the digest of what keys its outputs

    @classmethod
    def at(cls, folder: str | os.PathLike | None, warn: Warn) -> CompressionCache | None:
        """The cache in ``folder``/compressed (default: the user cache); None for 'off', and with
        one warning when the folder cannot be made."""
        if folder is not None and str(folder).lower() in OFF:
            return None
        try:
            where = Path(folder, "compressed") if folder is not None else cache_dir("compressed")
            where.mkdir(parents=True, exist_ok=True)
        except (OSError, LongctxError) as exc:
            reason = unwritable(folder, folder=True) if folder is not None else str(exc)
            warn(f"compression cache in {folder}: cannot be made ({reason}); compressing without a cache")
            return None
        return cls(where, warn)

    def key(self, compressor: Compressor, item: FaithfulnessItem, given: str) -> str:
        if compressor.label not in self.sources:
            made = hashlib.sha256(compressor.label.encode())
            made.update(_source(compressor).encode())
            made.update(repr([(name, _version(name)) for name in compressor.conventions.cache]).encode())
            self.sources[compressor.label] = made.hexdigest()
        digest = hashlib.sha256(self.sources[compressor.label].encode())
        digest.update(item_fingerprint(item).encode())
        digest.update(given.encode())
        return digest.hexdigest()[:32]

    def get(self, key: str) -> Compression | None:
        path = self.folder / f"{key}.json"
        try:
            stored = json.loads(path.read_text())
            found = Compression(tuple(Message(m["role"], m["content"], m["name"]) for m in stored["messages"]),
                                stored["expansions"])
        except (OSError, ValueError, KeyError, TypeError):  # missing, or damaged: computed again, then replaced
            self.misses += 1
            return None
        self.hits += 1
        return found

    def put(self, key: str, compression: Compression) -> None:
        if not self.writable:
            return
        value = json.dumps({"messages": [{"role": m.role, "content": m.content, "name": m.name} for m in compression.messages],
                            "expansions": compression.expansions})
        try:
            write_atomically(self.folder / f"{key}.json", lambda partial: partial.write_text(value))
        except OSError as exc:
            self.warn(f"compression cache {self.folder}: cannot be written ({exc.strerror or exc}); "
                      "compressing without a cache")
            self.writable = False  # one warning; what is cached already is still read
