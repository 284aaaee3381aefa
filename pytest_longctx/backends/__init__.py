"""Backends: the transformers one (``hf``), or any factory named as ``module:factory`` or
registered in the ``pytest_longctx.backends`` entry-point group that builds an object with
``read(ids, positions, tokens)`` (see ``base.Backend``)."""
from __future__ import annotations

import inspect
from typing import Any

from pytest_longctx.backends.registry import BACKENDS, RegistryError, resolve
from pytest_longctx.errors import LongctxError

BUILTIN = {"hf": "pytest_longctx.backends.hf:factory"}


def load_backend(model: str, backend: str = "hf", dtype: str = "auto", device: str = "auto") -> tuple[Any, Any]:
    """(backend, tokenizer) for a model reference.

    ``backend`` is ``hf`` (transformers), an entry point's name or ``module:factory``; the
    factory is called as ``factory(model=..., dtype=..., device=...)`` and returns the
    backend; its tokenizer is its ``tokenizer`` attribute (``None`` restricts scoring to the
    ids mode).
    """
    try:
        factory = resolve(backend, BACKENDS, BUILTIN)
    except RegistryError as exc:
        raise LongctxError(f"--backend {backend}: {exc}") from None
    if not callable(factory):
        raise LongctxError(f"--backend {backend}: names a {type(factory).__name__}, not a factory (a function or class)")
    try:
        inspect.signature(factory).bind(model=model, dtype=dtype, device=device)
    except TypeError as exc:
        raise LongctxError(f"--backend {backend}: the factory cannot be called as factory(model=..., dtype=..., device=...) "
                           f"({exc})") from None
    except ValueError:  # no signature to inspect (a builtin): the call says
        pass
    try:
        made = factory(model=model, dtype=dtype, device=device)
    except LongctxError:
        raise
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise LongctxError(f"--backend {backend}: the factory failed for model {model}: {type(exc).__name__}"
                           + (f": {first}" if first else "")) from None
    if not callable(getattr(made, "read", None)):
        raise LongctxError(f"--backend {backend}: the factory returned {type(made).__name__}, which has no read(ids, positions, tokens)")
    return made, getattr(made, "tokenizer", None)
