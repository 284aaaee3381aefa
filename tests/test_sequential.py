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
from pytest_longctx.gate.sequential.checks import Check, reading_order
from pytest_longctx.gate.sequential.reading import Reading, replay
from pytest_longctx.gate.specs import ACCURACY, ITEM, KL, RETAINED, Shape
from pytest_longctx.gate.verdict import BOUNDS, FAIL, MOOT, NA_AT_START, NOT_SETTLED, PASS, READ_THROUGH, TESTED
from pytest_longctx.metrics.confidence_sequence import Bettor, lower_bounds
from pytest_longctx.options.table import Sequential

EXACT, CONFIDENT = Sequential.EXACT, Sequential.CONFIDENT
SHARE, MEAN = Shape.SHARE, Shape.MEAN
ROUNDING = 1e-12
NA = "n/a"
SPECS = {"accuracy": ACCURACY, "kl": KL, "retained": RETAINED, "item_drop": ITEM}


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


def check(key: str, metric: str, threshold: float, caps: list[float], baseline: float | None = 0.5,
          base: float = 0.0, drop: float | None = None) -> Check:
    items = tuple(("facts", "2k", f"i{n}") for n in range(len(caps)))
    spec = SPECS[metric]
    return Check(key, spec, f"{key} {metric}", threshold, 0.0 if spec.at_most else baseline, items,
                 tuple(float(c) for c in caps), tuple(base for _ in caps), drop=drop)


def reading(mode: Sequential, alpha: float | None, checks: list[Check], order: list, tokens: dict | None = None,
            groups: dict | None = None) -> Reading:
    """A reading of ``checks`` in ``order``, each item a group of its own (``groups``: else), each costing ``tokens``
    (10 by default) alone."""
    tokens = tokens if tokens is not None else {}
    keys = {k for c in checks for k in c.items}
    groups = groups if groups is not None else {k: n for n, k in enumerate(sorted(keys))}
    return Reading(mode, alpha, checks, order, groups, lambda batch, first: sum(tokens.get(k, 10) for k in batch),
                   sum(tokens.get(k, 10) for k in keys))


def read_all(found: Reading, figures: dict[tuple[str, str, str], dict[int, tuple[float, float]]]) -> Reading:
    while batch := found.next_batch():
        found.take(batch, figures)
    return found


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
    accuracy = check("row", "accuracy", threshold, caps)
    drift = check("row", "kl", kl_threshold, reads)
    keys = accuracy.items
    figures = {keys[n]: {0: shares[n], 1: means[n]} for n in range(len(keys))}
    found = read_all(reading(EXACT, alpha, [accuracy, drift], [keys[n] for n in order]), figures)
    want = {"accuracy": naive_word(SHARE, shares, threshold, 0.5), "kl": naive_word(MEAN, means, kl_threshold, 0.0)}
    test_fails = FAIL in want.values()
    got_fails = False
    for state in found.states:
        settled, metric = state.settled, state.check.metric
        assert settled is not None
        if settled.how == BOUNDS:
            assert settled.word == want[metric], (metric, settled)
            assert not (alpha is not None and settled.word == FAIL)  # a FAIL under alpha needs every item
        elif settled.how in (READ_THROUGH, NA_AT_START):
            assert settled.how == NA_AT_START or settled.items == len(keys)
            assert settled.how == READ_THROUGH or want[metric] == NA
            got_fails |= want[metric] == FAIL
            continue
        else:
            assert settled.how == MOOT and test_fails
            continue
        got_fails |= settled.word == FAIL
    assert got_fails == test_fails
    # the items it left unread could not change anything: the record replays to the same stops
    again = replay(found.to_json())
    assert [s.settled for s in again.states] == [s.settled for s in found.states]


def test_a_clear_failure_is_settled_after_one_item():
    """Drift of 11 nats on the first of 8 items of 24 far reads each: no outcome of the other 7 brings the mean
    under 0.05, so the row fails having read one item, and its accuracy check is not needed."""
    accuracy = check("row", "accuracy", 0.85, [8] * 8)
    drift = check("row", "kl", 0.05, [24] * 8)
    keys = accuracy.items
    found = reading(EXACT, None, [accuracy, drift], list(keys), {k: 2000 for k in keys})
    found.take([keys[0]], {keys[0]: {0: (7.0, 8.0), 1: (11.0 * 24, 24.0)}})
    assert found.next_batch() == [] and found.read == [keys[0]]
    accuracy_state, drift_state = found.states
    assert (drift_state.settled.how, drift_state.settled.word, drift_state.settled.items) == (BOUNDS, FAIL, 1)
    assert drift_state.settled.tokens == 2000 and drift_state.settled.of_tokens == 16000
    assert accuracy_state.settled.how == MOOT


def test_a_pass_needs_every_drift_read_and_an_open_check_every_item():
    drift = check("row", "kl", 0.05, [3, 3, 3])
    retained = check("cell", "retained", 0.9, [1, 1, 1])
    keys = drift.items
    found = reading(EXACT, None, [drift, retained], list(keys))
    for n, key in enumerate(keys[:2]):
        found.take([key], {key: {0: (0.0, 3.0), 1: (1.0, 1.0)}})
        assert found.next_batch() == [keys[n + 1]]  # zero drift so far, but the next item may drift without limit
    found.take([keys[2]], {keys[2]: {0: (0.0, 3.0), 1: (1.0, 1.0)}})
    assert [s.settled.how for s in found.states] == [READ_THROUGH, READ_THROUGH]


