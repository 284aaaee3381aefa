"""Layer B and the model gate's faithfulness config against a naive computation: the
session written out in ChatML by hand, one full forward pass, full-vocabulary
log-softmax (``naive.reads``), the answer's tokens found from the offsets."""
from __future__ import annotations

import copy
import json
import math
import re

import pytest
from kit import naive
from kit.items import write_split
from kit.models import degraded_model, save_model, trained_qwen3

from pytest_longctx.backends.hf import TransformersBackend
from pytest_longctx.compress.evaluate import Reader, compress_one, read_answers
from pytest_longctx.compress.interface import resolve
from pytest_longctx.data.builtin.faithfulness import build_faithfulness
from pytest_longctx.data.load import load_dataset
from pytest_longctx.data.schema import parse_item
from pytest_longctx.scoring.chat import render
from pytest_longctx.scoring.pipeline import score_sets
from pytest_longctx.scoring.text_mode import session_reads

TOL = 1e-4


def chatml(messages, probe):
    turns = "".join(f"<|im_start|>{m.role}\n{m.content}<|im_end|>\n" for m in messages)
    return turns + f"<|im_start|>user\n{probe}<|im_end|>\n<|im_start|>assistant\n"


def answer_of(item):
    return re.search(item.required_facts[0], "\n".join(m.content for m in item.messages), re.IGNORECASE).group(0)


def naive_answer(model, tokenizer, messages, item):
    """[(hit, log p)] of each answer token after ``messages`` and the probe."""
    prompt = chatml(messages, item.probe)
    text = prompt + answer_of(item)
    encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    ids = encoded["input_ids"]
    tokens = [n for n, (start, end) in enumerate(encoded["offset_mapping"]) if end > len(prompt)]
    assert encoded["offset_mapping"][tokens[0]][0] == len(prompt)
    return [(top1 == ids[p], lp) for p, (top1, lp) in zip(tokens, naive.reads(model, ids, [(p - 1, ids[p]) for p in tokens]))]


@pytest.fixture(scope="module")
def rows():
    """Builder sessions without their long tool outputs (the fact stays): short texts for a tiny model."""
    short = []
    for row in build_faithfulness(seed=0, limit=6):
        fact = re.compile(row["required_facts"][0], re.IGNORECASE)
        messages = [m for m in row["messages"] if len(m["content"]) < 120 or fact.search(m["content"])]
        short.append({**row, "messages": messages})
    return short


@pytest.fixture(scope="module")
def sessions(rows):
    return [parse_item("faithfulness", row, f"row {n}") for n, row in enumerate(rows)]


