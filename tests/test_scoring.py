"""The engine and every metric against the naive computation in ``naive.py``."""
from __future__ import annotations

import math

import pytest
from kit import naive
from kit.models import perturbed

from pytest_longctx.backends.hf import TransformersBackend
from pytest_longctx.data.load import load_dataset
from pytest_longctx.scoring.pipeline import score_sets
from pytest_longctx.scoring.scores_file import load_scores

TOL = 1e-4


def close(a, b):
    if a is None or b is None:
        return a is b
    return math.isclose(a, b, abs_tol=TOL)


def run(model, tokenizer, data_dir, chunk_size=2048, sets=None, **kwargs):
    backend = TransformersBackend(model, tokenizer, chunk_size=chunk_size, name="tiny")
    return score_sets(backend, tokenizer, load_dataset(data_dir, sets=sets), progress=False, **kwargs)


@pytest.fixture(scope="module")
def ids_results(qwen_model, qwen_tokenizer, data_dir):
    return run(qwen_model, qwen_tokenizer, data_dir)


@pytest.fixture(scope="module")
def naive_ids(qwen_model, rows):
    return {key: [naive.target_scores(qwen_model, key[0], row, "ids") for row in split] for key, split in rows.items()}


def test_auto_picks_ids_for_the_qwen_tokenizer(ids_results):
    assert ids_results.mode == "ids"
    assert ids_results.meta["mode"] == "ids"


def test_facts_equal_the_naive_pass(ids_results, naive_ids):
    for length in ("2k", "8k"):
        expected = naive.facts_metrics(naive_ids[("facts", length)])
        got = ids_results.sets["facts"][length]
        for name in ("query_accuracy", "token_accuracy", "mean_logprob"):
            assert close(got[name], expected[name]), (length, name, got[name], expected[name])
        assert got["unaligned"] == 0 and got["scored"] == got["targets"] == 6
        assert 0 < got["token_accuracy"], "a model that never hits proves nothing about the hit logic"
        assert ids_results.rows[f"Facts recalled at {length} tokens"] == got["query_accuracy"]


def test_tool_calls_equal_the_naive_pass(ids_results, naive_ids, rows):
    for length in ("2k", "8k"):
        expected = naive.tool_metrics(rows[("tool_calls", length)], naive_ids[("tool_calls", length)])
        got = ids_results.sets["tool_calls"][length]
        for group in ("far", "fresh", "near"):
            assert close(got[f"{group}_accuracy"], expected[f"{group}_accuracy"])
            assert close(got[group]["mean_logprob"], expected[f"{group}_logprob"])
        assert ids_results.rows[f"Distant tool calls at {length} tokens"] == got["far_accuracy"]
        assert got["far"]["count"] == 6 and got["near"]["count"] == 4


def test_rules_scores_equal_the_naive_pass(ids_results, naive_ids, rows):
    for config in ("rules_en", "rules_cs", "rules_de"):
        for length in ("2k", "8k"):
            stored = ids_results.scores.scores[config][length]
            for row, expected in zip(rows[(config, length)], naive_ids[(config, length)]):
                for record, (without, with_rule) in zip(stored[row["id"]].targets, expected):
                    assert close(record["score_without"], without)
                    assert close(record["score_with"], with_rule)


def test_a_model_is_its_own_reference_without_one(ids_results):
    for config in ("rules_en", "rules_cs", "rules_de"):
        for length in ("2k", "8k"):
            for _placement, by_family in ids_results.sets[config][length]["cells"].items():
                for _family, cell in by_family.items():
                    if cell["counted"]:
                        assert cell["follow"] == 1.0 and close(cell["retained"], 1.0)
                    else:
                        assert cell["follow"] is None and cell["retained"] is None


def test_headline_rows_have_the_benchmark_names(ids_results):
    assert list(ids_results.rows) == [
        "Facts recalled at 2k tokens", "Facts recalled at 8k tokens",
        "Distant tool calls at 2k tokens", "Distant tool calls at 8k tokens",
        "Rules followed at 2k tokens", "Rules followed at 8k tokens",
        "Rules kept far back, worst case (1.00 = as the original)",
        "Czech rules kept far back, worst case", "German rules kept far back, worst case",
        "Rules in Czech followed at 8k tokens", "Rules in German followed at 8k tokens",
    ]


