"""Running a compressor over sessions: Layer A (retention), realized savings and, with a
model, Layer B (the answer teacher-forced under the full and the compressed context)."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from pytest_longctx.backends.base import Backend, describe, tokenizer_of
from pytest_longctx.compress.cache import CompressionCache
from pytest_longctx.compress.encoding import Encoding
from pytest_longctx.compress.interface import Compression, Compressor
from pytest_longctx.compress.selfinfo import SelfInformation
from pytest_longctx.compress.structure import structural_changes
from pytest_longctx.data.qwen import qwen35_tokenizer
from pytest_longctx.data.records import FAITHFULNESS, FaithfulnessItem, Message, session_text
from pytest_longctx.errors import LongctxError
from pytest_longctx.metrics.faithfulness import RETAINED_FACTS, Outcome
from pytest_longctx.scoring import engine
from pytest_longctx.scoring.chat import count_tokens
from pytest_longctx.scoring.records import item_records
from pytest_longctx.scoring.text_mode import session_reads

REFERENCE_TOKENIZER = "Qwen3.5 (the benchmark's reference tokenizer)"


@dataclass
class Reader:
    """What a compression is measured with: the tokenizer that counts savings (and its
    name, for the output) and, for Layer B and self-information, the model's backend."""

    tokenizer: Any
    tokenizer_name: str
    backend: Backend | None = None
    # (split, item id) -> tokens of its full session: the rendered chat, and its contents alone
    token_counts: dict[tuple[str, str], tuple[int, int]] = field(default_factory=dict)
    scorer: SelfInformation | None = None
    cache: CompressionCache | None = None  # outputs of compressors that ask for it

    def __post_init__(self) -> None:
        self.encoding = Encoding(self.tokenizer, self.tokenizer_name)

    @classmethod
    def of(cls, backend: Backend | None, model: str | None) -> Reader:
        """The model's reader, or without one (Layer A only) the Qwen3.5 tokenizer's."""
        if backend is None:
            return cls(qwen35_tokenizer(), REFERENCE_TOKENIZER)
        tokenizer = tokenizer_of(backend)
        if tokenizer is None:
            raise LongctxError(f"model {model}: its backend has no tokenizer; compressed sessions are rendered "
                               "and counted with the model's tokenizer")
        return cls(tokenizer, f"the tokenizer of {model}", backend, scorer=SelfInformation(backend, tokenizer))

    def services(self, compressor: Compressor) -> dict[str, Any]:
        if "scorer" in compressor.needs and self.scorer is None:
            raise LongctxError(f"compressor {compressor.spec} reads the model's log-probabilities (it takes 'scorer'): "
                               "give the model (--longctx-model, or --model for compress-bench)")
        return {"tokenizer": self.tokenizer, "encoding": self.encoding, "scorer": self.scorer}

    def given(self, compressor: Compressor) -> str | None:
        """What a compressor's output depends on besides the session and its knobs: the
        tokenizer, and the model when it reads one; None when nothing fingerprints that
        model's weights (a served one): then nothing names the output, and it is not kept."""
        if self.backend is None or "scorer" not in compressor.needs:
            return json.dumps([self.tokenizer_name, None])
        weights = describe(self.backend).get("weights")
        return json.dumps([self.tokenizer_name, weights]) if weights else None

    def content_tokens(self, messages: Sequence[Message]) -> int:
        """Tokens of the messages' contents, each counted alone: no chat markup, so merging
        messages or re-wrapping them saves nothing here."""
        return sum(len(self.encoding.encode(m.content)) for m in messages)

    def full_tokens(self, split: str, item: FaithfulnessItem) -> tuple[int, int]:
        """(rendered chat, contents) tokens of the item's full session, counted once per item
        (ids are unique within a split only)."""
        key = (split, item.id)
        if key not in self.token_counts:
            self.token_counts[key] = (count_tokens(self.tokenizer, item.messages, item.id), self.content_tokens(item.messages))
        return self.token_counts[key]


@dataclass
class Compressed:
    """One session through one compressor: the compressed messages and what they kept."""

    split: str
    item: FaithfulnessItem
    messages: tuple[Message, ...] | None  # None when the compression failed
    outcome: Outcome


