"""From items to token sequences and the predictions to read in them (docs/metrics.md#tokenization-modes).

``ids`` mode feeds the stored Qwen3.5 ids; ``text`` mode tokenizes each text with the
model's tokenizer and maps targets by character offset. Teacher forcing: the prediction
for the token at index ``j`` is read at index ``j - 1``.
"""
from __future__ import annotations

import bisect
import functools
from dataclasses import dataclass, replace
from typing import Any, Iterator, Sequence

import numpy as np

from pytest_longctx.data.load import Dataset
from pytest_longctx.data.records import FactItem, FaithfulnessItem, Item, Message, RuleItem, ToolItem
from pytest_longctx.errors import LongctxError
from pytest_longctx.scoring.chat import answer_text, render

MODES = ("auto", "ids", "text")


@dataclass(frozen=True)
class Read:
    """One prediction to read: the log-probability of ``token`` as the token at ``pos``
    of sequence ``seq`` of the item (so it is read at ``pos - 1``), and those of the ``also``
    tokens there (a baseline's most likely tokens, for the drift rows)."""

    seq: int
    pos: int
    token: int
    also: tuple[int, ...] = ()


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
    controls: tuple[TargetReads, ...] = ()  # short-context control reads (docs/metrics.md#control-reads), one read each

    @property
    def every(self) -> tuple[TargetReads, ...]:
        """The targets, then the control reads: the order of the engine's answers."""
        return self.targets + self.controls

    @property
    def tokens_needed(self) -> int:
        """The longest prefix a forward pass runs over (a read at ``pos`` needs ``pos`` tokens)."""
        return max((read.pos for target in self.every for read in target.reads), default=0)


CONTROL_TOKENS = 512  # control reads see only the item's first this many tokens
CONTROL_READS = 16  # per facts and tool_calls item


def control_reads(ids: np.ndarray) -> tuple[TargetReads, ...]:
    """Reads whose whole context is the first ``CONTROL_TOKENS`` tokens of the item's text:
    ``CONTROL_READS`` evenly spaced positions, chosen from the item alone (its length), so
    a candidate and its baseline read the same ones. Drift there is general damage."""
    last = min(CONTROL_TOKENS, len(ids) - 1)  # a read at pos sees tokens [0, pos)
    if last < 1:
        return ()
    positions = sorted({max(1, round(last * (n + 1) / CONTROL_READS)) for n in range(CONTROL_READS)})
    return tuple(TargetReads((Read(0, p, int(ids[p])),)) for p in positions)


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
    return _with_controls(ItemReads(config, length, item, tuple(s.ids for s in encoded), tuple(targets)))


def _with_controls(plan: ItemReads) -> ItemReads:
    """Facts and tool_calls items get their control reads (docs/metrics.md#control-reads)."""
    if isinstance(plan.item, (FactItem, ToolItem)):
        return replace(plan, controls=control_reads(plan.sequences[0]))
    return plan


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


ALONE = "is the first answer token alone, whose end is found with the model's tokenizer, and the backend has none: store [first, end)"


def _answer_tokens(position: tuple[int, int] | int, answer_char: tuple[int, int], tokens: TextTokens | None) -> tuple[int, int] | None:
    """A facts target's stored answer tokens ``[first, end)``; stored as the first alone, the
    end is the token that covers the answer's last character (None: no tokenizer to find it)."""
    if not isinstance(position, int):
        return position
    return None if tokens is None else (position, tokens.last_token_before(answer_char[1]) + 1)


def _ids_reads(config: str, length: str, item: Item, tokenizer: Any = None) -> ItemReads:
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
            answer = _answer_tokens(t.qwen_answer_pos, t.answer_char, tokens)
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
    return _with_controls(ItemReads(config, length, item, tuple(np.asarray(s, dtype=np.int64) for s in sequences), tuple(targets)))


# ---------------------------------------------------------------- ids mode: checking every item


def _ids_fields(item: Item) -> tuple[str, ...]:
    return ("qwen_ids_without_rule", "qwen_ids_with_rule") if isinstance(item, RuleItem) else ("qwen_ids",)


def _run(tokens: TextTokens, char: int) -> range:
    """The tokens that make up the run covering character ``char`` of the text: one token, or
    the byte pieces of a character split over several."""
    index = bisect.bisect_right(tokens.starts, char) - 1
    if index < 0:
        return range(0)
    end = tokens.token_of_start[tokens.starts[index + 1]] if index + 1 < len(tokens.starts) else len(tokens.ids)
    return range(tokens.token_of_start[tokens.starts[index]], end)


