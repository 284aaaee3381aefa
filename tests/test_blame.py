"""``longctx blame``: hybrids of two tiny qwen3 checkpoints are exact (every part taken back
is the original, bit for bit; none is the candidate), planted damage is found and fixed by
exactly the planted parts, and bad input is one line."""
from __future__ import annotations

import copy
import json
import re

import numpy as np
import pytest
import torch
from kit.blame import blame, row_figures
from kit.gguf import SETTINGS, tensors_of, write_gguf
from kit.models import PLANTED, cancelling, damaged, save_model, tiny_llama, tiny_qwen3, with_biases
from kit.needs import needs, needs_smollm2

from pytest_longctx.backends.hf import TransformersBackend
from pytest_longctx.backends.hybrids.gguf import GGUFPair
from pytest_longctx.backends.hybrids.pair import CANDIDATE, RecordsBoundaries, can_record, select_parts
from pytest_longctx.backends.hybrids.transformers import Hybrid, StateDictPair, check_compatible, model_parts
from pytest_longctx.cli.main import main
from pytest_longctx.data.load import load_dataset
from pytest_longctx.errors import LongctxError
from pytest_longctx.gate.blame import blame_pair
from pytest_longctx.reports.blame import blame_text
from pytest_longctx.scoring.pipeline import score_items, score_sets


@pytest.fixture(scope="module")
def dataset(data_dir):
    return load_dataset(str(data_dir), sets=["tool_calls"], lengths=["2k"], limit=2)


@pytest.fixture(scope="module")
def original(qwen_tokenizer):
    return tiny_qwen3(len(qwen_tokenizer), seed=3, layers=4, init=0.5)  # sure enough to drift when damaged


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
    # the parts' own hybrids, the original once, the fix set's step 2 (the other planted layer, tried first: it
    # passes); the first step reads the restore hybrids, and the first layer tried without the second is the
    # second's own restore hybrid, read again
    first, second = (p.part.name for p in found.parts[:2])
    assert found.fix_moves == [f"+ {first} (best of 3)", f"+ {second} (best of 1)", f"without {first}: fails"]
    assert found.hybrids == 2 * (len(planted) + 1) + 1 + 1
    assert found.fix_cost.parameters == sum(p.numel() for n, p in original.named_parameters()
                                            if n.startswith(("model.layers.1.", "model.layers.3.")))
    assert found.verification["passed"], found.verification["failing"]
    assert found.to_json()["fix_set"]["parts"] == found.fix_set
    after = TransformersBackend(candidate).weights_fingerprint(), TransformersBackend(original).weights_fingerprint()
    assert after == before  # both models are as loaded again


def test_a_pair_records_layer_boundaries_through_the_members_it_declares(original, candidate):
    """blame asks a pair to record its sides' layer boundaries only through ``RecordsBoundaries``: two transformers
    models declare its members and can; a GGUF pair, whose hybrids llama.cpp runs from the token ids, declares none."""
    assert can_record(StateDictPair(original, candidate, None))
    assert not issubclass(GGUFPair, RecordsBoundaries)


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


def under_another_config(model, **changes):
    """``model``'s weights in a model made from its config with ``changes`` (a rope base, a sliding window)."""
    config = copy.deepcopy(model.config)
    for key, value in changes.items():
        setattr(config, key, value)
    made = type(model)(config)
    made.load_state_dict(model.state_dict())
    return made


def test_the_same_weights_under_another_config_are_named_as_the_gate_names_them(original, dataset):
    candidate = under_another_config(original, rope_parameters={"rope_theta": 100.0, "rope_type": "default"},
                                     sliding_window=8, use_sliding_window=True,
                                     layer_types=["sliding_attention"] * original.config.num_hidden_layers)
    found = blame(original, candidate, None, dataset, None, progress=False)
    assert not found.passed and found.rows  # the config changes what it computes: the gate fails it
    theirs, mine = (TransformersBackend(m).describe()["config"][:8] for m in (original, candidate))
    differ = sorted(k for k, v in candidate.config.to_dict().items() if original.config.to_dict().get(k) != v)
    assert differ == ["layer_types", "rope_parameters", "sliding_window", "use_sliding_window"]
    assert found.config == (f"the original's own weights under another config: the model's config or the backend's settings "
                            f"differ (config digest {mine} here, {theirs} there; the keys that differ: {', '.join(differ)})")
    assert found.notes == [f"no part of the candidate differs from the original's: it is {found.config}; blame takes weights "
                           "apart, not a config: gate the original under the candidate's config, or give the candidate the "
                           "original's config"]
    assert all(p.unchanged for p in found.parts) and "interact" not in blame_text(found)
    assert found.to_json()["config"] == found.config


