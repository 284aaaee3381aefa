"""A checkpoint's own ``quantization_config`` as the transformers backend reports it: what the
candidate is in words, the library that runs it and its version, and the line that says which
extra to install when that library is missing; and what the transformers backend checks it
against: the config as written (an object, a method transformers knows, a compressed-tensors
config as compressed-tensors reads it), the tensors its weights files hold (their headers), and
the modules the library quantized as the model loaded. Nothing here imports a quantization library
except to see whether it is there, to read a config as it does, or to ask how it packs."""
from __future__ import annotations

import importlib
import json
import re
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from pytest_longctx.backends import kv_caches
from pytest_longctx.backends.files import beside_weights
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
        stored = quantization.get("config_groups")
        groups = [g for g in stored.values() if isinstance(g, Mapping)] if isinstance(stored, Mapping) else []
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


# --------------------------------------------------------------- the stored config, checked before transformers reads it

FIELD = "quantization_config"
JSON_KINDS = {str: "a string", list: "a list", bool: "a boolean", int: "a number", float: "a number", type(None): "null"}
RESAVE = "re-save the checkpoint with its library, or delete quantization_config to judge the weights unquantized"


def config_problem(quantization: Any, config_file: str) -> str | None:
    """What is wrong with a checkpoint's stored ``quantization_config`` (``config_file``: its config.json, as the
    line names it), as ``FILE, field 'quantization_config.…': what is wrong; what to do``; None when transformers
    and the library that runs it can read it."""
    if not isinstance(quantization, Mapping):
        return _field(config_file, FIELD, f"expected an object (its quantization library's settings, with a quant_method), "
                                          f"found {_found(quantization)}; {RESAVE}")
    return _method_problem(quantization, config_file) or _compressed_tensors_problem(quantization, config_file)


def _field(config_file: str, field: str, problem: str) -> str:
    return f"{config_file}, field {field!r}: {problem}"


def _found(value: Any) -> str:
    """A JSON value as a line shows it: its kind, and the value cut short."""
    shown = json.dumps(value, default=str)
    return f"{JSON_KINDS.get(type(value), type(value).__name__)} ({shown[:60]}{'…' if len(shown) > 60 else ''})"


def _method_problem(quantization: Mapping[str, Any], config_file: str) -> str | None:
    """A ``quant_method`` transformers does not know: it warns, skips the config and loads the weights as stored."""
    import transformers
    from transformers.quantizers.auto import AUTO_QUANTIZATION_CONFIG_MAPPING

    if quantization.get("load_in_4bit") or quantization.get("load_in_8bit"):  # bitsandbytes, as transformers reads it
        return None
    name = quantization.get("quant_method")
    if isinstance(name, str) and name in AUTO_QUANTIZATION_CONFIG_MAPPING:
        return None
    known = sorted({re.sub(r"^bitsandbytes_\dbit$", "bitsandbytes (with load_in_4bit or load_in_8bit)", m)
                    for m in AUTO_QUANTIZATION_CONFIG_MAPPING})
    said = "missing: it names none of the quantization methods" if name is None else f"{name!r} is not a quantization method"
    return _field(config_file, f"{FIELD}.quant_method",
                  f"{said} transformers {transformers.__version__} knows ({', '.join(known)}): it would "
                  "skip the config and load the weights as stored, and the gate would judge them as a quantization they do not "
                  "hold; name the method that made the checkpoint, or delete quantization_config to judge the plain weights")


