"""Drift at every read (docs/metrics.md#drift): KL_K against a naive full-vocabulary KL, the
pipeline's per-read figures against a naive forward pass, control reads, the damage kinds
of hand-built candidates, and older baselines without drift."""
from __future__ import annotations

import gzip
import json
import math

import numpy as np
import pytest
import torch
from kit.models import perturbed

from pytest_longctx.backends.base import ReadResult
from pytest_longctx.backends.hf import TransformersBackend
from pytest_longctx.data.load import load_dataset
from pytest_longctx.gate.damage import BOTH, FAR_SPECIFIC, GENERAL, NONE, Drift, GroupDrift
from pytest_longctx.gate.evaluation import evaluate
from pytest_longctx.gate.thresholds import Thresholds
from pytest_longctx.metrics.drift import Block, ItemDrift, ReadSums, item_reads, kl_k, pack, places
from pytest_longctx.scoring.controls import CONTROL_READS, CONTROL_TOKENS
from pytest_longctx.scoring.pipeline import compute_sets, score_sets
from pytest_longctx.scoring.scores_file import load_scores, scores_from_json

ROW = "Distant tool calls at 2k tokens"


def full_logprobs(model, ids, dtype=torch.float32) -> torch.Tensor:
    """[seq, vocab] log-softmax of one full forward pass (float32 by default, as the backend
    computes it; float64 where a test needs probabilities that sum to 1): the naive way."""
    with torch.no_grad():
        return torch.log_softmax(model(torch.tensor([list(ids)])).logits[0].to(dtype), dim=-1).double()


def naive_kl(p: torch.Tensor, q: torch.Tensor) -> float:
    """KL(P || Q) over the whole vocabulary, from log-probabilities."""
    return float((p.exp() * (p - q)).sum())


def naive_kl_k(p: torch.Tensor, q: torch.Tensor, top: list[int]) -> float:
    """KL_K written out from its definition: over the baseline's top ids ``top``, then the rest bucket."""
    pk, qk = p[top].exp(), q[top].exp()
    p_rest, q_rest = max(0.0, 1 - float(pk.sum())), max(1e-12, 1 - float(qk.sum()))
    rest = p_rest * (math.log(p_rest) - math.log(q_rest)) if p_rest > 0 else 0.0
    return float((pk * (p[top] - q[top])).sum()) + rest


@pytest.fixture(scope="module")
def dataset(data_dir):
    return load_dataset(str(data_dir), sets=["facts", "tool_calls"], lengths=["2k"])


@pytest.fixture(scope="module")
def baseline(qwen_model, qwen_tokenizer, dataset):
    return score_sets(TransformersBackend(qwen_model, qwen_tokenizer), qwen_tokenizer, dataset, progress=False).as_baseline()


def test_kl_k_is_the_full_kl_when_k_covers_the_vocabulary_and_a_lower_bound_otherwise(bpe_model, bpe_tokenizer, rows):
    text = rows[("facts", "2k")][0]["text"]
    ids = bpe_tokenizer(text, add_special_tokens=False)["input_ids"][:200]
    exact = torch.float64
    p_all, q_all = full_logprobs(bpe_model, ids, exact), full_logprobs(perturbed(bpe_model, 0.5, seed=1), ids, exact)
    vocabulary = p_all.shape[-1]
    for position in range(5, 200, 15):
        p, q = p_all[position], q_all[position]
        full = naive_kl(p, q)
        everything = torch.argsort(p, descending=True)
        assert kl_k(p[everything].tolist(), q[everything].tolist()) == pytest.approx(full, rel=1e-9, abs=1e-12)
        for k in (1, 4, 16, 64):
            top = everything[:k]
            found = kl_k(p[top].tolist(), q[top].tolist())
            assert 0.0 <= found <= full + 1e-12
            assert found == pytest.approx(naive_kl_k(p, q, top.tolist()), rel=1e-9, abs=1e-12)
        assert full > 0.0 and vocabulary > 64


