"""``longctx blame``: hybrids of two tiny qwen3 checkpoints are exact (every part taken back
is the original, bit for bit; none is the candidate), planted damage is found and fixed by
exactly the planted parts, and bad input is one line."""
from __future__ import annotations

import copy
import json
import re

import pytest
import torch
from conftest import tiny_qwen3

from pytest_longctx.backends.hf import TransformersBackend
from pytest_longctx.backends.parts import CANDIDATE, Hybrid, StateDictPair, check_compatible, model_parts, select_parts
from pytest_longctx.cli.main import main
from pytest_longctx.data.load import load_dataset
from pytest_longctx.errors import LongctxError
from pytest_longctx.gate.blame import blame
from pytest_longctx.scoring.pipeline import score_items, score_sets

PLANTED = (1, 3)


@pytest.fixture(scope="module")
def dataset(data_dir):
    return load_dataset(str(data_dir), sets=["tool_calls"], lengths=["2k"], limit=2)


@pytest.fixture(scope="module")
def original(qwen_tokenizer):
    return tiny_qwen3(len(qwen_tokenizer), seed=3, layers=4, init=0.5)  # sure enough to drift when damaged


def damaged(model, layers=PLANTED, scale=1.0):
    """A copy of ``model`` with heavy noise in the given decoder layers only."""
    noisy = copy.deepcopy(model)
    generator = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for name, tensor in noisy.named_parameters():
            if any(name.startswith(f"model.layers.{n}.") for n in layers) and tensor.numel() > 1:
                tensor.add_(torch.randn(tensor.shape, generator=generator) * tensor.std() * scale)
    return noisy


@pytest.fixture(scope="module")
def candidate(original):
    return damaged(original)


@pytest.fixture(scope="module")
def nudged(candidate):
    """The candidate with layer 0 changed too, by a rounding-sized nudge far below the planted damage:
    a part blame measures (it is not the original's) whose shares must come out near 0."""
    return damaged(candidate, layers=(0,), scale=1e-3)


def reads(model, dataset):
    scores = score_items(TransformersBackend(model), None, dataset, "ids", progress=False)
    return {(c, n, i): (s.targets, s.controls, s.drift) for c, n, i, s in scores.items()}


def test_the_parts_cover_every_parameter_once(original):
    names = [n for n, _ in original.named_parameters()]
    for granularity in ("layer", "block", "tensor"):
        parts = model_parts(original, granularity)
        assert sorted(n for p in parts for n in p.parameters) == sorted(names)
    assert [p.name for p in model_parts(original, "layer")] == ["embed", "layer.0", "layer.1", "layer.2", "layer.3",
                                                                 "final", "lm_head"]
    block = {p.name: p.parameters for p in model_parts(original, "block")}
    assert set(block["layer.2.attn"]) == {f"model.layers.2.self_attn.{t}" for t in (
        "q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight", "q_norm.weight", "k_norm.weight")}
    assert len(block["layer.2.mlp"]) == 3 and len(block["layer.2.norms"]) == 2


def test_every_part_taken_back_is_the_original_and_none_the_candidate(original, candidate, dataset):
    mine, theirs = reads(original, dataset), reads(candidate, dataset)
    assert mine != theirs
    for granularity in ("layer", "block"):
        hybrid = Hybrid(candidate, original)
        hybrid.take(model_parts(candidate, granularity))
        assert reads(candidate, dataset) == mine  # bit-identical, drift blocks included
        hybrid.reset()
        assert reads(candidate, dataset) == theirs
    hybrid = Hybrid(original, candidate)
    hybrid.take([])
    assert reads(original, dataset) == mine


def test_planted_damage_is_ranked_first_and_is_the_fix_set(original, nudged, dataset, qwen_tokenizer, tmp_path):
    candidate = nudged
    before = TransformersBackend(candidate).weights_fingerprint(), TransformersBackend(original).weights_fingerprint()
    found = blame(original, candidate, None, dataset, None, progress=False)
    assert not found.passed and found.rows
    planted = {f"layer.{n}" for n in PLANTED}
    assert {p.part.name for p in found.parts[:2]} == planted
    harmless = next(p for p in found.parts if p.part.name == "layer.0")
    assert not harmless.unchanged  # measured both ways, not taken as the candidate's and the original's figures
    for row in found.rows:
        assert all(found.restore_share(p, row) > 0.2 and found.damage_share(p, row) > 0.05 for p in found.parts[:2])
        # the nudge moves the far drift (the hybrids hold it), by next to nothing of the planted damage's
        assert harmless.restore[row].far != found.candidate[row].far and abs(found.restore_share(harmless, row)) < 0.02
        assert 0.0 < found.damage_share(harmless, row) < 0.02
    assert set(found.fix_set) == planted and found.fixed
    # the parts outside the changed layers are the original's own: not scored again, the original read once instead
    assert {p.part.name for p in found.parts if p.unchanged} == {"embed", "layer.2", "final", "lm_head"}
    assert found.hybrids == 2 * (len(planted) + 1) + 1 + len(found.fix_set) - 1  # the first fix step is a restore hybrid
    assert found.fix_cost.parameters == sum(p.numel() for n, p in original.named_parameters()
                                            if n.startswith(("model.layers.1.", "model.layers.3.")))
    assert found.verification["passed"], found.verification["failing"]
    assert found.to_json()["fix_set"]["parts"] == found.fix_set
    after = TransformersBackend(candidate).weights_fingerprint(), TransformersBackend(original).weights_fingerprint()
    assert after == before  # both models are as loaded again


