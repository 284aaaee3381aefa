"""KV-cache presses of NVIDIA's kvpress, run by the transformers backend (``--longctx-kv-press``,
``longctx score --kv-press``; docs/metrics.md#kv-cache-presses).

A press is named ``NAME[:key=value,...]``: NAME is a press class of kvpress (``SnapKVPress``),
the same without ``Press`` in any case, with or without underscores (``snapkv``, ``snap_kv``,
``streaming_llm``), or ``module:object`` for a press of the user's own (an instance, or a class
or factory called with the arguments). A press that wraps others is named with them in
parentheses, its own arguments after: ``adakv(snapkv:compression_ratio=0.5)``,
``chunk(knorm:compression_ratio=0.5):chunk_length=512``, and several with ``;`` between them,
``composed(snapkv:compression_ratio=0.25;knorm:compression_ratio=0.25)``. kvpress is imported
only when a press is asked for: it pins an older transformers and lives in an environment of its
own (scripts/setup-venv.sh DIR kvpress).
"""
from __future__ import annotations

import dataclasses
import importlib
import re
from typing import Any

from pytest_longctx.errors import LongctxError, first_line
from pytest_longctx.options.keys import split_settings
from pytest_longctx.parse import scalar

OPTION = "--kv-press (--longctx-kv-press)"
SETUP = "needs kvpress: scripts/setup-venv.sh DIR kvpress makes an environment with it (it pins transformers below 5.3)"
# Presses that compress while the answer is generated (kvpress's decoding presses) or that take other presses as
# arguments: not this option's NAME form (a ``module:object`` press may compose them).
DECODING = ("DecodingPress", "PrefillDecodingPress", "CompressionRatioDecodingPress", "DMSPress")


WRAPPED = re.compile(r"^(?P<name>[A-Za-z_]\w*)\((?P<inner>.*)\)(?::(?P<arguments>[^()]*))?$", re.S)


def _kvpress() -> Any:
    try:
        import kvpress
    except ImportError:
        raise LongctxError(f"{OPTION}: {SETUP}") from None
    return kvpress


def _key(name: str) -> str:
    """A press name as it is matched: lower case, no underscores or dashes, no ``press`` at the end."""
    return re.sub(r"[_-]", "", name.lower()).removesuffix("press")


def short_name(class_name: str) -> str:
    """``SnapKVPress`` -> ``snap_kv``, ``StreamingLLMPress`` -> ``streaming_llm``: how the known presses are listed."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", class_name.removesuffix("Press")).lower()


def press_classes() -> dict[str, type]:
    """kvpress's press classes by class name (the base classes and the decoding presses left out)."""
    kvpress = _kvpress()
    found = {}
    for name in dir(kvpress):
        value = getattr(kvpress, name)
        if name.endswith("Press") and isinstance(value, type) and name not in ("BasePress", "ScorerPress", *DECODING):
            found[name] = value
    return found


def parse_value(text: str) -> Any:
    """An argument's value: none, or what ``parse.scalar`` makes of it (true/false, a number, the text)."""
    return None if text.strip().lower() == "none" else scalar(text)


def parse_spec(spec: str) -> tuple[str, dict[str, Any]]:
    """``NAME[:key=value,...]`` (or ``module:object[:key=value,...]``) as (name, arguments)."""
    text = spec.strip()
    name, arguments = text, ""
    head, colon, rest = text.partition(":")
    if colon:
        # module:object[:args] when what follows the first colon holds no '=' before another colon
        second, colon2, tail = rest.partition(":")
        if "=" not in second and second:
            name, arguments = f"{head}:{second}", tail if colon2 else ""
        else:
            name, arguments = head, rest
    values: dict[str, Any] = {}
    given = split_settings(f"{OPTION} {spec}:", filter(None, (p.strip() for p in arguments.split(","))),
                           "snapkv:compression_ratio=0.5,window_size=64")
    for key, value in given.items():
        if not key.isidentifier():
            raise LongctxError(f"{OPTION} {spec}: {key!r} is not an argument's name (e.g. snapkv:compression_ratio=0.5,window_size=64)")
        values[key] = parse_value(value)
    if not name:
        raise LongctxError(f"{OPTION} {spec!r}: expected NAME[:key=value,...], e.g. snapkv:compression_ratio=0.5")
    return name, values


def _arguments_of(factory: Any) -> list[str]:
    if dataclasses.is_dataclass(factory):
        return [f.name for f in dataclasses.fields(factory) if f.init]
    return []


def make_press(spec: str) -> Any:
    """The press ``spec`` names, made with its arguments; one line for an unknown press, a bad
    argument, or kvpress missing."""
    wrapped = WRAPPED.match(spec.strip())
    if wrapped:
        return _wrapping(spec, wrapped["name"], wrapped["inner"], wrapped["arguments"] or "")
    name, arguments = parse_spec(spec)
    if ":" in name and _key(name.partition(":")[0]) in {_key(n) for n in press_classes()}:
        raise LongctxError(f"{OPTION} {spec}: {name.partition(':')[2]!r} is not key=value "
                           "(e.g. snapkv:compression_ratio=0.5,window_size=64)")
    if ":" in name:
        module_name, _, attribute = name.partition(":")
        _kvpress()
        try:
            found = getattr(importlib.import_module(module_name), attribute)
        except (ImportError, AttributeError) as exc:
            raise LongctxError(f"{OPTION} {spec}: cannot import {name} ({first_line(exc) or type(exc).__name__})") from None
        if _is_press(found):
            if arguments:
                raise LongctxError(f"{OPTION} {spec}: {name} is a press already made; it takes no arguments")
            press = found
        else:
            press = _build(spec, found, attribute, arguments)
    else:
        cls = _press_class(spec, name)
        inner = [f for f in ("press", "presses") if f in _arguments_of(cls)]
        if inner:
            raise LongctxError(f"{OPTION} {spec}: {cls.__name__} wraps {'another press' if inner[0] == 'press' else 'other presses'}: "
                               f"name {'it' if inner[0] == 'press' else 'them'} in parentheses, e.g. "
                               f"{short_name(cls.__name__)}(snapkv:compression_ratio=0.5)")
        press = _build(spec, cls, cls.__name__, arguments)
    if not _is_press(press):
        raise LongctxError(f"{OPTION} {spec}: {name} gave a {type(press).__name__}, not a kvpress press")
    return press


