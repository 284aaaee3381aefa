"""From items to token sequences and the predictions to read in them (docs/metrics.md#tokenization-modes).

``ids`` mode feeds the stored Qwen3.5 ids; ``text`` mode tokenizes each text with the
model's tokenizer and maps targets by character offset. Teacher forcing: the prediction
for the token at index ``j`` is read at index ``j - 1``.
"""
from __future__ import annotations

import bisect
import functools
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from pytest_longctx.data.load import Dataset
from pytest_longctx.data.records import FactItem, FaithfulnessItem, Item, Message, RuleItem, ToolItem
from pytest_longctx.errors import LongctxError
from pytest_longctx.scoring.chat import answer_text, render

MODES = ("auto", "ids", "text")


@dataclass(frozen=True)
class Read:
    """One prediction to read: the log-probability of ``token`` as the token at ``pos``
    of sequence ``seq`` of the item (so it is read at ``pos - 1``)."""

    seq: int
    pos: int
    token: int


@dataclass(frozen=True)
class TargetReads:
    """The reads one target needs, or why it cannot be scored (then ``reads`` is empty)."""

    reads: tuple[Read, ...]
    unaligned: str | None = None


@dataclass(frozen=True, eq=False)
class ItemReads:
    """An item as token sequences and the predictions to read in them, one ``TargetReads`` per
    target."""

    config: str
    length: str
    item: Item
    sequences: tuple[np.ndarray, ...]  # token ids, one array per text the item needs
    targets: tuple[TargetReads, ...]


def item_texts(item: Item) -> tuple[str, ...]:
    if isinstance(item, RuleItem):
        return item.text_without_rule, item.text_with_rule
    return (item.text,)


def item_stored_ids(item: Item) -> tuple[np.ndarray | None, ...]:
    if isinstance(item, RuleItem):
        return item.qwen_ids_without_rule, item.qwen_ids_with_rule
    return (item.qwen_ids,)


# ---------------------------------------------------------------- text mode: alignment


@dataclass(frozen=True, eq=False)
class TextTokens:
    """A text under a tokenizer: ids and where each token starts in the text.

    Tokens partition the text: a token starts where the previous one ended, so
    whitespace a tokenizer trims from its offsets belongs to the token that follows.
    A token whose offsets overlap the previous one (a byte piece of a character split
    over several tokens) starts nowhere: a target cannot begin inside it.
    """

    ids: np.ndarray
    starts: list[int]  # character start of each token that starts a character run, ascending
    token_of_start: dict[int, int]  # character offset -> token index for those tokens

    @classmethod
    def encode(cls, tokenizer: Any, text: str) -> TextTokens:
        encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        ids = np.asarray(encoded["input_ids"], dtype=np.int64)
        token_of_start: dict[int, int] = {}
        previous_end = 0
        for index, (start, end) in enumerate(encoded["offset_mapping"]):
            if start >= previous_end and end > start:
                token_of_start.setdefault(previous_end, index)
            previous_end = max(previous_end, end)
        return cls(ids=ids, starts=sorted(token_of_start), token_of_start=token_of_start)

    def token_at(self, char: int) -> int | None:
        """The token that starts exactly at ``char``, else None (unaligned)."""
        return self.token_of_start.get(char)

    def last_token_before(self, char_end: int) -> int:
        """The token that covers the character just before ``char_end``."""
        index = bisect.bisect_left(self.starts, char_end) - 1
        return self.token_of_start[self.starts[max(index, 0)]]

    def span_reads(self, seq: int, char_start: int, char_end: int) -> tuple[Read, ...] | None:
        """The reads of every token of the text's ``[char_start, char_end)`` (an answer), as
        sequence ``seq``: from the token that starts at ``char_start`` through the one that
        covers its end. None when no token starts there, or only the first (nothing predicts it)."""
        first = self.token_at(char_start)
        if not first:
            return None
        last = self.last_token_before(char_end)
        return tuple(Read(seq, p, int(self.ids[p])) for p in range(first, last + 1))


@functools.lru_cache(maxsize=4096)
def _first_token_cached(tokenizer: Any, text: str) -> int:
    return first_token(tokenizer, text)


def first_token(tokenizer: Any, text: str) -> int:
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if not ids:
        raise LongctxError(f"expected_text {text!r} tokenizes to nothing under the model's tokenizer")
    return int(ids[0])


def _unaligned(what: str, char: int, pos: int | None) -> TargetReads:
    if pos == 0:
        return TargetReads((), f"{what} at character {char} is the first token: nothing predicts it")
    return TargetReads((), f"{what} at character {char} does not start a token")


def _text_reads(tokenizer: Any, config: str, length: str, item: Item) -> ItemReads:
    encoded = [TextTokens.encode(tokenizer, text) for text in item_texts(item)]
    targets: list[TargetReads] = []
    if isinstance(item, FactItem):
        (seq,) = encoded
        for t in item.targets:
            reads = seq.span_reads(0, *t.answer_char)
            start = t.answer_char[0]
            targets.append(TargetReads(reads) if reads is not None else _unaligned("answer", start, seq.token_at(start)))
    elif isinstance(item, ToolItem):
        (seq,) = encoded
        for t in item.targets:
            pos = seq.token_at(t.char[0])
            targets.append(TargetReads((Read(0, pos, int(seq.ids[pos])),)) if pos else _unaligned("target", t.char[0], pos))
    else:
        without, with_rule = encoded
        for t in item.targets:
            pos_without = without.token_at(t.char_without_rule[0])
            pos_with = with_rule.token_at(t.char_with_rule[0])
            if not pos_without:
                targets.append(_unaligned("target (without rule)", t.char_without_rule[0], pos_without))
            elif not pos_with:
                targets.append(_unaligned("target (with rule)", t.char_with_rule[0], pos_with))
            else:
                expected = _first_token_cached(tokenizer, t.expected_text)
                targets.append(TargetReads((Read(0, pos_without, expected), Read(1, pos_with, expected))))
    return ItemReads(config, length, item, tuple(s.ids for s in encoded), tuple(targets))


