"""The compressor interface: ``compress(messages, probe, **knobs) -> messages``.

A compressor is named as ``module:function``, a built-in's name (see ``methods``) or an
entry point's in the ``pytest_longctx.compressors`` group, and called with the session's
messages (dicts ``{"role", "content", "name"}``, fresh copies), the probe, its keyword
knobs, and what it asks for by keyword: ``tokenizer`` (the evaluated model's, or the
Qwen3.5 one without a model), ``encoding`` (the same tokenizer as a tiktoken-like
``encode``/``decode``, ``encoding.Encoding``) and ``scorer`` (self-information of a
text's tokens under the evaluated model). How it wants the probe, references it can
expand, the package it needs and whether its outputs are cached: ``conventions``. A
compressor that raises or returns something other than messages fails that item with a
message naming it; the other items go on.
"""

from __future__ import annotations

import ast
import inspect
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from pytest_longctx.backends.registry import COMPRESSORS, RegistryError
from pytest_longctx.backends.registry import resolve as resolve_name
from pytest_longctx.compress.conventions import PROBE_LAST_MESSAGE, Conventions, declared
from pytest_longctx.compress.methods import BUILTIN, KNOB_RANGES
from pytest_longctx.data.records import FaithfulnessItem, Message, session_text
from pytest_longctx.errors import LongctxError
from pytest_longctx.options.keys import split_settings

SERVICES = ("tokenizer", "encoding", "scorer")


class CompressorError(LongctxError):
    """One item's compression failed; the message names the item."""


def parse_value(text: str) -> Any:
    """A knob value: a Python literal (number, bool, None, string in quotes, list, …);
    anything else is a ``ValueError`` (an unquoted word would silently become a string)."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        raise ValueError(f"{text!r} is not a Python literal (a number, True/False, None or a quoted string "
                         f"such as '{text}')") from None


def parse_knobs(pairs: Iterable[str], where: str) -> dict[str, Any]:
    """``NAME=VALUE`` knobs, split as every option's settings are (a blank value or a knob given twice
    is one line), each value a Python literal."""
    knobs = {}
    for name, value in split_settings(where, pairs, "ratio=0.5").items():
        if not name.isidentifier():
            raise LongctxError(f"{where} {name}={value}: {name!r} is not a knob's name; expected NAME=VALUE, e.g. ratio=0.5")
        try:
            knobs[name] = parse_value(value)
        except ValueError as exc:
            raise LongctxError(f"{where} {name}={value}: {exc}") from None
    return knobs


KINDS = {"bool": ((bool,), "True or False"), "int": ((int,), "a whole number"), "float": ((int, float), "a number"),
         "str": ((str,), "a string (in quotes)")}


def _kind(default: Any, annotation: Any) -> tuple[tuple[type, ...], str] | None:
    """The values a knob takes, from its default, or for a default of None from its
    annotation (``int | None``: a whole number or None); None when neither tells."""
    if default is not None and default is not inspect.Parameter.empty:
        return KINDS.get(type(default).__name__)
    names = [n.strip() for n in str(getattr(annotation, "__name__", annotation)).split("|")]
    known = [KINDS[n] for n in names if n in KINDS]
    if default is None and len(known) == 1 and len(names) == 2 and "None" in names:
        return known[0][0] + (type(None),), f"{known[0][1]} or None"
    return None


def knob_problem(value: Any, default: Any, bounds: tuple[float, float | None] | None,
                 annotation: Any = inspect.Parameter.empty) -> str | None:
    """What is wrong with a knob's value, or None: a value of another kind than the knob's
    default (a whole number where the default is one, a number for a float, True/False for
    a bool, a string for a string) or than its annotation says when the default is None,
    or one outside the knob's range."""
    kind = _kind(default, annotation)
    if kind is not None:
        expected, wanted = kind
        if not isinstance(value, expected) or (isinstance(value, bool) and bool not in expected):
            return f"is not {wanted}"
    if bounds and isinstance(value, (int, float)) and not isinstance(value, bool):
        low, high = bounds
        if value < low or (high is not None and value > high):
            return "is out of range: it must be " + (f"between {low:g} and {high:g}" if high is not None else f"at least {low:g}")
    return None


def _import(spec: str, search: Path | None) -> Callable[..., Any]:
    try:
        function = resolve_name(spec, COMPRESSORS, BUILTIN, search)
    except RegistryError as exc:
        raise LongctxError(f"compressor {spec!r}: {exc}") from None
    if not callable(function):
        raise LongctxError(f"compressor {spec!r}: {type(function).__name__} is not callable")
    return function


@dataclass(frozen=True)
class Compression:
    """What a compressor made of one session: the messages a reader sees and, for a
    compressor that can expand references, each reference's content (None where it had none)."""

    messages: tuple[Message, ...]
    expansions: dict[str, str | None] | None = None


