"""A checkpoint's own quantization in words, as every backend that reports it says it (transformers,
vLLM, blame's hybrids): what the candidate is (``describe``: the method, its scheme, the activations
and the KV cache it rounds) and who made it how (``made_by``: the llm-compressor recipe saved beside
its weights). Pure: no quantization library is imported here."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Mapping

# torchao's configuration classes by what they do; another is named by its class
TORCHAO_KINDS = {
    "Int8WeightOnlyConfig": "int8 weight-only",
    "Int4WeightOnlyConfig": "int4 weight-only",
    "Float8WeightOnlyConfig": "float8 weight-only",
    "Int8DynamicActivationInt8WeightConfig": "int8 weights, int8 activations rounded per token as they run",
    "Int8DynamicActivationInt4WeightConfig": "int4 weights, int8 activations rounded per token as they run",
    "Float8DynamicActivationFloat8WeightConfig": "float8 weights, float8 activations rounded as they run",
    # the integer width is the config's weight_dtype (int1 to int8)
    "IntxWeightOnlyConfig": "{bits} weight-only",
    "Int8DynamicActivationIntxWeightConfig": "{bits} weights, int8 activations rounded per token as they run",
}

# what a compressed-tensors scheme's strategy means for its weights
GRANULARITY = {"channel": "per channel", "tensor": "per tensor", "token": "per token", "group": "per group"}
# compressed-tensors' formats that a scheme's numbers alone do not name
FORMATS = {"nvfp4-pack-quantized": "NVFP4", "mxfp4-pack-quantized": "MXFP4"}


# llm-compressor's modifiers by the method each applies, in the words their authors use
LLMCOMPRESSOR_METHODS = {
    "QuantizationModifier": "round to nearest",
    "GPTQModifier": "GPTQ",
    "AWQModifier": "AWQ",
    "SmoothQuantModifier": "SmoothQuant",
    "AutoRoundModifier": "AutoRound",
    "SpinQuantModifier": "SpinQuant",
    "QuIPModifier": "QuIP",
    "SparseGPTModifier": "SparseGPT",
    "LogarithmicEqualizationModifier": "logarithmic equalization",
}
# a modifier's name as llm-compressor writes it in the recipe.yaml it saves beside the weights
RECIPE_MODIFIER = re.compile(r"^\s+(\w+Modifier):\s*$", re.MULTILINE)


def method(quantization: Mapping[str, Any]) -> str | None:
    """The config's ``quant_method`` as a plain string (transformers writes an enum)."""
    value = quantization.get("quant_method")
    return None if value is None else str(getattr(value, "value", value))


def describe(quantization: Mapping[str, Any], activations_rounded: bool = True, cache_rounded: bool = True) -> str:
    """What the candidate is, in words: ``torchao int8 weight-only``, ``bitsandbytes nf4``,
    ``compressed-tensors W4A16, groups of 64``; ``none`` for a model without quantization.
    ``activations_rounded``: whether the loaded model rounds the activations a scheme names
    (compressed-tensors decompressed for good rounds none); ``cache_rounded``: whether it rounds its
    keys and values as the checkpoint's KV cache scheme says."""
    name = method(quantization)
    if name is None:
        return "none"
    if quantization.get("dequantized_on_load"):
        activations = quantization.get("activation_scheme")
        return (describe({k: v for k, v in quantization.items() if k != "dequantized_on_load"}) + ", de-quantized on load: "
                + "its weights are judged" + (f", not its activation rounding ({activations})" if activations else "")
                + " (transformers has no kernel for it here)")
    if name == "fp8":
        block = quantization.get("weight_block_size")
        return "fp8 e4m3 weights" + (f" in blocks of {block[0]}x{block[1]}" if isinstance(block, list) and len(block) == 2
                                     else " per tensor")
    if name == "torchao":
        return f"torchao {_torchao(quantization)}"
    if name == "bitsandbytes":
        return f"bitsandbytes {_bitsandbytes(quantization)}"
    if name == "compressed-tensors":
        stored = quantization.get("config_groups")
        groups = [g for g in stored.values() if isinstance(g, Mapping)] if isinstance(stored, Mapping) else []
        said = "compressed-tensors " + "; ".join(_scheme(g, activations_rounded) for g in groups) if groups else name
        cache = quantization.get("kv_cache_scheme")
        return f"{said}; {scheme_words(cache, cache_rounded)}" if cache else said
    if name == "gguf":
        return "GGUF, de-quantized to the loading dtype"
    return _integer_format(name, quantization)


def made_by(recipe: str | Path | None, quantization: Mapping[str, Any], written: str | None = None) -> str:
    """Who made a compressed-tensors checkpoint and how, from what it records: the methods of the
    llm-compressor recipe saved beside its weights (``recipe.yaml``, its modifiers in order) and the
    compressed-tensors version that wrote it (``written``: the stored config's ``version``, which
    transformers drops on load): ``SmoothQuant, round to nearest, by llm-compressor (compressed-tensors
    0.19.0 wrote it)``. llm-compressor does not record its own version; the compressed-tensors one
    narrows down its release. Empty without a recipe."""
    if recipe is None or method(quantization) != "compressed-tensors":
        return ""
    try:
        text = Path(recipe).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return ""
    names = list(dict.fromkeys(RECIPE_MODIFIER.findall(text)))
    if not names:
        return ""
    methods = ", ".join(LLMCOMPRESSOR_METHODS.get(name, name.removesuffix("Modifier")) for name in names)
    written = quantization.get("version") or written
    return f"{methods}, by llm-compressor" + (f" (compressed-tensors {written} wrote it)" if written else "")


