"""Backends: the transformers one, or any ``module:factory`` that builds an object with
``read(ids, positions, tokens)`` (see ``base.Backend``)."""
from __future__ import annotations

import importlib
from typing import Any

from pytest_longctx.errors import LongctxError


def load_backend(model: str, backend: str = "hf", dtype: str = "auto", device: str = "auto") -> tuple[Any, Any]:
    """(backend, tokenizer) for a model reference.

    ``backend`` is ``hf`` (transformers) or ``module:factory``; the factory is called as
    ``factory(model=..., dtype=..., device=...)`` and returns the backend; its tokenizer
    is its ``tokenizer`` attribute (``None`` restricts scoring to the ids mode).
    """
    if backend == "hf":
        from pytest_longctx.backends.aliases import resolve_model
        from pytest_longctx.backends.hf import TransformersBackend

        loaded = TransformersBackend.load(resolve_model(model), dtype=dtype, device=device, name=model)
        return loaded, loaded.tokenizer
    module_name, _, attribute = backend.partition(":")
    if not module_name or not attribute:
        raise LongctxError(f"--backend {backend}: expected 'hf' or 'module:factory'")
    try:
        factory = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise LongctxError(f"--backend {backend}: cannot import it ({exc})") from None
    made = factory(model=model, dtype=dtype, device=device)
    if not callable(getattr(made, "read", None)):
        raise LongctxError(f"--backend {backend}: the factory returned {type(made).__name__}, which has no read(ids, positions, tokens)")
    return made, getattr(made, "tokenizer", None)
