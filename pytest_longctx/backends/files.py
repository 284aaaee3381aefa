"""Digests of model files: what makes a checkpoint on disk this checkpoint, for backends that
cannot read the loaded weights' bits (llama.cpp, vLLM's engine in its own processes)."""
from __future__ import annotations

import hashlib
from pathlib import Path

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
