"""Uncertainty on every gated row and cell (docs/metrics.md#uncertainty): the paired bootstrap
over items, McNemar on the discordant targets, the minimum detectable drop, and
``--longctx-alpha``."""
from __future__ import annotations

import json
import math
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from kit.needs import needs
from kit.runs import run_alike, with_and_without_xdist

from pytest_longctx.data.records import Kind
from pytest_longctx.gate import uncertainty
from pytest_longctx.gate.evaluation import evaluate
from pytest_longctx.gate.thresholds import Thresholds
from pytest_longctx.gate.uncertainty import Sample, mcnemar, needed_items
from pytest_longctx.metrics.facts import Recall
from pytest_longctx.metrics.item_figures import ItemFigures

ROW, KEY = "Facts recalled at 2k tokens", "facts-2k"  # junit names a row by its key


def facts_sets(flags: dict[str, list[bool | None]]) -> dict:
    """A facts set at 2k as scoring/pipeline.py makes it, from per-query recall flags per item."""
    per_item = {}
    for item_id, hits in flags.items():
        scored = [h for h in hits if h is not None]
        per_item[item_id] = ItemFigures(Kind.FACTS, recall=Recall(len(scored), sum(scored), None, tuple(hits)))
    scored = sum(f.recall.scored for f in per_item.values())
    recalled = sum(f.recall.recalled for f in per_item.values())
    return {"facts": {"2k": {"query_accuracy": recalled / scored, "per_item": per_item}}}


def row_verdict(model_flags, baseline_flags, **thresholds):
    evaluation = evaluate(facts_sets(model_flags), facts_sets(baseline_flags), Thresholds(**thresholds))
    return evaluation, next(v for v in evaluation.verdicts if v.label == ROW)


ALL = {f"f{i}": [True] * 5 for i in range(10)}


# ------------------------------------------------------------------ the bootstrap


def test_the_bootstrap_is_deterministic_under_its_seed(monkeypatch):
    sample = Sample.of([(3, 5, 5, 5), (5, 5, 4, 5), (1, 5, 5, 5), (4, 5, 4, 5), (2, 5, 3, 5)])
    first, again = uncertainty.difference(sample), uncertainty.difference(sample)
    assert first == again and first is not None
    monkeypatch.setattr(uncertainty, "SEED", uncertainty.SEED + 1)
    assert uncertainty.difference(sample) != first  # it is the seed that fixes the resamples


def numpy_bootstrap(items: list[tuple[float, float, float, float]], statistic, paired: bool = True, seed: int = 14,
                    resamples: int = 2000) -> np.ndarray:
    """A plain numpy bootstrap of ``statistic(model value, baseline value)`` over items
    (numerator, denominator per side; a value is a ratio of sums), written without scipy: each
    resample draws n item indices from ``default_rng(seed)``; paired, the model and the baseline
    take the same items, unpaired each side draws its own."""
    rows = np.asarray(items, dtype=float)  # [items, 4]
    rng = np.random.default_rng(seed)
    n = len(rows)
    mine = rng.integers(0, n, (resamples, n))  # [resamples, items]
    theirs = mine if paired else rng.integers(0, n, (resamples, n))
    model = rows[mine, 0].sum(axis=1) / rows[mine, 1].sum(axis=1)
    base = rows[theirs, 2].sum(axis=1) / rows[theirs, 3].sum(axis=1)
    return statistic(model, base)  # [resamples]


# items of unequal difficulty, the model a little below the baseline on each: the per-item
# values vary far more than their paired differences, so pairing narrows the interval
CORRELATED = [(9, 10, 10, 10), (4, 10, 5, 10), (1, 10, 2, 10), (7, 10, 7, 10), (2, 10, 3, 10), (8, 10, 9, 10),
              (0, 10, 1, 10), (5, 10, 6, 10), (3, 10, 3, 10), (6, 10, 8, 10)]


