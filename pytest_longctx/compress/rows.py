"""The rows a compression is judged by, each the full context's value against the
compressed one's, over the items the row is about."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from pytest_longctx.compress.evaluate import retained_facts
from pytest_longctx.data.records import FaithfulnessItem
from pytest_longctx.metrics.faithfulness import Outcome, compression_summary


@dataclass(frozen=True)
class RowSpec:
    """A row of the compressor gate: its key, its label, the value it shows and the items it covers."""

    key: str
    label: str
    value: str  # retention, retention_expanded, savings, content_savings, session_savings, recall or logprob
    chosen: Callable[[FaithfulnessItem], bool]


ROWS = (
    RowSpec("retention", "Facts retained", "retention", lambda i: True),
    RowSpec("retention-verbatim", "Facts retained, verbatim probes", "retention",
            lambda i: i.suite == "standard" and i.probe_type == "verbatim"),
    RowSpec("retention-paraphrase", "Facts retained, paraphrase probes", "retention",
            lambda i: i.suite == "standard" and i.probe_type == "paraphrase"),
    RowSpec("retention-low_surprisal", "Low-surprisal facts retained", "retention", lambda i: i.suite == "low_surprisal"),
    RowSpec("retention-tool_heavy", "Facts retained in tool-heavy sessions", "retention", lambda i: i.suite == "tool_heavy"),
    RowSpec("retention-expanded", "Facts retained, references expanded", "retention_expanded", lambda i: True),
    RowSpec("savings", "Realized savings", "savings", lambda i: True),
    RowSpec("content-savings", "Content-token savings", "content_savings", lambda i: True),
    RowSpec("session-savings", "Realized savings, mean per session", "session_savings", lambda i: True),
)
SAVINGS = ("savings", "content_savings", "session_savings")
ANSWER_ROWS = (  # Layer B: only with a model
    RowSpec("answer-recall", "Answers recalled (teacher-forced)", "recall", lambda i: True),
    RowSpec("answer-logprob", "Answer log-probability (nats per token)", "logprob", lambda i: True),
)


def row_values(spec: RowSpec, pairs: Sequence[tuple[FaithfulnessItem, Outcome]]) -> tuple[float | None, float | None]:
    """(full context, compressed) of a row over its items' (item, outcome) pairs."""
    chosen = [(item, outcome) for item, outcome in pairs if spec.chosen(item)]
    summary = compression_summary([outcome for _, outcome in chosen])
    if spec.value in ("retention", "retention_expanded"):
        if not summary["facts"]:
            return None, None
        return sum(retained_facts(item, item.messages) for item, _ in chosen) / summary["facts"], summary[spec.value]
    if spec.value in SAVINGS:
        return (0.0 if chosen else None), summary[spec.value]
    return summary[f"{spec.value}_full"], summary[f"{spec.value}_compressed"]
