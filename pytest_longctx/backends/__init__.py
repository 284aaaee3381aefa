"""Backends: the transformers one (``hf``), llama.cpp's (``llama.cpp``), vLLM's (``vllm`` in process,
``vllm-server`` over HTTP), or any factory named as
``module:factory`` or registered in the ``pytest_longctx.backends`` entry-point group that builds
an object with ``read(ids, positions, tokens, top_k=0)`` (see ``base.Backend``)."""
from __future__ import annotations

import inspect
from typing import Any, Sequence

from pytest_longctx.backends.aliases import MODEL_BACKENDS, check_model
from pytest_longctx.backends.base import Backend, tokenizer_of
from pytest_longctx.backends.registry import BACKENDS, Deferred, RegistryError, resolve
from pytest_longctx.errors import LongctxError, entered, first_line, hidden
from pytest_longctx.options.keys import split_settings


def _transformers() -> Any:
    from pytest_longctx.backends import hf  # torch and transformers: loaded when the backend is named

    return hf.factory


def _llama_cpp() -> Any:
    from pytest_longctx.backends import llama_cpp

    return llama_cpp.factory


def _vllm() -> Any:
    from pytest_longctx.backends import vllm

    return vllm.factory


def _vllm_server() -> Any:
    from pytest_longctx.backends import vllm

    return vllm.server_factory


BUILTIN = {"hf": Deferred(_transformers), "llama.cpp": Deferred(_llama_cpp), "vllm": Deferred(_vllm),
           "vllm-server": Deferred(_vllm_server)}


def backend_options(pairs: Sequence[str]) -> dict[str, str]:
    """``--backend-option KEY=VALUE`` (repeatable) as a dict; each key once, neither blank. The
    backend's factory checks the keys and values it takes (options/backend_keys.py)."""
    return split_settings("--backend-option", pairs, "cache-type-k=q8_0")


def load_backend(model: str, backend: str = "hf", dtype: str = "auto", device: str = "auto",
                 options: Sequence[str] = (), trust_remote_code: bool = False, kv_press: str | None = None) -> tuple[Backend, Any]:
    """(backend, tokenizer) for a model reference.

    ``backend`` is ``hf`` (transformers), ``llama.cpp``, an entry point's name or
    ``module:factory``; the factory is called as ``factory(model=..., dtype=..., device=...)``
    (and ``options={KEY: VALUE}`` when ``--backend-option``s are given, ``trust_remote_code=True``
    when the user allows a model's own code to run) and returns the backend; its tokenizer is
    its ``tokenizer`` attribute (``None`` restricts scoring to the ids mode). ``kv_press``: a kvpress
    press (``--kv-press``, backends/hf/presses.py), which the transformers backend takes as its
    ``kv-press`` option.
    """
    model = entered(model)  # from an API caller too: every line shows it redacted, only a server connects with it as given
    settings = backend_options(options)
    if kv_press:
        if backend != "hf":
            raise LongctxError(f"--kv-press {kv_press}: kvpress's presses run in the transformers backend (--backend hf), "
                               f"not {backend}")
        if "kv-press" in settings:
            raise LongctxError(f"--kv-press {kv_press}: a press is also given as --backend-option kv-press={settings['kv-press']}; "
                               "give one")
        settings["kv-press"] = kv_press
    if backend in MODEL_BACKENDS:
        check_model(model)  # a typo of an alias, a missing path, an uncached hub id offline: one line before any loading
    try:
        factory = resolve(backend, BACKENDS, BUILTIN)
    except RegistryError as exc:
        raise LongctxError(f"--backend {backend}: {exc}") from None
    if not callable(factory):
        raise LongctxError(f"--backend {backend}: names a {type(factory).__name__}, not a factory (a function or class)")
    arguments: dict[str, Any] = {"model": model, "dtype": dtype, "device": device, **({"options": settings} if settings else {}),
                                 **({"trust_remote_code": True} if trust_remote_code else {})}
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
        first = first_line(exc)
        raise LongctxError(hidden(f"--backend {backend}: the factory failed for model {model}: {type(exc).__name__}"
                                  + (f": {first}" if first else ""), model, *settings.values())) from None
    if not callable(getattr(made, "read", None)):
        raise LongctxError(f"--backend {backend}: the factory returned {type(made).__name__}, which has no read(ids, positions, tokens)")
    return made, tokenizer_of(made)
