"""The built-in compressors and the compressor interface, Layer A (no model)."""
from __future__ import annotations

import re

import pytest

from pytest_longctx.compress.evaluate import compress_one
from pytest_longctx.compress.interface import resolve
from pytest_longctx.compress.methods import last_messages, selective_context, sentence_relevance, sentences
from pytest_longctx.data.builtin.faithfulness import build_faithfulness
from pytest_longctx.errors import LongctxError
from pytest_longctx.metrics.faithfulness import compression_metrics


def run(spec, knobs, sessions, reader):
    compressor = resolve(spec, knobs)
    outcomes = {item.id: compress_one(compressor, "train", item, reader).outcome for item in sessions}
    return compression_metrics(sessions, outcomes), outcomes


def test_identity_keeps_every_fact_and_saves_nothing(sessions, reader):
    metrics, outcomes = run("identity", {}, sessions, reader)
    assert metrics["retention"] == 1.0 and metrics["savings"] == 0.0 and metrics["errors"] == 0
    assert all(o["tokens_compressed"] == o["tokens_full"] > 300 for o in outcomes.values())


def test_truncation_loses_early_facts_first(sessions, reader, qwen_tokenizer):
    for spec, knobs in (("last_tokens", {"tokens": 300}), ("last_messages", {"count": 8})):
        metrics, _ = run(spec, knobs, sessions, reader)
        depth = {d: metrics["by_depth"][d]["retention"] for d in ("early", "mid", "recent")}
        assert depth["early"] <= depth["mid"] <= depth["recent"] == 1.0 and depth["early"] < 0.2, (spec, depth)
        assert 0.3 < metrics["savings"] < 0.8
    kept = resolve("last_tokens", {"tokens": 300})(sessions[0], {"tokenizer": qwen_tokenizer}).messages
    assert kept[0] == sessions[0].messages[0]
    content = [len(qwen_tokenizer(m.content, add_special_tokens=False)["input_ids"]) for m in kept[1:]]
    assert sum(content) <= 300 + len(content)  # a cut message may tokenize one token longer at its new start
    assert kept[-1] == sessions[0].messages[-1]


def test_last_messages_keeps_the_system_prompt_and_the_last_k():
    messages = [{"role": "system", "content": "S", "name": None}] + [
        {"role": "user" if n % 2 else "assistant", "content": f"m{n}", "name": None} for n in range(6)]
    assert last_messages(messages, "?", count=2) == [messages[0], messages[-2], messages[-1]]
    assert last_messages(messages, "?", count=10) == messages


def test_bag_of_words_relevance_keeps_verbatim_probes_and_loses_paraphrases(sessions, reader):
    for spec in ("message_relevance", "sentence_relevance"):
        metrics, _ = run(spec, {"ratio": 0.5}, sessions, reader)
        by_type = metrics["by_probe_type"]
        assert by_type["verbatim"]["retention"] >= 0.95 and by_type["paraphrase"]["retention"] < 0.8, spec
        assert abs(metrics["savings"] - 0.5) < 0.1, spec


def test_sentence_relevance_keeps_the_sentence_not_its_message():
    text = "Tests are green. The cache TTL is 740 seconds. The docs build passes."
    lines = text + "\nnext line"
    assert [lines[s:e] for s, e in sentences(lines)] == [
        "Tests are green.", " The cache TTL is 740 seconds.", " The docs build passes.\n", "next line"]
    messages = [{"role": "system", "content": "S", "name": None}, {"role": "assistant", "content": text, "name": None},
                {"role": "user", "content": "Unrelated chatter about lunch plans.", "name": None}]
    kept = sentence_relevance(messages, "What is the cache TTL?", ratio=0.6)
    assert kept == [messages[0], {"role": "assistant", "content": "The cache TTL is 740 seconds.", "name": None}]


def digit_scorer(text):
    """Self-information stand-in: words with a digit are surprising (10 nats per token), others not (1)."""
    return [(m.start(), m.end(), 10.0 if re.search(r"\d", m.group()) else 1.0) for m in re.finditer(r"\S+", text)]


def test_selective_context_drops_the_least_informative_words():
    messages = [{"role": "system", "content": "Be brief.", "name": None},
                {"role": "assistant", "content": "The admin console listens on port 9412 now.", "name": None},
                {"role": "user", "content": "ok then", "name": None}]
    assert selective_context(messages, "?", ratio=0.0, scorer=digit_scorer) == messages
    kept = selective_context(messages, "?", ratio=0.9, scorer=digit_scorer)  # 9 of the 10 words go
    assert kept == [messages[0], {"role": "assistant", "content": "9412", "name": None}]
    kept = selective_context(messages, "?", ratio=0.5, scorer=digit_scorer)  # equals: the earlier go first
    assert kept == [messages[0], {"role": "assistant", "content": "port 9412 now.", "name": None}, messages[2]]


