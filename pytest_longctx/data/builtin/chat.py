"""Building texts piece by piece while remembering where things are, and rendering
agent sessions in the Qwen3.5 chat markup."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Mark:
    """A labelled character span of a built text; ``data`` says what it is."""

    tag: str
    start: int
    end: int
    data: dict[str, Any] = field(default_factory=dict)


class Doc:
    """An append-only text with marks."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.length = 0
        self.marks: list[Mark] = []

    def add(self, text: str, tag: str | None = None, **data: Any) -> tuple[int, int]:
        start = self.length
        self.parts.append(text)
        self.length += len(text)
        if tag:
            self.marks.append(Mark(tag, start, self.length, data))
        return start, self.length

    def mark(self, tag: str, start: int, end: int, **data: Any) -> None:
        self.marks.append(Mark(tag, start, end, data))

    @property
    def text(self) -> str:
        return "".join(self.parts)

    def tagged(self, tag: str) -> list[Mark]:
        return [m for m in self.marks if m.tag == tag]


def open_turn(doc: Doc, role: str) -> None:
    doc.add(f"<|im_start|>{role}\n")


def close_turn(doc: Doc) -> None:
    doc.add("<|im_end|>\n")


def tool_json(name: str, description: str, params: list[tuple[str, str, str]], required: list[str]) -> str:
    """One tool definition as the JSON line that goes inside ``<tools>``;
    ``params`` are (name, type, description)."""
    schema = {
        "type": "object",
        "properties": {p: {"type": t, "description": d} for p, t, d in params},
        "required": required,
    }
    return json.dumps({"type": "function", "function": {"name": name, "description": description, "parameters": schema}})


CALL_FORMAT = (
    "To use a tool, answer with a call block of this form and nothing after it:\n\n"
    "<tool_call>\n<function=NAME>\n<parameter=PARAMETER>\nVALUE\n</parameter>\n</function>\n</tool_call>\n\n"
    "Give each parameter in its own <parameter=...> block; required parameters must be given. "
    "Explain in a sentence what you are about to do before a call. Results come back inside <tool_response>."
)


def add_call(doc: Doc, function: str, args: list[tuple[str, str]], definition_id: str) -> dict[str, Any]:
    """A ``<tool_call>`` block; marks the function name, each parameter name, each
    "what comes next" position and the whole call. Returns the char positions of
    each argument value by parameter name (for marks inside values)."""
    call_start, _ = doc.add("<tool_call>\n<function=")
    doc.add(function, "target", kind="name", definition_id=definition_id)
    doc.add(">\n")
    values: dict[str, Any] = {}
    for n, (param, value) in enumerate(args):
        if n:
            doc.mark("target", doc.length, doc.length + 1, kind="next", definition_id=definition_id)
        doc.add("<parameter=")
        doc.add(param, "target", kind="param", definition_id=definition_id)
        doc.add(">\n")
        values[param] = doc.length
        doc.add(value)
        doc.add("\n</parameter>\n")
    doc.mark("target", doc.length, doc.length + 2, kind="next", definition_id=definition_id)
    doc.add("</function>\n</tool_call>")
    doc.mark("call", call_start, doc.length, definition_id=definition_id)
    return values
