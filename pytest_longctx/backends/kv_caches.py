"""Quantized KV caches of transformers (``QuantizedCache``), run by the transformers backend:
``--longctx-backend-option kv-cache=fp8`` (docs/metrics.md#quantized-kv-caches).

transformers' ``fp8`` cache keeps keys and values in float8 e4m3, one scale per layer taken from the
first call and kept: a prompt read in one call attends to its own keys and values exact, every later
token to float8 ones. The gate reads each context into it in one call, then its questions through
it, as kvpress's presses are read (scoring/questions.py). transformers' other backends, ``quanto``
and ``hqq``, keep the last ``residual_length`` tokens exact and quantize them in batches as that
window fills, so a read would depend on how its question is split into forward calls; and
optimum-quanto's tensors cannot be copied at the prefix tree's branch points. They are refused.
"""
from __future__ import annotations

from typing import Any, Callable

from pytest_longctx.errors import LongctxError, first_line

OPTION = "--backend-option kv-cache"
KINDS = ("fp8",)
WINDOWED = ("quanto", "hqq")  # transformers' caches with an exact residual window


def name_of(spec: str) -> str:
    """The cache ``spec`` names, as reports name it (``quantized KV cache fp8``); anything else is one line."""
    kind = spec.strip().lower()
    if kind.partition(":")[0] in WINDOWED:
        raise LongctxError(f"{OPTION}={spec}: not gated: transformers' {kind.partition(':')[0]} cache keeps the last "
                           "residual_length tokens exact and quantizes them in batches as that window fills, so a read would "
                           "depend on how its question is split into forward calls; kv-cache=fp8 quantizes every token alike")
    if kind not in KINDS:
        raise LongctxError(f"{OPTION}={spec}: expected {' or '.join(KINDS)} (float8 e4m3 keys and values, one scale per "
                           "layer taken from the context); it takes no arguments")
    return f"quantized KV cache {kind}"


def cache_factory(spec: str, model: Any) -> Callable[[], Any]:
    """What makes an empty cache of ``spec`` for ``model``, checked once here: a model transformers
    refuses it for (one with other than full attention layers) is one line."""
    from transformers import QuantizedCache

    kind = spec.strip().lower()

    def make() -> Any:
        return QuantizedCache(kind, model.config)

    try:
        make()
    except (ValueError, ImportError, TypeError) as exc:
        raise LongctxError(f"{OPTION}={spec}: transformers refuses it for this model: {first_line(exc)}") from None
    return make
