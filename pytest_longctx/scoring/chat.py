"""Sessions as the model reads them: chat markup, token counts, and the answer to a probe
(docs/metrics.md#faithfulness-of-context-compressors, Layer B), whose teacher-forced reads ``text_mode.session_reads`` makes.

The markup is the tokenizer's chat template when it has one, else ChatML
(``<|im_start|>role\\ncontent<|im_end|>\\n``). The probe is a user turn after the
messages, the assistant turn is opened, and the answer (what the first required-fact
regex matches in the full session) follows it; its tokens are read as a facts answer's
are: from the token that starts the answer through the one that covers its end.
"""
from __future__ import annotations

import hashlib
import re
from typing import Any, Sequence

from pytest_longctx.data.records import FaithfulnessItem, Message, session_text
from pytest_longctx.errors import LongctxError

CHATML = "ChatML"


def chat_markup(tokenizer: Any) -> str:
    """How sessions are rendered for this tokenizer: its chat template (by digest) or ChatML."""
    template = getattr(tokenizer, "chat_template", None)
    if not template:
        return CHATML
    return f"chat template {hashlib.sha256(str(template).encode()).hexdigest()[:12]}"


def _turn(message: Message) -> dict[str, str]:
    turn = {"role": message.role, "content": message.content}
    if message.name is not None:
        turn["name"] = message.name
    return turn


def render(tokenizer: Any, messages: Sequence[Message], probe: str | None = None, item_id: str = "") -> str:
    """The chat text of ``messages``; with a probe, followed by it as a user turn and the
    opened assistant turn."""
    turns = [_turn(m) for m in messages]
    if probe is not None:
        turns.append({"role": "user", "content": probe})
    if getattr(tokenizer, "chat_template", None):
        try:
            return tokenizer.apply_chat_template(turns, tokenize=False, add_generation_prompt=probe is not None)
        except Exception as exc:  # jinja raises template errors of its own kinds
            raise LongctxError(f"item {item_id}: the tokenizer's chat template cannot render the session "
                               f"({type(exc).__name__}: {exc})") from None
    text = "".join(f"<|im_start|>{t['role']}\n{t['content']}<|im_end|>\n" for t in turns)
    return text + ("<|im_start|>assistant\n" if probe is not None else "")


def count_tokens(tokenizer: Any, messages: Sequence[Message], item_id: str = "") -> int:
    """Tokens of the rendered session (no probe): what realized savings are counted in."""
    return len(tokenizer(render(tokenizer, messages, item_id=item_id), add_special_tokens=False)["input_ids"])


def answer_text(item: FaithfulnessItem) -> str:
    """What the first required fact matches in the full session (the loader checked it does)."""
    found = re.search(item.required_facts[0], session_text(item.messages), re.IGNORECASE)
    if found is None:
        raise LongctxError(f"item {item.id}: required_facts[0] {item.required_facts[0]!r} matches nothing in its messages")
    return found.group(0)

