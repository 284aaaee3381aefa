"""Digests that name a model's numbers: its checkpoint on disk, for backends that cannot read
the loaded weights' bits (llama.cpp, vLLM's engine in its own processes), and the settings
that change what it computes."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

# the files of a checkpoint folder that change the numbers: weights, their index, the configs
CHECKPOINT_FILES = ("*.safetensors", "*.bin", "*.pt", "*.gguf", "*.json")


def file_digest(path: Path) -> str:
    """sha256 of the file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()[:32]


def folder_digest(folder: Path) -> str:
    """sha256 over a checkpoint folder's weight and config files (names and bytes)."""
    digest = hashlib.sha256()
    found = sorted({p for pattern in CHECKPOINT_FILES for p in folder.rglob(pattern) if p.is_file()})
    for path in found:
        digest.update(f"{path.relative_to(folder).as_posix()}\0{file_digest(path)}\0".encode())
    return digest.hexdigest()[:32]


def settings_digest(settings: dict[str, Any]) -> str:
    """sha256 of settings written as sorted JSON (a backend's ``config`` in ``describe()``)."""
    return hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:24]


def key_digests(settings: dict[str, Any]) -> dict[str, str]:
    """A short digest of each setting's value, by key (a backend's ``config_keys`` in ``describe()``): what two
    configs differ in, where their ``config`` digests differ."""
    return {key: settings_digest({key: value})[:8] for key, value in settings.items()}


def beside_weights(where: str, name: str) -> Path | None:
    """The file ``name`` beside the weights of the model loaded from ``where``: in its folder, or for a hub
    id in the local Hugging Face cache (nothing is downloaded for it); None where there is none."""
    if not where:
        return None
    if Path(where).is_dir():
        found = Path(where) / name
        return found if found.is_file() else None
    try:
        from transformers.utils import cached_file

        cached = cached_file(where, name, local_files_only=True, _raise_exceptions_for_missing_entries=False,
                             _raise_exceptions_for_connection_errors=False)
    except Exception:  # noqa: BLE001 - not a hub id, or no cache: the file is unknown, not an error
        return None
    return Path(cached) if cached else None
