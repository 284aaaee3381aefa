"""Typed records of the benchmark's items (docs/metrics.md), one dataclass per config.

Character spans are half-open ``(start, end)`` offsets into the item's text (a row may
give a position as its start offset alone: data/schema.py derives the end). Token
fields prefixed ``qwen_`` hold the Qwen3.5 tokenization the items were built with:
``qwen_ids*`` are the token ids of a text, ``qwen_pos*`` are indices into those ids.
They are optional: without them only the ``text`` mode can score an item.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, Sequence, Union

if TYPE_CHECKING:  # token ids are numpy arrays; the records are made without importing it
    import numpy as np

Span = tuple[int, int]
ItemKey = tuple[str, str, str]  # config, length (or split), item id: an item across the data


class Name(str, Enum):
    """A name the files and reports write as its text (``facts``), typed in the code (``Kind.FACTS``): a
    misspelt member fails where it is written, not as a silent miss in a lookup."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)


class Kind(Name):
    """The metric family of a config (``config_kind``): what its items hold and how they are scored."""

    FACTS = "facts"
    TOOL_CALLS = "tool_calls"
    RULES = "rules"
    FAITHFULNESS = "faithfulness"


CONFIGS = ("facts", "tool_calls", "rules_en", "rules_cs", "rules_de")  # the agent benchmark's, split by length
RULES_CONFIGS = ("rules_en", "rules_cs", "rules_de")
# Context-compression faithfulness (docs/metrics.md#faithfulness-of-context-compressors): agent sessions, splits not named by length.
FAITHFULNESS = "faithfulness"
ALL_CONFIGS = (*CONFIGS, FAITHFULNESS)
FAMILIES = ("substitution", "redirect", "required")
PLACEMENTS = ("system", "user")
TOOL_KINDS = ("name", "param", "next", "command")
# A target is far when what it needs ends this many tokens or more before it.
FAR_TOKENS = 512


@dataclass(frozen=True)
class FactTarget:
    """A fact asked for again: the answer's span, the planted fact's span, how far back it lies."""

    answer_char: Span  # the answer after the query, e.g. " 48213."
    answer: str
    fact_char: Span  # the planted fact sentence
    fact: str
    distance_tokens: int
    qwen_answer_pos: Span | int | None = None  # answer tokens [first, end) in qwen_ids, or first alone (end: with the tokenizer)


@dataclass(frozen=True, eq=False)
class FactItem:
    """An item of the facts config: one long text with its fact queries."""

    id: str
    text: str
    targets: tuple[FactTarget, ...]
    source: dict[str, Any] = field(default_factory=dict)
    sources: tuple[dict[str, Any], ...] = ()
    qwen_ids: np.ndarray | None = None


@dataclass(frozen=True)
class ToolDefinition:
    """A tool definition or documented command given early in a tool_calls text, with its span."""

    id: str
    name: str
    kind: str  # "tool" (a JSON definition in <tools>) or "command" (a documented shell command)
    char: Span
    text: str


@dataclass(frozen=True)
class ToolTarget:
    """A token of a later tool call that depends on a definition (name, parameter, next token or
    command)."""

    char: Span  # the span of the target token
    target: str
    kind: str  # one of TOOL_KINDS
    far: bool
    fresh: bool
    definition_id: str
    distance_tokens: int
    qwen_pos: int | None = None


@dataclass(frozen=True, eq=False)
class ToolItem:
    """An item of the tool_calls config: one agent session, its definitions and call targets."""

    id: str
    text: str
    definitions: tuple[ToolDefinition, ...]
    targets: tuple[ToolTarget, ...]
    sources: tuple[dict[str, Any], ...] = ()
    qwen_ids: np.ndarray | None = None


@dataclass(frozen=True)
class RuleTarget:
    """A place, after the rule, where the action the rule implies differs from the session's own."""

    char_without_rule: Span  # where the governed action starts, in text_without_rule
    char_with_rule: Span  # the same place in text_with_rule
    expected_text: str  # what the rule implies, e.g. " rg"
    original_text: str  # what the session did, e.g. " grep"
    distance_tokens: int
    first: bool  # the first action the rule governs after it is given
    mentioned: bool  # the expected text occurs in the session before the target
    qwen_pos_without_rule: int | None = None
    qwen_pos_with_rule: int | None = None
    qwen_expected_id: int | None = None  # first Qwen3.5 token of expected_text


@dataclass(frozen=True, eq=False)
class RuleItem:
    """An item of a rules config: the same session without and with one rule line."""

    id: str
    context_id: str
    text_without_rule: str
    text_with_rule: str
    rule: str
    rule_char: Span  # the rule line in text_with_rule
    family: str
    placement: str
    lang: str
    targets: tuple[RuleTarget, ...]
    sources: tuple[dict[str, Any], ...] = ()
    qwen_ids_without_rule: np.ndarray | None = None
    qwen_ids_with_rule: np.ndarray | None = None


@dataclass(frozen=True)
class Message:
    """One chat message of a faithfulness session."""

    role: str
    content: str
    name: str | None = None


PROBE_TYPES = ("verbatim", "paraphrase")
DEPTHS = ("early", "mid", "recent")
FACT_PLACEMENTS = ("statement", "buried")
# standard: the card's high-surprisal facts; low_surprisal: facts phrased in common words;
# tool_heavy: high-surprisal facts buried in large tool outputs
SUITES = ("standard", "low_surprisal", "tool_heavy")


@dataclass(frozen=True, eq=False)
class FaithfulnessItem:
    """An agent session with one planted fact and a later probe that needs it."""

    id: str
    messages: tuple[Message, ...]
    probe: str
    probe_type: str  # one of PROBE_TYPES
    required_facts: tuple[str, ...]  # regular expressions, searched case-insensitively
    depth: str  # one of DEPTHS
    placement: str  # one of FACT_PLACEMENTS
    concept: str
    suite: str = "standard"  # one of SUITES; the published set has no such field
    sources: tuple[dict[str, Any], ...] = ()


def session_text(messages: Sequence[Message]) -> str:
    """What fact retention searches (docs/metrics.md#faithfulness-of-context-compressors): every message's content, joined with newlines."""
    return "\n".join(m.content for m in messages)


Item = Union[FactItem, ToolItem, RuleItem, FaithfulnessItem]


def config_kind(config: str) -> Kind:
    """The metric family of a config: ``facts``, ``tool_calls``, ``rules`` or ``faithfulness``."""
    if config in RULES_CONFIGS:
        return Kind.RULES
    if config in ("facts", "tool_calls", FAITHFULNESS):
        return Kind(config)
    raise ValueError(f"unknown config {config!r}; known: {', '.join(ALL_CONFIGS)}")