def test_a_baseline_made_under_a_kv_cache_setting_is_warned_of_as_the_gate_does(original, candidate, dataset):
    baseline = score_sets(TransformersBackend(original), None, dataset, progress=False).as_baseline()
    baseline.meta["judged"]["kv_cache"] = "k=q4_0 v=q4_0"  # the original, read with a quantized KV cache
    found = blame(original, candidate, None, dataset, baseline, progress=False, verify=False, budget=4)
    assert found.warnings == ["the baseline was itself made under compression (KV cache k=q4_0 v=q4_0): the candidate "
                              "(uncompressed) is judged against a compressed reference, not the original model; make the "
                              "baseline from the uncompressed model unless this is meant"]
    assert "warning: the baseline was itself made under compression" in blame_text(found)


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
    # left unchanged by the compression: listed apart, not ranked, its hybrids the candidate and the original
    assert clean["rank"] is None and clean["unchanged"] and body["parts"][-1] is clean
    assert all(abs(s["restore_far"]) < 1e-9 and s["damage_far"] == 0 for s in clean["shares"].values())
    assert [p["rank"] for p in body["parts"][:2]] == [1, 2]
    # the planted attention damage is not among the parts measured: the MLPs alone do not fix it, and blame says so
    assert body["fix_set"]["parts"] == ["layer.1.mlp", "layer.3.mlp"] or body["fix_set"]["parts"] == ["layer.3.mlp", "layer.1.mlp"]
    assert not body["fix_set"]["fixed"] and "lies in parts not measured (--parts)" in body["notes"][0]
    assert "restore: far drift" in shown and "does NOT make every blamed row pass" in shown and "verification" in shown
    assert "unchanged by the compression, not ranked" in shown and "layer.0.attn" in shown.split("not ranked")[1]


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
    llama = tiny_llama(1000, layers=4, width=32, kv_heads=4, tied=False)
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


def test_the_fix_set_is_searched_and_finds_a_pair_whose_halves_cancel(qwen_tokenizer, dataset):
    original, candidate = cancelling(len(qwen_tokenizer))
    baseline = score_sets(TransformersBackend(original), None, dataset, progress=False).as_baseline()
    found = blame(original, candidate, None, dataset, baseline, progress=False)
    [row] = found.rows
    by_name = {p.part.name: p for p in found.parts}
    first, second, nudge = by_name["layer.1"], by_name["layer.2"], by_name["layer.3"]
    # the figures of each single hybrid are those of the model made by hand with that part put back
    restored_first = copy.deepcopy(candidate)
    restored_first.model.layers[1].load_state_dict(original.model.layers[1].state_dict())
    restored_second = copy.deepcopy(candidate)
    restored_second.model.layers[2].load_state_dict(original.model.layers[2].state_dict())
    for made, entry in ((restored_first, first), (restored_second, second)):
        assert row_figures(made, dataset, baseline)[row] == entry.restore[row]
    assert row_figures(candidate, dataset, baseline)[row] == found.candidate[row]
    # the case: layer 1 restores most but not enough; restoring layer 2 alone makes it worse, its damage share says it matters
    assert found.parts[0] is first and found.restore_share(first, row) > 0.5 and not first.restore[row].passed
    assert found.restore_share(second, row) < -0.5 and found.damage_share(second, row) > 0.2 and found.differ(second, row)
    assert found.score(second) < 0 < found.prior(second)  # a fix set taken in restore order would stop before layer 2
    assert found.fix_set == ["layer.1", "layer.2"] and found.fixed
    # layer 2 passes first (no third part tried); then layer 1 is tried without layer 2 and is needed
    assert found.fix_moves == ["+ layer.1 (best of 3)", "+ layer.2 (best of 1)", "without layer.1: fails"]
    # layer 1 without layer 2 is layer 2's own restore hybrid, read again: the search scored one hybrid
    assert found.fix_hybrids == 1 and len(found.fix_steps) == 2
    # the fix set's figures are those of the original with layer 3's nudge alone, made by hand
    nudged_only = copy.deepcopy(original)
    nudged_only.model.layers[3].load_state_dict(candidate.model.layers[3].state_dict())
    assert found.fix_steps[-1][row] == row_figures(nudged_only, dataset, baseline)[row] and found.fix_steps[-1][row].passed
    assert found.verification["passed"], found.verification["failing"]
    # the parts' own hybrids (3 changed, 2 ways), the original for the 4 unchanged ones, step 2 (one tried)
    assert not nudge.unchanged and found.hybrids == 2 * 3 + 1 + 1


def test_the_fix_set_search_stops_at_its_budget_and_says_what_is_left(qwen_tokenizer, dataset):
    original, candidate = cancelling(len(qwen_tokenizer))
    found = blame(original, candidate, None, dataset, None, progress=False, verify=False, fix_budget=1)
    assert found.fix_set == ["layer.1", "layer.2"] and found.fixed  # the one hybrid: step 2, which passes
    assert found.hybrids == 2 * 3 + 1 + 1  # no hybrid left to try layer 1 without layer 2
    assert found.notes == ["the fix set search spent its budget of 1 hybrids before trying each part without the others: "
                           "it may hold a part they make needless (--fix-budget)"]
    # without layer 2 among the parts measured, every part in question is kept and the rows still fail
    found = blame(original, candidate, None, dataset, None, progress=False, verify=False, parts=["layer.1", "layer.3"],
                  fix_budget=1)
    assert found.fix_set == ["layer.1", "layer.3"] and not found.fixed and found.hybrids == 2 * 2 + 1
    assert found.notes == ["with every part that restores or causes any far drift kept (2 of 2 measured), a blamed row still "
                           "fails: the rest of the damage lies in parts not measured (--parts) or in how the parts interact"]


