"""How a compressor may ask to be called (the probe as the last message, the gate's
tokenizer as a tiktoken-like encoding, references it expands, a package it needs, a cache
of its outputs), and the savings and structural changes no compressor can game."""
from __future__ import annotations

import re

import pytest

from pytest_longctx.compress.cache import CompressionCache
from pytest_longctx.compress.conventions import conventions
from pytest_longctx.compress.evaluate import Reader, compress_one
from pytest_longctx.compress.interface import resolve
from pytest_longctx.compress.structure import structural_changes
from pytest_longctx.data.records import Message
from pytest_longctx.errors import LongctxError
from pytest_longctx.metrics.faithfulness import compression_summary

SEEN: list[list[dict]] = []
STORE: dict[str, str] = {}
CALLS: list[str] = []


@conventions(probe="last_message")
def with_prompt(messages, probe):
    SEEN.append(messages)
    return messages


@conventions(probe="last_message")
def drops_prompt(messages, probe):
    return messages[:-1]


def stash(ref: str) -> str | None:
    return STORE.get(ref)


@conventions(expand=stash, refs=r"\[stored (\w+)\]")
def stashing(messages, probe):
    """Every message but the system prompt replaced by a reference to its content."""
    out = []
    for n, m in enumerate(messages):
        if m["role"] == "system":
            out.append(m)
        else:
            STORE[f"m{n}x{len(m['content'])}"] = m["content"]
            out.append({**m, "content": f"[stored m{n}x{len(m['content'])}]"})
    return out


def merge_all(messages, probe):
    """Everything in one user message: nothing dropped."""
    return [{"role": "user", "content": "\n\n".join(m["content"] for m in messages), "name": None}]


def counting(messages, probe, *, budget: int = 40, encoding):
    """Each message cut to its first ``budget`` tokens of the given encoding."""
    return [{**m, "content": encoding.decode(encoding.encode(m["content"])[:budget])} for m in messages]


@conventions(requires="a-package-nobody-installs", extra="nothing")
def needs_a_package(messages, probe):
    return messages


@conventions(cache=("pytest",))
def slow(messages, probe, *, keep: int = 3):
    CALLS.append(probe)
    return messages[-keep:]


@conventions(cache=("pytest",))
def slow_reading_the_model(messages, probe, *, scorer):
    CALLS.append(probe)
    return messages[-2:]


def test_the_probe_as_the_last_message_goes_in_and_is_taken_off(sessions, reader):
    item = sessions[0]
    done = compress_one(resolve(f"{__name__}:with_prompt", {}), "train", item, reader)
    assert SEEN[-1][-1] == {"role": "user", "content": item.probe, "name": None}
    assert len(SEEN[-1]) == len(item.messages) + 1
    assert done.messages == item.messages and done.outcome["retained"] == 1 and done.outcome["tokens_compressed"] == \
        done.outcome["tokens_full"]
    failed = compress_one(resolve(f"{__name__}:drops_prompt", {}), "train", item, reader).outcome["error"]
    assert failed.startswith(f"item {item.id}: compressor {__name__}:drops_prompt: it takes the probe as the last message")


def test_references_are_counted_without_and_with_expansion(sessions, reader):
    outcomes = [compress_one(resolve(f"{__name__}:stashing", {}), "train", item, reader).outcome for item in sessions]
    assert all(o["retained"] == 0 and o["retained_expanded"] == 1 for o in outcomes)
    summary = compression_summary(outcomes)
    assert summary["retention"] == 0.0 and summary["retention_expanded"] == 1.0 and summary["savings"] > 0.5
    plain = compression_summary([compress_one(resolve("identity", {}), "train", sessions[0], reader).outcome])
    assert plain["retention_expanded"] is None  # nothing to expand: no second figure


def test_an_expand_that_breaks_fails_the_session_with_one_line(sessions, reader):
    def broken(ref):
        raise KeyError(ref)

    spec = resolve(f"{__name__}:stashing", {})
    from dataclasses import replace
    compressor = replace(spec, conventions=replace(spec.conventions, expand=broken))
    error = compress_one(compressor, "train", sessions[0], reader).outcome["error"]
    assert re.fullmatch(rf"item {sessions[0].id}: compressor {__name__}:stashing: expand\('m1x\d+'\) raised KeyError: 'm1x\d+'",
                        error)


def test_the_encoding_is_the_gate_tokenizer_shaped_like_tiktoken(sessions, reader, qwen_tokenizer):
    text = sessions[0].messages[2].content
    ids = reader.encoding.encode(text, disallowed_special=())
    assert ids == qwen_tokenizer(text, add_special_tokens=False)["input_ids"]
    assert reader.encoding.decode(ids) == text and reader.encoding.n_vocab == len(qwen_tokenizer)
    done = compress_one(resolve(f"{__name__}:counting", {"budget": 5}), "train", sessions[0], reader)
    assert all(len(qwen_tokenizer(m.content, add_special_tokens=False)["input_ids"]) <= 6 for m in done.messages)


