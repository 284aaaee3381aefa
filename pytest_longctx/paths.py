"""Where pytest-longctx keeps what it builds once and reuses (builtin data, converted models),
and how it writes a file or folder so that nobody ever reads it half-written."""
from __future__ import annotations

import errno
import os
import shutil
import signal
import stat
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterable, Iterator

from pytest_longctx.errors import LongctxError

STEP_SUMMARY = "GITHUB_STEP_SUMMARY"


def step_summary() -> str | None:
    """The CI job's step summary file (GitHub Actions' ``$GITHUB_STEP_SUMMARY``) the gate's markdown is appended
    to, when there is one."""
    return os.environ.get(STEP_SUMMARY) or None


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
    the old content or the new, never a part. A symbolic link is written through: the
    link stays, its target gets the new content. The parent folder is made when missing;
    the temporary sibling is removed when ``write`` fails, and on SIGTERM (which then ends
    the process as it would have). A file that is already there keeps its permission bits; a
    read-only one (no write bit, e.g. 0444) is refused, not replaced. A folder is made once: when ``path`` is already a folder
    (another process made it meanwhile), that folder stands and this one is dropped."""
    path = Path(path)
    target = Path(real_path(path, "the file"))
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    kept_mode = _file_mode(target)
    if kept_mode is not None and not kept_mode & 0o222:
        raise LongctxError(f"{path}: {read_only(kept_mode)}")
    _remove(partial)  # left over by an interrupted run with the same process id
    with _removed_on_sigterm(partial):
        try:
            write(partial)
            if partial.is_dir() and target.is_dir():
                # another process made the folder while this one wrote it (pytest -n 2 converting one model
                # in each worker): a folder only ever appears whole, in one rename, so it is complete
                # and stands; os.replace cannot put a folder onto a folder that is not empty anyway
                _remove(partial)
            else:
                if kept_mode is not None:
                    os.chmod(partial, kept_mode)  # the file replaced keeps its permissions (0600 stays 0600)
                os.replace(partial, target)
        except BaseException:
            _remove(partial)
            raise
    return path


@contextmanager
def temporary_folder(parent: str | os.PathLike | None, prefix: str) -> Iterator[Path]:
    """A new folder in ``parent`` (None: the system's temporary folder) named ``prefix…``,
    removed with what it holds when the block ends, and on SIGTERM; ``parent`` is made when missing."""
    if parent is not None:
        Path(parent).mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    try:
        with _removed_on_sigterm(folder):
            yield folder
    finally:
        _remove(folder)


def _file_mode(path: Path) -> int | None:
    """The permission bits of ``path`` when it is a regular file (through links), else None."""
    try:
        status = path.stat()
    except OSError:
        return None
    return stat.S_IMODE(status.st_mode) if stat.S_ISREG(status.st_mode) else None


def read_only(mode: int) -> str:
    return f"the file is read-only, mode {mode:04o}, so it is not replaced: chmod u+w it to replace it"


_DOOMED: list[Path] = []  # what SIGTERM removes before it ends the process


@contextmanager
def _removed_on_sigterm(path: Path) -> Iterator[None]:
    """While the block runs, SIGTERM removes ``path`` (a file or a folder) before ending the
    process as its default action does; blocks may nest, each adding its path. Only where
    SIGTERM has its default action or this handling (a handler of the program's own decides
    for itself; when it raises, the caller's cleanup runs) and in the main thread, the only
    one that may set a handler."""
    handling = signal.getsignal(signal.SIGTERM)
    if threading.current_thread() is not threading.main_thread() or handling not in (signal.SIG_DFL, _terminated):
        yield
        return
    _DOOMED.append(path)
    signal.signal(signal.SIGTERM, _terminated)
    try:
        yield
    finally:
        _DOOMED.remove(path)
        if not _DOOMED:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _terminated(signum: int, frame: object) -> None:
    for path in reversed(_DOOMED):
        _remove(path)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


def unwritable(path: str | os.PathLike, folder: bool = False) -> str | None:
    """Why ``path`` (a file, or with ``folder`` a folder) cannot be written, or None when it can.

    Tried, not guessed from permission bits: an empty file is made and removed in the nearest
    folder on the way that exists, so the answer holds for root too (a path under a regular
    file, a read-only or virtual file system such as ``/proc``)."""
    path = Path(path).expanduser()
    if path.is_dir() and not folder:
        return "it is a folder"
    mode = None if folder else _file_mode(path)
    if mode is not None and not mode & 0o222:  # permission bits, not access(): root may write anything
        return read_only(mode)
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


def real_path(path: str | os.PathLike, name: str) -> str:
    """Where ``path`` leads, links followed and ``..`` resolved: the file a read opens or a write replaces
    (a link that leads nowhere yet leads to where the write will go). A link that leads back to itself is
    one line naming ``name`` (the option, or what the file is), where it would otherwise read as missing
    and be replaced by a file."""
    try:
        return os.path.realpath(path, strict=True)
    except FileNotFoundError:
        return os.path.realpath(path)
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            return os.path.realpath(path)
    raise LongctxError(f"{name} {path}: a symbolic link that leads back to itself (a loop of links), so it names no "
                       "file; point it at the file, or remove it")


def local_files(named: Iterable[tuple[str, str | os.PathLike | None]],
                here: str | os.PathLike = ".") -> list[tuple[str, str | os.PathLike]]:
    """The ``(option, value)`` whose value is a file or folder in ``here`` (a link too): what a model, the data or a
    tokenizer reads from here; given by an alias, a hub id or a URL, it names none."""
    return [(option, value) for option, value in named if value and os.path.lexists(os.path.join(here, value))]


def _kinds(folder: str) -> set[str]:
    """The suffixes of the files ``folder`` holds (at any depth): the kinds of file its reader takes."""
    return {Path(name).suffix for _, _, names in os.walk(folder) for name in names}


def _within(path: str, folder: str) -> bool:
    return os.path.commonpath([path, folder]) == folder


def check_outputs(outputs: Iterable[tuple[str, str | os.PathLike | None]],
                  inputs: Iterable[tuple[str, str | os.PathLike | None]] = ()) -> None:
    """The one check of what a run writes against what it reads, made before anything is read: every output
    (``(option, path)``; None: not asked for) must be writable, and neither the file of an input or of another
    output, nor a file an input folder holds (a model's ``config.json``, a dataset's split), nor a new file there of
    a kind the folder holds (one more ``.json`` in a model's folder, a split in a dataset's: what its reader or its
    digest would take); an input that is a loop of links is refused too. Paths are compared as real paths, so
    ``./b.json.gz``, ``x/../b.json.gz`` and a link to it are all ``b.json.gz``. A clash is one line naming both
    options and paths."""
    taken: dict[str, tuple[str, str | os.PathLike]] = {}
    folders: list[tuple[str, str, str | os.PathLike]] = []
    for option, path in inputs:
        if path:
            real = real_path(path, option)
            taken.setdefault(real, (option, path))
            if os.path.isdir(real):
                folders.append((real, option, path))
    for option, path in outputs:
        if not path:
            continue
        real = real_path(path, option)
        if real in taken:
            other, other_path = taken[real]
            raise LongctxError(f"{option} {path}: it is the file of {other} {other_path}, which writing it would "
                               f"overwrite; give {option} a path of its own")
        for folder, other, other_path in folders:
            if not _within(real, folder):
                continue
            if os.path.lexists(real):  # a file the input holds: a model's config.json, a dataset's split
                raise LongctxError(f"{option} {path}: it is a file of {other} {other_path}, which writing it would "
                                   f"overwrite; give {option} a path outside it")
            kind = Path(real).suffix
            if kind and kind in _kinds(folder):  # one more of the files its reader takes: a split, a digested config
                raise LongctxError(f"{option} {path}: it would add a {kind} file to {other} {other_path}, whose {kind} "
                                   f"files the run reads; give {option} a path outside it")
        check_writable(path, option)
        taken[real] = (option, path)


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