def test_the_interval_and_sd_are_a_plain_numpy_paired_bootstrap():
    differences = numpy_bootstrap(CORRELATED, lambda model, base: model - base)
    (low, high), sd = uncertainty.difference(Sample.of(CORRELATED))
    assert (low, high) == pytest.approx((np.percentile(differences, 2.5), np.percentile(differences, 97.5)), abs=1e-12)
    assert sd == pytest.approx(np.std(differences, ddof=1), rel=1e-12)


def test_pairing_narrows_the_interval_as_an_unpaired_bootstrap_cannot():
    (low, high), _ = uncertainty.difference(Sample.of(CORRELATED))
    unpaired = numpy_bootstrap(CORRELATED, lambda model, base: model - base, paired=False)
    unpaired_low, unpaired_high = np.percentile(unpaired, [2.5, 97.5])
    # the paired interval lies below 0 (every item lost a little); an unpaired one spans 0, 4x as wide
    assert high < 0 < unpaired_high and unpaired_high - unpaired_low > 4 * (high - low)


@pytest.mark.parametrize("alpha", [0.05, 0.2])
def test_the_one_sided_bound_is_the_numpy_quantile_of_the_margin(alpha):
    """Against the baseline less a drop of 0.05 (the threshold recomputed per resample), and
    against a fixed threshold of 0.4 (at most: threshold - model)."""
    relative = numpy_bootstrap(CORRELATED, lambda model, base: model - (base - 0.05))
    assert uncertainty.upper_bound(Sample.of(CORRELATED), 0.0, 0.05, alpha) == pytest.approx(
        np.percentile(relative, 100 * (1 - alpha)), abs=1e-12)
    fixed = numpy_bootstrap(CORRELATED, lambda model, base: 0.4 - model)
    assert uncertainty.upper_bound(Sample.of(CORRELATED), 0.4, None, alpha, at_most=True) == pytest.approx(
        np.percentile(fixed, 100 * (1 - alpha)), abs=1e-12)


def test_the_interval_contains_the_point_difference():
    model = {f"f{i}": [True, i % 3 != 0, i % 2 == 0, True, None] for i in range(8)}
    base = {f"f{i}": [True, True, i % 4 != 1, True, None] for i in range(8)}
    evaluation, verdict = row_verdict(model, base)
    point = verdict.model - verdict.baseline
    low, high = verdict.interval
    assert low <= point <= high and low < high and verdict.items == 8
    items = [(sum(filter(None, m)), sum(h is not None for h in m), sum(filter(None, b)), sum(h is not None for h in b))
             for m, b in zip(model.values(), base.values())]
    differences = numpy_bootstrap(items, lambda m, b: m - b)
    assert verdict.mdd == pytest.approx((1.959964 + 0.841621) * np.std(differences, ddof=1), rel=1e-5)


def test_a_model_equal_to_its_baseline_has_an_interval_at_zero():
    _, verdict = row_verdict(ALL, ALL)
    assert verdict.interval == (0.0, 0.0) and (verdict.lost, verdict.gained, verdict.p) == (0, 0, 1.0)


# ------------------------------------------------------------------ McNemar


def test_mcnemar_counts_and_p_match_a_direct_binomial_computation():
    from scipy.stats import binom

    # (baseline hit, model hit): 5 lost, 1 gained, 4 concordant
    pairs = [(True, False)] * 5 + [(False, True)] + [(True, True)] * 3 + [(False, False)]
    lost, gained, p = mcnemar(pairs)
    assert (lost, gained) == (5, 1)
    assert p == pytest.approx(2 * binom.cdf(1, 6, 0.5)) and p == pytest.approx(2 * (1 + 6) / 2 ** 6)
    assert mcnemar([(True, True), (False, False)]) == (0, 0, 1.0)


