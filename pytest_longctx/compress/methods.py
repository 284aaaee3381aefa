"""Built-in reference compressors, each ``compress(messages, probe, **knobs) -> messages``.

Messages are dicts ``{"role", "content", "name"}``. Every method keeps the system
messages whole, as agent harnesses do, and compresses the rest:

* ``last_tokens(tokens=N)``: the last N tokens of the other messages' contents (the
  model's tokenizer; the first message kept may be cut at a token boundary).
* ``last_messages(count=K)``: the last K other messages.
* ``message_relevance(ratio=R)`` / ``sentence_relevance(ratio=R)``: bag-of-words
  relevance to the probe (distinct content words shared), at message or sentence
  (and line) granularity; the most relevant units are kept, the most recent first among
  equals, until ``1 - R`` of the content's characters are used.
* ``selective_context(ratio=R)``: Selective Context, query-agnostic: each word's
  self-information under the evaluated model (the sum over its tokens of
  ``-log p(token | text before)``, the text being the session's contents joined with
  newlines); the share R of the words with the least is dropped.

A message left empty is dropped.
"""
from __future__ import annotations

import re
from typing import Any, Callable

import numpy as np

from pytest_longctx.compress.words import content_words

Messages = list[dict[str, Any]]
Span = tuple[int, int]

SENTENCE_END = re.compile(r"[.!?](?=\s)|\n")


def _split(messages: Messages) -> tuple[list[int], list[int]]:
    """(indices of system messages, indices of the others)."""
    system = [n for n, m in enumerate(messages) if m["role"] == "system"]
    return system, [n for n in range(len(messages)) if n not in system]


def _rebuilt(messages: Messages, contents: dict[int, str]) -> Messages:
    """System messages as they were, the others with their new contents; empty ones dropped."""
    out = []
    for n, message in enumerate(messages):
        if message["role"] == "system":
            out.append(message)
        elif contents.get(n, "").strip():
            out.append({**message, "content": contents[n]})
    return out


def identity(messages: Messages, probe: str) -> Messages:
    """Keeps everything: retention 1.00, savings 0 (a check of the harness)."""
    return messages


def last_messages(messages: Messages, probe: str, *, count: int = 8) -> Messages:
    _, others = _split(messages)
    kept = others[max(0, len(others) - count):] if count > 0 else []
    return _rebuilt(messages, {n: messages[n]["content"] for n in kept})


def last_tokens(messages: Messages, probe: str, *, tokens: int = 512, tokenizer: Any) -> Messages:
    _, others = _split(messages)
    left, contents = tokens, {}
    for n in reversed(others):
        if left <= 0:
            break
        content = messages[n]["content"]
        offsets = tokenizer(content, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
        if len(offsets) <= left:
            contents[n] = content
        else:
            contents[n] = content[offsets[len(offsets) - left][0]:]
        left -= len(offsets)
    return _rebuilt(messages, contents)


def _keep_relevant(units: list[tuple[int, Span]], messages: Messages, probe: str, ratio: float) -> set[int]:
    """Indices of the units kept: most relevant first, the later first among equals,
    while they fit in ``1 - ratio`` of the units' characters."""
    wanted = content_words(probe)
    sizes = [end - start for _, (start, end) in units]
    scores = [len(content_words(messages[n]["content"][start:end]) & wanted) for n, (start, end) in units]
    budget = (1 - ratio) * sum(sizes)
    kept, used = set(), 0
    for index in sorted(range(len(units)), key=lambda i: (-scores[i], -i)):
        if used + sizes[index] <= budget:
            kept.add(index)
            used += sizes[index]
    return kept


def _compress_units(messages: Messages, units: list[tuple[int, Span]], kept: set[int]) -> Messages:
    contents: dict[int, str] = {}
    for index, (n, (start, end)) in enumerate(units):
        if index in kept:
            contents[n] = contents.get(n, "") + messages[n]["content"][start:end]
    return _rebuilt(messages, {n: text.strip() for n, text in contents.items()})


def sentences(text: str) -> list[Span]:
    """Sentence (and line) spans that cover the text; a sentence keeps its leading space."""
    spans, start = [], 0
    for match in SENTENCE_END.finditer(text):
        if text[start:match.end()].strip():
            spans.append((start, match.end()))
        elif spans:  # a line break after a sentence end stays with the sentence
            spans[-1] = (spans[-1][0], match.end())
        start = match.end()
    if text[start:].strip():
        spans.append((start, len(text)))
    return spans


def _by_relevance(messages: Messages, probe: str, ratio: float, unit_spans: Callable[[str], list[Span]]) -> Messages:
    _, others = _split(messages)
    units = [(n, span) for n in others for span in unit_spans(messages[n]["content"])]
    return _compress_units(messages, units, _keep_relevant(units, messages, probe, ratio))


def message_relevance(messages: Messages, probe: str, *, ratio: float = 0.5) -> Messages:
    return _by_relevance(messages, probe, ratio, lambda text: [(0, len(text))] if text.strip() else [])


def sentence_relevance(messages: Messages, probe: str, *, ratio: float = 0.5) -> Messages:
    return _by_relevance(messages, probe, ratio, sentences)


def selective_context(messages: Messages, probe: str, *, ratio: float = 0.5, scorer: Any) -> Messages:
    """``scorer(text)`` gives (start, end, self-information in nats) of each token of the
    text; the first token, which nothing predicts, has an infinite value and is kept."""
    text = "\n".join(m["content"] for m in messages)
    starts = np.cumsum([0] + [len(m["content"]) + 1 for m in messages])
    found = [(n, match) for n in _split(messages)[1] for match in re.finditer(r"(\S+)\s*", messages[n]["content"])]
    words = [(n, match.span()) for n, match in found]  # a word with the space after it: what is kept
    info = np.zeros(len(words))
    owner = np.full(len(text) + 1, -1)  # character -> the word it belongs to
    for index, (n, match) in enumerate(found):
        owner[starts[n] + match.start(1): starts[n] + match.end(1)] = index
    for _, end, nats in scorer(text):
        word = owner[end - 1] if end > 0 else -1
        if word >= 0:
            info[word] += nats
    ranked = [index for index in np.argsort(info, kind="stable") if np.isfinite(info[index])]
    dropped = set(ranked[: int(round(ratio * len(ranked)))])  # the least informative; earlier ones first among equals
    return _compress_units(messages, words, set(range(len(words))) - dropped)


# the built-ins' knobs: the smallest value and the largest (None: no largest)
KNOB_RANGES: dict[str, tuple[float, float | None]] = {"count": (0, None), "tokens": (0, None), "ratio": (0.0, 1.0)}

BUILTIN: dict[str, Callable[..., Messages]] = {
    f.__name__: f for f in (identity, last_tokens, last_messages, message_relevance, sentence_relevance, selective_context)
}
