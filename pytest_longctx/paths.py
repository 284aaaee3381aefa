"""Where pytest-longctx keeps what it builds once and reuses (builtin data, converted models),
and how it writes a file or folder so that nobody ever reads it half-written."""
from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Callable

from pytest_longctx.errors import LongctxError


def cache_dir(*parts: str) -> Path:
    """``$LONGCTX_CACHE``, else ``$XDG_CACHE_HOME/pytest-longctx``, else ``~/.cache/pytest-longctx``."""
    root = os.environ.get("LONGCTX_CACHE")
    if not root:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        root = os.path.join(base, "pytest-longctx")
    path = Path(root, *parts)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise LongctxError(f"cache folder {path}: cannot be made ({unwritable(path, folder=True) or exc.strerror}); "
                           "set LONGCTX_CACHE to a writable folder") from None
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


def unwritable(path: str | os.PathLike, folder: bool = False) -> str | None:
    """Why ``path`` (a file, or with ``folder`` a folder) cannot be written, or None when it can.

    Tried, not guessed from permission bits: an empty file is made and removed in the nearest
    folder on the way that exists, so the answer holds for root too (a path under a regular
    file, a read-only or virtual file system such as ``/proc``)."""
    path = Path(path).expanduser()
    if path.is_dir() and not folder:
        return "it is a folder"
    if folder and path.exists() and not path.is_dir():
        return "it is a file, not a folder"
    existing = path if folder and path.is_dir() else path.parent
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is a file, not a folder"
    probe = existing / f".longctx-probe-{os.getpid()}"
    try:
        os.close(os.open(probe, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except OSError as exc:
        return f"no file can be made in {existing}: {exc.strerror}"
    probe.unlink(missing_ok=True)
    return None


def check_writable(path: str | os.PathLike, option: str, folder: bool = False) -> None:
    """Refuse, before any work, an output ``path`` that cannot be written: one line naming the
    option and the path."""
    reason = unwritable(path, folder)
    if reason:
        raise LongctxError(f"{option} {path}: cannot be written ({reason}); give a path in a writable folder")


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
