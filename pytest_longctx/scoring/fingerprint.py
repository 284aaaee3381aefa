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


# Texts whose tokenization (ids and offsets) stands for the tokenizer's behaviour: chat
# markup, code, numbers, whitespace runs, accents and scripts the benchmark uses.
PROBES = (
    "<|im_start|>system\nYou are a helpful agent.<|im_end|>\n<|im_start|>user\nFiona booked flight 48213.<|im_end|>",
    '<tool_call>\n<function=bash>\n<parameter=command>\ngrep -rn "__call__" src/ | head -n 20\n</parameter>',
    "def f(x):\n    return {'a': [1, 2.5e-3]}  # comment\n\n\n\tindent\r\n",
    "Příliš žluťoučký kůň úpěl ďábelské ódy. Größere Äpfel für Übermut. naïve café ½ € 💡",
    "   leading and trailing spaces   ",
)


def tokenizer_fingerprint(tokenizer: Any, mode: str) -> str:
    """What the scores depend on: nothing in the ids mode; in text mode the vocabulary and
    how the probe texts tokenize (behaviour, not the file format, so a tokenizer saved
    by another library version still matches)."""
    if mode == "ids":
        return IDS_MODE_TOKENIZER
    digest = hashlib.sha256(repr(sorted(tokenizer.get_vocab().items())).encode())
    for text in PROBES:
        encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        digest.update(repr((list(encoded["input_ids"]), [tuple(o) for o in encoded["offset_mapping"]])).encode())
    return digest.hexdigest()[:24]
