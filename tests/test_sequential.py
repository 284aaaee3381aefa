"""Sequential reading's rules (gate/sequential/) without a model: exact settles every check on the verdict
reading every item gives, whatever the order and the figures; confident's betting confidence sequence matches
a plain numpy computation of it, covers the mean it is about at least 1 - alpha of the time over many
resampled gates, and stops right where peeking at a fixed-n interval after every item stops wrong."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_longctx.gate.sequential.bounds import KL_FLOOR
from pytest_longctx.gate.sequential.checks import MEAN, OPEN, SHARE, Check, reading_order
from pytest_longctx.gate.sequential.reading import CONFIDENT, EXACT, Reading, replay
from pytest_longctx.gate.verdict import BOUNDS, FAIL, MOOT, NOT_SETTLED, PASS, READ_THROUGH, TESTED
from pytest_longctx.metrics.confidence_sequence import Bettor, lower_bounds

ROUNDING = 1e-12
NA = "n/a"


def naive_word(shape: str, figures: list[tuple[float, float]], threshold: float, baseline: float | None) -> str:
    """The verdict reading every item gives, computed plainly: the pooled value against the threshold."""
    num, den = sum(f[0] for f in figures), sum(f[1] for f in figures)
    value = num / den if den else None
    if shape == MEAN:
        return NA if value is None else PASS if value <= threshold + ROUNDING else FAIL
    if value is None:
        return NA if baseline is None else FAIL
    if threshold <= 0.0:  # an accuracy that cannot fail
        return NA
    return PASS if value >= threshold - ROUNDING else FAIL


def check(key: str, metric: str, shape: str, threshold: float, caps: list[float], baseline: float | None = 0.5) -> Check:
    items = tuple(("facts", "2k", f"i{n}") for n in range(len(caps)))
    at_most = shape == MEAN
    return Check(key, metric, f"{key} {metric}", shape, threshold, at_most, 0.0 if at_most else baseline,
                 None if at_most else 0.0, items, tuple(float(c) for c in caps), tuple(0.0 for _ in caps),
                 drop=None)


def read_all(reading: Reading, figures: dict[tuple[str, str, str], dict[int, tuple[float, float]]]) -> Reading:
    while (key := reading.next_item()) is not None:
        reading.take(key, figures.get(key, {}))
    return reading


@st.composite
def gates(draw):
    """A row of two checks on the same items, its accuracy (a share) and its drift (a mean of non-negative
    reads), with per-item figures within the counts each item can have, read in a random order."""
    n = draw(st.integers(1, 10))
    caps = [draw(st.integers(0, 5)) for _ in range(n)]
    reads = [draw(st.integers(0, 6)) for _ in range(n)]
    shares, means = [], []
    for cap, most in zip(caps, reads):
        den = draw(st.integers(0, cap))
        shares.append((float(draw(st.integers(0, den))), float(den)))
        count = draw(st.integers(0, most))
        kl = draw(st.sampled_from([0.0, 1e-9, 0.01, 0.05]) | st.floats(0.0, 3.0))
        means.append((kl * count, float(count)))
    threshold = draw(st.sampled_from([0.0, 0.25, 0.5, 2 / 3, 1.0]) | st.floats(0.0, 1.0))
    kl_threshold = draw(st.sampled_from([0.0, 0.05]) | st.floats(0.0, 1.0))
    order = draw(st.permutations(range(n)))
    alpha = draw(st.sampled_from([None, 0.05]))
    return caps, reads, shares, means, threshold, kl_threshold, order, alpha


@settings(max_examples=400, deadline=None)
@given(gates())
def test_exact_gives_the_verdicts_of_reading_everything_in_any_order(gate):
    caps, reads, shares, means, threshold, kl_threshold, order, alpha = gate
    accuracy = check("row", "accuracy", SHARE, threshold, caps)
    drift = check("row", "kl", MEAN, kl_threshold, reads)
    keys = accuracy.items
    figures = {keys[n]: {0: shares[n], 1: means[n]} for n in range(len(keys))}
    reading = read_all(Reading(EXACT, alpha, [accuracy, drift], [keys[n] for n in order], {k: 10 for k in keys}), figures)
    want = {"accuracy": naive_word(SHARE, shares, threshold, 0.5), "kl": naive_word(MEAN, means, kl_threshold, 0.0)}
    test_fails = FAIL in want.values()
    got_fails = False
    for state in reading.states:
        settled, metric = state.settled, state.check.metric
        assert settled is not None
        if settled.how == BOUNDS:
            assert settled.word == want[metric], (metric, settled)
            assert not (alpha is not None and settled.word == FAIL)  # a FAIL under alpha needs every item
        elif settled.how == READ_THROUGH:
            assert settled.items == len(keys)
            settled_word = want[metric]
            got_fails |= settled_word == FAIL
            continue
        else:
            assert settled.how == MOOT and test_fails
            continue
        got_fails |= settled.word == FAIL
    assert got_fails == test_fails
    # the items it left unread could not change anything: the record replays to the same stops
    again = replay(reading.record())
    assert [s.settled for s in again.states] == [s.settled for s in reading.states]


def test_a_clear_failure_is_settled_after_one_item():
    """Drift of 11 nats on the first of 8 items of 24 far reads each: no outcome of the other 7 brings the mean
    under 0.05, so the row fails having read one item, and its accuracy check is not needed."""
    accuracy = check("row", "accuracy", SHARE, 0.85, [8] * 8)
    drift = check("row", "kl", MEAN, 0.05, [24] * 8)
    keys = accuracy.items
    reading = Reading(EXACT, None, [accuracy, drift], list(keys), {k: 2000 for k in keys})
    reading.take(keys[0], {0: (7.0, 8.0), 1: (11.0 * 24, 24.0)})
    assert reading.next_item() is None and reading.read == [keys[0]]
    accuracy_state, drift_state = reading.states
    assert (drift_state.settled.how, drift_state.settled.word, drift_state.settled.items) == (BOUNDS, FAIL, 1)
    assert drift_state.settled.tokens == 2000 and drift_state.settled.of_tokens == 16000
    assert accuracy_state.settled.how == MOOT


def test_a_pass_needs_every_drift_read_and_an_open_check_every_item():
    drift = check("row", "kl", MEAN, 0.05, [3, 3, 3])
    retained = check("cell", "retained", OPEN, 0.9, [1, 1, 1])
    keys = drift.items
    reading = Reading(EXACT, None, [drift, retained], list(keys), {})
    for n, key in enumerate(keys[:2]):
        reading.take(key, {0: (0.0, 3.0), 1: (1.0, 1.0)})
        assert reading.next_item() == keys[n + 1]  # zero drift so far, but the next item may drift without limit
    reading.take(keys[2], {0: (0.0, 3.0), 1: (1.0, 1.0)})
    assert [s.settled.how for s in reading.states] == [READ_THROUGH, READ_THROUGH]


def test_a_read_below_the_kl_floor_keeps_the_check_open():
    drift = check("row", "kl", MEAN, 0.05, [10, 10, 10])
    keys = drift.items
    reading = Reading(EXACT, None, [drift], list(keys), {})
    reading.take(keys[0], {0: (10 * KL_FLOOR * 2 + 20.0, 10.0)})  # 2 nats a read: a FAIL by the bounds
    assert reading.states[0].settled.word == FAIL
    broken = Reading(EXACT, None, [drift], list(keys), {})
    broken.take(keys[0], {0: (10 * KL_FLOOR * 2, 10.0)})  # below the floor: the bound does not hold
    assert broken.states[0].settled is None and broken.next_item() == keys[1]


def test_the_reading_order_interleaves_lengths_and_mixes_each_set():
    keys = [(c, n, f"{c[0]}{n}{i}") for c in ("tool_calls", "facts") for n in ("8k", "2k") for i in range(3)]
    order = reading_order(keys)
    assert sorted(order) == sorted(keys)
    assert [k[:2] for k in order[:4]] == [("facts", "2k"), ("tool_calls", "2k"), ("facts", "8k"), ("tool_calls", "8k")]
    assert reading_order(reversed(keys)) == order  # the data's own order plays no part


# ------------------------------------------------------------------ the confidence sequence


def numpy_wealth(w: np.ndarray, m: float, alpha: float, cap: float = 0.5) -> np.ndarray:
    """Waudby-Smith and Ramdas' predictable plug-in capital process, computed plainly over many sequences at once
    (rows): the wealth after each observation."""
    gates, t_max = w.shape
    t = np.arange(1, t_max + 1)
    means = (0.5 + np.cumsum(w, axis=1)) / (t + 1)  # the plug-in mean after each w
    squares = np.cumsum((w - means) ** 2, axis=1)
    before = np.concatenate([np.zeros((gates, 1)), squares[:, :-1]], axis=1)  # the sum before each w
    variance = (0.25 + before) / t
    bets = np.minimum(np.sqrt(2 * np.log(1 / alpha) / (variance * t * np.log(1 + t))), cap / m)
    return np.cumprod(1 + bets * (w - m), axis=1)


def test_the_bettor_is_the_plain_numpy_computation():
    rng = np.random.default_rng(3)
    w = rng.uniform(0, 1, size=(5, 40))
    want = numpy_wealth(w, 0.4, 0.05)
    for row, expected in zip(w, want):
        bettor = Bettor(0.4, 0.05)
        got = []
        for x in row:
            bettor.add(float(x))
            got.append(bettor.wealth)
        assert np.allclose(got, expected, rtol=1e-12, atol=0)


# a hit row's items: per item, of 8 queries, how many the candidate recalled minus how many the baseline did, with
# 0.05 x 8 allowed; its mean over this population is what the check is about
DIFFERENCES = np.array([-3, -2, -1, 0, 1, 2])


def population(mean_shift: float) -> tuple[np.ndarray, np.ndarray]:
    """(margins in [0, 1] units, their probabilities) of a population whose mean margin is ``mean_shift`` (in items'
    queries) away from the threshold: the check's null boundary is 0."""
    weights = np.array([0.06, 0.1, 0.2, 0.36, 0.18, 0.1])
    margins = DIFFERENCES + 0.4 - (DIFFERENCES + 0.4) @ weights + mean_shift
    low, high = -8.0, 8.4  # the margin range of a check of 8 queries per item and a 0.05 drop
    return (margins - low) / (high - low), weights


