"""Backends by name: a built-in one (``builtin.BUILTIN``: transformers, llama.cpp, vLLM in process and
over HTTP), or any factory named as ``module:factory`` or registered in the ``pytest_longctx.backends``
entry-point group that builds an object with ``read(ids, positions, tokens, top_k=0)`` (see
``base.Backend``)."""
from __future__ import annotations

import inspect
from typing import Any, Sequence

from pytest_longctx.backends.aliases import model_reference
from pytest_longctx.backends.base import Backend, tokenizer_of
from pytest_longctx.backends.builtin import BUILTIN, BY_NAME, FACTORIES, ModelKind
from pytest_longctx.backends.registry import BACKENDS, RegistryError, resolve
from pytest_longctx.errors import LongctxError, entered, first_line, hidden
from pytest_longctx.options.backend_keys import backend_options

KV_PRESS = "kv-press"  # the --backend-option a --kv-press is handed to


def load_backend(model: str, backend: str = "hf", dtype: str = "auto", device: str = "auto",
                 options: Sequence[str] = (), trust_remote_code: bool = False, kv_press: str | None = None) -> tuple[Backend, Any]:
    """(backend, tokenizer) for a model reference.

    ``backend`` is a built-in's name (``hf``, transformers, the default), an entry point's name or
    ``module:factory``; the factory is called as ``factory(model=..., dtype=..., device=...)``
    (and ``options={KEY: VALUE}`` when ``--backend-option``s are given, ``trust_remote_code=True``
    when the user allows a model's own code to run) and returns the backend; its tokenizer is
    its ``tokenizer`` attribute (``None`` restricts scoring to the ids mode). A built-in whose model
    is a reference (``ModelKind.REFERENCE``) is handed it checked, an alias resolved
    (``aliases.model_reference``), with the name as given as ``name=``. ``kv_press``: a kvpress
    press (``--kv-press``, backends/hf/presses.py), which the transformers backend takes as its
    ``kv-press`` option.
    """
    model = entered(model)  # from an API caller too: every line shows it redacted, only a server connects with it as given
    settings = backend_options(options)
    builtin = BY_NAME.get(backend)
    if kv_press:
        pressing = next(b for b in BUILTIN if b.takes(KV_PRESS))
        if builtin is not pressing:
            raise LongctxError(f"--kv-press {kv_press}: kvpress's presses run in {pressing.keys.owner} (--backend "
                               f"{pressing.name}), not {backend}")
        if KV_PRESS in settings:
            raise LongctxError(f"--kv-press {kv_press}: a press is also given as --backend-option kv-press={settings[KV_PRESS]}; "
                               "give one")
        settings[KV_PRESS] = kv_press
    named = builtin is not None and builtin.model is ModelKind.REFERENCE
    try:
        # a typo of an alias, a missing path, an uncached hub id offline: one line before any loading
        reference = model_reference(model) if named else model
    except LongctxError:
        raise
    except Exception as exc:  # an alias's own resolver
        raise _failed(backend, model, exc, settings) from None
    try:
        factory = resolve(backend, BACKENDS, FACTORIES)
    except RegistryError as exc:
        raise LongctxError(f"--backend {backend}: {exc}") from None
    if not callable(factory):
        raise LongctxError(f"--backend {backend}: names a {type(factory).__name__}, not a factory (a function or class)")
    arguments: dict[str, Any] = {"model": reference, "dtype": dtype, "device": device, **({"options": settings} if settings else {}),
                                 **({"trust_remote_code": True} if trust_remote_code else {}), **({"name": model} if named else {})}
    try:
        inspect.signature(factory).bind(**arguments)
    except TypeError as exc:
        parameters = inspect.signature(factory).parameters
        if settings and "options" not in parameters:
            raise LongctxError(f"--backend {backend}: takes no --backend-option (given: {', '.join(settings)})") from None
        if trust_remote_code and "trust_remote_code" not in parameters:
            raise LongctxError(f"--backend {backend}: runs no model code of its own, so --trust-remote-code does not apply; "
                               "leave it out") from None
        raise LongctxError(f"--backend {backend}: the factory cannot be called as factory(model=..., dtype=..., device=...) "
                           f"({exc})") from None
    except ValueError:  # no signature to inspect (a builtin): the call says
        pass
    try:
        made = factory(**arguments)
    except LongctxError:
        raise
    except Exception as exc:
        raise _failed(backend, model, exc, settings) from None
    if not isinstance(made, Backend) or not callable(made.read):
        raise LongctxError(f"--backend {backend}: the factory returned {type(made).__name__}, which has no read(ids, positions, tokens)")
    return made, tokenizer_of(made)


def _failed(backend: str, model: str, exc: Exception, settings: dict[str, str]) -> LongctxError:
    """A library's words about a value it had as given may quote a piece of its secrets: masked here."""
    first = first_line(exc)
    return LongctxError(hidden(f"--backend {backend}: the factory failed for model {model}: {type(exc).__name__}"
                               + (f": {first}" if first else ""), model, *settings.values()))
