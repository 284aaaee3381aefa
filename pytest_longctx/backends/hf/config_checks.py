"""A checkpoint's stored ``quantization_config``, checked before transformers reads it: an object, a
``quant_method`` transformers knows, and for compressed-tensors, formats and fields as compressed-tensors
itself reads them; each problem one line naming the file and the field."""
from __future__ import annotations

import json
import re
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Mapping, Sequence

from pytest_longctx.backends.quantization_words import method
from pytest_longctx.errors import first_line

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

