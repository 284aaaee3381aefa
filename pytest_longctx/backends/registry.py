"""Names that stand for code: ``module:object`` specs, and the entry-point groups through
which installed packages add backends, compressors and model aliases.

A name resolves, in this order, to a built-in of its kind, to an entry point of the kind's
group (``[project.entry-points."pytest_longctx.compressors"] mine = "pkg.mod:compress"``),
or to ``module:object`` imported as Python would (a module beside the tests is found too,
as pytest finds a conftest.py)."""
from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Callable, Mapping


@dataclass(frozen=True)
class Kind:
    """What a group of names resolves to, as the error messages call it."""

    group: str  # the entry-point group
    what: str  # "backend", "compressor", "model alias"
    form: str  # the spec's form in messages: "module:factory"


BACKENDS = Kind("pytest_longctx.backends", "backend", "module:factory")
COMPRESSORS = Kind("pytest_longctx.compressors", "compressor", "module:function")
ALIASES = Kind("pytest_longctx.aliases", "model alias", "module:function")


@dataclass(frozen=True)
class Deferred:
    """A built-in that is imported when it is named, not before: ``load()`` imports it (a real import
    statement inside the loader, which tests/test_layering.py declares) and returns it."""

    load: Callable[[], Any]


class RegistryError(Exception):
    """A name that resolves to nothing; the message says why (callers add where it came from)."""


def registered(kind: Kind) -> dict[str, Any]:
    """The entry points installed packages add to the kind's group, by name (not loaded)."""
    return {entry.name: entry for entry in entry_points(group=kind.group)}


def resolve(spec: str, kind: Kind, builtins: Mapping[str, Any] | None = None, search: Path | None = None) -> Any:
    """The object ``spec`` names. ``builtins``: the kind's own names, each an object or a ``Deferred``
    that imports it when named (so naming one costs no import). ``search``: a folder to import
    ``module`` from when Python cannot find it (the folder pytest was started in)."""
    builtins = builtins or {}
    entries = registered(kind)
    target = spec
    if spec in builtins:
        found = builtins[spec]
        return found.load() if isinstance(found, Deferred) else found
    if spec in entries:
        target = entries[spec].value
    if not all(target.partition(":")[::2]):
        names = [*builtins, *entries]
        raise RegistryError(f"expected {kind.form}" + (f" or one of {', '.join(names)}" if names else ""))
    try:
        return load(target, search)
    except (ImportError, AttributeError) as exc:
        raise RegistryError(f"cannot import it ({type(exc).__name__}: {exc})") from None


def load(target: str, search: Path | None = None) -> Any:
    """``module:object`` (``object`` may be dotted, ``Class.method``), or a whole ``module``."""
    module_name, _, attribute = target.partition(":")
    found = _import(module_name, search)
    for name in attribute.split(".") if attribute else ():
        found = getattr(found, name)
    return found


def _import(module_name: str, search: Path | None) -> Any:
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if search is None or exc.name != module_name.split(".")[0]:
            raise
        sys.path.insert(0, str(search))
        return importlib.import_module(module_name)
