"""What a checkpoint's safetensors weights files hold, read from their headers without loading
them: every tensor's dtype, shape and file; whether any is quantized storage; the tensors a module
lacks that the same module of every other layer holds; and a file that is truncated or not
safetensors at all."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

from pytest_longctx.backends.digests import beside_weights

# safetensors dtypes of plain weights (and of the int64 / bool buffers some models save): any other is quantized storage
PLAIN_STORED = ("F16", "BF16", "F32", "F64", "I64", "BOOL")
NUMBERED = re.compile(r"\.\d+(?=\.|$)")  # a layer's or an expert's index in a tensor's name


@dataclass(frozen=True)
class StoredTensor:
    """A tensor as its weights file's header describes it."""

    dtype: str  # as safetensors names it: F32, I8, F8_E4M3, …
    shape: tuple[int, ...]
    file: Path


def stored_tensors(where: str) -> dict[str, StoredTensor] | None:
    """Every tensor the safetensors weights files of the model at ``where`` (a folder, or a hub id in the local cache) hold, by
    name, read from their headers; None where there are none (a GGUF file, torch pickles) or one cannot be read."""
    index = beside_weights(where, "model.safetensors.index.json")
    try:
        names = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values())) if index else ["model.safetensors"]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    found: dict[str, StoredTensor] = {}
    for name in names:
        file = beside_weights(where, name)
        header = _header(file) if file else None
        if header is None:
            return None
        found.update({key: StoredTensor(str(entry.get("dtype")), tuple(entry.get("shape") or ()), file)
                      for key, entry in header.items() if key != "__metadata__" and isinstance(entry, dict)})
    return found


def _header(file: Path) -> dict[str, Any] | None:
    """A safetensors file's header: 8 bytes of length, then JSON."""
    try:
        with open(file, "rb") as handle:
            length = int.from_bytes(handle.read(8), "little")
            header = json.loads(handle.read(length)) if 0 < length < 1 << 30 else None
    except (OSError, ValueError):
        return None
    return header if isinstance(header, dict) else None


def holds_quantized_storage(stored: Mapping[str, StoredTensor]) -> bool:
    """Whether any stored tensor is held in other than a plain float (integers, float8, packed words)."""
    return any(t.dtype not in PLAIN_STORED for t in stored.values())


def files_of(stored: Mapping[str, StoredTensor]) -> str:
    return ", ".join(sorted({str(t.file) for t in stored.values()}))


def absent_tensors(modules: Iterable[str], stored: Mapping[str, StoredTensor]) -> dict[str, list[str]]:
    """The tensors each module of ``modules`` lacks in the weights files though every other module of its name in another
    layer (``model.layers.N.mlp.down_proj``) holds them, by the file that holds the module's layer; a module that holds a
    tensor none of the others holds (a layer left in float beside quantized ones) lacks none."""
    held: dict[str, set[str]] = {}
    for name in stored:
        owner, _, leaf = name.rpartition(".")
        held.setdefault(owner, set()).add(leaf)
    lacking: dict[str, list[str]] = {}
    for module in modules:
        pattern = NUMBERED.sub(".#", module)
        others = [leaves for owner, leaves in held.items() if owner != module and NUMBERED.sub(".#", owner) == pattern]
        own = held.get(module, set())
        expected = set.intersection(*others) if others else set()
        if expected and own <= expected and expected - own:
            file = str(_nearest(module, stored).file)
            lacking.setdefault(file, []).extend(f"{module}.{leaf}" for leaf in sorted(expected - own))
    return lacking


def incomplete_modules(stored: Mapping[str, StoredTensor]) -> dict[str, list[str]]:
    """``absent_tensors`` of every module the files hold some tensors of."""
    return absent_tensors(sorted({name.rpartition(".")[0] for name in stored}), stored)


def _nearest(name: str, stored: Mapping[str, StoredTensor]) -> StoredTensor:
    """The stored tensor whose name shares the longest run of leading parts with ``name`` (its module's, its layer's)."""
    parts = name.split(".")

    def shared(other: str) -> int:
        count = 0
        for mine, theirs in zip(parts, other.split(".")):
            if mine != theirs:
                break
            count += 1
        return count

    return stored[max(sorted(stored), key=shared)]


def damaged_weights(folder: str) -> str | None:
    """Which ``*.safetensors`` file of ``folder`` is truncated or not safetensors at all, and
    how: checked from its header (8 bytes of length, then JSON), without loading it."""
    for path in sorted(Path(folder).glob("*.safetensors")):
        size = path.stat().st_size
        with open(path, "rb") as handle:
            head = handle.read(8)
            length = int.from_bytes(head, "little") if len(head) == 8 else -1
            if not 0 < length <= size - 8:
                return f"{path}: not a safetensors file, or truncated ({size} bytes)"
            try:
                header = json.loads(handle.read(length))
                end = max((int(t["data_offsets"][1]) for k, t in header.items() if k != "__metadata__"), default=0)
            except (ValueError, TypeError, KeyError, IndexError, AttributeError):
                return f"{path}: its safetensors header is damaged"
        if 8 + length + end != size:
            return f"{path}: truncated or damaged ({size} bytes, its header describes {8 + length + end})"
    return None


def weights_held(where: str, extra: Mapping[str, Any]) -> dict[str, StoredTensor] | None:
    """What the safetensors weights files beside the model hold (none read for a GGUF file)."""
    return None if extra else stored_tensors(where)