def ever_rejects(ws, m: float, alpha: float = 0.05) -> bool:
    bettor = Bettor(m, alpha)
    for w in ws:
        bettor.add(float(w))
        if bettor.rejects:
            return True
    return False


@pytest.mark.parametrize("shift", [0.0, -0.3])
def test_the_confidence_sequence_covers_the_mean_over_many_resampled_gates(shift):
    """2,000 gates of 300 items each drawn from a population whose mean margin is at (0) or below (-0.3) the
    threshold: the confidence sequence excludes the true mean (its bettor at the mean crosses 1/alpha) in at most
    alpha of them over all 300 looks, and so a wrong PASS (the bettor at the threshold crossing) is as rare."""
    alpha, gates, items = 0.05, 2000, 300
    values, weights = population(shift)
    truth = float(values @ weights)
    w = np.random.default_rng(11).choice(values, size=(gates, items), p=weights)
    missed = (numpy_wealth(w, truth, alpha) >= 1 / alpha).any(axis=1)
    assert missed.mean() <= alpha, missed.mean()
    null = 8.0 / 16.4  # where the mean margin is 0, in [0, 1] units
    wrong_pass = (numpy_wealth(w, null, alpha) >= 1 / alpha).any(axis=1)
    assert wrong_pass.mean() <= alpha
    # the module's bettor is the plain computation, gate by gate
    assert [ever_rejects(row, truth) for row in w[:200]] == list(missed[:200])