def test_a_hit_row_counts_lost_and_gained_targets_against_the_baseline():
    base = {"a": [True, True, False, None], "b": [True, True, True], "c": [False, True]}
    model = {"a": [False, True, True, True], "b": [False, False, True], "c": [False, True]}
    _, verdict = row_verdict(model, base)
    # a: lost 1 gained 1 (the unscored fourth is left out); b: lost 2; c: none
    assert (verdict.lost, verdict.gained) == (3, 1)
    assert verdict.p == pytest.approx(2 * sum(math.comb(4, k) for k in range(2)) / 2 ** 4)
    assert "McNemar lost 3 / gained 1, p = 0.62" in verdict.message()
    assert f"interval [{verdict.interval[0]:.2f}, {verdict.interval[1]:.2f}] over 3 items" in verdict.message()


# ------------------------------------------------------------------ minimum detectable drop


def test_a_tiny_selection_is_named_too_small_to_gate_its_row():
    model = {"f0": [True, False], "f1": [True, True], "f2": [False, True]}
    base = {"f0": [True, True], "f1": [True, True], "f2": [True, True]}
    evaluation, verdict = row_verdict(model, base)
    assert verdict.mdd > 0.05
    needed = needed_items(3, verdict.mdd, 0.05)
    assert needed == math.ceil(3 * (verdict.mdd / 0.05) ** 2) and needed > 3
    warnings = [w for w in evaluation.warnings if w.startswith("facts-2k:")]
    assert warnings and "too small to gate" in warnings[0] and f"about {needed} items would be needed" in warnings[0]


def test_a_large_selection_is_not_warned_about():
    many = {f"f{i}": [True] * 20 for i in range(200)}
    evaluation, verdict = row_verdict(many, many)
    assert verdict.mdd == 0 and not evaluation.warnings


# ------------------------------------------------------------------ --longctx-alpha


def test_alpha_passes_a_small_non_significant_drop_and_keeps_a_large_one_failing():
    small = {**ALL, "f0": [True, False, False, False, False]}  # 4 of 50 queries lost in one item: -0.08
    _, point = row_verdict(small, ALL)
    assert point.model - point.baseline == pytest.approx(-0.08) and not point.passed  # the point rule fails it
    _, lenient = row_verdict(small, ALL, alpha=0.05)
    assert lenient.passed and lenient.bound >= 0 and "shortfall not significant" in lenient.message()

    large = {f"f{i}": [True, True, False, False, False] for i in range(10)}  # -0.6 in every item
    _, strict = row_verdict(large, ALL, alpha=0.05)
    assert not strict.passed and strict.bound < 0 and "shortfall significant" in strict.message()


def test_alpha_is_a_plugin_and_compare_option():
    from pytest_longctx.metrics.rules import COUNT_NATS
    from pytest_longctx.options.table import plugin_option
    from pytest_longctx.parse import significance_level

    names = {name: plugin_option(name) for name in ("alpha", "min-effect")}
    assert names["alpha"].default is None and names["min-effect"].default == COUNT_NATS == Thresholds().min_effect
    assert significance_level("0.05") == 0.05
    for bad in ("0", "0.5", "x"):
        with pytest.raises(ValueError):
            significance_level(bad)


# ------------------------------------------------------------------ through pytest


