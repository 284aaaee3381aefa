"""Row -> record conversion with validation: every error names the file, row and field."""
from __future__ import annotations

import json
import re
from typing import Any, Callable

import numpy as np

from pytest_longctx.data.records import (
    DEPTHS,
    FACT_PLACEMENTS,
    FAMILIES,
    PLACEMENTS,
    PROBE_TYPES,
    SUITES,
    TOOL_KINDS,
    FactItem,
    FactTarget,
    FaithfulnessItem,
    Item,
    Message,
    RuleItem,
    RuleTarget,
    ToolDefinition,
    ToolItem,
    ToolTarget,
    config_kind,
    session_text,
)
from pytest_longctx.errors import DataError

# Columns that hold token ids: read as int arrays, not Python lists.
ID_COLUMNS = ("qwen_ids", "qwen_ids_without_rule", "qwen_ids_with_rule")

REQUIRED_COLUMNS = {
    "facts": ("id", "text", "targets"),
    "tool_calls": ("id", "text", "definitions", "targets"),
    "rules": (
        "id", "context_id", "text_without_rule", "text_with_rule", "rule", "rule_char",
        "family", "placement", "lang", "targets",
    ),
    "faithfulness": ("id", "messages", "probe", "probe_type", "required_facts", "depth", "placement", "concept"),
}


class _Row:
    """Field access on one row (or one nested record) that fails with the row's location."""

    def __init__(self, data: dict[str, Any], where: str):
        self.data = data
        self.where = where

    def fail(self, field: str, problem: str) -> DataError:
        return DataError(f"{self.where}, field {field!r}: {problem}")

    def get(self, field: str, kind: type | tuple[type, ...], optional: bool = False) -> Any:
        value = self.data.get(field)
        if value is None:
            if optional:
                return None
            raise self.fail(field, "missing; every item needs it (see the fields in docs/data.md#fields)")
        if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
            names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
            raise self.fail(field, f"expected {names}, got {type(value).__name__} {value!r:.60}")
        return value

    def text(self, field: str) -> str:
        return self.get(field, str)

    def integer(self, field: str, optional: bool = False) -> int | None:
        value = self.get(field, (int, np.integer), optional)
        return None if value is None else int(value)

    def flag(self, field: str) -> bool:
        return bool(self.get(field, bool))

    def choice(self, field: str, allowed: tuple[str, ...]) -> str:
        value = self.text(field)
        if value not in allowed:
            raise self.fail(field, f"{value!r} is not one of {', '.join(allowed)}")
        return value

    def span(self, field: str, text_len: int | None, optional: bool = False) -> tuple[int, int] | None:
        value = self.get(field, (list, tuple, np.ndarray), optional)
        if value is None:
            return None
        if len(value) != 2:
            raise self.fail(field, f"a span is [start, end], got {list(value)!r:.60}")
        start, end = int(value[0]), int(value[1])
        if not 0 <= start < end or (text_len is not None and end > text_len):
            limit = f" (text has {text_len} characters)" if text_len is not None else ""
            raise self.fail(field, f"span [{start}, {end}) is not inside the text{limit}")
        return start, end

    def position(self, field: str, text_len: int, end: int | Callable[[int], int]) -> tuple[int, int]:
        """A character position: a ``[start, end)`` span, or an offset where the span starts
        (the card's "where ... starts"); the span then ends ``end`` characters later, or
        where ``end(start)`` says."""
        value = self.data.get(field)
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
            if value is not None and not isinstance(value, (list, tuple, np.ndarray)):
                raise self.fail(field, f"expected an offset or a [start, end] span, got {type(value).__name__} {value!r:.60}")
            return self.span(field, text_len)
        start = int(value)
        if not 0 <= start < text_len:
            raise self.fail(field, f"offset {start} is not inside the text (text has {text_len} characters)")
        stop = start + end if isinstance(end, int) else end(start)
        if not start < stop <= text_len:
            raise self.fail(field, f"offset {start}: the span it starts, [{start}, {stop}), is not inside the text "
                                   f"(text has {text_len} characters)")
        return start, stop

    def holding(self, field: str, text: str, value_field: str) -> tuple[int, int]:
        """The ``position`` ``field`` of a piece of ``text`` whose own text is ``value_field``
        (a facts item's answer or fact), checked to hold it: a span that holds something else
        would be scored as if it held the piece."""
        value = self.text(value_field)
        start, stop = self.position(field, len(text), len(value))
        if text[start:stop] != value:
            raise self.fail(field, f"span [{start}, {stop}) holds {text[start:stop]!r:.60}, not the {value_field} "
                                   f"{value!r:.60}; fix the span or the {value_field}")
        return start, stop

    def token_span(self, field: str) -> tuple[int, int] | int | None:
        """Token positions ``[first, end)``, or the first alone (the end is found with the tokenizer)."""
        value = self.data.get(field)
        if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
            if value < 0:
                raise self.fail(field, f"token position {int(value)} is negative")
            return int(value)
        return self.span(field, None, optional=True)

    def records(self, field: str) -> list[_Row]:
        values = self.get(field, (list, tuple, np.ndarray))
        rows = []
        for n, value in enumerate(values):
            if not isinstance(value, dict):
                raise self.fail(f"{field}[{n}]", f"expected a record, got {type(value).__name__}")
            rows.append(_Row(value, f"{self.where}, {field}[{n}]"))
        return rows

    def ids(self, field: str) -> np.ndarray | None:
        value = self.data.get(field)
        if value is None:
            return None
        try:
            return np.asarray(value, dtype=np.int64).reshape(-1)
        except (TypeError, ValueError):
            raise self.fail(field, "expected a list of token ids") from None

    def dicts(self, field: str) -> tuple[dict[str, Any], ...]:
        value = self.data.get(field)
        if value is None:
            return ()
        if isinstance(value, dict):
            return (value,)
        return tuple(v for v in value if isinstance(v, dict))


