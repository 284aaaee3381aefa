"""The ids mode's checks of every item: whether the stored Qwen3.5 ids and positions can be
scored as they are (docs/metrics.md#tokenization-modes)."""
from __future__ import annotations

from typing import Any, Iterator

import numpy as np

from pytest_longctx.data.load import Dataset
from pytest_longctx.data.records import FactItem, FaithfulnessItem, Item, RuleItem, ToolItem
from pytest_longctx.scoring.alignment import TextTokens, first_token
from pytest_longctx.scoring.ids_mode import ALONE, answer_tokens
from pytest_longctx.scoring.reads import item_stored_ids, item_texts


def _ids_fields(item: Item) -> tuple[str, ...]:
    return ("qwen_ids_without_rule", "qwen_ids_with_rule") if isinstance(item, RuleItem) else ("qwen_ids",)


def _position_problem(field: str, pos: int, size: int, tokens: TextTokens | None, char: int, what: str) -> str | None:
    """Stored token position ``pos`` of a target whose ``what`` starts at character ``char``."""
    if not 0 < pos < size:
        return f"field {field}: {pos} is outside its {size} ids (1 to {size - 1}: token 0 has nothing before it)"
    if tokens is not None and pos not in tokens.run_at(char):
        covering = tokens.run_at(char)
        return f"field {field}: {pos} is not the token of {what} (character {char} is in token {covering.start})"
    return None


def _target_problem(tokenizer: Any, item: Item, n: int, target: Any, encoded: list[TextTokens | None],
                    sizes: list[int]) -> str | None:
    f = f"targets[{n}]"
    if isinstance(item, FactItem):
        if target.qwen_answer_pos is None:
            return f"field {f}.qwen_answer_pos: missing"
        answer = answer_tokens(target.qwen_answer_pos, target.answer_char, encoded[0])
        if answer is None:
            return f"field {f}.qwen_answer_pos: {target.qwen_answer_pos} {ALONE}"
        first, end = answer
        if not 0 < first < end <= sizes[0]:
            return f"field {f}.qwen_answer_pos: [{first}, {end}) is not inside its {sizes[0]} ids"
        return (_position_problem(f"{f}.qwen_answer_pos", first, sizes[0], encoded[0], target.answer_char[0], "the answer")
                or _position_problem(f"{f}.qwen_answer_pos", end - 1, sizes[0], encoded[0], target.answer_char[1] - 1,
                                     "the answer's end"))
    if isinstance(item, ToolItem):
        if target.qwen_pos is None:
            return f"field {f}.qwen_pos: missing"
        return _position_problem(f"{f}.qwen_pos", target.qwen_pos, sizes[0], encoded[0], target.char[0], "the target")
    for seq, (field, char) in enumerate((("qwen_pos_without_rule", target.char_without_rule[0]),
                                        ("qwen_pos_with_rule", target.char_with_rule[0]))):
        pos = getattr(target, field)
        if pos is None:
            return f"field {f}.{field}: missing"
        problem = _position_problem(f"{f}.{field}", pos, sizes[seq], encoded[seq], char, "the governed action")
        if problem:
            return problem
    expected = target.qwen_expected_id
    if expected is None:
        return f"field {f}.qwen_expected_id: missing"
    if expected < 0 or (tokenizer is not None and expected != first_token(tokenizer, target.expected_text)):
        return f"field {f}.qwen_expected_id: {expected} is not the first token of expected_text {target.expected_text!r}"
    return None


def stored_ids_problem(tokenizer: Any, item: Item) -> str | None:
    """What keeps the ids mode from scoring the item as stored, as 'field X: problem', or None.

    With a tokenizer every stored sequence must be the tokenization of its text and every
    stored position must point at its target's characters; without one, the stored fields
    must be usable: present, no negative ids, positions inside their ids."""
    encoded: list[TextTokens | None] = []
    sizes = []
    for field, text, stored in zip(_ids_fields(item), item_texts(item), item_stored_ids(item)):
        if stored is None:
            return f"field {field}: missing"
        stored = np.asarray(stored, dtype=np.int64)
        sizes.append(len(stored))
        if tokenizer is None:
            if len(stored) and int(stored.min()) < 0:
                return f"field {field}: holds a negative token id ({int(stored.min())})"
            encoded.append(None)
            continue
        tokens = TextTokens.encode(tokenizer, text)
        if len(tokens.ids) != len(stored) or not np.array_equal(tokens.ids, stored):
            size = min(len(stored), len(tokens.ids))
            differ = np.nonzero(stored[:size] != tokens.ids[:size])[0]
            at = int(differ[0]) if len(differ) else size
            return (f"field {field}: the stored ids differ from the tokenizer's tokenization of the text from token {at} "
                    f"({len(stored)} ids stored, the text gives {len(tokens.ids)})")
        encoded.append(tokens)
    for n, target in enumerate(item.targets):
        problem = _target_problem(tokenizer, item, n, target, encoded, sizes)
        if problem:
            return problem
    return None


def reproduces_stored_ids(tokenizer: Any, dataset: Dataset) -> bool:
    """True when the tokenizer gives the stored Qwen3.5 ids of the first item of some config
    and length: then it has the Qwen3.5 vocabulary, and the ids mode applies (if every item
    checks out)."""
    if tokenizer is None:
        return False
    firsts = {}
    for config, length, item in dataset.items():
        if not isinstance(item, FaithfulnessItem):  # chat sessions, no stored ids
            firsts.setdefault((config, length), item)
    for item in firsts.values():
        stored = item_stored_ids(item)
        if all(s is not None for s in stored) and all(
            np.array_equal(np.asarray(tokenizer(text, add_special_tokens=False)["input_ids"]), ids)
            for text, ids in zip(item_texts(item), stored)
        ):
            return True
    return False


def problems(tokenizer: Any, dataset: Dataset) -> Iterator[str]:
    """Every item the ids mode cannot score as it is, as 'FILE, item ID, field X: problem'."""
    for config, length, item in dataset.items():
        if isinstance(item, FaithfulnessItem):
            continue
        problem = stored_ids_problem(tokenizer, item)
        if problem:
            yield f"{dataset.files.get((config, length), f'{config}/{length}')}, item {item.id}, {problem}"