@pytest.mark.parametrize("budget", ["0", "-3", "many"])
def test_a_fix_budget_that_is_no_count_of_hybrids_is_refused(budget, capsys):
    problem = "expected a whole number" if budget == "many" else "must be at least 1"
    for flag in ("--fix-budget", "--budget"):
        assert main(["blame", "--reference", "a", "--model", "b", flag, budget]) == 2
        assert capsys.readouterr().err.strip() == f"longctx: error: {flag}: {problem} (given {budget!r})"
    layers = "-1" if budget == "0" else budget
    assert main(["blame", "--reference", "a", "--model", "b", "--boundary-every", layers]) == 2
    problem = "expected a whole number" if budget == "many" else "must be at least 0"
    assert capsys.readouterr().err.strip() == f"longctx: error: --boundary-every: {problem} (given {layers!r})"


def figures(found):
    """``found``'s results file less what differs between runs that read the same figures: the models scored, the
    recordings' figures, the seconds measured and the models expected (recorded boundaries add two)."""
    written = found.to_json()
    for key in ("hybrids", "reuse", "cost"):
        written.pop(key)
    written["estimate"].pop("seconds")
    return written


def forwarded_tokens(model, dataset):
    """The tokens the engine runs through ``model`` to score ``dataset`` once, counted at its forward calls."""
    seen = []
    hook = model.register_forward_pre_hook(lambda module, args, kwargs: seen.append(kwargs["input_ids"].shape[1]),
                                           with_kwargs=True)
    try:
        reads(model, dataset)
    finally:
        hook.remove()
    return sum(seen)


@pytest.mark.parametrize("every", [1, 2])
def test_hybrids_started_from_the_recorded_layer_boundaries_read_every_figure_the_same(original, nudged, dataset, every,
                                                                                       tmp_path):
    whole = blame(original, nudged, None, dataset, None, progress=False, reuse=False)
    # with a score cache, which holds the candidate's answers once it is scored: both sides are still recorded
    reused = blame(original, nudged, None, dataset, None, progress=False, reuse=True, reuse_every=every,
                   cache_dir=str(tmp_path))
    assert whole.reuse is None and reused.reuse is not None
    mine, theirs = figures(whole), figures(reused)
    assert mine == theirs  # every row state of every part both ways, the fix set's steps and the verification, bit for bit
    # the original's recording stands in for its scoring for the unchanged parts: one more scoring, the candidate's
    assert reused.hybrids == whole.hybrids + 1
    # what was skipped: each hybrid on the items from the boundary kept at or below its first layer taken from the
    # other side, or, where higher, from the other side's boundary at or below its first changed layer not taken (its
    # layers below that one are all the other side's)
    kept = [b for b in range(every, 5, every)] + [4]
    start = {k: max((b for b in kept if b <= k), default=0) for k in range(5)}
    layer = {f"layer.{k}": k for k in range(4)}
    changed = {layer[p.part.name] for p in reused.parts if not p.unchanged}
    singles = [{layer[p.part.name]} for p in reused.parts if not p.unchanged]
    hybrids = [("restore", t) for t in singles] + [("damage", t) for t in singles]
    kept_parts = []
    for move in reused.fix_moves:  # the fix set's hybrids: the parts kept with the one tried, or without the one left out
        name, fix = move.split()[1], None
        if move.startswith("+ ") and kept_parts:
            fix = {layer[n] for n in [*kept_parts, name]}
        elif move.startswith("without "):
            name = move.split()[1].rstrip(":")
            fix = {layer[n] for n in kept_parts if n != name}
        if fix is not None and ("restore", fix) not in hybrids:  # one scored before is read again, not run
            hybrids.append(("restore", fix))
        if move.startswith("+ "):
            kept_parts.append(name)
    taken_sets = [taken for _, taken in hybrids]
    assert len(reused.rows) == 1  # one row: its items are the whole selection
    tokens = forwarded_tokens(nudged, dataset)
    starts = [max(start[min(taken)], start[min(changed - taken, default=4)]) for taken in taken_sets]
    # layer 0 alone from the other side: from that side's boundary 1, where one is kept
    assert min(changed) == 0 and any(start[min(taken)] < s for taken, s in zip(taken_sets, starts)) == (every == 1)
    assert reused.reuse["skipped"] == tokens * sum(starts)
    assert reused.reuse["scoring"] == tokens * 4 and reused.reuse["items"] == reused.hybrids * tokens * 4
    hidden = original.config.hidden_size
    assert reused.reuse["bytes"] == 2 * len(set(kept)) * tokens * hidden * 4  # both sides, float32