def scheme_words(scheme: Mapping[str, Any], rounded: bool) -> str:
    """A checkpoint's KV cache scheme in words: ``float8 KV cache per tensor, rounded as it runs``."""
    kind = "float" if scheme.get("type") == "float" else "int"
    where = {"tensor": "per tensor", "head": "per KV head"}.get(scheme.get("strategy"), f"per {scheme.get('strategy')}")
    return (f"{kind}{scheme.get('num_bits')} KV cache {where}, "
            + ("rounded as it runs" if rounded else "not rounded here (a full-precision cache is read)"))


def _torchao(quantization: Mapping[str, Any]) -> str:
    kinds = []
    for entry in (quantization.get("quant_type") or {}).values():
        if not isinstance(entry, Mapping):  # an older transformers wrote the name alone
            kinds.append(str(entry))
            continue
        kind, data = str(entry.get("_type", "unknown")), entry.get("_data") or {}
        granularity = data.get("granularity") or data.get("weight_granularity") or {}
        group = data.get("group_size") or (granularity.get("_data") or {}).get("group_size")
        bits = (data.get("weight_dtype") or {}).get("_data", "int?")
        words = TORCHAO_KINDS.get(kind, kind.removesuffix("Config")).format(bits=bits)
        kinds.append(words + (f", groups of {group}" if group else ""))
    return "; ".join(kinds) or "unknown"


def _integer_format(name: str, quantization: Mapping[str, Any]) -> str:
    """A format of integer weights in groups (gptq, awq, auto-round's own, and others like them):
    ``gptq 4-bit, groups of 32, by auto-round 0.16.1``, ``auto-round int4, groups of 32,
    auto_round:auto_gptq packing, by auto-round 0.15.1``. auto-round says it made a checkpoint
    (its own format, or ``provider`` when it exports another) but not whether its rounding was
    tuned (AutoRound's steps) or to nearest."""
    bits, group = quantization.get("bits"), quantization.get("group_size")
    own = name == "auto-round"
    words = [f"auto-round {quantization.get('data_type', 'int')}{bits or '?'}" if own else name + (f" {bits}-bit" if bits else "")]
    if isinstance(group, int) and group > 0:
        words.append(f"groups of {group}")
    if quantization.get("sym") is False or quantization.get("zero_point") is True:
        words.append("asymmetric")
    if quantization.get("desc_act"):
        words.append("activation order")
    if name == "awq" and quantization.get("version"):
        words.append(f"{quantization['version']} packing")
    if own and quantization.get("packing_format"):
        words.append(f"{quantization['packing_format']} packing")
    maker = "auto-round" if own else quantization.get("provider")
    if maker:
        version = quantization.get("autoround_version") if maker == "auto-round" else None
        words.append(f"by {maker}" + (f" {version}" if version else ""))
    return ", ".join(words)


def _bitsandbytes(quantization: Mapping[str, Any]) -> str:
    if quantization.get("load_in_4bit"):
        double = ", double quantization" if quantization.get("bnb_4bit_use_double_quant") else ""
        compute = str(quantization.get("bnb_4bit_compute_dtype") or "float32").removeprefix("torch.")
        computed = f", computed in {compute}" if compute != "float32" else ""  # each layer's input cast to it
        return f"{quantization.get('bnb_4bit_quant_type', 'fp4')}{double}{computed}"
    return f"int8 (LLM.int8(), outlier threshold {quantization.get('llm_int8_threshold', 6.0)})"


def _scheme(group: Mapping[str, Any], activations_rounded: bool) -> str:
    """One compressed-tensors scheme: ``W4A16, groups of 64`` or ``W8A8, int8 weights per channel,
    int8 activations dynamic per token, rounded as they run``."""
    weights, inputs = group.get("weights") or {}, group.get("input_activations")
    words = [f"W{weights.get('num_bits', 16)}A{inputs.get('num_bits', 16) if inputs else 16}"]
    strategy = weights.get("strategy")
    kind = "float" if weights.get("type") == "float" else "int"
    if strategy == "group":
        where = f"groups of {weights.get('group_size')}"
    elif strategy == "tensor_group":
        where = f"groups of {weights.get('group_size')} with a scale per tensor too"
    elif strategy == "block":
        where = f"blocks of {'x'.join(map(str, weights.get('block_structure') or []))}"
    else:
        where = GRANULARITY.get(strategy, strategy or "")
    if inputs or kind == "float":  # the name alone (W8A8) does not say the weights' type then
        where = f"{kind}{weights.get('num_bits')} weights {'in ' if strategy in ('group', 'tensor_group', 'block') else ''}{where}".strip()
    if where:
        words.append(where + (f" ({FORMATS[group['format']]})" if group.get("format") in FORMATS else ""))
    if weights and not weights.get("symmetric", True):
        words.append("asymmetric")
    if inputs:
        timing = "dynamic" if inputs.get("dynamic") else "static"
        where = (f"per group of {inputs.get('group_size')}" if inputs.get("strategy") == "group"
                 else GRANULARITY.get(inputs.get("strategy"), inputs.get("strategy")))
        words.append(f"{'float' if inputs.get('type') == 'float' else 'int'}{inputs.get('num_bits')} activations {timing} {where}, "
                     + ("rounded as they run" if activations_rounded
                        else "not rounded here: the weights alone are judged (vLLM's backend runs the activations too)"))
    return ", ".join(words)

