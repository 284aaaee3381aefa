"""Exact sequential reading gives every test the outcome reading everything gives (SPEC 3.4), whatever the figures:
the gate itself (``GateRun``, as pytest drives it) over every set kind the test data has (facts, tool calls, the three
rules languages, agent sessions), on candidates whose every figure is drawn at random from the baseline's (hits
flipped, log-probabilities and rule effects moved, drift at every read, now and then a NaN), under random thresholds
and overrides, every test selected or the rows and cells alone; and split over two xdist-like workers whose exports
a controller absorbs. No model runs: the candidate's scores are the drawn ones, handed to the gate's reader in place
of the engine's."""
from __future__ import annotations

import copy
import math
import random
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kit.items import write_split
from kit.runs import run_pytest

from pytest_longctx.gate.ladder import racing_order
from pytest_longctx.gate.model_run import GateRun
from pytest_longctx.gate.run_options import GateOptions
from pytest_longctx.gate.thresholds import Thresholds, parse_overrides
from pytest_longctx.metrics.drift import Block, block
from pytest_longctx.options.table import Sequential
from pytest_longctx.scoring import engine
from pytest_longctx.scoring.pipeline import Scored
from pytest_longctx.scoring.scores_file import ItemScores, ScoresFile, load_scores

OVERRIDES = ["", "facts-2k-*:item_drop=0.05", "tool_calls-2k:kl=0.3", "rules_*-2k-*:retained=0.2", "rules_en-follow-*:follow=0.3",
             "*:kl=0.01", "faithfulness-train:drop=0.5"]


def drawn(baseline: ScoresFile, seed: int, damage: float, nan: float) -> ScoresFile:
    """A candidate's scores drawn from the baseline's: each hit lost with probability ``damage``, log-probabilities
    and rule effects moved by up to 2 x ``damage`` nats, every read's distribution moved as much (its drift), and a
    log-probability NaN with probability ``nan``."""
    rng = random.Random(seed)
    found = ScoresFile(mode=baseline.mode, meta=copy.deepcopy(baseline.meta))
    for config, length, item_id, scores in baseline.items():
        targets = [_moved(record, rng, damage, nan) for record in scores.targets]
        controls = [_moved(record, rng, damage, 0.0) for record in scores.controls]
        theirs = Block.decode(scores.drift)
        ref = []
        for lps in theirs.lps:
            p = np.exp(np.array(lps, dtype=float))
            q = p * np.exp([rng.uniform(-2 * damage, 2 * damage) for _ in lps])
            q = q / max(1.0, q.sum() + rng.uniform(0.0, damage))  # a sub-distribution: its rest bucket at least 0
            ref.append([math.log(v) if v > 0 else -math.inf for v in q])
        top1 = [t if rng.random() > damage else t + 1 for t in theirs.top1]
        mine = block(theirs.at, top1, None, ref, theirs.k)
        found.scores.setdefault(config, {}).setdefault(length, {})[item_id] = ItemScores(scores.fingerprint, targets, controls, mine)
    return found


def _moved(record: dict, rng: random.Random, damage: float, nan: float) -> dict:
    if "unaligned" in record:
        return dict(record)
    if "logprobs" in record:
        lps = [None if rng.random() < nan else lp - rng.uniform(0, 2 * damage) for lp in record["logprobs"]]
        return {"hits": [h and rng.random() > damage for h in record["hits"]], "logprobs": lps}
    return {"score_without": record["score_without"] - rng.uniform(0, 2 * damage),
            "score_with": record["score_with"] - rng.uniform(0, 4 * damage)}


class Drawn:
    """The gate's reader's source in place of the engine: the drawn scores of the items planned, and the tokens the
    engine forwards for them (their distinct prefix tokens, a prefix kept from an earlier run of the unit not again)."""

    def __init__(self, scores: ScoresFile):
        self.scores = scores
        self.kept: set[int] = set()

    def __call__(self, backend, tokenizer, dataset, mode, plans, *args, shared=None, **kwargs) -> Scored:
        part = ScoresFile(mode=mode, meta=copy.deepcopy(self.scores.meta))
        for plan in plans:
            found = self.scores.scores[plan.config][plan.length][plan.item.id]
            part.scores.setdefault(plan.config, {}).setdefault(plan.length, {})[plan.item.id] = found
        forwarded = engine.forwarded_tokens(plans)
        if shared is not None and plans:
            forwarded -= len(shared.ids) if id(shared) in self.kept else 0
            self.kept.add(id(shared))
        return Scored(part, forwarded)


