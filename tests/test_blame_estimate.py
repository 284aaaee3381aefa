"""Blame's first-order estimate and what it steers, each against an independent computation: the estimate
against a central finite difference of the objective, read with a naive full-logits forward pass and
metrics' own ``kl_k``; against each part's measured restore where it ranks right and where an interaction
makes it wrong (so the hybrids' verification is seen to matter); spread damage turning the search
cumulative, its keep set judged on a model made by hand; the whole run's ETA, worked by hand; the partial
results file a SIGTERM leaves."""
from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from kit.blame import blame, row_figures
from kit.models import damaged, save_model, tiny_qwen3

from pytest_longctx.backends.hf import TransformersBackend
from pytest_longctx.backends.hybrids.first_order import first_order
from pytest_longctx.backends.hybrids.pair import SequenceReads, WeightedRead
from pytest_longctx.backends.hybrids.transformers import model_parts
from pytest_longctx.data.load import load_dataset
from pytest_longctx.gate.blame.cumulative import steps_for
from pytest_longctx.gate.blame.scorer import Pace
from pytest_longctx.metrics.drift import kl_k
from pytest_longctx.scoring.pipeline import score_sets


@pytest.fixture(scope="module")
def dataset(data_dir):
    return load_dataset(str(data_dir), sets=["tool_calls"], lengths=["2k"], limit=2)


def objective(model, sequence: SequenceReads) -> float:
    """The weighted KL_K of the reads, from the model's full logits over the whole sequence."""
    with torch.no_grad():
        logits = model(torch.tensor([sequence.ids])).logits[0].double()
    logprobs = torch.log_softmax(logits, dim=-1)
    return sum(read.weight * kl_k(read.logprobs, [float(logprobs[read.position - 1, i]) for i in read.ids])
               for read in sequence.reads)


def moved(candidate, original, names, t: float):
    """A copy of ``candidate`` with the tensors ``names`` moved ``t`` of the way to the original's."""
    made = copy.deepcopy(candidate)
    theirs = dict(original.named_parameters())
    with torch.no_grad():
        for name, tensor in made.named_parameters():
            if name in names:
                tensor.add_(t * (theirs[name] - tensor))
    return made