@needs("xdist", install='pip install -e ".[test]"')
def test_the_summary_shows_the_interval_the_same_with_and_without_xdist(pytester, gate_models, data_dir, gate_baseline):
    runs = {}
    ran = with_and_without_xdist(pytester, gate_models["degraded"], data_dir, gate_baseline, "--longctx-alpha=0.05",
                                 "--longctx-min-effect=0.3")
    for workers, (result, junit, _) in ran.items():
        suite = ET.parse(junit).getroot().find("testsuite")
        properties = {p.get("name"): p.get("value") for p in suite.find("properties")}
        properties.pop("longctx.tokens_forwarded")  # at least one process's under xdist (docs/options.md#pytest-xdist)
        summary = run_alike(result.stdout.str())
        runs[workers] = (summary, properties, result.stdout.str())
    summary, properties, text = runs["0"]
    assert summary == runs["2"][0] and properties == runs["2"][1]
    header = next(line for line in summary if line.startswith("row"))
    assert "interval" in header and "McNemar" in header
    line = next(line for line in summary if line.startswith(ROW))
    low, high = float(properties[f"longctx.interval_low.{KEY}"]), float(properties[f"longctx.interval_high.{KEY}"])
    assert f"[{low:.2f}, {high:.2f}]" in line and f"p={float(properties[f'longctx.p.{KEY}']):.2g}" in line
    assert properties["longctx.threshold.alpha"] == "0.05" and properties["longctx.threshold.min_effect"] == "0.3"
    # drift: the same table and figures under xdist (its bootstrap shares the seed)
    assert any(line.startswith("drift at the reads") for line in summary)
    tools = "Distant tool calls at 2k tokens"
    _, drift_line = [line for line in summary if line.startswith(tools)]  # the gate table's, then the drift table's
    assert drift_line.split()[6] == f"{float(properties['longctx.drift_far_kl.tool_calls-2k']):.3f}"
    assert drift_line.endswith(properties["longctx.damage.tool_calls-2k"]) and properties["longctx.damage.tool_calls-2k"]
    results = json.loads((pytester.path / "results-0.json").read_text())
    assert results["meta"]["min_effect"] == 0.3
    assert results["verdicts"] == json.loads((pytester.path / "results-2.json").read_text())["verdicts"]
    verdict = next(v for v in results["verdicts"] if v["label"] == ROW)
    assert verdict["interval"] == [pytest.approx(low, abs=5e-7), pytest.approx(high, abs=5e-7)] and verdict["alpha"] == 0.05
    assert {"lost", "gained", "p", "items", "mdd", "bound"} <= set(verdict)
    # the rules cells are ratios of the per-item sums the bootstrap resamples
    for length in results["sets"]["rules_en"].values():
        for placement, by_family in length["cells"].items():
            for family, cell in by_family.items():
                chosen = [e for e in length["per_item"].values()
                          if e["placement"] == placement and family in ("all", e["family"]) and e["counted"]]
                if cell["counted"]:
                    assert cell["retained"] == pytest.approx(sum(e["eff_sum"] for e in chosen) / sum(e["eff_ref_sum"] for e in chosen))
                    assert cell["follow"] == pytest.approx(sum(e["followed"] for e in chosen) / sum(e["counted"] for e in chosen))


def test_the_agent_session_rows_sample_their_own_sessions():
    def sessions(hits: dict[str, bool]) -> dict:
        per_item = {i: ItemFigures(Kind.FAITHFULNESS, recall=Recall(1, int(h), None, (h,)),
                                   suite="low_surprisal" if i.startswith("l") else "standard")
                    for i, h in hits.items()}
        low = [f for f in per_item.values() if f.suite == "low_surprisal"]
        return {"faithfulness": {"train": {"recall": sum(f.recall.recalled for f in per_item.values()) / len(per_item),
                                           "by_suite": {"low_surprisal": {"recall": sum(f.recall.recalled for f in low) / len(low)}},
                                           "per_item": per_item}}}

    base = {"s0": True, "s1": True, "s2": True, "l0": True, "l1": True}
    model = {"s0": False, "s1": True, "s2": True, "l0": True, "l1": False}
    verdicts = {v.key: v for v in evaluate(sessions(model), sessions(base), Thresholds()).verdicts}
    assert (verdicts["faithfulness-train"].items, verdicts["faithfulness-train"].lost) == (5, 2)
    low = verdicts["faithfulness-train-low_surprisal"]
    assert (low.items, low.lost, low.gained) == (2, 1, 0)
    assert low.interval[0] <= low.model - low.baseline <= low.interval[1]