def _compressed_tensors_problem(quantization: Mapping[str, Any], config_file: str) -> str | None:
    """A compressed-tensors config read as compressed-tensors reads it: its formats among the ones it knows (it reads a
    group's and only records the top-level one, which would otherwise pass unseen), every field as its schema says."""
    if method(quantization) != "compressed-tensors":
        return None
    groups = quantization.get("config_groups")
    if groups is not None and not isinstance(groups, Mapping):
        return _field(config_file, f"{FIELD}.config_groups", f"expected an object (a scheme by name: {{\"group_0\": "
                                                             f"{{\"targets\": …, \"weights\": …}}}}), found {_found(groups)}; {RESAVE}")
    try:
        from compressed_tensors import CompressionFormat
        from compressed_tensors.quantization import QuantizationConfig
    except Exception:  # noqa: BLE001 - not installed or failing: the line that names its extra says so
        return None
    formats = [f.value for f in CompressionFormat]
    said = [(f"{FIELD}.format", quantization.get("format"))] + [
        (f"{FIELD}.config_groups.{name}.format", group.get("format")) for name, group in (groups or {}).items()
        if isinstance(group, Mapping)]
    for field, value in said:
        if value is not None and value not in formats:
            return _field(config_file, field, f"{value!r} is not a format compressed-tensors "
                                              f"{_version('compressed-tensors')} knows ({', '.join(formats)}); write the one its "
                                              "weights were saved in, or re-save the checkpoint with its library")
    if not (groups or quantization.get("kv_cache_scheme")):  # transformers reads no scheme then (sparsity alone)
        return None
    try:
        QuantizationConfig.model_validate(dict(quantization))
    except ValueError as exc:  # pydantic's ValidationError, one entry per field it refused
        return _validation_problem(getattr(exc, "errors", lambda: [])(), quantization, config_file) or _field(
            config_file, FIELD, f"compressed-tensors {_version('compressed-tensors')} cannot read it ({first_line(exc)}); {RESAVE}")
    return None


def _validation_problem(errors: list[dict[str, Any]], data: Mapping[str, Any], config_file: str) -> str | None:
    """pydantic's first error as a field of config.json: its location walked through the stored dict, so that the names
    pydantic gives the members of a union (``list[str]``, ``function-after[…]``) are left out; an error that refuses a
    whole value as one member of a union gives way to the errors inside the member that took it."""
    placed = [(_path(error.get("loc", ()), data), error) for error in errors]
    inside = [(path, error) for (path, whole), error in placed if not whole] or [(path, e) for (path, _), e in placed]
    if not inside:
        return None
    path, error = inside[0]
    kind = error.get("type", "")
    problem = (f"expected an object, found {_found(error.get('input'))}" if kind in ("dict_type", "model_type", "model_attributes_type")
               else str(error.get("msg", "not valid")).removeprefix("Value error, ")
               + ("" if kind == "missing" else f", found {_found(error.get('input'))}"))
    return _field(config_file, ".".join([FIELD, *path]).replace(".[", "["),
                  f"{problem}; write it as compressed-tensors {_version('compressed-tensors')} reads it, or {RESAVE}")


def _path(location: Sequence[Any], data: Any) -> tuple[list[str], bool]:
    """(the fields of ``location`` that are keys or indices of ``data``, whether its last step was not one: a union's
    member, refused whole)."""
    node, path, member = data, [], False
    for index, step in enumerate(location):
        if isinstance(node, Mapping) and step in node:
            node, member = node[step], False
            path.append(str(step))
        elif isinstance(node, list) and isinstance(step, int) and 0 <= step < len(node):
            node, member = node[step], False
            path.append(f"[{step}]")
        elif index == len(location) - 1 and isinstance(step, str) and "[" not in step and not step[:1].isupper():
            path.append(step)  # a field that is missing
        else:
            member = True
    return path, member


def _version(distribution: str) -> str:
    try:
        return version(distribution)
    except PackageNotFoundError:
        return "(version unknown)"


# --------------------------------------------------------------- what the weights files hold, from their headers

# safetensors dtypes of plain weights (and of the int64 / bool buffers some models save): any other is quantized storage
PLAIN_STORED = ("F16", "BF16", "F32", "F64", "I64", "BOOL")
NUMBERED = re.compile(r"\.\d+(?=\.|$)")  # a layer's or an expert's index in a tensor's name


