"""A blame's fix set as the tool that made a transformers candidate writes it: the llm-compressor
recipe saved beside the candidate with the kept linear layers added to each rounding modifier's
``ignore`` list (``recipe_keeping``), or, for a library transformers quantizes on load, its
quantization config with them in the modules it skips (``config_keeping``)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, Sequence

from pytest_longctx.backends.quantization_words import LLMCOMPRESSOR_METHODS, RECIPE_MODIFIER, method

# the modifiers that round weights: a module in their ``ignore`` list keeps its float weights
QUANTIZING = {"QuantizationModifier", "GPTQModifier", "AWQModifier", "AutoRoundModifier"}
TUPLE = "tag:yaml.org,2002:python/tuple"  # how PyYAML writes a tuple, as llm-compressor's recipes hold some
# the modifiers whose result depends on data other layers see: re-made, the other layers change too
CALIBRATED = {"GPTQModifier", "AWQModifier", "AutoRoundModifier", "SmoothQuantModifier"}


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

