"""A checkpoint's own ``quantization_config`` as the transformers backend reports it: what the
candidate is in words, the library that runs it and its version, and the line that says which
extra to install when that library is missing. Read from the config alone: nothing here
imports a quantization library except to see whether it is there."""
from __future__ import annotations

import importlib
import json
import re
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Mapping, Sequence

from pytest_longctx.backends import kv_caches
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
# the modifiers that round weights: a module in their ``ignore`` list keeps its float weights
QUANTIZING = {"QuantizationModifier", "GPTQModifier", "AWQModifier", "AutoRoundModifier"}
TUPLE = "tag:yaml.org,2002:python/tuple"  # how PyYAML writes a tuple, as llm-compressor's recipes hold some
# the modifiers whose result depends on data other layers see: re-made, the other layers change too
CALIBRATED = {"GPTQModifier", "AWQModifier", "AutoRoundModifier", "SmoothQuantModifier"}


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


def method(quantization: Mapping[str, Any]) -> str | None:
    """The config's ``quant_method`` as a plain string (transformers writes an enum)."""
    value = quantization.get("quant_method")
    return None if value is None else str(getattr(value, "value", value))


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
        groups = (quantization.get("config_groups") or {}).values()
        said = "compressed-tensors " + "; ".join(_scheme(g, activations_rounded) for g in groups) if groups else name
        cache = quantization.get("kv_cache_scheme")
        return f"{said}; {kv_caches.scheme_words(cache, cache_rounded)}" if cache else said
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


def recipe_keeping(recipe: Path, modules: Sequence[str], original: str) -> list[str]:
    """The llm-compressor recipe that makes the checkpoint with ``modules`` (linear layers' names)
    left in float, as lines of YAML: ``recipe``, the one saved beside it, with those modules added
    to the ``ignore`` list of each modifier that rounds weights, after comments that say how to run
    it on ``original``. Empty when the recipe cannot be read or holds no such modifier."""
    import yaml

    class Loader(yaml.SafeLoader):  # llm-compressor writes SmoothQuant's mappings as tuples (!!python/tuple): kept so
        pass

    class Dumper(yaml.SafeDumper):
        pass

    Loader.add_constructor(TUPLE, lambda loader, node: tuple(loader.construct_sequence(node, deep=True)))
    Dumper.add_representer(tuple, lambda dumper, value: dumper.represent_sequence(TUPLE, value))
    try:
        text = Path(recipe).read_text(encoding="utf-8")
        stages = yaml.load(text, Loader=Loader)  # noqa: S506 - a safe loader, one tag more
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return []
    found: list[str] = []

    def visit(node: Any) -> None:
        if not isinstance(node, dict):
            return
        for key, value in node.items():
            if key in QUANTIZING and isinstance(value, dict):
                ignored = value.get("ignore") or []
                value["ignore"] = [*ignored, *(m for m in modules if m not in ignored)]
                found.append(key)
            else:
                visit(value)

    visit(stages)
    if not found:
        return []
    redone = sorted(CALIBRATED & set(RECIPE_MODIFIER.findall(text)))
    lines = [f"# llm-compressor: oneshot(model={json.dumps(original)}, recipe=\"fix.yaml\""
             + (", dataset=<the calibration data the candidate was made with>" if redone else "")
             + "), then save_pretrained(..., save_compressed=True)",
             f"# the candidate's recipe.yaml with the fix set's {len(modules)} linear layer{'s' * (len(modules) != 1)} added to "
             "each ignore list"]
    if redone:
        lines.append(f"# {' and '.join(LLMCOMPRESSOR_METHODS[m] for m in redone)} quantize{'s' * (len(redone) == 1)} each layer on "
                     "what the layers before it compute: re-made, the other layers differ from the candidate's too; gate the result")
    return lines + yaml.dump(stages, Dumper=Dumper, sort_keys=False, default_flow_style=None).splitlines()


# quant_method -> (transformers' config class, its key for the modules it leaves in float)
SKIPPING = {"bitsandbytes": ("BitsAndBytesConfig", "llm_int8_skip_modules"),
            "torchao": ("TorchAoConfig", "modules_to_not_convert")}


def config_keeping(quantization: Mapping[str, Any], left: Sequence[str], modules: Sequence[str], original: str,
                   dtype: str, device: str) -> list[str]:
    """The Python that makes, with transformers, the checkpoint of a library transformers quantizes on
    load (``SKIPPING``) with ``modules`` (linear layers' names) left in float, as lines: the
    candidate's ``quantization``, its skip list the layers the candidate ``left`` in float and the
    fix set's ``modules``, loaded from ``original`` at ``dtype`` on ``device`` and saved. Empty for
    another library."""
    found = SKIPPING.get(method(quantization))
    if found is None:
        return []
    kind, key = found
    kept = [*left, *(m for m in modules if m not in left)]
    config = {k: v for k, v in quantization.items() if k != "dequantized_on_load"}
    config[key] = kept
    return [f"# transformers: {original} quantized on load again with the fix set's {len(modules)} linear "
            f"layer{'s' * (len(modules) != 1)} added to {key} (beside the {len(left)} the candidate left in float)",
            "import json",
            f"from transformers import AutoModelForCausalLM, {kind}",
            f"config = {kind}.from_dict(json.loads({json.dumps(json.dumps(config, sort_keys=True))}))",
            f"model = AutoModelForCausalLM.from_pretrained({json.dumps(original)}, quantization_config=config, "
            f"dtype={json.dumps(dtype)}, device_map={json.dumps(device)})",
            'model.save_pretrained("fixed")']


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