def test_the_module_lower_bounds_are_where_the_wealth_crosses():
    """The running lower bound (the one-sided confidence sequence) lies above a mean exactly when that mean's
    bettor has crossed 1/alpha by then: coverage of the sequence is the bettor's."""
    rng = np.random.default_rng(5)
    values, weights = population(0.5)
    for row in rng.choice(values, size=(12, 30), p=weights):
        bound = lower_bounds(list(row), 0.05)[-1]
        assert bound < float(np.mean(row))
        assert ever_rejects(row, bound - 1e-6) and not ever_rejects(row, bound + 1e-6)


def naive_peek(margins: np.ndarray, z: float) -> np.ndarray:
    """The first look at which a fixed-n one-sided interval of the mean margin, taken after every item, lies below
    0 (a FAIL), or -1: the rule that stops as soon as it sees a significant shortfall."""
    t = np.arange(1, margins.shape[1] + 1)
    means = np.cumsum(margins, axis=1) / t
    spread = np.sqrt(np.maximum(np.cumsum(margins**2, axis=1) / t - means**2, 0) / np.maximum(t - 1, 1))
    fails = (means + z * spread < 0) & (t >= 3)
    return np.where(fails.any(axis=1), fails.argmax(axis=1), -1)


def test_peeking_at_a_fixed_interval_stops_wrong_where_the_confidence_sequence_does_not():
    """A candidate whose mean margin is +0.1 queries per item: it passes. Looking at a one-sided 95 % interval after
    every item up to 200 fails it in well over 5 % of gates; the betting test fails it in at most 5 %."""
    alpha, gates, items = 0.05, 2000, 200
    values, weights = population(0.1)
    w = np.random.default_rng(7).choice(values, size=(gates, items), p=weights)
    margins = w * 16.4 - 8.0
    naive = naive_peek(margins, 1.6449)
    null = 8.0 / 16.4
    betting = (numpy_wealth(1 - w, 1 - null, alpha) >= 1 / alpha).any(axis=1)  # the bettor for "below": a FAIL
    assert (naive >= 0).mean() > 2 * alpha and betting.mean() <= alpha
    # one gate, concretely: the interval stops it with a FAIL, the confidence sequence reads on and never does
    gate = int(np.flatnonzero((naive >= 0) & ~betting)[0])
    stop = int(naive[gate])
    assert margins[gate, : stop + 1].mean() + 1.6449 * margins[gate, : stop + 1].std(ddof=1) / math.sqrt(stop + 1) < 0
    fail_bettor = Bettor(1 - null, alpha)
    for x in w[gate]:
        fail_bettor.add(float(1 - x))
        assert not fail_bettor.rejects


def test_confident_settles_clear_cases_and_says_not_settled_otherwise():
    drift = check("row", "kl", MEAN, 0.05, [20] * 8)
    accuracy = check("row2", "accuracy", SHARE, 0.85, [8] * 8, baseline=0.9)
    accuracy = Check(accuracy.key, accuracy.metric, accuracy.label, SHARE, 0.85, False, 0.9, 0.0, accuracy.items,
                     accuracy.caps, tuple(7.0 for _ in accuracy.caps), drop=0.05)
    keys = drift.items
    reading = Reading(CONFIDENT, None, [drift, accuracy], list(keys), {})
    reading.take(keys[0], {0: (11.0 * 20, 20.0), 1: (7.0, 8.0)})  # 11 nats of drift: far beyond 0.05
    drift_state, accuracy_state = reading.states
    assert (drift_state.settled.how, drift_state.settled.word, drift_state.settled.items) == (TESTED, FAIL, 1)
    assert "e-value" in drift_state.settled.detail
    read_all(reading, {k: {1: (7.0, 8.0)} for k in keys[1:]})  # as good as the baseline on every item: no test can
    assert accuracy_state.settled.how == NOT_SETTLED and accuracy_state.settled.items == 8  # show it within 0.05 of it