def test_merging_messages_earns_rendered_savings_but_no_content_savings(sessions, reader):
    outcomes = [compress_one(resolve(f"{__name__}:merge_all", {}), "train", item, reader).outcome for item in sessions]
    summary = compression_summary(outcomes)
    assert summary["retention"] == 1.0
    assert summary["savings"] > 0.05  # the chat markup of every merged turn
    assert summary["content_savings"] <= 0.0  # the contents are all there (and the separators)
    assert summary["structure"]["merged"] == len(sessions) and summary["sessions_restructured"] == len(sessions)
    assert abs(summary["session_savings"] - sum(1 - o["tokens_compressed"] / o["tokens_full"] for o in outcomes) / len(outcomes)) < 1e-12


def test_structural_changes_are_told_apart(sessions):
    item = sessions[1]
    original = list(item.messages)
    assert structural_changes(original, original) == {"merged": 0, "roles_changed": 0, "system_inserted": 0}
    trimmed = [Message(m.role, m.content[: len(m.content) // 2], m.name) for m in original[::2]]
    assert structural_changes(original, trimmed) == {"merged": 0, "roles_changed": 0, "system_inserted": 0}
    summary = Message("system", "Earlier turns:\n" + "\n".join(m.content for m in original[1:5]))
    recast = Message("user", original[3].content)
    changed = [original[0], summary, recast, *original[5:]]
    assert structural_changes(original, changed) == {"merged": 1, "roles_changed": int(original[3].role != "user"),
                                                     "system_inserted": 1}
    footer = Message(original[2].role, original[2].content + "\n[trimmed: compressed 400->120 tokens; full output ref=ab12cd34]")
    assert structural_changes(original, [footer]) == {"merged": 0, "roles_changed": 0, "system_inserted": 0}


def test_a_compressor_whose_package_is_missing_says_what_to_install():
    with pytest.raises(LongctxError) as missing:
        resolve(f"{__name__}:needs_a_package", {})
    assert str(missing.value) == (f"compressor {__name__}:needs_a_package needs the a-package-nobody-installs package: "
                                  'pip install "pytest-longctx[nothing]"')


def test_declarations_are_checked():
    with pytest.raises(ValueError, match="probe='first'"):
        conventions(probe="first")
    with pytest.raises(ValueError, match="expand and refs go together"):
        conventions(expand=stash)
    with pytest.raises(ValueError, match="needs a group"):
        conventions(expand=stash, refs=r"ref=\w+")


def test_a_slow_compressor_is_read_from_its_cache_on_the_second_run(sessions, qwen_tokenizer, tmp_path):
    warnings: list[str] = []
    cached = Reader.of(None, None)
    cached.cache = CompressionCache.at(tmp_path, warnings.append)
    compressor = resolve(f"{__name__}:slow", {"keep": 2})
    CALLS.clear()
    first = [compress_one(compressor, "train", item, cached).outcome for item in sessions[:4]]
    assert len(CALLS) == 4 and cached.cache.misses == 4
    again = [compress_one(compressor, "train", item, cached).outcome for item in sessions[:4]]
    assert len(CALLS) == 4 and cached.cache.hits == 4 and again == first
    compress_one(resolve(f"{__name__}:slow", {"keep": 3}), "train", sessions[0], cached)  # other knobs: another key
    assert len(CALLS) == 5
    for path in (tmp_path / "compressed").glob("*.json"):
        path.write_text("{damaged")
    assert compress_one(compressor, "train", sessions[0], cached).outcome == first[0] and len(CALLS) == 6
    compress_one(resolve("last_messages", {"count": 2}), "train", sessions[0], cached)  # built-ins are not cached
    assert len(list((tmp_path / "compressed").glob("*.json"))) == 5 and not warnings
    assert CompressionCache.at("off", warnings.append) is None


def test_a_slow_compressor_that_reads_a_model_without_a_weight_fingerprint_is_not_kept(sessions, qwen_tokenizer, tmp_path):
    class Served:
        """A model whose weights nothing fingerprints (a vLLM server without reuse-scores)."""

        def read(self, ids, positions, tokens, top_k=0):
            raise AssertionError("not read here")

        def describe(self):
            return {"weights": None}

    reader = Reader(qwen_tokenizer, "the tokenizer of a served model", backend=Served(), scorer=object())
    reader.cache = CompressionCache.at(tmp_path, print)
    compressor = resolve(f"{__name__}:slow_reading_the_model", {})
    CALLS.clear()
    for _ in range(2):
        compress_one(compressor, "train", sessions[0], reader)
    assert len(CALLS) == 2 and not list((tmp_path / "compressed").glob("*.json"))