def test_every_read_of_a_candidate_matches_a_naive_forward_pass(qwen_model, qwen_tokenizer, dataset, baseline):
    candidate_model = perturbed(qwen_model, 0.3, seed=5)
    candidate = score_sets(TransformersBackend(candidate_model, qwen_tokenizer), qwen_tokenizer, dataset,
                           reference=baseline, progress=False)
    checked = 0
    for config, length, item in dataset.items():
        mine, theirs = candidate.scores.scores[config][length][item.id], baseline.scores[config][length][item.id]
        reads = item_reads(item, mine, theirs)
        block = Block.decode(theirs.drift)
        assert reads is not None and len(reads) == len(block.at)
        p_all, q_all = full_logprobs(qwen_model, item.qwen_ids), full_logprobs(candidate_model, item.qwen_ids)
        for (seq, pos), ids, lps, read in zip(block.at, block.ids, block.lps, reads):
            assert seq == 0
            p, q = p_all[pos - 1], q_all[pos - 1]  # the prediction of token pos is read at pos - 1
            sixteenth = float(torch.topk(p, 16).values[-1])
            assert len(set(ids)) == 16 and all(float(p[i]) >= sixteenth - 1e-5 for i in ids)  # a top 16 (ties in any order)
            assert lps == pytest.approx(p[ids].tolist(), abs=1e-5)
            assert read.kl == pytest.approx(naive_kl_k(p, q, ids), rel=1e-3, abs=1e-6)
            assert read.same_top1 == (int(p.argmax()) == int(q.argmax()))
            token = int(item.qwen_ids[pos])
            assert read.dlogp == pytest.approx(float(q[token] - p[token]), abs=1e-4)
            checked += 1
        controls = [pos for (_, pos), read in zip(Block.decode(theirs.drift).at, reads) if read.group == "control"]
        assert len(controls) == min(CONTROL_READS, len(item.qwen_ids) - 1) and max(controls) <= CONTROL_TOKENS
        assert controls == sorted(set(controls))
    assert checked > 100


def test_the_model_against_its_own_baseline_drifts_exactly_zero(qwen_model, qwen_tokenizer, dataset, baseline):
    again = score_sets(TransformersBackend(qwen_model, qwen_tokenizer), qwen_tokenizer, dataset, reference=baseline,
                       progress=False)
    evaluation = evaluate(again.sets, compute_sets(dataset, baseline, None), Thresholds())
    found = evaluation.drift[ROW]
    assert (found.far.kl, found.near.kl, found.control.kl) == (0.0, 0.0, 0.0)
    assert found.far.same_top1 == found.control.same_top1 == 1.0 and found.far.dlogp == 0.0
    assert found.interval == (0.0, 0.0) and found.kind == NONE
    check = next(v for v in evaluation.verdicts if v.metric == "kl" and v.label.startswith(ROW))
    assert check.passed and check.model == 0.0 and check.interval == (0.0, 0.0)


class Damaged:
    """A hand-built candidate: the model's own distributions, flattened by a temperature at the
    reads ``temperature(ids, index)`` names (one full forward pass per request)."""

    tokenizer = None

    def __init__(self, model, temperature):
        self.model, self.temperature = model, temperature

    def read(self, ids, positions, tokens, top_k=0):
        with torch.no_grad():
            logits = self.model(torch.tensor([list(ids)])).logits[0].float()
        top1, logprobs = [], []
        for position, asked in zip(positions, tokens):
            lp = torch.log_softmax(logits[position] / self.temperature(ids, position), dim=-1)
            top1.append(int(lp.argmax()))
            logprobs.append(lp[list(asked)].tolist())
        return ReadResult(top1, logprobs)


def groups_at(baseline, dataset) -> dict[tuple[tuple[int, ...], int], str]:
    """(the sequence's first ids, prediction index) -> far, near or control, from the baseline's reads."""
    found = {}
    for config, length, item in dataset.items():
        theirs = baseline.scores[config][length][item.id]
        head = tuple(int(i) for i in item.qwen_ids[:32])
        for (_, pos), (group, _, _) in zip(Block.decode(theirs.drift).at, places(item, theirs)):
            found[(head, pos - 1)] = group
    return found


@pytest.mark.parametrize("damage, kind", [({"far": 4.0}, FAR_SPECIFIC), ({"near": 4.0, "control": 4.0, "far": 1.5}, GENERAL)])
def test_a_candidate_damaged_far_back_is_far_specific_and_one_damaged_everywhere_general(
        qwen_model, dataset, baseline, damage, kind):
    groups = groups_at(baseline, dataset)

    def temperature(ids, index):
        return damage.get(groups.get((tuple(int(i) for i in ids[:32]), index), ""), 1.0)

    candidate = score_sets(Damaged(qwen_model, temperature), None, dataset, mode="ids", reference=baseline, progress=False)
    evaluation = evaluate(candidate.sets, compute_sets(dataset, baseline, None), Thresholds(kl=0.05))
    found = evaluation.drift[ROW]
    assert found.kind == kind, found.text()
    assert found.text().startswith(kind)
    check = next(v for v in evaluation.verdicts if v.metric == "kl" and v.label.startswith(ROW))
    assert not check.passed and check.damage is found and f"damage {kind}" in check.message()
    if kind == FAR_SPECIFIC:
        assert found.near.kl == pytest.approx(0.0, abs=1e-9) and found.control.kl == pytest.approx(0.0, abs=1e-9)
        assert found.interval[0] > 0
    else:
        assert found.near.kl > 0.05 and found.control.kl > 0.05 and found.doubled[0] <= 0