def _fact(row: _Row) -> FactItem:
    text = row.text("text")
    targets = tuple(
        FactTarget(
            answer_char=t.holding("answer_char", text, "answer"),
            answer=t.text("answer"),
            fact_char=t.holding("fact_char", text, "fact"),
            fact=t.text("fact"),
            distance_tokens=t.integer("distance_tokens"),
            qwen_answer_pos=t.token_span("qwen_answer_pos"),
        )
        for t in row.records("targets")
    )
    source = row.dicts("source")
    return FactItem(
        id=row.text("id"),
        text=text,
        targets=targets,
        source=source[0] if source else {},
        sources=row.dicts("sources"),
        qwen_ids=row.ids("qwen_ids"),
    )


COMMAND_WORD = re.compile(r"[\s*`$>-]*([^\s`:,;()]+)")  # "- docbuild --strict: builds …" -> docbuild


def _definition_end(text: str, start: int, kind: str) -> int:
    """Where a definition given by its offset ends: a JSON tool definition's closing brace,
    else the end of its line (a documented command is one line)."""
    if kind == "tool":
        try:
            return json.JSONDecoder().raw_decode(text, start)[1]
        except json.JSONDecodeError:
            pass
    line_end = text.find("\n", start)
    return len(text) if line_end < 0 else line_end


def _definition_name(body: str, kind: str) -> str | None:
    """A tool's name from its JSON definition (``name``, or ``function.name`` in the
    OpenAI form); a command's from its first word."""
    if kind == "command":
        match = COMMAND_WORD.match(body)
        return match.group(1) if match else None
    try:
        spec = json.JSONDecoder().raw_decode(body.lstrip())[0]
    except json.JSONDecodeError:
        return None
    if isinstance(spec, dict) and isinstance(spec.get("function"), dict) and "name" not in spec:
        spec = spec["function"]
    name = spec.get("name") if isinstance(spec, dict) else None
    return name if isinstance(name, str) and name else None


def _definition(d: _Row, text: str) -> ToolDefinition:
    """The card's minimal form is id, kind and span (``char``, a span or an offset); ``text``
    is then the span's text and ``name`` is derived from it."""
    kind = d.choice("kind", ("tool", "command"))
    given = d.get("text", str, optional=True)
    char = d.position("char", len(text), len(given) if given is not None else lambda start: _definition_end(text, start, kind))
    body = given if given is not None else text[char[0]:char[1]]
    name = d.get("name", str, optional=True) or _definition_name(body, kind)
    if name is None:
        raise d.fail("name", f"missing, and the span holds no {'JSON tool definition with a name' if kind == 'tool' else 'command'} "
                             "to take it from; give the definition's name")
    return ToolDefinition(id=d.text("id"), name=name, kind=kind, char=char, text=body)


