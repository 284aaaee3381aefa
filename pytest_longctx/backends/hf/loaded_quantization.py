"""A checkpoint's quantization as transformers loaded it: its config (the one stored, where
transformers de-quantized it on load), the llm-compressor recipe beside its weights, the modules the
library took and the parameters that are the model's own, the activations it rounds and the kernels
that run it, and all of that in words (``described_quantization``)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

from pytest_longctx.backends.digests import beside_weights
from pytest_longctx.backends.hf.kv_caches import checkpoint_scales
from pytest_longctx.backends.hf.stored_tensors import StoredTensor, holds_quantized_storage, stored_tensors
from pytest_longctx.backends.quantization_words import describe, made_by, method

# what compressed-tensors keeps beside a quantized layer's weight: its scales and shape (beside a floating-point
# weight, loaded de-quantized, they describe it and are not the model's own tensors)
QUANTIZATION_METADATA = (".weight_scale", ".weight_zero_point", ".weight_shape", ".weight_g_idx", ".weight_global_scale")


def model_parameters(model: Any) -> dict[str, Any]:
    """Name -> parameter, a tied tensor once (under its first name); a quantized layer's metadata beside
    a floating-point weight (compressed-tensors' weight-only schemes, loaded de-quantized: the weight
    holds the values it computes with) left out."""
    found = dict(model.named_parameters())

    def metadata(name: str) -> bool:
        weight = found.get(f"{name.rpartition('.')[0]}.weight")
        return name.endswith(QUANTIZATION_METADATA) and weight is not None and weight.is_floating_point()

    return {name: p for name, p in found.items() if not metadata(name)}


def quantization_config(model: Any) -> dict[str, Any]:
    """The model's ``quantization_config`` as a dict (transformers keeps an object); empty when it has none.
    A checkpoint transformers de-quantized on load (fp8 or mxfp4 without a kernel here) has lost its own: the
    one its stored config.json holds, marked ``dequantized_on_load``."""
    found = getattr(model.config, "quantization_config", None)
    if found:
        return found.to_dict() if hasattr(found, "to_dict") else dict(found)
    written = stored_quantization(model)
    return {**written, "dequantized_on_load": True} if written.get("quant_method") else {}


def stored_quantization(model: Any) -> dict[str, Any]:
    """The ``quantization_config`` the config.json beside the model's weights holds, as it was written
    (its library's ``version`` too, which transformers drops on load); empty without one."""
    stored = beside_weights(_source(model), "config.json")
    try:
        written = json.loads(stored.read_text(encoding="utf-8")).get("quantization_config") if stored else None
    except (OSError, ValueError, AttributeError):
        written = None
    return written if isinstance(written, dict) else {}


def recipe_file(model: Any) -> Path | None:
    """The ``recipe.yaml`` llm-compressor saved beside the model's weights."""
    return beside_weights(_source(model), "recipe.yaml")


def _source(model: Any) -> str:
    """Where the model was loaded from (a folder or a hub id); empty where unknown."""
    return str(getattr(model.config, "_name_or_path", "") or "")


def rounds_activations(model: Any) -> bool:
    """Whether the activations a compressed-tensors scheme names are rounded as the model runs:
    its linear layers then carry the scheme and round their inputs (compressed-tensors' own
    forward); a checkpoint de-quantized on load carries none."""
    return any(getattr(getattr(m, "quantization_scheme", None), "input_activations", None) is not None
               and getattr(m, "quantization_enabled", True) for m in model.modules())


def decompress_now(model: Any) -> None:
    """compressed-tensors unpacks some checkpoints' weights on the model's first forward pass (a
    hook): done here, the weights fingerprinted are the ones every read runs with. It unpacks
    float4 weights (NVFP4, MXFP4) to bfloat16 whatever the model's dtype, which a float32 model
    cannot multiply with: they are cast to the dtype the rest of the model was loaded in (from
    bfloat16 to float32, exactly). Weights kept in float8 (a GPU kernel runs them compressed) stay so."""
    if getattr(model, "ct_decompress_hook", None) is not None:
        model.hf_quantizer.compressor.decompress_model(model)
    loaded = model.get_input_embeddings().weight.dtype
    for module in model.modules():
        weight = getattr(module, "weight", None)
        if (getattr(module, "quantization_scheme", None) is not None and weight is not None
                and weight.dtype.is_floating_point and weight.element_size() > 1 and weight.dtype != loaded):
            weight.data = weight.data.to(loaded)


def quantization_kernels(model: Any) -> list[str]:
    """The kernels a quantization library chose for this model as it loaded, where it chooses one per
    device and dtype: auto-round's by name (``auto_round:torch_zp``), gptqmodel's by the class of the
    layers that hold packed weights (``TorchAtenLinear``); none for the other libraries."""
    chosen = getattr(getattr(model, "hf_quantizer", None), "used_backends", None)
    if chosen:
        return [str(k) for k in chosen]
    return sorted({type(m).__name__ for m in model.modules() if "qweight" in dict(m.named_buffers(recurse=False))
                   and type(m).__module__.startswith("gptqmodel.")})


def kernels_said(model: Any) -> str:
    found = quantization_kernels(model)
    return f"run by its {', '.join(found)} kernel{'s' * (len(found) > 1)}" if found else ""


# torch dtypes of plain weights and buffers; a parameter or buffer of any other was put there by a quantization library
PLAIN_DTYPES = ("float16", "bfloat16", "float32", "float64", "int64", "bool")


def quantized_modules(model: Any) -> list[str]:
    """The modules a quantization library took as the model loaded: they carry its scheme (compressed-tensors,
    de-quantized or not), or hold a tensor of its own class (torchao's) or of a dtype no float model holds
    (bitsandbytes' packed bytes, int8, float8, GPTQ's packed words)."""
    return [name for name, module in model.named_modules() if _holds_quantized(module)]


def _holds_quantized(module: Any) -> bool:
    if getattr(module, "quantization_scheme", None) is not None:
        return True
    own = [*module.parameters(recurse=False), *module.buffers(recurse=False)]
    return any(hasattr(t, "__tensor_flatten__") or str(t.dtype).removeprefix("torch.") not in PLAIN_DTYPES for t in own)


def claims_quantization(quantization: Mapping[str, Any]) -> bool:
    """Whether a config says the weights are quantized: a compressed-tensors config of sparsity alone does not, nor does
    a GGUF file's (de-quantized to the loading dtype, said so)."""
    name = method(quantization)
    if name in (None, "gguf"):
        return False
    return name != "compressed-tensors" or bool(quantization.get("config_groups") or quantization.get("kv_cache_scheme"))


def parsed_groups(model: Any) -> dict[str, Any]:
    """The scheme groups of a compressed-tensors config as compressed-tensors parsed it when the model loaded."""
    config = getattr(getattr(getattr(model, "hf_quantizer", None), "compressor", None), "quantization_config", None)
    return dict(getattr(config, "config_groups", None) or {})


def applied(model: Any, quantization: Mapping[str, Any]) -> dict[str, Any]:
    """``quantization`` with only the compressed-tensors scheme groups that some loaded module carries (a group whose
    targets match no module quantizes nothing); as it is for another library, or where the parsed groups are unknown."""
    parsed = parsed_groups(model)
    if method(quantization) != "compressed-tensors" or not parsed or not isinstance(quantization.get("config_groups"), Mapping):
        return dict(quantization)
    carried = list({id(s): s for m in model.modules() if (s := getattr(m, "quantization_scheme", None)) is not None}.values())
    kept = {name: group for name, group in quantization["config_groups"].items()
            if name not in parsed or any(parsed[name] == scheme for scheme in carried)}
    return {**quantization, "config_groups": kept}


def described_quantization(model: Any, quantization: Mapping[str, Any], recipe: Path | None, written: str | None) -> str:
    """The candidate's quantization in words, as the library applied it to the loaded modules: the scheme they carry, the
    activations and KV cache they round, the kernels that run them; a config whose quantization neither the modules nor the
    weights files hold (transformers skipped it, or found float weights under it) is said as not applied."""
    # transformers' config objects drop keys they do not know (auto-round's provider and version, when it exports the GPTQ
    # or AWQ format): the description reads them from the stored config
    claimed = {**stored_quantization(model), **quantization} if quantization else {}
    if claimed and not quantization_held(model, claimed, stored_tensors(_source(model))):
        config = {k: v for k, v in claimed.items() if k != "dequantized_on_load"}
        return (f"none: config.json's quantization_config ({describe(config)}) was not applied: its modules and its "
                "weights files hold plain floats")
    return "; ".join(filter(None, (describe(applied(model, claimed), rounds_activations(model),
                                                      bool(checkpoint_scales(model))),
                                   made_by(recipe, quantization, written), kernels_said(model))))


def quantization_held(model: Any, quantization: Mapping[str, Any], stored: Mapping[str, StoredTensor] | None) -> bool:
    """Whether what a config says is quantized is: modules the library took (or a KV cache scheme run), or, for a format
    transformers de-quantizes on load, weights files that hold quantized storage; true where the files cannot be read."""
    return (not claims_quantization(quantization) or bool(quantized_modules(model))
            or bool(checkpoint_scales(model)) or stored is None or holds_quantized_storage(stored))

