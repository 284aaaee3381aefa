"""What an item is read as: its token sequences and the predictions to read in them
(docs/metrics.md#tokenization-modes).

Teacher forcing: the prediction for the token at index ``j`` is read at index ``j - 1``.
A rules item has two sequences (0: without the rule, 1: with it); every other item one.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pytest_longctx.data.records import Item, RuleItem


@dataclass(frozen=True)
class Read:
    """One prediction to read: the log-probability of ``token`` as the token at ``pos``
    of sequence ``seq`` of the item (so it is read at ``pos - 1``), and those of the ``also``
    tokens there (a baseline's most likely tokens, for the drift rows). Under a KV-cache press,
    ``context`` is where the read's question starts: tokens ``[0, context)`` are the context the
    press compresses, the rest up to the read its question, read exactly (scoring/questions.py;
    0: none, the read is exact)."""

    seq: int
    pos: int
    token: int
    also: tuple[int, ...] = ()
    context: int = 0


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

    @property
    def tokens_forwarded(self) -> int:
        """The tokens its forward passes run over when it is read alone: each sequence up to its last read (a read
        at ``pos`` needs ``pos`` tokens), a prefix two of its sequences share counted once (the engine runs it once)."""
        ends: dict[int, int] = {}
        for target in self.every:
            for read in target.reads:
                ends[read.seq] = max(ends.get(read.seq, 0), read.pos)
        total, seen = 0, []
        for seq, end in sorted(ends.items()):
            tokens = self.sequences[seq][:end]
            shared = max((_common_prefix(tokens, other) for other in seen), default=0)
            total += end - shared
            seen.append(tokens)
        return total


def _common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    """How many tokens ``a`` and ``b`` begin with alike."""
    size = min(len(a), len(b))
    differ = np.flatnonzero(a[:size] != b[:size])
    return int(differ[0]) if differ.size else size


def item_texts(item: Item) -> tuple[str, ...]:
    """The texts of the item's sequences, in sequence order."""
    if isinstance(item, RuleItem):
        return item.text_without_rule, item.text_with_rule
    return (item.text,)


def item_stored_ids(item: Item) -> tuple[np.ndarray | None, ...]:
    """The stored Qwen3.5 ids of the item's sequences, in sequence order (None: not stored)."""
    if isinstance(item, RuleItem):
        return item.qwen_ids_without_rule, item.qwen_ids_with_rule
    return (item.qwen_ids,)