def test_the_verification_on_the_blamed_items_reads_the_fix_sets_hybrid_without_scoring_it_again(original, nudged, dataset,
                                                                                                  monkeypatch):
    import pytest_longctx.gate.blame.scorer as module

    baseline = score_sets(TransformersBackend(original), None, dataset, progress=False).as_baseline()
    scored = []  # (name, weights fingerprint) of every model scored

    def counted(backend, *args, **kwargs):
        scored.append((backend.name, backend.weights_fingerprint()))
        return score_items(backend, *args, **kwargs)

    monkeypatch.setattr(module, "score_items", counted)
    found = blame(original, nudged, None, dataset, baseline, progress=False)
    assert len(found.rows) == 1 and found.fix_set and found.fixed and found.reuse is None  # one row: its items are the selection
    # no model scored twice (the fix set's hybrid was scored in its search), the candidate once before the hybrids
    assert "fix set" not in [name for name, _ in scored] and len({f for _, f in scored}) == len(scored) == found.hybrids + 1
    # its verdict is that of the candidate with the fix set's layers taken back by hand, scored and judged as the gate does
    [state] = row_figures(taken(nudged, original, layer_numbers(found.fix_set)), dataset, baseline).values()
    assert found.verification["passed"] == state.passed


def twelve_layers(vocab_size: int):
    """A 12-layer original and a candidate with every layer changed a little and layers 2 and 9 a lot."""
    original = tiny_qwen3(vocab_size, seed=3, layers=12, init=0.5)
    return original, damaged(damaged(original, layers=(2, 9)), layers=tuple(range(12)), scale=0.05)


def test_twelve_changed_layers_read_the_same_from_the_boundaries_at_1_6x_fewer_token_layers(qwen_tokenizer, dataset):
    original, candidate = twelve_layers(len(qwen_tokenizer))
    whole = blame(original, candidate, None, dataset, None, progress=False, verify=False, reuse=False, search="exhaustive")
    # 12 changed parts: reused
    reused = blame(original, candidate, None, dataset, None, progress=False, verify=False, search="exhaustive")
    mine, theirs = figures(whole), figures(reused)
    assert mine == theirs and reused.fix_set == ["layer.2", "layer.9"]
    tokens = forwarded_tokens(candidate, dataset)
    today = whole.hybrids * tokens * 12  # every hybrid through every layer
    now = reused.reuse["items"] - reused.reuse["skipped"]
    print(f"\n{whole.hybrids} hybrids whole: {today} token-layers; from the boundaries {reused.hybrids}: {now} run, "
          f"{reused.reuse['skipped']} handed over ({reused.reuse['bytes']} bytes held)")
    assert reused.hybrids == whole.hybrids + 1 and today / now > 1.6


def taken(base, other, layers):
    """``base`` with ``layers`` taken from ``other``, made by hand."""
    made = copy.deepcopy(base)
    for k in layers:
        made.model.layers[k].load_state_dict(other.model.layers[k].state_dict())
    return made


def layer_numbers(names):
    return [int(name.split(".")[1]) for name in names]


def test_the_group_search_finds_what_measuring_every_part_finds_at_fewer_hybrids(qwen_tokenizer, dataset):
    original, candidate = twelve_layers(len(qwen_tokenizer))
    baseline = score_sets(TransformersBackend(original), None, dataset, progress=False).as_baseline()
    every = blame(original, candidate, None, dataset, baseline, progress=False, search="exhaustive")
    found = blame(original, candidate, None, dataset, baseline, progress=False)
    planted = {"layer.2", "layer.9"}
    assert every.search == "exhaustive" and found.search == "groups" and found.exhaustive == every.exhaustive == 24
    assert {p.part.name for p in found.parts[:2]} == {p.part.name for p in every.parts[:2]} == planted
    assert found.fix_set == every.fix_set and set(found.fix_set) == planted and found.fixed
    assert found.verification["passed"] and every.verification["passed"]
    # the first halves, then only the groups that hold a planted layer are split, down to the planted layers
    [row] = found.rows
    assert [g.parts for g in found.groups[:2]] == [[f"layer.{k}" for k in range(6)], [f"layer.{k}" for k in range(6, 12)]]
    for group in found.groups:
        assert group.carries or not planted & set(group.parts), group.name
        # its figures are those of the candidate with its layers taken back by hand (the original with the candidate's,
        # for damage), scored and judged as the gate does
        base, other = (candidate, original) if group.direction == "restore" else (original, candidate)
        assert group.states[row] == row_figures(taken(base, other, layer_numbers(group.parts)), dataset, baseline)[row]
    # a part is measured alone both ways where every group that held it carried; else it is cleared: in a group
    # that did not carry, or in the half of a group whose other half moved the drift as much as the whole group
    changed = [p for p in found.parts if not p.unchanged]
    cleared = {p.part.name for p in changed if p.searched == "cleared"}
    assert {p.part.name for p in changed if p.restore and p.damage} == {f"layer.{k}" for k in range(12)} - cleared
    assert not cleared & planted and {name for g in found.groups if not g.carries for name in g.parts} <= cleared
    for name in planted:  # the planted layers' own figures are the exhaustive run's
        mine, theirs = [next(p for p in f.parts if p.part.name == name) for f in (found, every)]
        assert (mine.restore, mine.damage) == (theirs.restore, theirs.damage)
    # the two sides' recordings, the groups, the parts kept measured alone in the direction the search did not, the fix set
    singles = sum(p.searched == "measured" and not p.unchanged for p in found.parts)
    assert found.hybrids == 2 + len(found.groups) + singles + found.fix_hybrids < every.hybrids
    ran = [f.reuse["items"] - f.reuse["skipped"] for f in (found, every)]
    print(f"group search: {found.hybrids} models on the items ({len(found.groups)} groups), {ran[0]} token-layers; "
          f"every part both ways: {every.hybrids}, {ran[1]} token-layers")
    assert ran[0] < ran[1]
    text = blame_text(found)
    assert f"group search: {len(found.groups)} group hybrids" in text and "cleared in a group" in text


