"""What a compressor did to a session's structure, beyond shortening it: messages merged,
roles changed, system messages inserted (docs/metrics.md#faithfulness-of-context-compressors).

Each compressed message is traced to the original messages it draws on, by the pairs of
consecutive content words they share (a pruned or trimmed text keeps most of its pairs;
a footer or marker brings pairs of its own, found in no original): the original sharing
the most pairs is its main source, and every further original that adds at least
``MIN_NEW_PAIRS`` pairs not yet covered is a source too.

* merged: a compressed message with two sources or more;
* system inserted: a system message whose main source is no system message (or that has
  no source);
* role changed: any other compressed message whose main source has another role.
"""
from __future__ import annotations

from typing import Sequence

from pytest_longctx.compress.words import STOPWORDS, WORD
from pytest_longctx.data.records import Message
from pytest_longctx.metrics.faithfulness import STRUCTURE

MIN_NEW_PAIRS = 3


def word_pairs(text: str) -> set[tuple[str, str]]:
    words = [w for w in WORD.findall(text.lower()) if w not in STOPWORDS and len(w) > 1]
    return set(zip(words, words[1:]))


def sources(message: Message, original: Sequence[Message], originals: Sequence[set[tuple[str, str]]]) -> list[int]:
    """Indices of the originals ``message`` draws on, its main source first (among equals,
    one of its own role, then the earliest)."""
    left = word_pairs(message.content)
    found: list[int] = []
    while left:
        gains = [len(pairs & left) if n not in found else 0 for n, pairs in enumerate(originals)]
        best = max(range(len(gains)), key=lambda n: (gains[n], original[n].role == message.role, -n), default=None)
        if best is None or gains[best] < (MIN_NEW_PAIRS if found else 1):
            break
        found.append(best)
        left -= originals[best]
    return found


def structural_changes(original: Sequence[Message], compressed: Sequence[Message]) -> dict[str, int]:
    """How many compressed messages were merged, changed role, or are inserted system messages."""
    pairs = [word_pairs(m.content) for m in original]
    changes = dict.fromkeys(STRUCTURE, 0)
    for message in compressed:
        found = sources(message, original, pairs)
        changes["merged"] += len(found) > 1
        main = original[found[0]].role if found else None
        if message.role == "system" and main != "system":
            changes["system_inserted"] += 1
        elif main is not None and main != message.role:
            changes["roles_changed"] += 1
    return changes
