"""The text mode's reads (docs/metrics.md#tokenization-modes): each text tokenized with the
model's tokenizer, targets found by character offset. Chat sessions are read this way in
either mode."""
from __future__ import annotations

from typing import Any, Sequence

from pytest_longctx.data.records import FactItem, FaithfulnessItem, Item, Message, ToolItem
from pytest_longctx.errors import LongctxError
from pytest_longctx.scoring.alignment import TextTokens, first_token
from pytest_longctx.scoring.chat import answer_text, render
from pytest_longctx.scoring.controls import with_controls
from pytest_longctx.scoring.reads import ItemReads, Read, TargetReads, item_texts


def _unaligned(what: str, char: int, pos: int | None) -> TargetReads:
    if pos == 0:
        return TargetReads((), f"{what} at character {char} is the first token: nothing predicts it")
    return TargetReads((), f"{what} at character {char} does not start a token")


def text_reads(tokenizer: Any, config: str, length: str, item: Item) -> ItemReads:
    """The item's texts under the model's tokenizer and the reads of its targets there."""
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
                expected = first_token(tokenizer, t.expected_text)
                targets.append(TargetReads((Read(0, pos_without, expected), Read(1, pos_with, expected))))
    return with_controls(ItemReads(config, length, item, tuple(s.ids for s in encoded), tuple(targets)))


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
