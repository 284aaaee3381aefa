"""Fingerprints that decide whether two runs scored the same thing: data items and tokenizers."""
from __future__ import annotations

import dataclasses
import hashlib
from typing import Any, Iterable

import numpy as np

# In the ids mode the stored Qwen3.5 ids are fed as they are: the tokenizer plays no part.
IDS_MODE_TOKENIZER = "stored-qwen3.5-ids"


def _feed(digest: Any, value: Any) -> None:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        digest.update(type(value).__name__.encode())
        for field in dataclasses.fields(value):
            digest.update(f"<{field.name}>".encode())
            _feed(digest, getattr(value, field.name))
    elif isinstance(value, np.ndarray):
        digest.update(b"ids:" + np.ascontiguousarray(value, dtype="<i8").tobytes())
    elif isinstance(value, (list, tuple)):
        digest.update(f"[{len(value)}".encode())
        for element in value:
            _feed(digest, element)
    elif isinstance(value, dict):
        digest.update(f"{{{len(value)}".encode())
        for key in sorted(value, key=str):
            digest.update(repr(key).encode())
            _feed(digest, value[key])
    else:
        digest.update(repr(value).encode())


def item_fingerprint(item: Any) -> str:
    """A digest of every field of an item record (texts, targets, stored ids, sources)."""
    digest = hashlib.sha256()
    _feed(digest, item)
    return digest.hexdigest()[:24]


def data_fingerprint(keyed: Iterable[tuple[str, str, str, str]]) -> str:
    """A digest of (config, length, item id, item fingerprint) over a selection."""
    digest = hashlib.sha256()
    for key in sorted(keyed):
        digest.update("|".join(key).encode() + b"\n")
    return digest.hexdigest()[:24]


def tokenizer_fingerprint(tokenizer: Any, mode: str) -> str:
    """What the scores depend on: nothing in the ids mode, the full tokenizer in text mode."""
    if mode == "ids":
        return IDS_MODE_TOKENIZER
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        serial = backend.to_str()
    else:
        serial = repr(sorted(tokenizer.get_vocab().items())) + type(tokenizer).__name__
    return hashlib.sha256(serial.encode()).hexdigest()[:24]