def test_the_group_search_tests_the_half_the_estimate_names_first(qwen_tokenizer, dataset, monkeypatch):
    """One layer damaged high up (10 of 12): each group above layer 0 is split, and the half with the larger
    first-order estimate is tested first; where it does what its group does, the other half is never run.
    Without an estimate, the half whose hybrid starts at the higher boundary (runs fewer layers) goes first."""
    import pytest_longctx.gate.blame.run as run

    original = tiny_qwen3(len(qwen_tokenizer), seed=3, layers=12, init=0.5)
    candidate = damaged(damaged(original, layers=(10,), scale=3.0), layers=tuple(range(12)), scale=0.01)
    found = blame(original, candidate, None, dataset, None, progress=False)
    layers = [layer_numbers(g.parts) for g in found.groups]
    # the first halves (both, the one holding layer 10 first); 9-11 before 6-8 (not run: 9-11 restores what 6-11
    # does), 9-10 before 11 (not run), 10 before 9 (not run)
    assert layers == [[6, 7, 8, 9, 10, 11], [0, 1, 2, 3, 4, 5], [9, 10, 11], [9, 10], [10]], layers
    assert [g.carries for g in found.groups] == [True, False, True, True, True]
    assert found.fix_set == ["layer.10"] and found.fixed and found.verification["passed"]
    # the estimate names layer 10 first (to first order it restores less than it does: 37 % against 100 %)
    assert max(found.parts, key=lambda p: p.estimate or 0.0).part.name == found.parts[0].part.name == "layer.10"

    def no_estimate(report, *args):
        report.estimates_why_not = "no estimate, for this test"

    monkeypatch.setattr(run, "estimate", no_estimate)
    blind = blame(original, candidate, None, dataset, None, progress=False)
    layers = [layer_numbers(g.parts) for g in blind.groups]
    # 11 before 9-10 (11 alone carries nothing, so 9-10 is run too): one hybrid more than with the estimate
    assert layers == [[0, 1, 2, 3, 4, 5], [6, 7, 8, 9, 10, 11], [9, 10, 11], [11], [9, 10], [10]], layers
    assert [g.carries for g in blind.groups] == [False, True, True, False, True, True]
    assert blind.fix_set == ["layer.10"] and blind.hybrids == found.hybrids + 1


def test_the_group_search_finds_a_pair_whose_halves_cancel(qwen_tokenizer, dataset):
    original, candidate = cancelling(len(qwen_tokenizer), layers=12)
    found = blame(original, candidate, None, dataset, None, progress=False)
    [row] = found.rows
    by_name = {p.part.name: p for p in found.parts}
    assert found.search == "groups" and found.fix_set == ["layer.1", "layer.2"] and found.fixed and found.verification["passed"]
    # layer 2 is split out of its group by restoring it making the drift worse, and its damage share says it matters
    second = by_name["layer.2"]
    assert found.restore_share(second, row) < -0.5 and found.damage_share(second, row) > 0.2 and found.differ(second, row)
    assert [g.carries for g in found.groups if g.parts == ["layer.2"]] == [True]


def masking(vocab_size: int):
    """A candidate whose layers 3 and 8 each write the same huge constant into the residual stream: either
    alone leaves the final norm nothing but the constant to read, so restoring one alone changes next to
    nothing, and damaging the original with either does all the damage. Every other layer is nudged."""
    original = with_biases(vocab_size, layers=12)
    candidate = damaged(original, layers=(0, 1, 2, 4, 5, 6, 7, 9, 10, 11), scale=1e-3)
    written = torch.zeros(original.config.hidden_size)
    written[:8] = 1e4
    with torch.no_grad():
        for k in (3, 8):
            candidate.model.layers[k].self_attn.o_proj.bias.add_(written)
    return original, candidate