def facts_found(item: FaithfulnessItem, text: str) -> int:
    return sum(re.search(fact, text, re.IGNORECASE) is not None for fact in item.required_facts)


def retained_facts(item: FaithfulnessItem, messages: Sequence[Message]) -> int:
    """Layer A: the required facts found in the messages' joined contents."""
    return facts_found(item, session_text(messages))


def _compressed(compressor: Compressor, item: FaithfulnessItem, reader: Reader, services: dict[str, Any]) -> Compression:
    """The compressor's output, from the cache when it asks for one and has it there."""
    given = reader.given(compressor) if reader.cache is not None and compressor.conventions.cache else None
    if reader.cache is None or given is None:
        return compressor(item, services)
    key = reader.cache.key(compressor, item, given)
    found = reader.cache.get(key)
    if found is None:
        found = compressor(item, services)
        reader.cache.put(key, found)
    return found


def compress_one(compressor: Compressor, split: str, item: FaithfulnessItem, reader: Reader) -> Compressed:
    """One item compressed and measured; a failure (the compressor's, or a chat template
    that cannot render its output) is the item's error, not the run's. With references
    it can expand, ``retained_expanded`` counts the facts found with every one expanded."""
    services = reader.services(compressor)  # a missing model fails the run, not the item
    outcome: Outcome = {"facts": len(item.required_facts), RETAINED_FACTS: 0, "tokens_full": None,
                        "tokens_compressed": None, "error": None}
    messages: tuple[Message, ...] | None = None
    try:
        compression = _compressed(compressor, item, reader, services)
        messages = compression.messages
        outcome["tokens_full"], outcome["content_full"] = reader.full_tokens(split, item)
        outcome["tokens_compressed"] = count_tokens(reader.tokenizer, messages, item.id)
        outcome["content_compressed"] = reader.content_tokens(messages)
        outcome[RETAINED_FACTS] = retained_facts(item, messages)
        if compression.expansions is not None:
            expanded = [session_text(messages), *(text for text in compression.expansions.values() if text)]
            outcome["retained_expanded"] = facts_found(item, "\n".join(expanded))
        outcome["structure"] = structural_changes(item.messages, messages)
    except LongctxError as exc:  # CompressorError, or a chat template that cannot render the messages
        messages, outcome["error"] = None, str(exc)
    return Compressed(split, item, messages, outcome)


# a compressor that fails the same way on each of the first sessions could not start: the
# run stops with that one line instead of failing every session with it
START_SESSIONS = 3


def compress_all(compressor: Compressor, pairs: Sequence[tuple[str, FaithfulnessItem]], reader: Reader) -> list[Compressed]:
    """``compress_one`` over (split, item) pairs; ``LongctxError`` when the first
    ``START_SESSIONS`` sessions all fail with the same error (the item's id aside)."""
    done: list[Compressed] = []
    for split, item in pairs:
        done.append(compress_one(compressor, split, item, reader))
        if len(done) == START_SESSIONS:
            errors = {c.outcome["error"].removeprefix(f"item {c.item.id}: ") if c.outcome["error"] else None for c in done}
            if len(errors) == 1 and None not in errors:
                raise LongctxError(f"compressor {compressor.label} could not start: {errors.pop()} "
                                   f"(the same on each of the first {START_SESSIONS} sessions; none was measured)")
    return done


def read_answers(reader: Reader, compressed: Sequence[Compressed], progress: Callable[[int, int], Any] | None = None,
                 cache: Any = None) -> None:
    """Layer B for every compressed item: ``outcome["full"]`` and ``outcome["compressed"]``
    get the answer's raw records (hits and log-probabilities, or why it is unaligned)."""
    done = [(c, c.messages) for c in compressed if c.messages is not None]
    plans = [session_reads(reader.tokenizer, FAITHFULNESS, c.split, c.item, [c.item.messages, messages]) for c, messages in done]
    for (c, _), plan, scores in zip(done, plans, engine.run(reader.backend, plans, progress, cache=cache, mode="text")):
        c.outcome["full"], c.outcome["compressed"] = item_records(plan, scores, top_k=0).targets
