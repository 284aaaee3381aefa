"""What a model's weights take on disk: the size a ladder of candidates is ordered by (gate/ladder.py). A local
``.gguf`` file is its own size; a checkpoint folder, or a hub id the Hugging Face cache holds, the sum of its weight
files (its configs and tokenizer are not counted: they are the same size for every candidate)."""
from __future__ import annotations

from pathlib import Path

# the files that hold a checkpoint's weights (digests.CHECKPOINT_FILES less the configs)
WEIGHT_FILES = ("*.safetensors", "*.bin", "*.pt", "*.pth", "*.gguf")


def weights_bytes(reference: str) -> int | None:
    """The bytes of the weights ``reference`` (a model reference, an alias already resolved) names; None where they
    are not on this machine (a hub id the cache does not hold, a server's URL)."""
    path = Path(reference).expanduser()
    if path.is_file():
        return path.stat().st_size
    folder = path if path.is_dir() else _cached_snapshot(reference)
    if folder is None:
        return None
    found = {p for pattern in WEIGHT_FILES for p in folder.rglob(pattern) if p.is_file()}
    return sum(p.stat().st_size for p in found) if found else None


def _cached_snapshot(reference: str) -> Path | None:
    """The Hugging Face cache's folder of a hub id (nothing is downloaded); None where it holds none."""
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(reference, local_files_only=True))
    except Exception:  # noqa: BLE001 - not a hub id, not cached, or no huggingface_hub: the size is unknown, not an error
        return None