def drift_of(far: float, near: float, control: float, interval: tuple[float, float] | None,
             doubled: tuple[float, float] | None, against: str = "near") -> Drift:
    def group(kl):
        return GroupDrift(10, kl, 1.0, 0.0)

    return Drift(4, group(far), group(near), group(control), against, (far - near) if against == "near" else (far - control),
                 interval, doubled, 0.0, None, 0.05)


@pytest.mark.parametrize("figures, kind", [
    ((0.30, 0.01, 0.00, (0.20, 0.40), (0.18, 0.39)), FAR_SPECIFIC),
    ((1.80, 0.17, 0.00, (1.48, 1.82), (1.20, 1.60)), FAR_SPECIFIC),  # near reads past a 512-token window drift too
    ((0.30, 0.20, 0.10, (-0.05, 0.25), (-0.3, 0.05)), GENERAL),
    ((0.30, 0.01, 0.10, (-0.02, 0.50), (-0.04, 0.49)), GENERAL),
    ((12.4, 9.3, 9.2, (2.0, 3.9), (-7.4, -5.1)), GENERAL),  # damaged everywhere, far more in nats only
    ((0.90, 0.20, 0.10, (0.50, 0.90), (0.30, 0.70)), BOTH),
    ((0.03, 0.01, 0.00, (-0.01, 0.05), (-0.02, 0.04)), NONE),
    ((0.30, 0.20, 0.00, (-0.05, 0.25), (-0.3, 0.05)), NONE),  # long-context drift, the same at every distance
    ((0.30, 0.01, 0.00, None, None), NONE),
    # SmolLM2 Q4_K_M, 2k tool calls: the same drift at every distance, control just within
    ((0.056, 0.075, 0.044, (-0.02, 0.03), (-0.06, 0.0), "control"), GENERAL),
    ((0.048, 0.063, 0.042, (-0.08, 0.06), (-0.1, 0.0), "control"), NONE),  # within the threshold everywhere
    ((0.058, 0.0, 0.043, (0.001, 0.03), (-0.05, -0.02), "control"), FAR_SPECIFIC),
    # a q8_0 KV cache, 8k facts failing on 2 lost facts: a significant far excess of 0.0005 nats is no damage
    ((0.0007, 0.0, 0.0002, (0.0002, 0.0009), (0.0001, 0.0005), "control"), NONE),
])
def test_the_damage_kind_follows_the_stated_rule(figures, kind):
    found = drift_of(*figures)
    said = "not located by drift" if kind == NONE else kind  # a failing row whose drift locates nothing says so in words
    assert found.kind == kind and found.text().startswith(said), found.text()


def test_a_version_1_baseline_still_gates_without_drift_rows(qwen_model, qwen_tokenizer, dataset, baseline, tmp_path):
    path = tmp_path / "old.json.gz"
    baseline.save(path)
    body = json.loads(gzip.decompress(path.read_bytes()))
    body["version"] = 1
    for by_length in body["scores"].values():
        for by_item in by_length.values():
            for item in by_item.values():
                item.pop("controls"), item.pop("drift")
    path.write_bytes(gzip.compress(json.dumps(body).encode()))
    old = load_scores(path)
    assert not old.has_drift
    candidate = score_sets(TransformersBackend(perturbed(qwen_model, 0.3, seed=5), qwen_tokenizer), qwen_tokenizer,
                           dataset, reference=old, progress=False)
    evaluation = evaluate(candidate.sets, compute_sets(dataset, old, None), Thresholds())
    assert not evaluation.drift and all(v.metric != "kl" for v in evaluation.verdicts)
    assert evaluation.rows == candidate.rows


def test_a_damaged_drift_block_is_one_line_naming_the_file_and_item(baseline, tmp_path):
    from pytest_longctx.errors import LongctxError

    path = tmp_path / "damaged.json"
    baseline.save(path)
    body = json.loads(path.read_text())
    body["scores"]["facts"]["2k"]["f0"]["drift"]["lps"] = "AAAA"
    path.write_text(json.dumps(body))
    with pytest.raises(LongctxError) as raised:
        load_scores(path, "baseline")
    assert str(raised.value).startswith(f"baseline {path}: facts/2k/f0: its drift block is damaged")


def test_a_candidate_read_elsewhere_has_no_drift_and_says_so(qwen_model, qwen_tokenizer, dataset, baseline):
    moved = scores_from_json(json.loads(json.dumps(baseline.to_json())))  # a copy
    shifted = moved.scores["facts"]["2k"]["f0"]
    shifted.drift["at"] = pack([x for seq, pos in Block.decode(shifted.drift).at for x in (seq, pos + 1)], "i")
    candidate = score_sets(TransformersBackend(qwen_model, qwen_tokenizer), qwen_tokenizer, dataset, reference=moved,
                           progress=False)
    assert any(w.startswith("drift: 1 item(s) are read at other places than in the reference (facts/2k/f0)")
               for w in candidate.warnings)
    assert candidate.sets["facts"]["2k"]["per_item"]["f0"].drift is None
    assert candidate.sets["facts"]["2k"]["per_item"]["f1"].drift is not None