def _press_class(spec: str, name: str) -> type:
    """kvpress's press class ``name`` names; one line listing the known ones where there is none."""
    classes = press_classes()
    by_key = {_key(n): c for n, c in classes.items()}
    if _key(name) not in by_key:
        decoding = next((n for n in DECODING if _key(n) == _key(name)), None)
        if decoding:
            raise LongctxError(f"{OPTION} {spec}: {decoding} compresses while an answer is generated; the gate reads "
                               "teacher-forced, with the context compressed once (docs/metrics.md#kv-cache-presses)")
        known = ", ".join(sorted(short_name(n) for n in classes))
        raise LongctxError(f"{OPTION} {spec}: no press {name!r} in kvpress; known: {known} (or module:object)")
    return by_key[_key(name)]


def _split(inner: str) -> list[str]:
    """The presses inside a wrapper's parentheses: ``;`` between them, not inside nested parentheses."""
    found, depth, start = [], 0, 0
    for n, char in enumerate(inner):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == ";" and depth == 0:
            found.append(inner[start:n])
            start = n + 1
    return [p.strip() for p in [*found, inner[start:]] if p.strip()]


def _wrapping(spec: str, name: str, inner: str, arguments: str) -> Any:
    """A press that wraps the presses inside its parentheses (``adakv(snapkv:compression_ratio=0.5)``), made with
    its own arguments after them."""
    cls = _press_class(spec, name)
    takes = _arguments_of(cls)
    wrapped = [make_press(p) for p in _split(inner)]
    values = parse_spec(f"{name}:{arguments}")[1] if arguments else {}
    if "presses" in takes:
        values["presses"] = wrapped
    elif "press" in takes and len(wrapped) == 1:
        values["press"] = wrapped[0]
    else:
        what = "one press" if "press" in takes else "no press"
        raise LongctxError(f"{OPTION} {spec}: {cls.__name__} wraps {what}, not {len(wrapped)}")
    return _build(spec, cls, cls.__name__, values)


def _is_press(value: Any) -> bool:
    return isinstance(value, _kvpress().presses.base_press.BasePress)


def _build(spec: str, factory: Any, what: str, arguments: dict[str, Any]) -> Any:
    takes = _arguments_of(factory)
    unknown = [k for k in arguments if takes and k not in takes]
    if unknown:
        raise LongctxError(f"{OPTION} {spec}: {what} takes no argument {unknown[0]!r}; it takes {', '.join(takes) or 'none'}")
    try:
        return factory(**arguments)
    except TypeError as exc:
        raise LongctxError(f"{OPTION} {spec}: {what}: {first_line(exc)}") from None
    except (AssertionError, ValueError) as exc:
        said = first_line(exc) or "an argument is out of range"
        raise LongctxError(f"{OPTION} {spec}: {what} refuses its arguments: {said}") from None


def describe_press(press: Any) -> str:
    """The press and every argument it was made with, as results and fingerprints name it:
    ``SnapKVPress(compression_ratio=0.5, window_size=64, kernel_size=5)``."""
    cls = type(press)
    where = "" if cls.__module__.startswith("kvpress") else f"{cls.__module__}:"
    if not dataclasses.is_dataclass(press):
        return f"{where}{press!r}"
    parts = []
    for field in dataclasses.fields(press):
        if not field.init:
            continue
        value = getattr(press, field.name)
        if isinstance(value, list) and value and all(_is_press(v) for v in value):
            shown = "[" + ", ".join(describe_press(v) for v in value) + "]"
        else:
            shown = describe_press(value) if _is_press(value) else repr(value)
        parts.append(f"{field.name}={shown}")
    return f"{where}{cls.__name__}({', '.join(parts)})"


def check_model(press: Any, model: Any, spec: str) -> None:
    """A press on a model kvpress does not support is one line (its hooks sit on the decoder layers'
    attention of the models it lists)."""
    supported = _kvpress().presses.base_press.SUPPORTED_MODELS
    if not isinstance(model, supported):
        names = ", ".join(c.__name__.removesuffix("ForCausalLM").removesuffix("ForConditionalGeneration") for c in supported)
        raise LongctxError(f"{OPTION} {spec}: kvpress does not support {type(model).__name__}; it supports {names}")


def rerotates(press: Any) -> bool:
    """Whether the press moves the kept keys to the first positions (kvpress's key re-rotation): the
    question then continues from the compressed length, as kvpress's pipeline has it."""
    kvpress = _kvpress()
    if isinstance(press, (kvpress.KeyRerotationPress, kvpress.RestoreKVPress)):
        return True
    return isinstance(press, kvpress.FinchPress) and bool(getattr(press, "rerotate_keys", False))
