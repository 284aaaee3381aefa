"""The ids mode's reads (docs/metrics.md#tokenization-modes): the stored Qwen3.5 ids and
token positions, fed as they are."""
from __future__ import annotations

from typing import Any

import numpy as np

from pytest_longctx.data.records import FactItem, Item, ToolItem
from pytest_longctx.errors import LongctxError
from pytest_longctx.scoring.alignment import TextTokens
from pytest_longctx.scoring.controls import with_controls
from pytest_longctx.scoring.reads import ItemReads, Read, TargetReads, item_stored_ids

ALONE = "is the first answer token alone, whose end is found with the model's tokenizer, and the backend has none: store [first, end)"


def _missing(item: Item, field: str) -> LongctxError:
    return LongctxError(f"item {item.id}: no stored {field}; the ids mode needs the qwen_* fields (use --mode text)")


def answer_tokens(position: tuple[int, int] | int, answer_char: tuple[int, int], tokens: TextTokens | None) -> tuple[int, int] | None:
    """A facts target's stored answer tokens ``[first, end)``; stored as the first alone, the
    end is the token that covers the answer's last character (None: no tokenizer to find it)."""
    if not isinstance(position, int):
        return position
    return None if tokens is None else (position, tokens.last_token_before(answer_char[1]) + 1)


def ids_reads(config: str, length: str, item: Item, tokenizer: Any = None) -> ItemReads:
    """The stored sequences and positions as they are (``choose_mode`` checked them)."""
    sequences = item_stored_ids(item)
    if any(s is None for s in sequences):
        raise _missing(item, "qwen_ids")

    def at(seq: int, pos: int) -> int:
        if not 0 < pos < len(sequences[seq]):
            raise LongctxError(f"item {item.id}: stored token position {pos} is outside its {len(sequences[seq])} ids")
        return pos

    targets: list[TargetReads] = []
    if isinstance(item, FactItem):
        (ids,) = sequences
        tokens = TextTokens.encode(tokenizer, item.text) if tokenizer is not None and any(
            isinstance(t.qwen_answer_pos, int) for t in item.targets) else None
        for n, t in enumerate(item.targets):
            if t.qwen_answer_pos is None:
                raise _missing(item, "qwen_answer_pos")
            answer = answer_tokens(t.qwen_answer_pos, t.answer_char, tokens)
            if answer is None:
                raise LongctxError(f"item {item.id}: targets[{n}].qwen_answer_pos {ALONE}")
            first, end = answer
            targets.append(TargetReads(tuple(Read(0, at(0, p), int(ids[p])) for p in range(first, end))))
    elif isinstance(item, ToolItem):
        (ids,) = sequences
        for t in item.targets:
            if t.qwen_pos is None:
                raise _missing(item, "qwen_pos")
            targets.append(TargetReads((Read(0, at(0, t.qwen_pos), int(ids[t.qwen_pos])),)))
    else:
        for t in item.targets:
            if None in (t.qwen_pos_without_rule, t.qwen_pos_with_rule, t.qwen_expected_id):
                raise _missing(item, "qwen_pos_without_rule/qwen_pos_with_rule/qwen_expected_id")
            targets.append(TargetReads((Read(0, at(0, t.qwen_pos_without_rule), t.qwen_expected_id),
                                        Read(1, at(1, t.qwen_pos_with_rule), t.qwen_expected_id))))
    return with_controls(ItemReads(config, length, item, tuple(np.asarray(s, dtype=np.int64) for s in sequences), tuple(targets)))
