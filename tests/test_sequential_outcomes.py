"""Exact sequential reading gives every test the outcome reading everything gives (SPEC 3.4), whatever the figures:
the gate itself (``GateRun``, as pytest drives it) over every set kind the test data has (facts, tool calls, the three
rules languages, agent sessions), on candidates whose every figure is drawn at random from the baseline's (hits
flipped, log-probabilities and rule effects moved, drift at every read, now and then a NaN), under random thresholds
and overrides, every test selected or the rows and cells alone; and split over two xdist-like workers whose exports
a controller absorbs. No model runs: the candidate's scores are the drawn ones, handed to the gate's reader in place
of the engine's."""
from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kit.drawn import Drawn, NoModel, drawn

from pytest_longctx.gate.ladder import racing_order
from pytest_longctx.gate.model_run import GateRun
from pytest_longctx.gate.run_options import GateOptions
from pytest_longctx.gate.thresholds import Thresholds, parse_overrides
from pytest_longctx.options.table import Sequential
from pytest_longctx.scoring.scores_file import ScoresFile, load_scores

OVERRIDES = ["", "facts-2k-*:item_drop=0.05", "tool_calls-2k:kl=0.3", "rules_*-2k-*:retained=0.2", "rules_en-follow-*:follow=0.3",
             "*:kl=0.01", "faithfulness-train:drop=0.5"]


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
