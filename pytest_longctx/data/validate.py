"""``longctx validate DIR``: check a benchmark folder (builtin or published) against
the schema and for internal consistency, re-deriving every offset, token position,
distance and flag from the texts with the Qwen3.5 tokenizer. That a facts item's spans
hold its answers and facts is checked when the items are read (``schema``), so such a
folder is refused by every command, not only here."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Iterator

import numpy as np

from pytest_longctx.data.builtin.fit import Encoding, SegmentEncoder
from pytest_longctx.data.builtin.rules import mention_pattern
from pytest_longctx.data.lengths import length_tokens
from pytest_longctx.data.load import load_dataset
from pytest_longctx.data.records import ALL_CONFIGS, FAITHFULNESS, FAR_TOKENS, FactItem, Item, Kind, RuleItem, ToolItem, config_kind
from pytest_longctx.errors import LongctxError

CALL = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.S)
FUNCTION = re.compile(r"<function=([^>\n]*)>")
PARAMETER_VALUE = re.compile(r"<parameter=[^>\n]*>\n(.*?)(?:\n</parameter>|\Z)", re.S)


class Checker:
    """Collects problems of one item, each a line naming the item and field."""

    def __init__(self, where: str):
        self.where = where
        self.problems: list[str] = []

    def check(self, ok: bool, field: str, problem: str) -> bool:
        if not ok:
            self.problems.append(f"{self.where}, {field}: {problem}")
        return ok


def _ids(check: Checker, field: str, stored: np.ndarray | None, encoding: Encoding, n_tokens: int) -> None:
    check.check(len(encoding) == n_tokens, field, f"the text has {len(encoding)} Qwen3.5 tokens, expected {n_tokens}")
    if stored is None:
        return
    if len(stored) != len(encoding) or not np.array_equal(stored, encoding.ids):
        size = min(len(stored), len(encoding))
        diff = np.nonzero(stored[:size] != encoding.ids[:size])[0]
        at = int(diff[0]) if len(diff) else size
        check.check(False, field, f"stored ids differ from the tokenization of the text from token {at}")


def _token(check: Checker, field: str, encoding: Encoding, start: int, text_len: int) -> int | None:
    """The index of the token starting at ``start``, or None (a problem) if none does."""
    if not check.check(0 <= start < text_len, field, f"offset {start} is outside the text ({text_len} characters)"):
        return None
    if not check.check(encoding.starts_at(start), field, f"offset {start} does not start a Qwen3.5 token"):
        return None
    return encoding.before(start)


def _facts(item: FactItem, check: Checker, encoding: Encoding) -> None:
    for n, t in enumerate(item.targets):
        f = f"targets[{n}]"
        first = _token(check, f"{f}.answer_char", encoding, t.answer_char[0], len(item.text))
        if first is None:
            continue
        end = encoding.covering(t.answer_char[1] - 1) + 1
        if isinstance(t.qwen_answer_pos, int):  # the first answer token alone
            check.check(t.qwen_answer_pos == first, f"{f}.qwen_answer_pos", f"{t.qwen_answer_pos}, the answer starts at token {first}")
        elif t.qwen_answer_pos is not None:
            check.check(
                tuple(t.qwen_answer_pos) == (first, end),
                f"{f}.qwen_answer_pos",
                f"{list(t.qwen_answer_pos)}, the answer tokens are [{first}, {end})",
            )
        distance = first - encoding.before(t.fact_char[1])
        check.check(t.distance_tokens == distance, f"{f}.distance_tokens", f"{t.distance_tokens}, recomputed {distance}")


def _calls(text: str, encoding: Encoding, names: dict[str, str]) -> list[tuple[str, int, int, int]]:
    """(definition id, start char, end char, end token) of every call after the system prompt."""
    body = text.find("<|im_end|>")
    calls = []
    for match in CALL.finditer(text, max(body, 0)):
        block = match.group(1)
        function = FUNCTION.search(block)
        found = {names.get(f"tool:{function.group(1)}")} if function else set()
        for value in PARAMETER_VALUE.findall(block):
            word = value.split(None, 1)[0] if value.strip() else ""
            found.add(names.get(f"command:{word}"))
        for definition in sorted(d for d in found if d):
            calls.append((definition, match.start(), match.end(), encoding.before(match.end())))
    return calls


def _tool_calls(item: ToolItem, check: Checker, encoding: Encoding) -> None:
    definitions = {d.id: d for d in item.definitions}
    for n, d in enumerate(item.definitions):
        check.check(item.text[slice(*d.char)] == d.text, f"definitions[{n}].char", "span does not hold the definition text")
    names = {f"{d.kind}:{d.name}": d.id for d in item.definitions}
    calls = _calls(item.text, encoding, names)
    for n, t in enumerate(item.targets):
        f = f"targets[{n}]"
        check.check(item.text[slice(*t.char)] == t.target, f"{f}.char", f"span does not hold the target {t.target!r}")
        index = _token(check, f"{f}.char", encoding, t.char[0], len(item.text))
        if index is None:
            continue
        check.check(int(encoding.ends[index]) == t.char[1], f"{f}.char", "span is not exactly one Qwen3.5 token")
        if t.qwen_pos is not None:
            check.check(t.qwen_pos == index, f"{f}.qwen_pos", f"{t.qwen_pos}, the target token is {index}")
        distance = index - encoding.before(definitions[t.definition_id].char[1])
        check.check(t.distance_tokens == distance, f"{f}.distance_tokens", f"{t.distance_tokens}, recomputed {distance}")
        far = distance >= FAR_TOKENS
        recent = any(
            d == t.definition_id and start < t.char[0] and not start <= t.char[0] < end and end_token > index - FAR_TOKENS
            for d, start, end, end_token in calls
        )
        check.check(t.far == far, f"{f}.far", f"{t.far}, recomputed {far} (distance {distance})")
        check.check(t.fresh == (far and not recent), f"{f}.fresh", f"{t.fresh}, recomputed {far and not recent}")


def _rules(item: RuleItem, check: Checker, encodings: tuple[Encoding, Encoding], encoder: SegmentEncoder) -> None:
    without, with_rule = item.text_without_rule, item.text_with_rule
    enc_without, enc_with = encodings
    start, end = item.rule_char
    shift = end - start
    check.check(with_rule[start:end] == item.rule, "rule_char", "span does not hold the rule")
    check.check(item.rule not in without, "text_without_rule", "holds the rule line")
    check.check(with_rule[:start] == without[:start], "text_with_rule", "differs from text_without_rule before the rule line")
    check.check(without[start:].startswith(with_rule[end:]), "text_with_rule", "after the rule line it is not text_without_rule trimmed")
    rule_end = enc_with.before(end)
    earliest = min((t.char_with_rule[0] for t in item.targets), default=None)
    for n, t in enumerate(item.targets):
        f = f"targets[{n}]"
        check.check(
            without[slice(*t.char_without_rule)] == t.original_text, f"{f}.char_without_rule", f"span does not hold {t.original_text!r}"
        )
        check.check(
            tuple(t.char_with_rule) == (t.char_without_rule[0] + shift, t.char_without_rule[1] + shift),
            f"{f}.char_with_rule",
            "is not char_without_rule moved by the rule line",
        )
        pos_without = _token(check, f"{f}.char_without_rule", enc_without, t.char_without_rule[0], len(without))
        pos_with = _token(check, f"{f}.char_with_rule", enc_with, t.char_with_rule[0], len(with_rule))
        if pos_without is None or pos_with is None:
            continue
        if t.qwen_pos_without_rule is not None:
            check.check(
                t.qwen_pos_without_rule == pos_without,
                f"{f}.qwen_pos_without_rule",
                f"{t.qwen_pos_without_rule}, the target token is {pos_without}",
            )
        if t.qwen_pos_with_rule is not None:
            check.check(
                t.qwen_pos_with_rule == pos_with, f"{f}.qwen_pos_with_rule", f"{t.qwen_pos_with_rule}, the target token is {pos_with}"
            )
        expected = encoder.encode(t.expected_text)
        if t.qwen_expected_id is not None and len(expected):
            check.check(
                t.qwen_expected_id == int(expected.ids[0]),
                f"{f}.qwen_expected_id",
                f"{t.qwen_expected_id}, the first token of {t.expected_text!r} is {int(expected.ids[0])}",
            )
        if len(expected):
            check.check(
                int(expected.ids[0]) != int(enc_without.ids[pos_without]),
                f"{f}.expected_text",
                "starts with the same token as the original",
            )
        distance = pos_with - rule_end
        check.check(t.distance_tokens == distance, f"{f}.distance_tokens", f"{t.distance_tokens}, recomputed {distance}")
        check.check(
            distance >= FAR_TOKENS, f"{f}.distance_tokens", f"{distance} tokens after the rule; rules targets must be far ({FAR_TOKENS}+)"
        )
        if t.first:
            check.check(t.char_with_rule[0] == earliest, f"{f}.first", "set on a target that is not the earliest")
        before = with_rule[:start] + " " * shift + with_rule[end : t.char_with_rule[0]]
        mentioned = bool(mention_pattern(t.expected_text.strip()).search(before))
        check.check(t.mentioned == mentioned, f"{f}.mentioned", f"{t.mentioned}, recomputed {mentioned}")
    check.check(sum(t.first for t in item.targets) <= 1, "targets", "more than one target is marked first")


def _texts(item: Item) -> list[tuple[str, str, np.ndarray | None]]:
    if isinstance(item, RuleItem):
        return [
            ("qwen_ids_without_rule", item.text_without_rule, item.qwen_ids_without_rule),
            ("qwen_ids_with_rule", item.text_with_rule, item.qwen_ids_with_rule),
        ]
    return [("qwen_ids", item.text, item.qwen_ids)]


def check_item(config: str, length: str, item: Item, encoder: SegmentEncoder, where: str) -> list[str]:
    check = Checker(where)
    texts = _texts(item)
    encodings = encoder.encode_many([text for _, text, _ in texts])
    for (field, _, stored), encoding in zip(texts, encodings):
        _ids(check, field, stored, encoding, length_tokens(length) + 1)
    kind = config_kind(config)
    if kind == Kind.FACTS:
        _facts(item, check, encodings[0])
    elif kind == Kind.TOOL_CALLS:
        _tool_calls(item, check, encodings[0])
    else:
        _rules(item, check, (encodings[0], encodings[1]), encoder)
    return check.problems


def validate_dir(root: Path) -> Iterator[str]:
    """One line per problem found in the benchmark folder ``root``. The faithfulness
    config has no stored tokens: reading it checks its schema and that each item's fact
    is in its session."""
    configs = [c for c in ALL_CONFIGS if (root / c).is_dir() or (root / "data" / c).is_dir()]
    if not configs:
        yield f"{root}: no config folders ({', '.join(ALL_CONFIGS)})"
        return
    encoder = SegmentEncoder()
    for config in configs:
        try:
            dataset = load_dataset(str(root), sets=[config])
        except LongctxError as exc:
            yield str(exc)
            continue
        if config == FAITHFULNESS:
            continue
        for length, items in dataset.configs.get(config, {}).items():
            path = dataset.files[(config, length)]
            for item in items:
                yield from check_item(config, length, item, encoder, f"{path}, item {item.id}")
