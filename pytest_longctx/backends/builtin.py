"""The built-in backends, one declared record each: the name ``--backend`` takes, the factory it stands
for (its package imported only when the name is used), the ``--backend-option`` keys it takes, what its
``--model`` is, and the pair ``longctx blame`` loads with it. Every table that names built-in backends is
made from ``BUILTIN``: the registry's built-ins, the backends whose model reference is checked and an
alias resolved before their factory runs, the keys each front end checks a run's settings against, the
backends blame makes hybrids for, and docs/options.md's key tables. Adding one is its package and an
entry here (docs/architecture.md#adding-a-backend); tests/test_builtin_backends.py holds every other
place that names them to this table."""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any, Sequence

from pytest_longctx.backends.registry import Deferred
from pytest_longctx.options.backend_keys import LLAMA_CPP, OPTION, TRANSFORMERS, VLLM, VLLM_SERVER
from pytest_longctx.options.keys import KeyTable, split_settings


class ModelKind(Enum):
    """What a backend's ``--model`` is."""

    REFERENCE = "a hub id, a folder, a .gguf file or an alias"  # checked, an alias resolved, before the factory runs
    URL = "a server's URL"  # handed to the factory as given


@dataclass(frozen=True)
class BuiltinBackend:
    """One built-in backend."""

    name: str  # as --backend and --longctx-backend take it
    factory: Deferred  # the factory the name stands for: factory(model=..., dtype=..., device=..., [options=...], ...)
    keys: KeyTable  # the --backend-option keys it takes (options/backend_keys.py)
    model: ModelKind = ModelKind.REFERENCE
    pair: Deferred | None = None  # blame's loader of two models with it: (hybrids.pair.PairRequest) -> Pair; None: no hybrids

    def takes(self, key: str) -> bool:
        """Whether it takes the ``--backend-option`` ``key``."""
        return key in self.keys.names()


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


def _transformers_pair() -> Any:
    from pytest_longctx.backends.hybrids import transformers

    return transformers.load_pair


def _gguf_pair() -> Any:
    from pytest_longctx.backends.hybrids import gguf

    return gguf.load_pair


BUILTIN: tuple[BuiltinBackend, ...] = (
    BuiltinBackend("hf", Deferred(_transformers), TRANSFORMERS, pair=Deferred(_transformers_pair)),
    BuiltinBackend("llama.cpp", Deferred(_llama_cpp), LLAMA_CPP, pair=Deferred(_gguf_pair)),
    BuiltinBackend("vllm", Deferred(_vllm), VLLM),
    BuiltinBackend("vllm-server", Deferred(_vllm_server), VLLM_SERVER, model=ModelKind.URL),
)
BY_NAME = {backend.name: backend for backend in BUILTIN}
FACTORIES = {backend.name: backend.factory for backend in BUILTIN}  # the registry's built-ins of the backend kind
PAIRED = tuple(backend.name for backend in BUILTIN if backend.pair is not None)  # the backends blame makes hybrids for


def check_backend_settings(backend: str, settings: Sequence[str], option: str = OPTION) -> dict[str, str]:
    """``settings`` (``KEY=VALUE``, repeatable) split, and checked against ``backend``'s keys where
    it is a built-in (a backend of the user's own checks its own): one line for a blank, unknown
    or malformed setting, before any model is loaded."""
    found = BY_NAME.get(backend)
    if found is None:
        return split_settings(option, settings, "KEY=VALUE")
    given = split_settings(option, settings, found.keys.example())
    found.keys.parse(given, option)
    return given