def _tool(row: _Row) -> ToolItem:
    text = row.text("text")
    definitions = tuple(_definition(d, text) for d in row.records("definitions"))
    known = {d.id for d in definitions}
    targets = []
    for t in row.records("targets"):
        definition_id = t.text("definition_id")
        if definition_id not in known:
            raise t.fail("definition_id", f"{definition_id!r} is not in the item's definitions")
        targets.append(
            ToolTarget(
                char=t.position("char", len(text), len(t.text("target"))),
                target=t.text("target"),
                kind=t.choice("kind", TOOL_KINDS),
                far=t.flag("far"),
                fresh=t.flag("fresh"),
                definition_id=definition_id,
                distance_tokens=t.integer("distance_tokens"),
                qwen_pos=t.integer("qwen_pos", optional=True),
            )
        )
    return ToolItem(
        id=row.text("id"),
        text=text,
        definitions=definitions,
        targets=tuple(targets),
        sources=row.dicts("sources"),
        qwen_ids=row.ids("qwen_ids"),
    )


def _rule(row: _Row) -> RuleItem:
    without, with_rule = row.text("text_without_rule"), row.text("text_with_rule")
    targets = tuple(
        RuleTarget(
            char_without_rule=t.position("char_without_rule", len(without), len(t.text("original_text"))),
            char_with_rule=t.position("char_with_rule", len(with_rule), len(t.text("original_text"))),
            expected_text=t.text("expected_text"),
            original_text=t.text("original_text"),
            distance_tokens=t.integer("distance_tokens"),
            first=t.flag("first"),
            mentioned=t.flag("mentioned"),
            qwen_pos_without_rule=t.integer("qwen_pos_without_rule", optional=True),
            qwen_pos_with_rule=t.integer("qwen_pos_with_rule", optional=True),
            qwen_expected_id=t.integer("qwen_expected_id", optional=True),
        )
        for t in row.records("targets")
    )
    return RuleItem(
        id=row.text("id"),
        context_id=row.text("context_id"),
        text_without_rule=without,
        text_with_rule=with_rule,
        rule=row.text("rule"),
        rule_char=row.position("rule_char", len(with_rule), len(row.text("rule"))),
        family=row.choice("family", FAMILIES),
        placement=row.choice("placement", PLACEMENTS),
        lang=row.text("lang"),
        targets=targets,
        sources=row.dicts("sources"),
        qwen_ids_without_rule=row.ids("qwen_ids_without_rule"),
        qwen_ids_with_rule=row.ids("qwen_ids_with_rule"),
    )


def _faithfulness(row: _Row) -> FaithfulnessItem:
    messages = tuple(
        Message(role=m.text("role"), content=m.text("content"), name=m.get("name", str, optional=True))
        for m in row.records("messages")
    )
    facts = row.get("required_facts", (list, tuple, np.ndarray))
    if not len(facts):
        raise row.fail("required_facts", "empty; an item needs at least one fact (a regular expression)")
    for n, fact in enumerate(facts):
        if not isinstance(fact, str):
            raise row.fail(f"required_facts[{n}]", f"expected str, got {type(fact).__name__}")
        try:
            pattern = re.compile(fact, re.IGNORECASE)
        except re.error as exc:
            raise row.fail(f"required_facts[{n}]", f"{fact!r} is not a regular expression ({exc})") from None
        if n == 0 and not pattern.search(session_text(messages)):
            raise row.fail("required_facts[0]", f"{fact!r} matches nothing in the messages; the fact must be in the session")
    return FaithfulnessItem(
        id=row.text("id"),
        messages=messages,
        probe=row.text("probe"),
        probe_type=row.choice("probe_type", PROBE_TYPES),
        required_facts=tuple(facts),
        depth=row.choice("depth", DEPTHS),
        placement=row.choice("placement", FACT_PLACEMENTS),
        concept=row.text("concept"),
        suite=row.choice("suite", SUITES) if row.data.get("suite") is not None else SUITES[0],
        sources=row.dicts("sources"),
    )


PARSERS: dict[str, Callable[[_Row], Item]] = {
    "facts": _fact, "tool_calls": _tool, "rules": _rule, "faithfulness": _faithfulness,
}


def check_columns(config: str, columns: list[str], where: str) -> None:
    """Fail once, naming every missing column, before any row is read."""
    missing = [c for c in REQUIRED_COLUMNS[config_kind(config)] if c not in columns]
    if missing:
        raise DataError(
            f"{where}: missing column{'s' if len(missing) > 1 else ''} {', '.join(missing)} "
            f"required by the {config} config (see the fields in docs/data.md#fields)"
        )


def parse_item(config: str, row: dict[str, Any], where: str) -> Item:
    """One validated record from one row; ``where`` names the file and row for errors."""
    ident = row.get("id")
    label = f"{where} (id {ident})" if isinstance(ident, str) else where
    return PARSERS[config_kind(config)](_Row(row, label))