def test_a_check_no_item_can_count_in_is_settled_before_anything_is_read():
    """A rules cell whose baseline counts no target, drift without far reads, and an item whose baseline counts
    nothing are n/a whatever is read: a unit of nothing else is not read at all."""
    retained = check("cell", "retained", 0.9, [0, 0, 0], baseline=None)
    drift = check("row", "kl", 0.05, [0, 0, 0])
    own = Check("facts-2k-i0", ITEM, "facts-2k-i0", 1.0, None, (("facts", "2k", "i0"),), (0.0,))
    found = reading(EXACT, None, [retained, drift, own], list(retained.items))
    assert found.next_batch() == [] and found.read == []
    assert [s.settled.how for s in found.states] == [NA_AT_START] * 3
    assert all(s.settled.word is None for s in found.states)


def test_an_items_own_check_is_read_and_judged_on_its_loss():
    """An item whose baseline counts something has an open check until it is read, whatever the rows say: its
    loss decides it (a NaN, infinity, fails it)."""
    keys = tuple(("facts", "2k", f"i{n}") for n in range(3))
    drift = check("row", "kl", 0.05, [4, 4, 4])
    own = [Check(f"facts-2k-i{n}", ITEM, f"i{n}", 1.0, None, (key,), (1.0,)) for n, key in enumerate(keys)]
    found = reading(EXACT, None, [drift, *own], list(keys))
    losses = {keys[0]: 0.5, keys[1]: 1.5, keys[2]: math.inf}
    found.take([keys[0]], {keys[0]: {0: (400.0, 4.0), 1: (losses[keys[0]], 1.0)}})  # drift fails at once
    assert found.states[0].settled.word == FAIL
    read_all(found, {k: {n + 1: (loss, 1.0)} for n, (k, loss) in enumerate(losses.items())})
    assert found.read == list(keys)  # every item read: each one's own check needed it
    assert [s.settled.how for s in found.states[1:]] == [READ_THROUGH] * 3
    assert [s.check.word(s.read[0][0]) for s in found.states[1:]] == [PASS, FAIL, FAIL]


def test_items_of_one_group_are_read_together_and_the_tokens_counted_once():
    """Items that share a prefix are one group: the first needed item brings the group's other items (those no
    check counts too, ``s4``), in one step whose cost the reading's cost function gives (here: a shared 100 and
    10 of each's own)."""
    keys = tuple(("rules_en", "2k", f"s{n}") for n in range(5))
    follow = Check("rules_en-follow-2k", SPECS["accuracy"], "follow", 0.5, 0.5, keys[:4], (1.0,) * 4, (0.0,) * 4)
    groups = {keys[0]: 0, keys[1]: 1, keys[2]: 0, keys[3]: 1, keys[4]: 0}
    found = Reading(EXACT, None, [follow], list(keys[:4]), groups, lambda batch, first: 100 + 10 * len(batch), 250)
    assert found.next_batch() == [keys[0], keys[2], keys[4]]
    found.take([keys[0], keys[2], keys[4]], {k: {0: (0.0, 1.0)} for k in keys})  # 0 to 0.5 still possible: open
    assert found.steps[0].tokens == 130 and found.next_batch() == [keys[1], keys[3]]


def test_a_read_below_the_kl_floor_keeps_the_check_open():
    drift = check("row", "kl", 0.05, [10, 10, 10])
    keys = drift.items
    found = reading(EXACT, None, [drift], list(keys))
    found.take([keys[0]], {keys[0]: {0: (10 * KL_FLOOR * 2 + 20.0, 10.0)}})  # 2 nats a read: a FAIL by the bounds
    assert found.states[0].settled.word == FAIL
    broken = reading(EXACT, None, [drift], list(keys))
    broken.take([keys[0]], {keys[0]: {0: (10 * KL_FLOOR * 2, 10.0)}})  # below the floor: the bound does not hold
    assert broken.states[0].settled is None and broken.next_batch() == [keys[1]]


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
    drift = check("row", "kl", 0.05, [20] * 8)
    accuracy = check("row2", "accuracy", 0.85, [8] * 8, baseline=0.9, base=7.0, drop=0.05)
    keys = drift.items
    found = reading(CONFIDENT, None, [drift, accuracy], list(keys))
    found.take([keys[0]], {keys[0]: {0: (11.0 * 20, 20.0), 1: (7.0, 8.0)}})  # 11 nats of drift: far beyond 0.05
    drift_state, accuracy_state = found.states
    assert (drift_state.settled.how, drift_state.settled.word, drift_state.settled.items) == (TESTED, FAIL, 1)
    assert "e-value" in drift_state.settled.detail
    read_all(found, {k: {1: (7.0, 8.0)} for k in keys[1:]})  # as good as the baseline on every item: no test can
    assert accuracy_state.settled.how == NOT_SETTLED and accuracy_state.settled.items == 8  # show it within 0.05 of it