def session_reads(tokenizer: Any, config: str, split: str, item: FaithfulnessItem,
                  contexts: Sequence[Sequence[Message]]) -> ItemReads:
    """One sequence and one target per context: the session rendered with the probe, and
    the probe's answer after it, read as a facts answer is."""
    if tokenizer is None:
        raise LongctxError(f"item {item.id}: the {config} config renders chat sessions with the model's tokenizer, "
                           "and this backend has none; leave the config out (--sets) or give the backend a tokenizer")
    answer = answer_text(item)
    sequences, targets = [], []
    for seq, messages in enumerate(contexts):
        prompt = render(tokenizer, messages, item.probe, item.id)
        encoded = TextTokens.encode(tokenizer, prompt + answer)
        reads = encoded.span_reads(seq, len(prompt), len(prompt) + len(answer)) if answer else None
        targets.append(TargetReads(reads) if reads is not None else
                       TargetReads((), f"the answer {answer!r} does not start a token after the prompt"))
        sequences.append(encoded.ids)
    return ItemReads(config, split, item, tuple(sequences), tuple(targets))


# ---------------------------------------------------------------- ids mode: stored positions


def _missing(item: Item, field: str) -> LongctxError:
    return LongctxError(f"item {item.id}: no stored {field}; the ids mode needs the qwen_* fields (use --mode text)")


def _ids_reads(config: str, length: str, item: Item) -> ItemReads:
    sequences = item_stored_ids(item)
    if any(s is None for s in sequences):
        raise _missing(item, "qwen_ids")
    targets: list[TargetReads] = []
    if isinstance(item, FactItem):
        (ids,) = sequences
        for t in item.targets:
            if t.qwen_answer_pos is None:
                raise _missing(item, "qwen_answer_pos")
            first, end = t.qwen_answer_pos
            targets.append(TargetReads(tuple(Read(0, p, int(ids[p])) for p in range(first, end))))
    elif isinstance(item, ToolItem):
        (ids,) = sequences
        for t in item.targets:
            if t.qwen_pos is None:
                raise _missing(item, "qwen_pos")
            targets.append(TargetReads((Read(0, t.qwen_pos, int(ids[t.qwen_pos])),)))
    else:
        for t in item.targets:
            if None in (t.qwen_pos_without_rule, t.qwen_pos_with_rule, t.qwen_expected_id):
                raise _missing(item, "qwen_pos_without_rule/qwen_pos_with_rule/qwen_expected_id")
            targets.append(
                TargetReads((Read(0, t.qwen_pos_without_rule, t.qwen_expected_id), Read(1, t.qwen_pos_with_rule, t.qwen_expected_id)))
            )
    for target in targets:
        for read in target.reads:
            if not 0 < read.pos < len(sequences[read.seq]):
                raise LongctxError(
                    f"item {item.id}: stored token position {read.pos} is outside its {len(sequences[read.seq])} ids"
                )
    return ItemReads(config, length, item, tuple(np.asarray(s, dtype=np.int64) for s in sequences), tuple(targets))


# ---------------------------------------------------------------- mode choice


def reproduces_stored_ids(tokenizer: Any, dataset: Dataset) -> bool:
    """True when the tokenizer gives the stored Qwen3.5 ids for the first item of every
    config and length (all its texts, exactly): then it has the Qwen3.5 vocabulary."""
    if tokenizer is None:
        return False
    checked: set[tuple[str, str]] = set()
    for config, length, item in dataset.items():
        if (config, length) in checked or isinstance(item, FaithfulnessItem):  # chat sessions, no stored ids
            continue
        checked.add((config, length))
        for text, stored in zip(item_texts(item), item_stored_ids(item)):
            if stored is None:
                return False
            ids = tokenizer(text, add_special_tokens=False)["input_ids"]
            if len(ids) != len(stored) or not np.array_equal(np.asarray(ids), stored):
                return False
    return bool(checked)


def choose_mode(requested: str, tokenizer: Any, dataset: Dataset) -> str:
    if requested not in MODES:
        raise LongctxError(f"--mode {requested}: expected one of {', '.join(MODES)}")
    if requested == "text":
        if tokenizer is None:
            raise LongctxError("--mode text needs a tokenizer, and the backend has none; use --mode ids")
        return "text"
    stored = reproduces_stored_ids(tokenizer, dataset)
    if requested == "ids":
        if tokenizer is not None and not stored:
            raise LongctxError(
                "--mode ids: the model's tokenizer does not reproduce the stored Qwen3.5 ids; use --mode text (or auto)"
            )
        return "ids"
    if tokenizer is None:
        return "ids"
    return "ids" if stored else "text"


def plan_reads(dataset: Dataset, mode: str, tokenizer: Any = None) -> list[ItemReads]:
    """Sequences and reads of every selected item, in dataset order. Faithfulness
    sessions are rendered with the model's tokenizer in either mode."""
    plans = []
    for config, length, item in dataset.items():
        if isinstance(item, FaithfulnessItem):
            plans.append(session_reads(tokenizer, config, length, item, [item.messages]))
        elif mode == "ids":
            plans.append(_ids_reads(config, length, item))
        else:
            plans.append(_text_reads(tokenizer, config, length, item))
    return plans