def _position_problem(field: str, pos: int, size: int, tokens: TextTokens | None, char: int, what: str) -> str | None:
    """Stored token position ``pos`` of a target whose ``what`` starts at character ``char``."""
    if not 0 < pos < size:
        return f"field {field}: {pos} is outside its {size} ids (1 to {size - 1}: token 0 has nothing before it)"
    if tokens is not None and pos not in _run(tokens, char):
        covering = _run(tokens, char)
        return f"field {field}: {pos} is not the token of {what} (character {char} is in token {covering.start})"
    return None


def _target_problem(tokenizer: Any, item: Item, n: int, target: Any, encoded: list[TextTokens | None],
                    sizes: list[int]) -> str | None:
    f = f"targets[{n}]"
    if isinstance(item, FactItem):
        if target.qwen_answer_pos is None:
            return f"field {f}.qwen_answer_pos: missing"
        answer = _answer_tokens(target.qwen_answer_pos, target.answer_char, encoded[0])
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
    if expected < 0 or (tokenizer is not None and expected != _first_token_cached(tokenizer, target.expected_text)):
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


def _problems(tokenizer: Any, dataset: Dataset) -> Iterator[str]:
    """Every item the ids mode cannot score as it is, as 'FILE, item ID, field X: problem'."""
    for config, length, item in dataset.items():
        if isinstance(item, FaithfulnessItem):
            continue
        problem = stored_ids_problem(tokenizer, item)
        if problem:
            yield f"{dataset.files.get((config, length), f'{config}/{length}')}, item {item.id}, {problem}"


def choose_mode(requested: str, tokenizer: Any, dataset: Dataset, warnings: list[str] | None = None,
                missing: str | None = None) -> str:
    """The mode the run uses. ``ids`` needs every item's stored fields to check out (the
    texts tokenize to the stored ids, positions point at the targets): with ``--mode ids``
    the first item that does not is an error; with ``auto`` the run falls back to ``text``
    and says so in ``warnings``. ``auto`` with a tokenizer that reproduces none of the
    stored ids (another vocabulary) is ``text`` without a word: that is what it is for.
    ``missing``: why the backend has no tokenizer (a model folder without tokenizer files),
    said when the text mode needs one."""
    if requested not in MODES:
        raise LongctxError(f"--mode {requested}: expected one of {', '.join(MODES)}")
    if requested == "text":
        if tokenizer is None:
            if missing:
                raise LongctxError(f"--mode text: {missing}; add them, or use --mode ids (the data's stored Qwen3.5 ids, "
                                   "for a model of that vocabulary)")
            raise LongctxError("--mode text needs a tokenizer, and the backend has none; use --mode ids")
        return "text"
    if requested == "auto" and tokenizer is not None and not reproduces_stored_ids(tokenizer, dataset):
        return "text"
    problems = _problems(tokenizer, dataset)
    first = next(problems, None)
    if first is None:
        return "ids"
    if requested == "ids" or tokenizer is None:
        fix = ("use --mode text (or auto)" if tokenizer is not None else
               f"{missing or 'this backend has no tokenizer'}, so the text mode cannot replace them: fix the data "
               "(longctx validate DIR)")
        raise LongctxError(f"--mode {requested}: {first}; the ids mode feeds the stored Qwen3.5 ids as they are: {fix}")
    more = sum(1 for _ in problems)
    others = f" (and {more} more item{'s' if more > 1 else ''})" if more else ""
    message = (f"--mode auto: scoring in text mode with the model's own tokenizer, not the stored Qwen3.5 ids: {first}{others}; "
               "check the data with longctx validate DIR, or pass --mode text to silence this")
    if warnings is not None:
        warnings.append(message)
    return "text"


def plan_reads(dataset: Dataset, mode: str, tokenizer: Any = None) -> list[ItemReads]:
    """Sequences and reads of every selected item, in dataset order. Faithfulness
    sessions are rendered with the model's tokenizer in either mode."""
    plans = []
    for config, length, item in dataset.items():
        if isinstance(item, FaithfulnessItem):
            plans.append(session_reads(tokenizer, config, length, item, [item.messages]))
        elif mode == "ids":
            plans.append(_ids_reads(config, length, item, tokenizer))
        else:
            plans.append(_text_reads(tokenizer, config, length, item))
    return plans