def test_parts_that_mask_each_other_are_found_by_their_damage(qwen_tokenizer, dataset):
    original, candidate = masking(len(qwen_tokenizer))
    found = blame(original, candidate, None, dataset, None, progress=False)
    [row] = found.rows
    by_name = {p.part.name: p for p in found.parts}
    for name in ("layer.3", "layer.8"):
        assert abs(found.restore_share(by_name[name], row)) < 0.05 and found.damage_share(by_name[name], row) > 0.9
    assert found.search == "groups" and sorted(found.fix_set) == ["layer.3", "layer.8"] and found.fixed
    # no restore of a group below the first halves moves the drift: each such family is tested by its damage too
    damage = [g for g in found.groups if g.direction == "damage"]
    assert damage and all(g.carries == bool({"layer.3", "layer.8"} & set(g.parts)) for g in damage)
    assert found.verification["passed"]


def test_the_budget_stops_the_search_and_says_what_is_left(qwen_tokenizer, dataset):
    original, candidate = twelve_layers(len(qwen_tokenizer))
    found = blame(original, candidate, None, dataset, None, progress=False, verify=False, reuse=False, budget=4)
    # the first halves; the half of each with the larger estimate (layers 0-2 do all the damage layers 0-5 do, so 3-5
    # are not tested; layers 9-11 all that 6-11 do)
    assert found.hybrids == 4 and [g.name for g in found.groups][2:] == ["layer.0..layer.2 (3 parts)", "layer.9..layer.11 (3 parts)"]
    in_order = sorted((p for p in found.parts if not p.unchanged), key=lambda p: layer_numbers([p.part.name]))
    untested = [p.part.name for p in in_order if p.searched == "untested"]
    assert untested == [f"layer.{k}" for k in (0, 1, 2, 9, 10, 11)]  # a group that carried, and the half not tested
    assert [p.part.name for p in in_order if p.searched == "cleared"] == [f"layer.{k}" for k in range(3, 9)]
    assert not found.fix_set and not found.fixed
    assert found.notes[0] == (f"the budget of 4 models (--budget) ended before 6 changed part(s) were measured: "
                              f"{', '.join(untested)}; they are in neither the ranking's figures nor the fix set")
    assert found.notes[1] == ("no part measured restores or causes any of the far drift: the damage lies in parts the budget "
                              "left unmeasured (--budget) or in how the parts interact")


def test_a_part_the_first_round_clears_is_found_again_from_the_fix_sets_hybrid(qwen_tokenizer, dataset):
    """Restoring layer 4 alone takes away under 5 % of the far drift (layer 2's damage swamps it), and both are in
    the first half: that half's first half (layers 0-2) moves the drift as much as it does, so the first round
    clears layers 3-5 untested; with layer 2 restored, what is left of the drift is layer 4's, still beyond the
    row's threshold."""
    original = tiny_qwen3(len(qwen_tokenizer), seed=3, layers=12, init=0.5)
    candidate = damaged(damaged(damaged(original, layers=(2,), scale=3.0), layers=(4,), scale=0.3),
                        layers=(0, 1, 3, 5, 6, 7, 8, 9, 10, 11), scale=0.01)
    found = blame(original, candidate, None, dataset, None, progress=False)
    [row] = found.rows
    fourth = next(p for p in found.parts if p.part.name == "layer.4")
    assert 0 < found.restore_share(fourth, row) < 0.05 and 0 < found.damage_share(fourth, row) < 0.1
    assert not any("layer.4" in g.parts and "layer.2" not in g.parts and g.carries for g in found.groups if not g.second)
    again = [g for g in found.groups if g.second]
    # the second round restores its groups with layer 2 restored: each that holds layer 4 takes away nearly all that is left
    assert again and all(g.carries and g.shares[0] > 0.9 for g in again if "layer.4" in g.parts)
    assert {p.part.name for p in found.parts if p.searched == "measured" and not p.unchanged} == {"layer.2", "layer.4"}
    assert found.fix_set == ["layer.2", "layer.4"] and found.fixed and found.verification["passed"]
    assert "second round, with the fix set restored: restore layer.4" in blame_text(found)