def test_the_drift_block_is_compact(baseline):
    sizes = [len(json.dumps(s.drift)) / Block.decode(s.drift).k / len(Block.decode(s.drift).at)
             for _, _, _, s in baseline.items()]
    assert max(sizes) < 12  # bytes per kept token: an int32 id and a float32 log-probability, base64
    assert np.isfinite(sizes).all()


@pytest.mark.parametrize("figures, kind", [
    # SmolLM2 with a 512-token window, 2k, the first item only (sequential reading settled both rows on it)
    ((1.987, 0.197, 0.000, "near"), FAR_SPECIFIC),
    ((1.251, 0.000, 0.000, "control"), FAR_SPECIFIC),
    ((11.7, 9.3, 9.2, "near"), GENERAL),  # int2 weights: damaged everywhere, far not twice the near drift
    ((20.0, 9.3, 9.2, "near"), BOTH),
    ((0.30, 0.40, 0.00, "near"), NONE),  # far drift beyond the threshold and no more than near
])
def test_on_one_item_the_damage_kind_rests_on_the_point_estimates_and_says_so(figures, kind):
    far, near, control, against = figures

    def group(kl):
        return GroupDrift(10, kl, 1.0, 0.0)

    found = Drift(1, group(far), group(near), group(control), against, far - (near if against == "near" else control),
                  None, None, 0.0, None, 0.05)
    said = found.text()
    assert found.kind == kind and said.startswith("not located by drift" if kind == NONE else kind), said
    assert said.endswith("on the point estimates of 1 item (no paired interval to test them)") and "significant" not in said
    assert drift_of(far, near, control, None, None, against).kind in (NONE, GENERAL)  # more items, no interval: unshown


def summary(far_kl: float, reads: int = 10) -> ItemDrift:
    """One item's drift (metrics/drift.py item_drift) with mean far KL ``far_kl``."""
    def group(kl, n):
        return ReadSums(reads=n, kl=kl * n, same_top1=n, dlogp_reads=n, dlogp=0.0, nonfinite=0)

    return ItemDrift(far=group(far_kl, reads), near=group(0.0, 0), control=group(0.0, reads))


def drift_check(far_kls: list[float], **thresholds):
    from pytest_longctx.data.records import Kind
    from pytest_longctx.gate.evaluation import Sides, drift_verdicts
    from pytest_longctx.metrics.drift import set_drift
    from pytest_longctx.metrics.item_figures import ItemFigures
    from pytest_longctx.metrics.rows import RowSource

    per_item = {f"i{n}": ItemFigures(Kind.TOOL_CALLS, drift=summary(kl)) for n, kl in enumerate(far_kls)}
    sets = {"tool_calls": {"2k": {"drift": set_drift([f.drift for f in per_item.values()]), "per_item": per_item}}}
    found, checks = drift_verdicts(ROW, RowSource("tool_calls", "far_accuracy", "2k"), Sides(sets, sets, sets),
                                   Thresholds(**thresholds), [])
    (check,) = checks
    return found, check


def test_alpha_passes_a_drift_just_over_its_threshold_and_keeps_a_large_one_failing():
    noisy = [0.0, 0.15, 0.0, 0.12, 0.01, 0.05, 0.0, 0.17]  # mean 0.0625, above 0.05 but not significantly
    _, point = drift_check(noisy, kl=0.05)
    _, lenient = drift_check(noisy, kl=0.05, alpha=0.05)
    assert point.model == pytest.approx(0.0625) and not point.passed
    assert lenient.bound is not None and lenient.bound >= 0 and lenient.passed
    assert "shortfall not significant (upper 95% bound of threshold - kl" in lenient.message()
    _, far_over = drift_check([0.3, 0.32, 0.28, 0.31], kl=0.05, alpha=0.05)
    assert far_over.bound < 0 and not far_over.passed and far_over.interval[0] > 0.05


def test_a_kl_override_sets_the_drift_threshold_of_the_rows_it_names():
    from pytest_longctx.gate.thresholds import parse_overrides

    found, check = drift_check([0.08, 0.09], kl=0.05, overrides=parse_overrides(["tool_calls-*:kl=0.1"], "test"))
    assert check.threshold == 0.1 == found.threshold and check.passed and check.needs == "<= 0.100"
    assert found.kind == NONE  # far drift 0.085 is within the row's own threshold: no damage named
    strict_found, strict = drift_check([0.08, 0.09], kl=0.05)
    assert not strict.passed and strict_found.kind == FAR_SPECIFIC and f"damage {FAR_SPECIFIC}" in strict.message()