class NoModel:
    """A backend the drawn scores stand in for, with sessions (the engine reads it as a prefix tree, as the drawn
    tokens are counted) and the baseline's tokenizer (the agent sessions are read in text mode): nothing is read
    through it."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def read(self, ids, positions, tokens, top_k=0):
        raise AssertionError("the drawn scores answer every read")

    def session(self):
        raise AssertionError("the drawn scores answer every read")


def gate(mode: Sequential, data: Path, baseline: Path, tokenizer, thresholds: Thresholds, scores: ScoresFile, rows_only: bool,
         units: list[str] | None = None, within=None) -> tuple[GateRun, dict[str, str]]:
    """The gate over the test data at 2k against ``baseline``, the drawn ``scores`` read: (the run, each selected test's
    outcome; ``units``: read only these, as one xdist worker does, and judge nothing; ``within``: the order each set's
    items are read in, as a ladder's racing order sets it)."""
    options = GateOptions(model="drawn", data=str(data), sets=None, lengths=["2k"], limit=None, mode="auto",
                          baseline=str(baseline), update_baseline=False, out=None, only=True, dtype="float32", device="cpu",
                          backend="hf", cache_dir="off", thresholds=thresholds, sequential=mode)
    run = GateRun(options, Path.cwd())
    cases = [c for c in run.cases() if not (rows_only and c.kind == "item")]
    run.select(cases)
    run.reader.source = Drawn(scores)
    run.reader.within = within
    run.ensure(units if units is not None else sorted({c.unit for c in cases}), NoModel(tokenizer), progress=False)
    return run, ({} if units is not None else {case.key: run.judge(case).word for case in cases})


@pytest.fixture(scope="module")
def every_kind(rows, gate_models, tmp_path_factory) -> tuple[Path, Path]:
    """(the test data with agent sessions beside it, every set kind at 2k; the reference model's baseline of it)."""
    folder = tmp_path_factory.mktemp("every-kind")
    for (config, split), split_rows in rows.items():
        write_split(folder, config, split, split_rows)
    write_split(folder, "faithfulness", "train", [session(n) for n in range(3)], fmt="jsonl")
    baseline = folder / "reference.json.gz"
    result = run_pytest(tmp_path_factory.mktemp("update"), "--longctx-model", gate_models["reference"], "--longctx-data",
                        str(folder), "--longctx-lengths", "2k", "--longctx-baseline", str(baseline), "--longctx-update-baseline")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return folder, baseline


def session(n: int) -> dict:
    """An agent session with one planted fact and a probe that needs it (the faithfulness card's fields)."""
    fact = f"The nightly build runs on runner {4000 + 17 * n}."
    turns = [{"role": "system", "content": "You are a terse engineering assistant.", "name": None},
             {"role": "user", "content": f"Set up the build for the service number {n}.", "name": None},
             {"role": "assistant", "content": fact, "name": None}]
    turns += [{"role": "user" if k % 2 else "assistant", "content": f"Step {k}: tidy the module and its tests.", "name": None}
              for k in range(6)]
    return {"id": f"s{n:04d}", "messages": turns, "probe": "Which runner does the nightly build run on?",
            "required_facts": [rf"runner {4000 + 17 * n}"], "probe_type": "verbatim", "depth": ("early", "mid", "recent")[n],
            "concept": "build", "placement": "statement", "suite": ("standard", "low_surprisal", "standard")[n]}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**31), damage=st.sampled_from([0.0, 0.01, 0.1, 0.5, 2.0]), nan=st.sampled_from([0.0, 0.0, 0.05]),
       drop=st.sampled_from([0.0, 0.05, 0.3]), follow=st.sampled_from([0.5, 0.9]), retained=st.sampled_from([0.5, 0.9]),
       kl=st.sampled_from([0.0, 0.05, 1.0]), item_drop=st.sampled_from([0.05, 1.0]), min_effect=st.sampled_from([0.001, 0.05, 1.0]),
       override=st.sampled_from(OVERRIDES), rows_only=st.booleans())
def test_exact_gives_every_test_offs_outcome(every_kind, qwen_tokenizer, seed, damage, nan, drop, follow, retained, kl,
                                             item_drop, min_effect, override, rows_only):
    data, baseline = every_kind
    thresholds = Thresholds(drop=drop, follow=follow, retained=retained, kl=kl, item_drop=item_drop, min_effect=min_effect,
                            overrides=parse_overrides([override] if override else [], "test"))
    scores = drawn(load_scores(baseline), seed, damage, nan)
    common = (data, baseline, qwen_tokenizer, thresholds, scores, rows_only)
    off, want = gate(Sequential.OFF, *common)
    exact, got = gate(Sequential.EXACT, *common)
    assert got == want and {key.split("-")[0] for key in want} >= {"facts", "tool_calls", "rules_en", "faithfulness"}
    assert exact.reader.forwarded <= off.reader.forwarded == off.reader.whole
    # split over two workers as pytest-xdist splits a run by unit, each exporting what it read to the controller
    controller, _ = gate(Sequential.EXACT, *common, units=[])
    for units in (["facts", "rules"], ["tool_calls", "faithfulness"]):
        worker, _ = gate(Sequential.EXACT, *common, units=units)
        controller.absorb(worker.export())
    cases = [c for c in controller.cases() if not (rows_only and c.kind == "item")]
    assert {case.key: controller.judge(case).word for case in cases} == want
    assert controller.reader.forwarded == exact.reader.forwarded


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**31), damage=st.sampled_from([0.01, 0.1, 0.5, 2.0]), kl=st.sampled_from([0.0, 0.05, 1.0]),
       drop=st.sampled_from([0.0, 0.05, 0.3]), rows_only=st.booleans(), data=st.data())
def test_exact_under_a_ladders_racing_order_gives_offs_outcome(every_kind, qwen_tokenizer, seed, damage, kl, drop, rows_only,
                                                               data):
    """A ladder's racing order (gate/ladder.py), made from drift an earlier candidate showed on some of the items, is
    fixed before the candidate reads: exact reading under it still gives every test the outcome reading every item
    gives, and forwards no more."""
    folder, baseline = every_kind
    thresholds = Thresholds(drop=drop, kl=kl)
    scores = drawn(load_scores(baseline), seed, damage, 0.0)
    common = (folder, baseline, qwen_tokenizer, thresholds, scores, rows_only)
    off, want = gate(Sequential.OFF, *common)
    keys = sorted((c, n, i) for c, n, i, _ in scores.items())
    earlier = data.draw(st.dictionaries(st.sampled_from(keys), st.floats(0.0, 10.0), max_size=len(keys)))
    exact, got = gate(Sequential.EXACT, *common, within=racing_order(earlier))
    assert got == want
    assert exact.reader.forwarded <= off.reader.forwarded