@dataclass(frozen=True)
class StoredTensor:
    dtype: str  # as safetensors names it: F32, I8, F8_E4M3, …
    shape: tuple[int, ...]
    file: Path


def stored_tensors(where: str) -> dict[str, StoredTensor] | None:
    """Every tensor the safetensors weights files of the model at ``where`` (a folder, or a hub id in the local cache) hold, by
    name, read from their headers; None where there are none (a GGUF file, torch pickles) or one cannot be read."""
    index = beside_weights(where, "model.safetensors.index.json")
    try:
        names = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values())) if index else ["model.safetensors"]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    found: dict[str, StoredTensor] = {}
    for name in names:
        file = beside_weights(where, name)
        header = _header(file) if file else None
        if header is None:
            return None
        found.update({key: StoredTensor(str(entry.get("dtype")), tuple(entry.get("shape") or ()), file)
                      for key, entry in header.items() if key != "__metadata__" and isinstance(entry, dict)})
    return found


def _header(file: Path) -> dict[str, Any] | None:
    """A safetensors file's header: 8 bytes of length, then JSON."""
    try:
        with open(file, "rb") as handle:
            length = int.from_bytes(handle.read(8), "little")
            header = json.loads(handle.read(length)) if 0 < length < 1 << 30 else None
    except (OSError, ValueError):
        return None
    return header if isinstance(header, dict) else None


def holds_quantized_storage(stored: Mapping[str, StoredTensor]) -> bool:
    """Whether any stored tensor is held in other than a plain float (integers, float8, packed words)."""
    return any(t.dtype not in PLAIN_STORED for t in stored.values())


def files_of(stored: Mapping[str, StoredTensor]) -> str:
    return ", ".join(sorted({str(t.file) for t in stored.values()}))


def absent_tensors(modules: Iterable[str], stored: Mapping[str, StoredTensor]) -> dict[str, list[str]]:
    """The tensors each module of ``modules`` lacks in the weights files though every other module of its name in another
    layer (``model.layers.N.mlp.down_proj``) holds them, by the file that holds the module's layer; a module that holds a
    tensor none of the others holds (a layer left in float beside quantized ones) lacks none."""
    held: dict[str, set[str]] = {}
    for name in stored:
        owner, _, leaf = name.rpartition(".")
        held.setdefault(owner, set()).add(leaf)
    lacking: dict[str, list[str]] = {}
    for module in modules:
        pattern = NUMBERED.sub(".#", module)
        others = [leaves for owner, leaves in held.items() if owner != module and NUMBERED.sub(".#", owner) == pattern]
        own = held.get(module, set())
        expected = set.intersection(*others) if others else set()
        if expected and own <= expected and expected - own:
            file = str(_nearest(module, stored).file)
            lacking.setdefault(file, []).extend(f"{module}.{leaf}" for leaf in sorted(expected - own))
    return lacking


def incomplete_modules(stored: Mapping[str, StoredTensor]) -> dict[str, list[str]]:
    """``absent_tensors`` of every module the files hold some tensors of."""
    return absent_tensors(sorted({name.rpartition(".")[0] for name in stored}), stored)


def _nearest(name: str, stored: Mapping[str, StoredTensor]) -> StoredTensor:
    """The stored tensor whose name shares the longest run of leading parts with ``name`` (its module's, its layer's)."""
    parts = name.split(".")

    def shared(other: str) -> int:
        count = 0
        for mine, theirs in zip(parts, other.split(".")):
            if mine != theirs:
                break
            count += 1
        return count

    return stored[max(sorted(stored), key=shared)]


# --------------------------------------------------------------- what the library did to the loaded modules

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


@dataclass(frozen=True)
class EditedField:
    """A field of a compressed-tensors scheme whose value the stored tensors do not fit, and the value they do."""
    field: str
    said: Any
    held: Any
    holds: str  # what the weights file holds, in words
    key: str
    stored: tuple[int, ...]
    expected: tuple[int, ...]


