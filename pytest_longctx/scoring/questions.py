"""Where each read's question starts, for a KV-cache press (docs/metrics.md#kv-cache-presses).

A press follows kvpress's protocol: a context is compressed once as it is prefilled, and a
question after it is read exactly through the compressed cache. On the benchmark's items the
question of a read is:

* a facts answer: its query, the sentence that asks for the fact and the start of the answer
  sentence (``Which ticket did Ada take? Ada took ticket`` before `` 48213.``);
* a read in an agent session (tool calls, rules, and the control reads of a session): the chat
  message that holds the token the read predicts from;
* a faithfulness probe's answer: the probe's user turn, the opened assistant turn and the answer;
* a control read of plain text: the sentence that holds that token.

The context is every token before the question (``Read.context``). Reads whose questions start
at the same token of the same text share one compression.
"""
from __future__ import annotations

import bisect
from dataclasses import replace
from typing import Any

import numpy as np

from pytest_longctx.data.records import FactItem, FaithfulnessItem
from pytest_longctx.errors import LongctxError
from pytest_longctx.scoring.alignment import TextTokens
from pytest_longctx.scoring.chat import answer_text, render
from pytest_longctx.scoring.reads import ItemReads, TargetReads, item_texts

MESSAGE = "<|im_start|>"  # how the benchmark's agent sessions mark where a message starts (ChatML)
SENTENCE_ENDS = (". ", "? ", "! ", "\n")


def sentence_start(text: str, char: int) -> int:
    """Where the sentence (or line) that holds character ``char`` starts."""
    return max((text.rfind(end, 0, char) + len(end) for end in SENTENCE_ENDS if text.rfind(end, 0, char) >= 0), default=0)


def message_start(text: str, char: int) -> int | None:
    """Where the chat message that holds character ``char`` starts, or None in a text without messages."""
    found = text.rfind(MESSAGE, 0, char + 1)
    return found if found >= 0 else None


def query_start(text: str, answer_char: int) -> int:
    """Where a facts answer's query starts: the sentence before the answer's own sentence, which asks."""
    return sentence_start(text, sentence_start(text, answer_char) - 1)


def _token_starts(tokens: TextTokens) -> np.ndarray:
    """The character each token starts at (a byte piece inside a character: the run's start)."""
    starts = np.zeros(len(tokens.ids), dtype=np.int64)
    for char in tokens.starts:
        starts[tokens.token_of_start[char]:] = char
    return starts


def _first_token_from(tokens: TextTokens, char: int) -> int:
    """The first token that starts at or after ``char``."""
    index = bisect.bisect_left(tokens.starts, char)
    return tokens.token_of_start[tokens.starts[index]] if index < len(tokens.starts) else len(tokens.ids)


def _texts(plan: ItemReads, tokenizer: Any) -> tuple[tuple[str, ...], int | None]:
    """The texts of a plan's sequences, and for a faithfulness session where the probe's turn starts."""
    item = plan.item
    if isinstance(item, FaithfulnessItem):
        prompt = render(tokenizer, item.messages, item.probe, item.id)
        before = render(tokenizer, item.messages, item_id=item.id)
        probe = len(before) if prompt.startswith(before) else max(prompt.rfind(item.probe), 0)
        return (prompt + answer_text(item),), probe
    return item_texts(item), None


def with_questions(plans: list[ItemReads], tokenizer: Any) -> list[ItemReads]:
    """The plans with every read's ``context`` set where its question starts (module docstring)."""
    if tokenizer is None:
        raise LongctxError("--kv-press: a press needs the model's tokenizer to find where each read's question starts "
                           "(character offsets); this backend has none")
    return [_plan_questions(plan, tokenizer) for plan in plans]


def _plan_questions(plan: ItemReads, tokenizer: Any) -> ItemReads:
    texts, probe = _texts(plan, tokenizer)
    encoded = []
    for seq, text in enumerate(texts):
        tokens = TextTokens.encode(tokenizer, text)
        if not np.array_equal(tokens.ids, plan.sequences[seq]):
            raise LongctxError(f"item {plan.item.id}: under a KV-cache press each read's question is found by character, and "
                               "the model's tokenizer does not give the ids this item is read with (the ids mode's stored "
                               "ids?); use --mode text")
        encoded.append((text, tokens, _token_starts(tokens)))
    item = plan.item

    def question(seq: int, pos: int, target: int | None) -> int:
        text, tokens, starts = encoded[seq]
        last = int(starts[pos - 1])  # the last token the read sees
        if probe is not None:
            char = probe
        elif isinstance(item, FactItem) and target is not None:
            char = query_start(text, item.targets[target].answer_char[0])
        else:
            found = message_start(text, last)
            char = found if found is not None else sentence_start(text, last)
        return min(_first_token_from(tokens, char), pos - 1)  # the question holds at least the token the read sees

    def mark(target: TargetReads, index: int | None) -> TargetReads:
        return replace(target, reads=tuple(replace(r, context=question(r.seq, r.pos, index)) for r in target.reads))

    return replace(plan, targets=tuple(mark(t, n) for n, t in enumerate(plan.targets)),
                   controls=tuple(mark(t, None) for t in plan.controls))