def test_a_budget_that_ends_within_a_part_shows_what_it_measured_and_nothing_more(original, candidate, dataset):
    """Two changed parts measured one by one, in the order of their estimates, and a budget of one hybrid: the
    first restored is all there is. Its figures are that hybrid's; the other has none; the fix set holds what was
    measured, and the notes say the same."""
    from pytest_longctx.reports.blame import row_tables

    baseline = score_sets(TransformersBackend(original), None, dataset, progress=False).as_baseline()
    found = blame(original, candidate, None, dataset, baseline, progress=False, verify=False, budget=1)
    [row] = found.rows
    first, second = sorted((p for p in found.parts if not p.unchanged), key=lambda p: -p.estimate)
    assert found.search == "exhaustive" and found.hybrids == 1 and {first.name, second.name} == {"layer.1", "layer.3"}
    # the one hybrid: the candidate with the first part taken back by hand, scored and judged as the gate does
    restored = row_figures(taken(candidate, original, layer_numbers([first.name])), dataset, baseline)[row]
    assert first.restore[row] == restored and not first.damage and not second.restore and not second.damage
    before = found.candidate[row]
    cells = {line[1]: line for line in row_tables(found)[0].body}
    share = f"{(before.far - restored.far) / before.far:.0%}"
    excess = ("n/a" if before.excess is None or before.excess <= 0 or restored.excess is None
              else f"{(before.excess - restored.excess) / before.excess:.0%}")
    # the cells: restore's far drift, share, estimate, excess share, damage's far drift, share, params, remark
    assert cells[first.name][2:8] + cells[first.name][9:] == [
        f"{before.far:.3f} -> {restored.far:.3f}", share, f"{first.estimate:.0%}", excess, "-", "-",
        "damage not measured (budget)"]
    assert cells[second.name][2:8] + cells[second.name][9:] == [
        f"{before.far:.3f} -> -", "-", f"{second.estimate:.0%}", "-", "-", "-", "not measured (budget)"]
    # what was measured is what the fix set holds: the first part's own hybrid, which is what the row reads with it
    assert found.fix_set == [first.name] and found.fix_steps == [first.restore] and found.fixed == restored.passed
    assert found.notes[:2] == [
        f"the budget of 1 models (--budget) ended before 1 changed part(s) were measured: {second.name}; they are in "
        "neither the ranking's figures nor the fix set",
        f"the budget of 1 models (--budget) ended before {first.name} was measured both ways: the table shows its "
        "figures restored in the candidate alone, no damage share"]
    if not restored.passed:
        assert found.notes[2:] == ["with every part that restores or causes any far drift kept (1 of 1 measured), a blamed "
                                   "row still fails: the rest of the damage lies in parts the budget left unmeasured "
                                   "(--budget) or in how the parts interact"]
    # no part the table calls not measured shows a measured share or is in the fix set
    for name, line in cells.items():
        if line[9] == "not measured (budget)":
            assert [line[3], *line[5:8]] == ["-"] * 4 and name not in found.fix_set, name