def edited_field(model: Any, quantization: Mapping[str, Any], mismatched: Iterable[tuple[str, Any, Any]]) -> EditedField | None:
    """For a compressed-tensors checkpoint whose stored tensors' shapes the loaded model does not expect
    (``mismatched``: transformers' (name, stored shape, expected shape)), the scheme field whose value would make the
    stored ones: ``num_bits`` from a packed weight's width (compressed-tensors' own packing asked, for each width),
    ``group_size`` from a scale's; None when neither explains it."""
    if method(quantization) != "compressed-tensors":
        return None
    for key, stored, expected in sorted(mismatched, key=lambda m: m[0]):
        owner, _, leaf = key.rpartition(".")
        try:
            module = model.get_submodule(owner)
        except AttributeError:
            continue
        weights = getattr(getattr(module, "quantization_scheme", None), "weights", None)
        columns = getattr(module, "in_features", None)
        if weights is None or not isinstance(columns, int) or not stored:
            continue
        field = f"{FIELD}.config_groups.{_group_of(model, module.quantization_scheme, quantization)}.weights"
        found = None
        if leaf == "weight_packed":
            bits = [b for b in range(1, 9) if _packed_columns(columns, b) == stored[-1]]
            if len(bits) == 1 and bits[0] != weights.num_bits:
                found = ("num_bits", weights.num_bits, bits[0], f"holds its layers packed in {bits[0]} bits")
        elif leaf == "weight_scale" and weights.group_size and columns % stored[-1] == 0 and columns // stored[-1] != weights.group_size:
            size = columns // stored[-1]
            found = ("group_size", weights.group_size, size, f"holds its layers' scales in groups of {size}")
        if found:
            name, said, held, holds = found
            return EditedField(f"{field}.{name}", said, held, holds, key, tuple(stored), tuple(expected))
    return None


def _packed_columns(columns: int, bits: int) -> int:
    """The int32 words compressed-tensors packs a row of ``columns`` values of ``bits`` bits into; 0 if it cannot say."""
    import torch

    try:
        from compressed_tensors.compressors import pack_to_int32

        return int(pack_to_int32(torch.zeros(1, columns, dtype=torch.int8), bits).shape[-1])
    except Exception:  # noqa: BLE001 - an older or newer packer: no width inferred
        return 0


def _group_of(model: Any, scheme: Any, quantization: Mapping[str, Any]) -> str:
    """The name of the config group whose scheme a module carries."""
    named = [name for name, group in _parsed_groups(model).items() if group == scheme]
    groups = list(quantization.get("config_groups") or {})
    return named[0] if named else groups[0] if len(groups) == 1 else "<group>"


def _parsed_groups(model: Any) -> dict[str, Any]:
    """The scheme groups of a compressed-tensors config as compressed-tensors parsed it when the model loaded."""
    config = getattr(getattr(getattr(model, "hf_quantizer", None), "compressor", None), "quantization_config", None)
    return dict(getattr(config, "config_groups", None) or {})


def applied(model: Any, quantization: Mapping[str, Any]) -> dict[str, Any]:
    """``quantization`` with only the compressed-tensors scheme groups that some loaded module carries (a group whose
    targets match no module quantizes nothing); as it is for another library, or where the parsed groups are unknown."""
    parsed = _parsed_groups(model)
    if method(quantization) != "compressed-tensors" or not parsed or not isinstance(quantization.get("config_groups"), Mapping):
        return dict(quantization)
    carried = list({id(s): s for m in model.modules() if (s := getattr(m, "quantization_scheme", None)) is not None}.values())
    kept = {name: group for name, group in quantization["config_groups"].items()
            if name not in parsed or any(parsed[name] == scheme for scheme in carried)}
    return {**quantization, "config_groups": kept}
