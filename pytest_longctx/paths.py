"""Where pytest-longctx keeps what it builds once and reuses (builtin data, converted models),
and how it writes a file or folder so that nobody ever reads it half-written."""
from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Callable


def cache_dir(*parts: str) -> Path:
    """``$LONGCTX_CACHE``, else ``$XDG_CACHE_HOME/pytest-longctx``, else ``~/.cache/pytest-longctx``."""
    root = os.environ.get("LONGCTX_CACHE")
    if not root:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        root = os.path.join(base, "pytest-longctx")
    path = Path(root, *parts)
    path.mkdir(parents=True, exist_ok=True)
    return path


def write_atomically(path: str | os.PathLike, write: Callable[[Path], object]) -> Path:
    """Make ``path`` (a file or a folder) in one step: ``write`` fills a temporary sibling
    (``.<name>.<pid>.tmp``), which then replaces ``path`` in one rename, so a reader finds
    the old content or the new, never a part. The parent folder is made when missing; the
    temporary sibling is removed when ``write`` fails."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    _remove(partial)  # left over by an interrupted run with the same process id
    try:
        write(partial)
        os.replace(partial, path)
    except BaseException:
        _remove(partial)
        raise
    return path


def write_bytes_atomically(path: str | os.PathLike, data: bytes) -> Path:
    return write_atomically(path, lambda partial: partial.write_bytes(data))


def write_text_atomically(path: str | os.PathLike, text: str) -> Path:
    """``text`` in UTF-8."""
    return write_atomically(path, lambda partial: partial.write_text(text, encoding="utf-8"))


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)
