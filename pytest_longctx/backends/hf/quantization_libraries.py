"""The libraries that run a checkpoint's quantization in transformers: whether the one a checkpoint
needs imports here (else the extra that installs it), and its version, which the results record."""
from __future__ import annotations

import importlib
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Mapping

from pytest_longctx.backends.quantization_words import describe, method
from pytest_longctx.errors import first_line

# quant_method -> (the module transformers imports to run it, its distribution: also the extra's name)
LIBRARIES: dict[str, tuple[str, str]] = {
    "torchao": ("torchao", "torchao"),
    "bitsandbytes": ("bitsandbytes", "bitsandbytes"),
    "compressed-tensors": ("compressed_tensors", "compressed-tensors"),
    "auto-round": ("auto_round", "auto-round"),
    # transformers runs the GPTQ and AWQ formats through gptqmodel (GPTQ also asks for optimum)
    "gptq": ("gptqmodel", "gptqmodel"),
    "awq": ("gptqmodel", "gptqmodel"),
}


def missing_library(quantization: Mapping[str, Any]) -> str | None:
    """Why the library that runs this quantization does not import here, with the extra that
    installs it; None when it imports or the method is not one of ``LIBRARIES``."""
    found = LIBRARIES.get(method(quantization) or "")
    if found is None:
        return None
    module, extra = found
    try:
        importlib.import_module(module)
    except Exception as exc:  # noqa: BLE001 - not installed, or installed but failing on import
        why = first_line(exc) or type(exc).__name__
        return (f"its weights are quantized by {extra} ({describe(quantization)}), which does not import here "
                f"({why}): pip install 'pytest-longctx[{extra}]'")
    return None


def install_hint(quantization: Mapping[str, Any]) -> str:
    """``pip install 'pytest-longctx[EXTRA]'`` for a method this package has an extra for, else empty."""
    found = LIBRARIES.get(method(quantization) or "")
    return f"pip install 'pytest-longctx[{found[1]}]'" if found else ""


def library_versions(quantization: Mapping[str, Any]) -> dict[str, str]:
    """The version of the library that runs this quantization, by distribution name (none for a
    method transformers runs itself)."""
    found = LIBRARIES.get(method(quantization) or "")
    if found is None:
        return {}
    try:
        return {found[1]: version(found[1])}
    except PackageNotFoundError:
        return {}