def test_a_part_is_unchanged_only_with_the_same_values_stored_the_same_way(original, candidate, qwen_tokenizer):
    pair = StateDictPair(original, candidate, None)
    assert [p.name for p in pair.parts("layer") if not pair.unchanged(p)] == ["layer.1", "layer.3"]
    halved = copy.deepcopy(original).to(torch.bfloat16)
    narrow = StateDictPair(halved, damaged(copy.deepcopy(halved).to(torch.float32), layers=(1,)), None)
    assert not any(narrow.unchanged(p) for p in narrow.parts("layer"))  # equal values, another dtype: changed


def test_a_candidate_that_is_the_original_at_another_dtype_is_named(original, candidate, dataset):
    recast = copy.deepcopy(original).to(torch.bfloat16)
    message = ("--model b is --reference a at another dtype (bfloat16; the original holds float32), nothing else changed: "
               "no part restores its drift")
    with pytest.raises(LongctxError, match=re.escape(message)) as raised:
        blame(original, recast, None, dataset, None, names=("a", "b"), progress=False)
    assert "\n" not in str(raised.value)
    # another dtype and damage too: blamed, and the cost says the hybrids held the kept parts at the candidate's dtype
    pair = StateDictPair(original, damaged(original).to(torch.bfloat16), None)
    [planted] = [p for p in pair.parts("layer") if p.name == "layer.1"]
    assert pair.cost([planted]).precision == "the candidate's dtype (bfloat16)"
    with pair.hybrid(CANDIDATE, [planted], "restore layer.1"):
        taken = {n: pair.models[CANDIDATE].get_parameter(n) for n in planted.parameters}
        assert all(t.dtype == torch.bfloat16 and torch.equal(t, original.get_parameter(n).to(torch.bfloat16))
                   for n, t in taken.items())


def test_a_baseline_of_another_model_is_refused(original, candidate, data_dir, tmp_path, capsys):
    original.save_pretrained(tmp_path / "original")
    candidate.save_pretrained(tmp_path / "candidate")
    dataset = load_dataset(str(data_dir), sets=["tool_calls"], lengths=["2k"], limit=1)
    other = tiny_qwen3(original.config.vocab_size, seed=5, layers=4, init=0.5)  # the same data and tokenizer (ids mode)
    score_sets(TransformersBackend(other, name="other-org/other"), None, dataset, progress=False).as_baseline().save(
        tmp_path / "other.json.gz")
    code = main(["blame", "--reference", str(tmp_path / "original"), "--model", str(tmp_path / "candidate"),
                 "--baseline", str(tmp_path / "other.json.gz"), "--data", str(data_dir), "--sets", "tool_calls",
                 "--lengths", "2k", "--limit", "1", "--quiet"])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    [line] = [line for line in captured.err.splitlines() if line.startswith("longctx")]  # past the loaders' progress bars
    mine, theirs = (TransformersBackend(m).weights_fingerprint()[:12] for m in (original, other))
    assert line == (f"longctx: error: --baseline {tmp_path / 'other.json.gz'}: made from other weights (other-org/other, "
                    f"weights {theirs}) than --reference {tmp_path / 'original'} (weights {mine}): blame needs the baseline "
                    "of the original the candidate was made from; make it from --reference (longctx score --model "
                    "REFERENCE --save_scores FILE), or leave --baseline out to score the original now")


