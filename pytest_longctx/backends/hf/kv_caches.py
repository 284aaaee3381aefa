"""Quantized KV caches of transformers (``QuantizedCache``), run by the transformers backend:
``--longctx-backend-option kv-cache=fp8`` (docs/metrics.md#quantized-kv-caches).

transformers' ``fp8`` cache keeps keys and values in float8 e4m3, one scale per layer taken from the
first call and kept: a prompt read in one call attends to its own keys and values exact, every later
token to float8 ones. The gate reads each context into it in one call, then its questions through
it, as kvpress's presses are read (scoring/questions.py). transformers' other backends, ``quanto``
and ``hqq``, keep the last ``residual_length`` tokens exact and quantize them in batches as that
window fills, so a read would depend on how its question is split into forward calls; and
optimum-quanto's tensors cannot be copied at the prefix tree's branch points. They are refused.

A checkpoint's own KV cache scheme (llm-compressor's ``kv_cache_scheme``: a float8 or int8 cache with
one scale per layer, or per KV head, calibrated and saved as ``self_attn.k_scale`` / ``v_scale``) is
what vLLM runs with ``kv-cache-dtype=fp8``; transformers drops those scales on load and reads with a
full-precision cache. The transformers backend runs it: every key (after its rotary embedding, as
the cache stores it) and value is rounded with the checkpoint's scales before attention reads it
(``use_checkpoint_scheme``), so a question attends to the rounded cache as the served model does.
"""
from __future__ import annotations

import json
import sys
from typing import Any, Callable, Mapping

from pytest_longctx.backends.digests import beside_weights
from pytest_longctx.errors import LongctxError, first_line

OPTION = "--backend-option kv-cache"
KINDS = ("fp8",)
WINDOWED = ("quanto", "hqq")  # transformers' caches with an exact residual window
ROUNDED = "longctx-kv-"  # the attention implementation that rounds keys and values, before the one it wraps
SCALES = ("k_scale", "v_scale")  # what llm-compressor saves beside each attention layer, keys' and values'


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


def use_checkpoint_scheme(model: Any, scheme: Mapping[str, Any], where: str) -> None:
    """Round every key and value ``model`` attends to as the checkpoint's ``scheme`` says, with the scales
    saved beside its weights in ``where``. A scheme this cannot run as written (dynamic, asymmetric, another
    granularity) or scales that are not there are one line: judging it with a full-precision cache would
    pass a cache the model never reads with."""
    import torch

    said = f"its kv_cache_scheme ({json.dumps({k: scheme.get(k) for k in ('type', 'num_bits', 'strategy', 'dynamic', 'symmetric')})})"
    if scheme.get("dynamic") or not scheme.get("symmetric", True) or scheme.get("strategy") not in ("tensor", "head") \
            or scheme.get("type") not in ("float", "int") or (scheme.get("type") == "float" and scheme.get("num_bits") != 8):
        raise LongctxError(f"{said}: only static symmetric float8 or int schemes per tensor or per KV head run here (as "
                           "llm-compressor writes them for vLLM); gate it under vLLM: --longctx-backend vllm "
                           "--longctx-backend-option kv-cache-dtype=fp8")
    stored = _stored_scales(where)
    layers = [(name, module) for name, module in model.named_modules() if isinstance(getattr(module, "layer_idx", None), int)
              and hasattr(module, "k_proj")]
    missing = [f"{name}.{scale}" for name, _ in layers for scale in SCALES if f"{name}.{scale}" not in stored]
    if not layers or missing:
        raise LongctxError(f"{said}: the checkpoint's weights hold no {missing[0] if missing else 'attention layer scales'}: "
                           "re-save it with llm-compressor, or delete kv_cache_scheme from its config.json to judge it "
                           "with a full-precision cache")
    heads = getattr(model.config.get_text_config(), "num_key_value_heads", None)
    for name, module in layers:
        for scale in SCALES:
            value = stored[f"{name}.{scale}"].to(torch.float32).reshape(-1)
            shape = (1, -1, 1, 1) if value.numel() > 1 else ()
            if value.numel() > 1 and value.numel() != heads:
                raise LongctxError(f"{said}: {name}.{scale} holds {value.numel()} scales, the model {heads} KV heads")
            module.register_buffer(f"longctx_{scale}", value.reshape(shape), persistent=False)
    inner = model.config._attn_implementation
    model.set_attn_implementation(_register(inner, scheme))


def checkpoint_scales(model: Any) -> list[list[float]]:
    """The keys' and values' scales each layer's cache is rounded with (empty: none), for the config digest."""
    return [[float(x) for x in getattr(module, f"longctx_{scale}").reshape(-1)] for module in model.modules()
            for scale in SCALES if hasattr(module, f"longctx_{scale}")]


def _stored_scales(where: str) -> dict[str, Any]:
    """Every ``*.k_scale`` / ``*.v_scale`` tensor in the checkpoint's safetensors files, by name."""
    from safetensors import safe_open

    index = beside_weights(where, "model.safetensors.index.json")
    names = sorted(set(json.loads(index.read_text(encoding="utf-8")).get("weight_map", {}).values())) if index else ["model.safetensors"]
    found: dict[str, Any] = {}
    for file in filter(None, (beside_weights(where, name) for name in names)):
        with safe_open(str(file), "pt") as handle:
            found.update({key: handle.get_tensor(key) for key in handle.keys() if key.endswith(tuple(f".{s}" for s in SCALES))})
    return found


def _register(inner: str, scheme: Mapping[str, Any]) -> str:
    """The name of an attention implementation that rounds keys and values as ``scheme`` says, then
    runs ``inner`` (the model's own: sdpa, eager, ...) on them; registered with transformers once."""
    import torch
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS, AttentionInterface

    if scheme.get("type") == "float":
        def rounded(x: Any, scale: Any) -> Any:  # float8 e4m3 as compressed-tensors and vLLM store it
            return (x / scale).clamp(-448.0, 448.0).to(torch.float8_e4m3fn).to(x.dtype) * scale
    else:
        bound = 2 ** (int(scheme.get("num_bits", 8)) - 1)

        def rounded(x: Any, scale: Any) -> Any:
            return torch.round(x / scale).clamp(-bound, bound - 1) * scale

    def attention(module: Any, query: Any, key: Any, value: Any, mask: Any, **kwargs: Any) -> Any:
        run = ALL_ATTENTION_FUNCTIONS.get(inner) or sys.modules[type(module).__module__].eager_attention_forward
        return run(module, query, rounded(key, module.longctx_k_scale.to(key.dtype)),
                   rounded(value, module.longctx_v_scale.to(value.dtype)), mask, **kwargs)

    name = f"{ROUNDED}{scheme.get('type')}{scheme.get('num_bits')}-{inner}"
    AttentionInterface.register(name, attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register(name, ALL_MASK_ATTENTION_FUNCTIONS[inner])
    return name