def test_the_estimate_is_the_objectives_slope_towards_the_original(qwen_tokenizer):
    """Each part's estimate is minus the derivative of the objective as the part moves from the candidate towards
    the original: a central finite difference of the objective read naively agrees to 2 %."""
    original = tiny_qwen3(len(qwen_tokenizer), seed=3, layers=4, init=0.5)
    candidate = damaged(original, layers=(1, 3), scale=0.3)
    ids = torch.randint(0, 5000, (96,), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        base = torch.log_softmax(original(ids[None]).logits[0].double(), dim=-1)
    reads = []
    for position in (30, 50, 70, 95):
        top = torch.topk(base[position - 1], 8)
        reads.append(WeightedRead(position, tuple(int(i) for i in top.indices), tuple(float(v) for v in top.values), 0.25))
    sequence = SequenceReads(tuple(int(i) for i in ids), tuple(reads))
    parts = model_parts(candidate, "layer")
    found = first_order(original, candidate, [sequence], parts)
    assert not found.why_not and set(found.by_part) == {p.name for p in parts}
    step = 1e-2
    for part in parts:
        names = set(part.parameters)
        slope = (objective(moved(candidate, original, names, step), sequence)
                 - objective(moved(candidate, original, names, -step), sequence)) / (2 * step)
        if part.name in ("layer.1", "layer.3"):
            assert found.by_part[part.name] == pytest.approx(-slope, rel=0.02, abs=1e-6), part.name
        else:  # the same weights on both sides: no move, no slope
            assert found.by_part[part.name] == 0.0 and slope == 0.0, part.name
    assert found.by_part["layer.1"] != found.by_part["layer.3"]


def test_where_restores_add_the_estimate_ranks_the_parts_as_they_measure(qwen_tokenizer, dataset):
    """Heavy damage in layer 1, light in layer 3: measured both ways by the exhaustive search, the estimate
    orders the two as their measured restores do, and both are positive."""
    original = tiny_qwen3(len(qwen_tokenizer), seed=3, layers=4, init=0.5)
    candidate = damaged(damaged(original, layers=(1,), scale=1.0), layers=(3,), scale=0.1)
    found = blame(original, candidate, None, dataset, None, search="exhaustive", progress=False)
    [row] = found.rows
    by_name = {p.name: p for p in found.ranked}
    heavy, light = by_name["layer.1"], by_name["layer.3"]
    assert found.restore_share(heavy, row) > found.restore_share(light, row)
    assert heavy.estimate > light.estimate > 0
    assert [p.name for p in found.ranked] == ["layer.1", "layer.3"]


def test_where_parts_interact_the_estimate_misorders_some_and_the_hybrids_correct_it(qwen_tokenizer, dataset):
    """Every one of 12 layers damaged a little (layer 0 most): measured one by one, some parts that the estimate
    says take drift away add to it when restored alone (their damage offsets another's), and the leading part's
    estimate is several times its measured restore. The ranking the estimate steers is still decided by the
    hybrids: no such part is in the fix set, which passes its verification."""
    original = tiny_qwen3(len(qwen_tokenizer), seed=3, layers=12, init=0.5)
    candidate = damaged(original, layers=tuple(range(12)), scale=0.1)
    found = blame(original, candidate, None, dataset, None, search="exhaustive", progress=False)
    [row] = found.rows
    wrong = [p for p in found.ranked if p.estimate > 0.02 and found.restore_share(p, row) < 0]
    assert wrong, [(p.name, p.estimate, found.restore_share(p, row)) for p in found.ranked]
    lead = found.ranked[0]
    assert lead.estimate > 2 * found.restore_share(lead, row) > 0  # first order overshoots this one
    agree = found.correlation()
    assert agree.hybrids == 12 and 0.5 < agree.rho < 1.0, agree
    assert not {p.name for p in wrong} & set(found.fix_set) and found.fixed and found.verification["passed"]


def test_spread_damage_turns_the_search_cumulative_and_its_keep_set_passes_when_made_by_hand(qwen_tokenizer, dataset):
    """Layers 1 to 11 of 12 damaged alike: the first split finds both halves carry and the estimate needs most
    parts for its total, so the run searches the leading parts by estimate, by bisection; the keep set it names
    passes when the candidate is given those layers back by hand, and the run stays within its expectation."""
    original = tiny_qwen3(len(qwen_tokenizer), seed=3, layers=12, init=0.5)
    candidate = damaged(original, layers=tuple(range(1, 12)), scale=0.3)
    baseline = score_sets(TransformersBackend(original), None, dataset, progress=False).as_baseline()
    found = blame(original, candidate, None, dataset, baseline, progress=False)
    assert found.search == "cumulative" and found.spread is not None and found.spread.needed > 3, found.notes
    first = [g for g in found.groups if g.direction == "restore"]
    assert [len(g.parts) for g in first] == [6, 5] and all(share >= 0.05 for g in first for share in g.shares)
    assert 0 < len(found.keep_steps) <= steps_for(11)  # the bisection over the 11 changed layers
    kept = [int(name.split(".")[1]) for name in found.fix_set]
    by_estimate = sorted(found.ranked, key=lambda p: -p.estimate)
    assert found.fix_set == [p.name for p in by_estimate[:len(kept)]]
    if found.fixed:
        restored = copy.deepcopy(candidate)
        for n in kept:
            restored.model.layers[n].load_state_dict(original.model.layers[n].state_dict())
        assert all(s.passed for s in row_figures(restored, dataset, baseline).values())
        assert found.verification["passed"]
    else:  # none short of every layer passes: the note says that the whole model must be compressed more lightly
        assert any("no keep set short of all 11" in note for note in found.notes), found.notes
    assert found.hybrids <= found.expected + 1


class Halfway:
    """A hybrid's progress that has ``seconds`` left."""

    def __init__(self, seconds: float):
        self.seconds = seconds

    def remaining(self) -> float:
        return self.seconds


def test_the_whole_runs_eta_is_this_models_rest_and_the_expected_models_left_at_the_mean_pace():
    pace = Pace(budget=10, expected=8, seconds=[2.0, 4.0])  # 2 scored, 3 s each on average
    # model 3 of 8: 5 s left of it, then 5 more at 3 s; at most 7 more under the budget of 10
    assert pace.detail(Halfway(5.0)) == "model 3 of about 8, whole run ETA 0:20 (at most 0:26, --budget 10)"
    assert Pace(budget=None, expected=8, seconds=[60.0] * 7).detail(Halfway(float("nan"))) == \
        "model 8 of about 8, whole run ETA 1:00"  # before its first token a model is taken to need the mean
    assert Pace(budget=4, expected=8).detail(Halfway(1.0)) == "model 1 of about 8, at most 4"  # no pace yet


def test_sigterm_leaves_a_partial_results_file_that_says_where_it_stopped(qwen_tokenizer, data_dir, tmp_path):
    original = tiny_qwen3(len(qwen_tokenizer), seed=3, layers=12, init=0.5)
    candidate = damaged(original, layers=tuple(range(12)), scale=0.3)
    folders = [save_model(tmp_path / name, model, qwen_tokenizer)
               for name, model in (("original", original), ("candidate", candidate))]
    out = tmp_path / "blame.json"
    command = [sys.executable, "-m", "pytest_longctx.cli", "blame", "--reference", str(folders[0]), "--model",
               str(folders[1]), "--data", str(data_dir), "--sets", "tool_calls", "--lengths", "2k", "--limit", "2",
               "--search", "exhaustive", "--out", str(out)]
    run = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])})
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and run.poll() is None:  # until a part has been measured
        body = json.loads(out.read_text()) if out.exists() else {}
        if any(p["restore"] for p in body.get("parts", [])):
            break
        time.sleep(0.2)
    assert run.poll() is None, run.communicate()
    run.send_signal(signal.SIGTERM)
    stdout, stderr = run.communicate(timeout=120)
    assert run.returncode == 130, stderr
    body = json.loads(out.read_text())
    assert body["partial"] and body["stopped"] == "stopped by the user (Ctrl-C or SIGTERM)"
    assert body["not_reached"][0] == "the search (stopped in it)", body["not_reached"]
    measured = [p for p in body["parts"] if p["restore"]]
    assert measured and body["hybrids"] >= len(measured)
    assert any(line.startswith("12 changed parts not measured") or "changed parts not measured alone" in line
               for line in body["not_reached"])
    assert "stopped by the user" in stdout + stderr