def swapped(tokenizer):
    """``tokenizer`` with the ids of two of its one-letter tokens exchanged: as many ids, the same merges, but
    texts cut into other ids."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    state = json.loads(tokenizer.backend_tokenizer.to_str())
    vocab = state["model"]["vocab"]
    vocab["a"], vocab["e"] = vocab["e"], vocab["a"]
    return PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(json.dumps(state)))


def test_a_tokenizer_that_differs_is_named_by_the_flag_that_gave_it(bpe_tokenizer, data_dir, tmp_path, capsys):
    from pytest_longctx.scoring.fingerprint import tokenizer_fingerprint

    other = swapped(bpe_tokenizer)
    mine, theirs = (tokenizer_fingerprint(t, "text") for t in (bpe_tokenizer, other))
    assert mine != theirs and len(other) == len(bpe_tokenizer)
    original = tiny_qwen3(len(bpe_tokenizer), seed=3, layers=4, init=0.5)
    folders = {}
    for name, model, tokenizer in (("original", original, bpe_tokenizer), ("candidate", damaged(original), bpe_tokenizer),
                                   ("retokenized", damaged(original), other)):
        folders[name] = save_model(tmp_path / name, model, tokenizer)
    dataset = load_dataset(str(data_dir), sets=["tool_calls"], lengths=["2k"], limit=1)
    for name, tokenizer in (("baseline", bpe_tokenizer), ("other-baseline", other)):
        scores = score_sets(TransformersBackend(original, name=str(folders["original"])), tokenizer, dataset, progress=False)
        assert scores.mode == "text"
        scores.as_baseline().save(tmp_path / f"{name}.json.gz")
    selection = ["--data", str(data_dir), "--sets", "tool_calls", "--lengths", "2k", "--limit", "1", "--quiet"]

    def refused(reference, model, *args):
        code = main(["blame", "--reference", str(reference), "--model", str(model), *map(str, args), *selection])
        captured = capsys.readouterr()
        assert code == 2 and captured.out == "", captured.out
        [line] = [line for line in captured.err.splitlines() if line.startswith("longctx")]
        return line.removeprefix("longctx: error: ")

    # the candidate differs from the original, whose baseline is right: the candidate is named, with or without it
    differs = (f"--model {folders['retokenized']}: tokenizes otherwise than --reference {folders['original']} (another "
               "vocabulary, or the same texts cut into other tokens): blame reads the original, the candidate and every "
               "hybrid of the two with the candidate's tokenizer, so the two must tokenize alike; give the candidate the "
               "original's tokenizer files, or blame it against the original it was made from")
    assert refused(folders["original"], folders["retokenized"], "--baseline", tmp_path / "baseline.json.gz") == differs
    assert refused(folders["original"], folders["retokenized"]) == differs
    # the two sides agree and the baseline does not: the baseline is named
    assert refused(folders["original"], folders["candidate"], "--baseline", tmp_path / "other-baseline.json.gz") == (
        f"--baseline {tmp_path / 'other-baseline.json.gz'}: made with another tokenizer ({theirs}) than --reference "
        f"{folders['original']} and --model {folders['candidate']} tokenize with ({mine}): blame needs the baseline of the "
        "original as it reads it; make it from --reference (longctx score --model REFERENCE --save_scores FILE), or leave "
        "--baseline out to score the original now")
    # an original that cannot be loaded is named by its own flag
    assert refused(tmp_path / "missing", folders["candidate"]) == (
        f"--reference {tmp_path / 'missing'}: no such folder or file (a model folder, a .gguf file, a hub id ORG/NAME or an "
        "alias: qwen2.5-coder-0.5b, qwen2.5-coder-0.5b-gguf, smollm2-135m, smollm2-135m-gguf)")
    # and with them all agreeing, blame runs
    assert main(["blame", "--reference", str(folders["original"]), "--model", str(folders["candidate"]), "--baseline",
                 str(tmp_path / "baseline.json.gz"), "--parts", "layer.1", *selection]) == 0
    assert "layer.1" in capsys.readouterr().out


def retokenized_gguf(path, target):
    """``path`` written again as ``target`` with the ids of two of its tokens exchanged in its vocabulary."""
    from gguf import GGUFReader, GGUFValueType, GGUFWriter

    reader = GGUFReader(path)
    writer = GGUFWriter(target, str(reader.fields["general.architecture"].contents()))
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        value, kind = field.contents(), field.types[0]
        if name == "tokenizer.ggml.tokens":
            a, b = value.index("a"), value.index("e")
            value[a], value[b] = value[b], value[a]
        writer.add_key_value(name, value, kind, sub_type=field.types[-1] if kind == GGUFValueType.ARRAY else None)
    for tensor in reader.tensors:
        writer.add_tensor(tensor.name, tensor.data, raw_dtype=tensor.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return target


@needs("llama_cpp", "gguf", install="pip install 'pytest-longctx[llama]'")
@needs_smollm2
def test_gguf_files_name_their_non_finite_parts_and_the_flag_of_the_side_that_differs(data_dir, tmp_path, capsys):
    from pytest_longctx.backends.aliases import smollm2_gguf
    from pytest_longctx.backends.llama_cpp.backend import LlamaCppBackend

    clean = tensors_of(len(LlamaCppBackend.load(smollm2_gguf()).tokenizer))
    broken = dict(clean)
    broken["blk.3.attn_norm.weight"] = np.full_like(clean["blk.3.attn_norm.weight"], np.nan)
    broken["blk.3.ffn_up.weight"] = np.full_like(clean["blk.3.ffn_up.weight"], np.nan)  # stored as Q8_0: its scales NaN
    broken["blk.1.ffn_down.weight"] = clean["blk.1.ffn_down.weight"].copy()
    broken["blk.1.ffn_down.weight"][3, 4] = np.inf
    original = write_gguf(tmp_path / "original.gguf", clean)
    with np.errstate(invalid="ignore"):  # NaN rounded to Q8_0's integers: what a broken quantizer writes
        candidate = write_gguf(tmp_path / "candidate.gguf", broken, {"blk.3.ffn_up.weight"})
    pair = GGUFPair(str(original), str(candidate), (SETTINGS, SETTINGS), names=("original.gguf", "candidate.gguf"))
    dataset = load_dataset(str(data_dir), sets=["tool_calls"], lengths=["2k"], limit=1)
    found = blame_pair(pair, dataset, None, progress=False)
    # what the arrays written hold, read from them here
    held = {name: "NaN" if np.isnan(values).any() else "inf" for name, values in broken.items() if not np.isfinite(values).all()}
    assert [(n.side, n.part, n.tensors) for n in found.non_finite] == [
        ("candidate", "layer.1", {"blk.1.ffn_down.weight": held["blk.1.ffn_down.weight"]}),
        ("candidate", "layer.3", {name: held[name] for name in ("blk.3.attn_norm.weight", "blk.3.ffn_up.weight")})]
    assert not found.rows and not found.notes and found.hybrids == 0
    # a candidate whose vocabulary holds two tokens at each other's ids; an original that is no file
    other = retokenized_gguf(original, tmp_path / "retokenized.gguf")
    selection = ["--data", str(data_dir), "--sets", "tool_calls", "--lengths", "2k", "--limit", "1", "--quiet"]
    for reference, model, message in (
            (original, other, f"--model {other}: tokenizes otherwise than --reference {original} (its tokenizer.ggml.tokens "
                              "differs): blame reads the original, the candidate and every hybrid of the two with the "
                              "candidate's tokenizer, so the two must tokenize alike; blame the candidate against the "
                              "original it was made from"),
            (tmp_path / "missing.gguf", candidate, f"--reference {tmp_path / 'missing.gguf'}: no such .gguf file")):
        code = main(["blame", "--backend", "llama.cpp", "--reference", str(reference), "--model", str(model), *selection])
        captured = capsys.readouterr()
        assert code == 2 and [line for line in captured.err.splitlines() if line.startswith("longctx")] == [
            f"longctx: error: {message}"]