@pytest.fixture(scope="module")
def model(sessions, qwen_tokenizer):
    """A tiny qwen3 that has memorised each full session with its probe and answer."""
    texts = [chatml(item.messages, item.probe) + answer_of(item) for item in sessions]
    sequences = [qwen_tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
    return trained_qwen3(sequences, len(qwen_tokenizer), steps=40)


@pytest.fixture(scope="module")
def backend(model, qwen_tokenizer):
    return TransformersBackend(model, qwen_tokenizer, name="tiny")


def test_layer_b_equals_the_naive_pass_under_full_and_compressed_contexts(backend, model, sessions, qwen_tokenizer):
    reader = Reader.of(backend, "tiny")
    hits = {"full": 0, "compressed": 0}
    for spec, knobs in (("identity", {}), ("last_messages", {"count": 6})):
        done = [compress_one(resolve(spec, knobs), "train", item, reader) for item in sessions]
        read_answers(reader, done)
        for c in done:
            for context, messages in (("full", c.item.messages), ("compressed", c.messages)):
                record = c.outcome[context]
                expected = naive_answer(model, qwen_tokenizer, messages, c.item)
                assert record["hits"] == [h for h, _ in expected], (spec, c.item.id, context)
                assert all(math.isclose(a, b, abs_tol=TOL) for a, (_, b) in zip(record["logprobs"], expected))
                hits[context] += all(record["hits"]) if spec != "identity" else 0
            if spec == "identity":
                assert c.outcome["full"] == c.outcome["compressed"]
    assert hits["full"] > hits["compressed"], "the memorised answers should need their full sessions"


def test_self_information_is_the_naive_negative_log_probability(backend, model, sessions, qwen_tokenizer):
    text = "\n".join(m.content for m in sessions[0].messages[:4])
    tokens = Reader.of(backend, "tiny").scorer(text)
    ids = qwen_tokenizer(text, add_special_tokens=False)["input_ids"]
    expected = naive.reads(model, ids, [(p - 1, ids[p]) for p in range(1, len(ids))])
    assert len(tokens) == len(ids) and tokens[0][2] == math.inf
    assert all(math.isclose(nats, -lp, abs_tol=TOL) for (_, _, nats), (_, lp) in zip(tokens[1:], expected))
    kept = compress_one(resolve("selective_context", {"ratio": 0.5}), "train", sessions[0], Reader.of(backend, "tiny"))
    words = [len(m.content.split()) for m in sessions[0].messages[1:]]
    assert kept.outcome["error"] is None
    assert sum(len(m.content.split()) for m in kept.messages[1:]) == sum(words) - round(0.5 * sum(words))


def test_the_model_gate_config_equals_the_naive_pass(backend, model, rows, sessions, qwen_tokenizer, tmp_path):
    write_split(tmp_path, "faithfulness", "train", rows)
    results = score_sets(backend, qwen_tokenizer, load_dataset(tmp_path), progress=False)
    metrics = results.sets["faithfulness"]["train"]
    expected = [naive_answer(model, qwen_tokenizer, item.messages, item) for item in sessions]
    recalled = [all(h for h, _ in e) for e in expected]
    assert metrics["scored"] == len(sessions) and metrics["recall"] == sum(recalled) / len(sessions) > 0
    assert math.isclose(metrics["mean_logprob"], sum(lp for e in expected for _, lp in e) / sum(map(len, expected)),
                        abs_tol=TOL)
    low = [r for item, r in zip(sessions, recalled) if item.suite == "low_surprisal"]
    assert results.rows["Facts recalled in agent sessions"] == metrics["recall"]
    assert results.rows["Low-surprisal facts recalled in agent sessions"] == sum(low) / len(low)
    assert results.meta["chat_markup"] == "ChatML"


def test_a_chat_template_renders_the_session_when_the_tokenizer_has_one(qwen_tokenizer, sessions):
    tokenizer = copy.deepcopy(qwen_tokenizer)
    tokenizer.chat_template = ("{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}"
                               "{% if add_generation_prompt %}[assistant]\n{% endif %}")
    item = sessions[0]
    prompt = "".join(f"[{m.role}] {m.content}\n" for m in item.messages) + f"[user] {item.probe}\n[assistant]\n"
    assert render(tokenizer, item.messages, item.probe) == prompt
    plan = session_reads(tokenizer, "faithfulness", "train", item, [item.messages])
    encoded = tokenizer(prompt + answer_of(item), add_special_tokens=False)["input_ids"]
    assert list(plan.sequences[0]) == encoded
    reads = plan.targets[0].reads
    assert tokenizer.decode([r.token for r in reads]).strip() == answer_of(item)


# ------------------------------------------------------------------ the gates, with a model


@pytest.fixture(scope="module")
def folders(model, qwen_tokenizer, rows, tmp_path_factory):
    """The tiny model and a degraded copy saved as model folders, and the sessions as data."""
    found = {"data": tmp_path_factory.mktemp("sessions")}
    write_split(found["data"], "faithfulness", "train", rows)
    for name, weights in (("model", model), ("degraded", degraded_model(model))):
        found[name] = save_model(tmp_path_factory.mktemp(name), weights, qwen_tokenizer)
    return found


def test_the_compressor_gate_reads_the_answers_with_a_model(pytester, folders):
    out = pytester.path / "results.json"
    result = pytester.runpytest_inprocess(
        "-p", "no:cacheprovider", "--longctx-compressor=last_messages", "--longctx-knob=count=6",
        f"--longctx-model={folders['model']}", f"--longctx-data={folders['data']}", f"--longctx-out={out}",
        "--longctx-threshold=answer-recall:drop=0", "--longctx-cache-dir=off")
    text = result.stdout.str()
    assert f"Layer B read by {folders['model']}" in text and "Answer log-probability (nats per token)" in text
    results = json.loads(out.read_text())
    items = results["items"].values()
    full = sum(all(o["full"]["hits"]) for o in items) / len(items)
    compressed = sum(all(o["compressed"]["hits"]) for o in items) / len(items)
    assert results["full_rows"]["Answers recalled (teacher-forced)"] == full > compressed
    assert results["rows"]["Answers recalled (teacher-forced)"] == compressed
    assert "FAILED longctx::test_threshold[answer-recall]" in text and "(full context - 0)" in text


def test_the_model_gate_gates_the_faithfulness_config_against_its_baseline(pytester, folders):
    baseline = pytester.path / "baseline.json.gz"

    def gate(model, *args):
        return pytester.runpytest_inprocess("-p", "no:cacheprovider", f"--longctx-model={folders[model]}",
                                            f"--longctx-data={folders['data']}", f"--longctx-baseline={baseline}",
                                            "--longctx-cache-dir=off", *args)

    assert gate("model", "--longctx-update-baseline").ret == 0
    result = gate("model")
    result.assert_outcomes(passed=6 + 2)  # the items and the two rows
    assert "Facts recalled in agent sessions" in result.stdout.str()
    result = gate("degraded")
    text = result.stdout.str()
    assert result.ret == 1 and "FAILED longctx::test_row[faithfulness-train]" in text
    assert "Facts recalled in agent sessions: accuracy" in text and "FAILED longctx::test_item[faithfulness-train-" in text


def test_compress_bench_reports_layer_b_from_the_full_context(folders, capsys):
    from pytest_longctx.cli import main

    assert main(["compress-bench", "--model", str(folders["model"]), "--data", str(folders["data"]), "--methods",
                 "identity,last_messages", "--sweep", "last_messages:count=6", "--cache-dir", "off", "--quiet"]) == 0
    printed = capsys.readouterr().out
    full = next(line for line in printed.splitlines() if line.startswith("Layer B, full context"))
    points = printed.split("at 25% savings")[0]  # the points table, not the matched one
    cells = {line.split()[0]: [c for c in line.split() if c != "*"] for line in points.splitlines()
             if line.startswith(("identity", "last_messages"))}  # the Pareto mark left out
    assert float(full.split("answers recalled ")[1].split(",")[0]) > 0
    assert cells["identity"][-2:] == ["+0.000", "+0.000"]
    assert float(cells["last_messages"][-2]) < 0 and float(cells["last_messages"][-1]) < 0  # recall, log-prob lost