def test_chunked_and_unchunked_runs_agree(qwen_model, qwen_tokenizer, data_dir, ids_results):
    chunked = run(qwen_model, qwen_tokenizer, data_dir, chunk_size=7)
    for config, length, item_id, whole in ids_results.scores.items():
        for a, b in zip(whole.targets, chunked.scores.scores[config][length][item_id].targets):
            if "hits" in a:
                assert a["hits"] == b["hits"]
                assert all(close(x, y) for x, y in zip(a["logprobs"], b["logprobs"]))
            else:
                assert close(a["score_without"], b["score_without"]) and close(a["score_with"], b["score_with"])


def test_reference_round_trip(qwen_model, qwen_tokenizer, data_dir, ids_results, tmp_path, rows, naive_ids):
    path = tmp_path / "ref.json.gz"
    ids_results.scores.save(path)
    reference = load_scores(path)
    rules = ["rules_en", "rules_de"]
    again = run(qwen_model, qwen_tokenizer, data_dir, sets=rules, reference=reference)
    for config in rules:
        for length in ("2k", "8k"):
            for by_family in again.sets[config][length]["cells"].values():
                for cell in by_family.values():
                    if cell["counted"]:
                        assert cell["follow"] == 1.0 and close(cell["retained"], 1.0)

    other = perturbed(qwen_model, 0.3, seed=7)
    against = run(other, qwen_tokenizer, data_dir, sets=rules, reference=reference)
    counted = 0
    for config in rules:
        for length in ("2k", "8k"):
            mine = [naive.target_scores(other, config, row, "ids") for row in rows[(config, length)]]
            expected = naive.rules_cells(rows[(config, length)], mine, naive_ids[(config, length)])
            cells = against.sets[config][length]["cells"]
            for (placement, family), cell in expected.items():
                got = cells[placement][family]
                assert got["counted"] == cell["counted"]
                assert close(got["follow"], cell["follow"]) and close(got["retained"], cell["retained"])
                counted += cell["counted"]
    assert counted > 0, "the test data must give counted targets, or the comparison proves nothing"
    follows = [c["follow"] for cfg in ("rules_en",) for n in ("2k", "8k")
               for by in against.sets[cfg][n]["cells"].values() for c in by.values() if c["counted"]]
    assert any(f < 1.0 for f in follows), "the perturbed model should lose some rules"


def test_text_mode_with_another_tokenizer(bpe_model, bpe_tokenizer, data_dir, rows):
    results = run(bpe_model, bpe_tokenizer, data_dir)
    assert results.mode == "text"
    for length in ("2k", "8k"):
        facts = [naive.target_scores(bpe_model, "facts", r, "text", bpe_tokenizer) for r in rows[("facts", length)]]
        expected = naive.facts_metrics(facts)
        got = results.sets["facts"][length]
        assert got["unaligned"] == expected["unaligned"]
        for name in ("query_accuracy", "token_accuracy", "mean_logprob"):
            assert close(got[name], expected[name]), (name, got[name], expected[name])
        tools = [naive.target_scores(bpe_model, "tool_calls", r, "text", bpe_tokenizer) for r in rows[("tool_calls", length)]]
        expected = naive.tool_metrics(rows[("tool_calls", length)], tools)
        got = results.sets["tool_calls"][length]
        assert got["unaligned"] == sum(s is None for item in tools for s in item) > 0, "the kit plants unaligned targets"
        assert got["unaligned"] + got["scored"] == got["targets"]
        for group in ("far", "fresh", "near"):
            assert close(got[f"{group}_accuracy"], expected[f"{group}_accuracy"])
            assert close(got[group]["mean_logprob"], expected[f"{group}_logprob"])
        for config in ("rules_en", "rules_de"):
            scores = [naive.target_scores(bpe_model, config, r, "text", bpe_tokenizer) for r in rows[(config, length)]]
            expected_cells = naive.rules_cells(rows[(config, length)], scores, scores)
            for (placement, family), cell in expected_cells.items():
                got_cell = results.sets[config][length]["cells"][placement][family]
                assert got_cell["counted"] == cell["counted"]
                assert close(got_cell["follow"], cell["follow"])


def test_text_mode_reference_refuses_an_ids_mode_reference(bpe_model, bpe_tokenizer, data_dir, ids_results, tmp_path):
    from pytest_longctx.errors import LongctxError

    path = tmp_path / "ids.json.gz"
    ids_results.scores.save(path)
    with pytest.raises(LongctxError, match="another tokenizer"):
        run(bpe_model, bpe_tokenizer, data_dir, reference=load_scores(path))