@dataclass(frozen=True)
class Compressor:
    """A resolved compressor with its knobs, callable on an item; a failure is a
    ``CompressorError``."""

    spec: str
    function: Callable[..., Any]
    knobs: Mapping[str, Any]
    needs: frozenset[str]  # the services it takes by keyword
    conventions: Conventions = Conventions()

    @property
    def label(self) -> str:
        return " ".join([self.spec, *(f"{k}={v}" for k, v in self.knobs.items())])

    def __call__(self, item: FaithfulnessItem, services: Mapping[str, Any]) -> Compression:
        where = f"item {item.id}: compressor {self.label}"
        messages = [{"role": m.role, "content": m.content, "name": m.name} for m in item.messages]
        last_message = self.conventions.probe == PROBE_LAST_MESSAGE
        if last_message:
            messages.append({"role": "user", "content": item.probe, "name": None})
        given = {name: services[name] for name in self.needs}
        try:
            result = self.function(messages, item.probe, **self.knobs, **given)
        except Exception as exc:  # whatever a user's compressor raises fails this item only
            raise CompressorError(f"{where} raised {type(exc).__name__}: {exc}") from None
        output = validate_output(result, where)
        if last_message:
            if not output or output[-1].role != "user" or output[-1].content != item.probe:
                raise CompressorError(f"{where}: it takes the probe as the last message (probe='last_message') but did "
                                      "not return it last, as a user message with the probe unchanged")
            output = output[:-1]
        return Compression(output, self.expand(output, where))

    def expand(self, messages: tuple[Message, ...], where: str) -> dict[str, str | None] | None:
        """Every reference the messages make, with its content (None without expand)."""
        expand = self.conventions.expand
        if expand is None:
            return None
        found: dict[str, str | None] = {}
        for ref in self.conventions.references(session_text(messages)):
            try:
                content = expand(ref)
            except Exception as exc:
                raise CompressorError(f"{where}: expand({ref!r}) raised {type(exc).__name__}: {exc}") from None
            if content is not None and not isinstance(content, str):
                raise CompressorError(f"{where}: expand({ref!r}) returned {type(content).__name__}; expected str or None")
            found[ref] = content
        return found


def validate_output(result: Any, where: str) -> tuple[Message, ...]:
    fix = "it must return a list of messages like its input (dicts with str 'role' and 'content', optional str 'name')"
    if not isinstance(result, (list, tuple)):
        raise CompressorError(f"{where} returned {type(result).__name__}; {fix}")
    messages = []
    for n, message in enumerate(result):
        if not isinstance(message, Mapping):
            raise CompressorError(f"{where}: message {n} is {type(message).__name__}; {fix}")
        role, content, name = message.get("role"), message.get("content"), message.get("name")
        if not isinstance(role, str) or not isinstance(content, str) or not isinstance(name, (str, type(None))):
            raise CompressorError(
                f"{where}: message {n} has role {role!r:.30}, content of type {type(content).__name__}, name {name!r:.30}; {fix}"
            )
        messages.append(Message(role, content, name))
    return tuple(messages)


def _check_installed(spec: str, conventions: Conventions) -> None:
    if conventions.requires is None:
        return
    try:
        distribution(conventions.requires)
    except PackageNotFoundError:
        install = f'pip install "pytest-longctx[{conventions.extra}]"' if conventions.extra else f"pip install {conventions.requires}"
        raise LongctxError(f"compressor {spec} needs the {conventions.requires} package: {install}") from None


def resolve(spec: str, knobs: Mapping[str, Any], search: Path | None = None) -> Compressor:
    """The compressor ``spec`` names, with its knobs checked against its signature."""
    function = _import(spec, search)
    conventions = declared(function)
    _check_installed(spec, conventions)
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError):  # a builtin or extension callable: nothing to check
        return Compressor(spec, function, dict(knobs), frozenset(), conventions)
    open_ended = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    accepted = [name for name in list(parameters)[2:] if name not in SERVICES]
    unknown = [k for k in knobs if k in SERVICES or (k not in accepted and not open_ended)]
    if unknown:
        raise LongctxError(f"compressor {spec}: unknown knob {', '.join(unknown)}; it takes {', '.join(accepted) or 'no knobs'}")
    ranges = KNOB_RANGES if spec in BUILTIN else conventions.ranges
    for name, value in knobs.items():
        parameter = parameters.get(name)
        default, annotation = (parameter.default, parameter.annotation) if parameter else (inspect.Parameter.empty,) * 2
        problem = knob_problem(value, default, ranges.get(name), annotation)
        if problem:
            raise LongctxError(f"compressor {spec}: knob {name}={value!r} {problem}")
    return Compressor(spec, function, dict(knobs), frozenset(s for s in SERVICES if s in parameters), conventions)