def test_the_command_blames_saved_checkpoints_and_writes_json(original, candidate, data_dir, tmp_path, capsys):
    original.save_pretrained(tmp_path / "original")
    candidate.save_pretrained(tmp_path / "candidate")
    baseline = score_sets(TransformersBackend(original), None, load_dataset(str(data_dir), sets=["tool_calls"],
                                                                              lengths=["2k"], limit=1), progress=False)
    baseline.as_baseline().save(tmp_path / "baseline.json.gz")
    out = tmp_path / "blame.json"
    code = main(["blame", "--reference", str(tmp_path / "original"), "--model", str(tmp_path / "candidate"),
                 "--baseline", str(tmp_path / "baseline.json.gz"), "--data", str(data_dir), "--sets", "tool_calls",
                 "--lengths", "2k", "--limit", "1", "--granularity", "block", "--parts",
                 "layer.0.attn,layer.1.mlp,layer.3.mlp", "--out", str(out), "--quiet"])
    shown = capsys.readouterr().out
    assert code == 0, shown
    body = json.loads(out.read_text())
    clean = next(p for p in body["parts"] if p["part"] == "layer.0.attn")
    assert clean["rank"] == 3 and all(abs(s["restore_far"]) < 1e-9 and s["damage_far"] == 0 for s in clean["shares"].values())
    # the planted attention damage is not among the parts measured: the MLPs alone do not fix it, and blame says so
    assert body["fix_set"]["parts"] == ["layer.1.mlp", "layer.3.mlp"] or body["fix_set"]["parts"] == ["layer.3.mlp", "layer.1.mlp"]
    assert not body["fix_set"]["fixed"] and "lies in parts not measured (--parts)" in body["notes"][0]
    assert "restore: far drift" in shown and "does NOT make every blamed row pass" in shown and "verification" in shown


def test_texts_beyond_the_context_window_are_blamed_only_when_allowed(qwen_tokenizer, data_dir, tmp_path, capsys):
    short = tiny_qwen3(len(qwen_tokenizer), seed=3, layers=4, init=0.5)
    short.config.max_position_embeddings = 64  # the test items run past it
    short.save_pretrained(tmp_path / "original")
    damaged(short).save_pretrained(tmp_path / "candidate")
    dataset = load_dataset(str(data_dir), sets=["tool_calls"], lengths=["2k"], limit=1)
    score_sets(TransformersBackend(short), None, dataset, progress=False, beyond_context=True).as_baseline().save(
        tmp_path / "baseline.json.gz")
    command = ["blame", "--reference", str(tmp_path / "original"), "--model", str(tmp_path / "candidate"), "--baseline",
               str(tmp_path / "baseline.json.gz"), "--data", str(data_dir), "--sets", "tool_calls", "--lengths", "2k",
               "--limit", "1", "--parts", "layer.1", "--quiet"]
    assert main(command) == 2
    refused = capsys.readouterr().err
    assert "beyond the model's context window of 64" in refused and "blame: --allow-beyond-context" in refused
    assert main([*command, "--allow-beyond-context"]) == 0
    assert "layer.1" in capsys.readouterr().out


def test_a_candidate_that_passes_has_nothing_to_blame(original, data_dir, tmp_path, capsys):
    original.save_pretrained(tmp_path / "same")
    code = main(["blame", "--reference", str(tmp_path / "same"), "--model", str(tmp_path / "same"), "--data",
                 str(data_dir), "--sets", "tool_calls", "--lengths", "2k", "--limit", "1", "--quiet"])
    assert code == 0 and capsys.readouterr().out.startswith("nothing to blame:")


def test_bad_input_is_one_line(original, qwen_tokenizer):
    from transformers import AutoModelForCausalLM, LlamaConfig

    llama = AutoModelForCausalLM.from_config(LlamaConfig(vocab_size=1000, hidden_size=32, intermediate_size=64,
                                                         num_hidden_layers=4, num_attention_heads=4))
    cases = [
        (llama, "is a Qwen3ForCausalLM (qwen3), --model b a LlamaForCausalLM (llama): blame takes two checkpoints of one "
                "architecture"),
        (tiny_qwen3(len(qwen_tokenizer), layers=5), "their tensor names do not match (11 differ; "
                                                    "model.layers.4.self_attn.q_proj.weight is only in --model)"),
        (tiny_qwen3(1000, layers=4), "model.embed_tokens.weight is [248077, 32] in one and [1000, 32] in the other"),
    ]
    for other, message in cases:
        with pytest.raises(LongctxError) as raised:
            check_compatible(original, other, "a", "b")
        assert message in str(raised.value) and "\n" not in str(raised.value)
    with pytest.raises(LongctxError, match=r"^--parts layer\.9: no such part at --granularity layer; the parts are "
                                           r"embed, layer\.0, layer\.1, layer\.2, layer\.3, final, lm_head$"):
        select_parts(model_parts(original, "layer"), ["layer.1", "layer.9"], "layer")