def test_selective_context_without_a_model_is_one_clear_error(sessions, reader):
    with pytest.raises(LongctxError, match="selective_context reads the model.s log-probabilities .*--longctx-model"):
        compress_one(resolve("selective_context", {"ratio": 0.5}), "train", sessions[0], reader)


def boom(messages, probe):
    if "namespace" in probe or "cluster" in probe:
        raise ValueError("cannot handle clusters")
    return messages


def malformed(messages, probe, *, how="text"):
    return {"text": "a string", "content": [{"role": "user", "content": 3}], "role": [{"content": "x"}]}[how]


def test_a_failing_compressor_fails_its_item_only_and_names_it(sessions, reader):
    metrics, outcomes = run(f"{__name__}:boom", {}, sessions, reader)
    failed = {i for i, o in outcomes.items() if o["error"]}
    assert failed == {i.id for i in sessions if i.concept == "namespace"} and failed
    first = sorted(failed)[0]
    assert outcomes[first]["error"] == f"item {first}: compressor {__name__}:boom raised ValueError: cannot handle clusters"
    assert metrics["errors"] == len(failed) and metrics["retention"] == 1 - len(failed) / len(sessions)
    for how, what in (("text", "returned str"), ("content", "message 0 has role 'user', content of type int"),
                      ("role", "message 0 has role None")):
        _, outcomes = run(f"{__name__}:malformed", {"how": how}, sessions[:2], reader)
        error = outcomes[sessions[1].id]["error"]
        assert error.startswith(f"item {sessions[1].id}: compressor {__name__}:malformed how={how}") and what in error
        assert "must return a list of messages" in error


@pytest.mark.parametrize("spec, knobs, expected", [
    ("last_tokens", {"count": 3}, "compressor last_tokens: unknown knob count; it takes tokens"),
    ("last_tokens", {"tokenizer": 3}, "unknown knob tokenizer"),
    ("no_such_method", {}, "expected module:function or one of identity, last_tokens"),
    ("no_such_module:fn", {}, "cannot import it (ModuleNotFoundError"),
    (f"{__name__}:nothing_here", {}, "cannot import it (AttributeError"),
])
def test_a_bad_compressor_spec_is_one_clear_error(spec, knobs, expected):
    with pytest.raises(LongctxError) as error:
        resolve(spec, knobs)
    assert expected in str(error.value)


def test_savings_count_each_splits_own_session_when_ids_repeat(sessions, reader):
    """Ids are unique within a split only: an item of another split with the same id is counted anew."""
    import dataclasses

    first, other = sessions[0], sessions[1]
    twin = dataclasses.replace(other, id=first.id)  # another split's item that happens to share the id
    identity = resolve("identity", {})
    a, b = compress_one(identity, "train", first, reader), compress_one(identity, "test", twin, reader)
    assert a.outcome["tokens_full"] == a.outcome["tokens_compressed"]
    assert b.outcome["tokens_full"] == b.outcome["tokens_compressed"] != a.outcome["tokens_full"]


def broken(messages, probe):
    raise ImportError("needs the model file model.bin")


def test_a_compressor_that_cannot_start_stops_the_run_with_one_line(sessions, reader, tmp_path, capsys):
    from pytest_longctx.cli import main
    from pytest_longctx.compress.evaluate import START_SESSIONS, compress_all

    with pytest.raises(LongctxError) as stopped:
        compress_all(resolve(f"{__name__}:broken", {}), [("train", item) for item in sessions], reader)
    assert str(stopped.value) == (f"compressor {__name__}:broken could not start: compressor {__name__}:broken raised "
                                  f"ImportError: needs the model file model.bin (the same on each of the first "
                                  f"{START_SESSIONS} sessions; none was measured)")
    # a compressor that fails some sessions only goes on: its failures are the items'
    done = compress_all(resolve(f"{__name__}:boom", {}), [("train", item) for item in sessions], reader)
    assert len(done) == len(sessions) and any(c.outcome["error"] for c in done)
    # through compress-bench: exit 2 and the one line, not a failure per session
    data = tmp_path / "faithfulness"
    data.mkdir()
    (data / "train.jsonl").write_text("".join(__import__("json").dumps(r) + "\n" for r in build_faithfulness(seed=0, limit=6)))
    code = main(["compress-bench", "--data", str(tmp_path), "--methods", f"{__name__}:broken", "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("could not start") == 1 and "ImportError" in err
