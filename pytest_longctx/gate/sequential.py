"""Sequential reading (docs/metrics.md#sequential-reading): score items one at a time, in a fixed order, until
every selected row's and cell's verdict is settled, instead of a fixed number of items.

* **The order.** Within each (config, length) the items by a digest of their key (an order no outcome can move,
  which mixes whatever order the data was built in); the sets of a unit taken in turn, lengths shortest first.
* **exact.** After each item, each check's value over the whole selection is bounded from what is read and
  the most each unread item can count: a share (accuracy, follow) adds, per unread item, between 0 and all of
  its targets (a count known from the data and the baseline); drift (mean KL_K at far reads) adds reads of at
  least ``KL_FLOOR`` nats each and of no upper limit, as many as the baseline's drift block holds; a retained
  effect has no bound (it settles only when read through). A check is settled when every value still possible
  gives the same verdict; the verdict is then the full selection's, by construction. Under ``--longctx-alpha``
  a FAIL also needs the bootstrap over every item, so only a PASS settles early.
* **confident.** Each check's per-item margin (for a share with a threshold relative to the baseline,
  ``hits - baseline hits + drop x scored``; with an absolute one, ``hits - threshold x counted``; for drift,
  ``threshold x reads - KL sum``) has a mean of at least 0 exactly when the check passes on the population of
  items. Two one-sided tests at level alpha watch that mean's boundary, each a capital process of Waudby-Smith
  and Ramdas' betting confidence sequences (JRSS-B 2024) with their predictable plug-in bets: one bets that
  the mean is above 0 (a PASS once its wealth reaches 1/alpha), one that it is below (a FAIL). By Ville's
  inequality either wealth reaches 1/alpha with probability at most alpha while its null holds, however
  often it is looked at. A margin without an upper bound (drift) can only be shown beyond its threshold.
* A row's or cell's test fails when any of its checks does, so once one is settled FAIL the others are not
  needed; an item no open check needs is not read.

Pure functions of per-item figures and counts: no model, no torch; ``gate/model_run.py`` drives them.
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

from pytest_longctx.data.lengths import sorted_lengths
from pytest_longctx.data.load import Dataset
from pytest_longctx.data.records import (
    ALL_CONFIGS,
    FaithfulnessItem,
    Item,
    ItemKey,
    RuleItem,
    ToolItem,
    config_kind,
)
from pytest_longctx.gate.thresholds import Thresholds
from pytest_longctx.gate.verdicts import (
    BOUNDS,
    DRIFT_GATED,
    DRIFT_LABEL,
    FAIL,
    MOOT,
    NOT_SETTLED,
    PASS,
    READ_THROUGH,
    TESTED,
    Settling,
    Verdict,
    cell_key,
    cell_metrics,
    cells,
)
from pytest_longctx.metrics.confidence_sequence import Bettor
from pytest_longctx.metrics.drift import Block, places
from pytest_longctx.metrics.raw import is_scored
from pytest_longctx.metrics.rows import RowSource, headline, row_specs
from pytest_longctx.options.table import SEQUENTIAL_ALPHA, SEQUENTIAL_MODES
from pytest_longctx.scoring.pipeline import compute_sets

EXACT, CONFIDENT, OFF = SEQUENTIAL_MODES
SHARE, MEAN, OPEN = "share", "mean", "open"  # what a check's value is over its items: how it can be bounded
# A read's KL_K is at least -log Q, Q the candidate's probability of the baseline's 16 tokens and its rest bucket:
# 1 up to float32 rounding, so no read goes below -1e-4 nats. A read item that does breaks the bound, and its
# check is read through.
KL_FLOOR = -1e-4

Figure = tuple[float, float]  # one item's (numerator, denominator) of a check: hits / scored, KL sum / reads


# ------------------------------------------------------------------ the order


def _digest(key: ItemKey) -> str:
    return hashlib.sha256("/".join(key).encode("utf-8")).hexdigest()


def reading_order(keys: Iterable[ItemKey]) -> list[ItemKey]:
    """The items in the order they are read: each (config, length)'s by the digest of its key, the sets taken in
    turn, lengths shortest first and configs in the benchmark's order."""
    by_set: dict[tuple[str, str], list[ItemKey]] = {}
    for key in keys:
        by_set.setdefault((key[0], key[1]), []).append(key)
    lengths = sorted_lengths([length for _, length in by_set])
    rank = {config: n for n, config in enumerate(ALL_CONFIGS)}
    sets = sorted(by_set, key=lambda s: (lengths.index(s[1]), rank.get(s[0], len(rank)), s[0]))
    queues = [sorted(by_set[s], key=_digest) for s in sets]
    order = []
    for turn in range(max(map(len, queues), default=0)):
        order.extend(queue[turn] for queue in queues if turn < len(queue))
    return order


# ------------------------------------------------------------------ checks


@dataclass(frozen=True)
class Check:
    """One check of a row or cell as sequential reading sees it: its items (in reading order), the most each can
    count, and what decides its verdict."""

    key: str  # the key of the test it belongs to (a row's or a cell's)
    metric: str  # accuracy, follow, retained, kl
    label: str
    shape: str  # SHARE, MEAN or OPEN
    threshold: float
    at_most: bool
    baseline: float | None  # the baseline's value over the whole selection
    floor: float | None
    items: tuple[ItemKey, ...]
    caps: tuple[float, ...]  # per item: the most its denominator can be (targets, counted targets, far reads)
    base: tuple[float, ...]  # per item: the baseline's numerator (a threshold relative to the baseline)
    drop: float | None = None  # a threshold relative to the baseline: the drop it allows
    paths: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())  # numerator and denominator in a per_item entry

    def word(self, value: float | None) -> str:
        """The verdict the check gives with ``value`` as its final value (as gate/verdicts.py judges it)."""
        baseline = (None if value is None else 0.0) if self.metric == "kl" else self.baseline
        return Verdict(self.key, self.label, self.metric, value, baseline, self.threshold, "", at_most=self.at_most,
                       floor=self.floor).word

    def figure(self, entry: Mapping[str, Any] | None) -> Figure:
        """An item's (numerator, denominator) from its entry in a set's ``per_item`` (no drift: nothing)."""
        num, den = _dig(entry, self.paths[0]), _dig(entry, self.paths[1])
        return (float(num or 0.0), float(den or 0.0))

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "metric": self.metric, "label": self.label, "shape": self.shape,
                "threshold": self.threshold, "at_most": self.at_most, "baseline": self.baseline, "floor": self.floor,
                "items": [list(k) for k in self.items], "caps": list(self.caps), "base": list(self.base), "drop": self.drop}

    @classmethod
    def from_json(cls, found: Mapping[str, Any]) -> Check:
        return cls(found["key"], found["metric"], found["label"], found["shape"], found["threshold"], found["at_most"],
                   found["baseline"], found["floor"], tuple(tuple(k) for k in found["items"]), tuple(found["caps"]),
                   tuple(found["base"]), found["drop"])


def _dig(entry: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(entry, Mapping) or key not in entry:
            return None
        entry = entry[key]
    return entry


UNKNOWN = frozenset({"?"})  # a check whose value no bound limits yet


def possible_words(check: Check, read: Mapping[int, Figure]) -> frozenset[str]:
    """The verdicts still possible for ``check`` once the items at these indices are read (their figures), every
    other item counting anything it can: one word means the check is settled."""
    unread = sum(cap for n, cap in enumerate(check.caps) if n not in read)
    num, den = sum(f[0] for f in read.values()), sum(f[1] for f in read.values())
    if check.shape == OPEN:
        return UNKNOWN
    if den + unread == 0:
        return frozenset({check.word(None)})
    if check.shape == SHARE:
        words = {check.word(num / (den + unread)), check.word((num + unread) / (den + unread))}
    else:
        if any(f[0] < KL_FLOOR * f[1] for f in read.values()):  # the floor does not hold: no bound from it
            return UNKNOWN if unread else frozenset({check.word(num / den)})
        lowest = (num + KL_FLOOR * unread) / (den + unread)
        words = {check.word(min(lowest, num / den) if den else lowest),
                 check.word(math.inf if unread else num / den)}
    if den == 0:  # every unread item may have nothing to count: no value at all
        words.add(check.word(None))
    return frozenset(words)


def range_text(check: Check, read: Mapping[int, Figure]) -> str:
    """The values still possible, in words: ``possible far KL 0.225 to inf, threshold <= 0.050``."""
    unread = sum(cap for n, cap in enumerate(check.caps) if n not in read)
    num, den = sum(f[0] for f in read.values()), sum(f[1] for f in read.values())
    if check.shape == OPEN or den + unread == 0:
        return ""
    if check.shape == SHARE:
        low, high = num / (den + unread), (num + unread) / (den + unread)
    else:
        low = (num + KL_FLOOR * unread) / (den + unread)
        low, high = (min(low, num / den) if den else low), (math.inf if unread else num / den)
    return f"possible {check.metric} {low:.3f} to {high:.3f}, needs {'<=' if check.at_most else '>='} {check.threshold:.3f}"


# ------------------------------------------------------------------ the confidence sequence


def margin(check: Check, index: int, figure: Figure) -> float:
    """One item's margin: its mean over the population of items is at least 0 exactly when the check passes there
    (a share against ``baseline - drop``: hits - baseline hits + drop x scored; against an absolute threshold:
    hits - threshold x counted; drift: threshold x reads - KL sum)."""
    num, den = figure
    if check.at_most:
        return check.threshold * den - num
    if check.drop is not None:
        return num - check.base[index] + check.drop * den
    return num - check.threshold * den


def margin_range(check: Check) -> tuple[float, float]:
    """The least and most an item's margin can be, from the most its items can count (drift: no most KL)."""
    most = max(check.caps, default=0.0)
    if check.at_most:
        return -math.inf, check.threshold * most
    if check.drop is not None:
        return -most, (1.0 + check.drop) * most
    return -check.threshold * most, (1.0 - check.threshold) * most


def bettors(check: Check, alpha: float) -> tuple[Bettor | None, Bettor | None, Callable[[float], tuple[float, float]]]:
    """(the bettor whose win shows a PASS, the one whose win shows a FAIL, margin -> what each bets on): the margin
    in [0, 1] units where both ends are known (its null at the mean 0); drift's, without an upper end, in units of
    its upper end, FAIL only. A side without room to bet on (a range that does not straddle 0) is None."""
    low, high = margin_range(check)
    if math.isinf(low):
        if high <= 0:
            return None, None, lambda x: (0.0, 0.0)
        return None, Bettor(1.0, alpha), lambda x: (0.0, (high - x) / high)
    if not low < 0 < high:
        return None, None, lambda x: (0.0, 0.0)
    null = -low / (high - low)
    return (Bettor(null, alpha), Bettor(1.0 - null, alpha),
            lambda x: ((x - low) / (high - low), (high - x) / (high - low)))


# ------------------------------------------------------------------ one unit's reading


@dataclass
class CheckState:
    """What is read of one check, and whether and how it is settled."""

    check: Check
    read: dict[int, Figure] = field(default_factory=dict)
    order: list[int] = field(default_factory=list)  # the indices in the order read
    settled: Settling | None = None
    passing: Bettor | None = None
    failing: Bettor | None = None
    units: Callable[[float], tuple[float, float]] | None = None


@dataclass
class Reading:
    """The sequential reading of one unit's sets: its checks (grouped by the test they belong to), the order,
    the tokens of every item, and what was read. ``take`` each item read; ``next_item`` says what to read next,
    None once every selected test is settled."""

    mode: str
    alpha: float | None  # --longctx-alpha (exact: a FAIL needs every item; confident: its level, else SEQUENTIAL_ALPHA)
    checks: list[Check]
    order: list[ItemKey]
    tokens: dict[ItemKey, int]
    read: list[ItemKey] = field(default_factory=list)
    states: list[CheckState] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.states = [CheckState(check) for check in self.checks]
        for state in self.states:
            if self.mode == CONFIDENT:
                state.passing, state.failing, state.units = bettors(state.check, self.level)
            self._settle(state)
        self._moot()

    @property
    def level(self) -> float:
        return self.alpha if self.alpha is not None else SEQUENTIAL_ALPHA

    def next_item(self) -> ItemKey | None:
        """The first unread item, in order, that an unsettled check needs."""
        needed = {key for state in self.states if state.settled is None
                  for n, key in enumerate(state.check.items) if n not in state.read}
        return next((key for key in self.order if key in needed and key not in self.read), None)

    def figures(self, key: ItemKey, entry: Mapping[str, Any] | None) -> dict[int, Figure]:
        """Check (its index) -> item ``key``'s figure there, from the item's entry in its set's ``per_item``."""
        return {n: state.check.figure(entry) for n, state in enumerate(self.states) if key in state.check.items}

    def take(self, key: ItemKey, figures: Mapping[int, Figure]) -> None:
        """Item ``key`` is read, with its figure in each check that counts it (``figures``)."""
        self.read.append(key)
        for number, state in enumerate(self.states):
            check = state.check
            if key not in check.items:
                continue
            index = check.items.index(key)
            figure = figures.get(number, (0.0, 0.0))
            state.read[index] = figure
            state.order.append(index)
            if state.settled is None:
                if state.units is not None and (state.passing or state.failing):
                    for bettor, w in zip((state.passing, state.failing), state.units(margin(check, index, figure))):
                        if bettor is not None:
                            bettor.add(w)
                self._settle(state)
        self._moot()

    def _settle(self, state: CheckState) -> None:
        check, read = state.check, state.read
        if self.mode == EXACT:
            if len(read) == len(check.items):
                state.settled = self._settling(state, READ_THROUGH, None, "")
                return
            words = possible_words(check, read)
            if len(words) != 1 or words == UNKNOWN or not read:  # one item read at least: a set has figures to show
                return
            word = next(iter(words))
            if self.alpha is None or word != FAIL:  # under --longctx-alpha a FAIL rests on the bootstrap over every item
                state.settled = self._settling(state, BOUNDS, word, range_text(check, read))
            return
        for bettor, word in ((state.passing, PASS), (state.failing, FAIL)):
            if bettor is not None and bettor.rejects:
                state.settled = self._settling(state, TESTED, word, self._tested(state))
                return
        if len(read) == len(check.items):
            state.settled = self._settling(state, NOT_SETTLED, None, self._tested(state))

    def _tested(self, state: CheckState) -> str:
        said = [f"{side} e-value {bettor.wealth:.3g}" for side, bettor in (("within", state.passing), ("beyond", state.failing))
                if bettor is not None]
        if not said:
            return "no test can settle it (its margin has no bound)"
        return f"{', '.join(said)} against 1/alpha = {1 / self.level:g}"

    def _settling(self, state: CheckState, how: str, word: str | None, detail: str) -> Settling:
        check = state.check
        read = [check.items[n] for n in state.read]
        return Settling(self.mode, how, word, len(read), len(check.items), sum(self.tokens.get(k, 0) for k in read),
                        sum(self.tokens.get(k, 0) for k in check.items), detail)

    def _moot(self) -> None:
        """A test with a check settled FAIL fails: its open checks are not needed."""
        failing = {state.check.key for state in self.states if state.settled is not None and state.settled.word == FAIL}
        for state in self.states:
            if state.settled is None and state.check.key in failing:
                state.settled = self._settling(state, MOOT, None, f"{state.check.key} already fails on another check")

    @property
    def done(self) -> bool:
        return self.next_item() is None

    def record(self) -> dict[str, Any]:
        """The stopping record: enough to replay the reading (``replay``) and to say how each check was settled."""
        return {
            "mode": self.mode, "alpha": self.alpha, "order": [list(k) for k in self.order], "read": [list(k) for k in self.read],
            "tokens": [[*key, n] for key, n in self.tokens.items()],
            "checks": [{**state.check.to_json(), "figures": [[n, *state.read[n]] for n in state.order],
                        "settled": state.settled.to_json() if state.settled is not None else None}
                       for state in self.states],
        }


def settling_from_json(found: Mapping[str, Any]) -> Settling:
    return Settling(found["mode"], found["how"], found["word"], found["items"], found["of_items"], found["tokens"],
                    found["of_tokens"], found["detail"])


def replay(record: Mapping[str, Any]) -> Reading:
    """The reading a stopping record describes, done again from its figures: a reviewer's check that every
    check was settled where and how the record says, and that no item past that was needed."""
    checks = [Check.from_json(found) for found in record["checks"]]
    tokens = {(c, n, i): count for c, n, i, count in record["tokens"]}
    reading = Reading(record["mode"], record["alpha"], checks, [tuple(k) for k in record["order"]], tokens)
    figures: dict[ItemKey, dict[int, Figure]] = {}
    for number, (check, found) in enumerate(zip(checks, record["checks"])):
        for index, num, den in found["figures"]:
            figures.setdefault(check.items[index], {})[number] = (num, den)
    for key in map(tuple, record["read"]):
        if reading.next_item() != key:
            raise ValueError(f"the record reads {'/'.join(key)} where the rule reads {reading.next_item()}")
        reading.take(key, figures.get(key, {}))
    if reading.next_item() is not None:
        raise ValueError(f"the record stops before {'/'.join(reading.next_item() or ())}, which an open check needs")
    return reading


# ------------------------------------------------------------------ the checks of a selection


def _suite_of(item: Item) -> str | None:
    return item.suite if isinstance(item, FaithfulnessItem) else None


def _in_cell(placement: str | None, family: str | None) -> Callable[[Item], bool]:
    return lambda item: isinstance(item, RuleItem) and item.placement == placement and family in ("all", item.family)


def _in_rows(item: Item, source: RowSource) -> bool:
    """Whether ``item`` counts in the row ``source`` (a rules row: its cell; an agent-session row: its suite)."""
    if source.is_rules:
        return _in_cell(source.placement, source.family)(item)
    return source.suite is None or _suite_of(item) == source.suite


def _share_caps(config: str, item: Item, records: Sequence[Mapping[str, Any]], min_effect: float) -> float:
    """The most targets an item can count in its config's share: its scored queries (facts, sessions), its far
    targets (tool calls), the targets its baseline counts (rules: ``|eff_ref| >= min_effect``)."""
    kind = config_kind(config)
    if kind == "tool_calls":
        assert isinstance(item, ToolItem)
        return float(sum(t.far for t in item.targets))
    if kind == "rules":
        return float(sum(is_scored(r) and abs(r["score_with"] - r["score_without"]) >= min_effect for r in records))
    return float(len(records))


def _far_reads(item: Item, scores: Any) -> float:
    """The far reads of an item's drift block in the baseline (none without one)."""
    if not scores.drift:
        return 0.0
    block = Block.decode(scores.drift)
    if block.ids is None or block.lps is None:
        return 0.0
    return float(sum(group == "far" for group, _, _ in places(item, scores)))


SHARE_PATHS = {"facts": (("recalled",), ("scored",)), "faithfulness": (("recalled",), ("scored",)),
               "tool_calls": (("far", "correct"), ("far", "count")), "follow": (("followed",), ("counted",)),
               "retained": (("eff_sum",), ("eff_ref_sum",)), "kl": (("drift", "far", "kl"), ("drift", "far", "reads"))}


@dataclass(frozen=True)
class Selection:
    """What the checks of a selection are made from: its items, the baseline's scores and metrics of them, the
    thresholds, and the keys of the selected row and cell tests."""

    dataset: Dataset
    baseline: Any  # the baseline ScoresFile
    baseline_sets: Mapping[str, Mapping[str, Mapping[str, Any]]]
    thresholds: Thresholds
    tests: frozenset[str]
    order: Sequence[ItemKey]

    def _items(self, config: str, lengths: Sequence[str], keep: Callable[[Item], bool]) -> list[tuple[ItemKey, Item]]:
        rank = {key: n for n, key in enumerate(self.order)}
        found = [((config, length, item.id), item) for length in lengths
                 for item in self.dataset.configs[config].get(length, []) if keep(item)]
        return sorted(found, key=lambda pair: rank.get(pair[0], len(rank)))

    def _check(self, key: str, metric: str, label: str, shape: str, threshold: float, at_most: bool,
               baseline: float | None, floor: float | None, config: str, lengths: Sequence[str],
               keep: Callable[[Item], bool], drop: float | None = None) -> Check:
        chosen = self._items(config, lengths, keep)
        caps, base = [], []
        path_kind = metric if metric in ("follow", "retained", "kl") else config_kind(config)
        paths = SHARE_PATHS[path_kind]
        for (c, n, item_id), item in chosen:
            scores = self.baseline.scores[c][n][item_id]
            caps.append(_far_reads(item, scores) if metric == "kl" else
                        _share_caps(c, item, scores.targets, self.thresholds.min_effect))
            base.append(float(_dig(self.baseline_sets[c][n]["per_item"].get(item_id), paths[0]) or 0.0))
        return Check(key, metric, label, shape, threshold, at_most, baseline, floor, tuple(k for k, _ in chosen),
                     tuple(caps), tuple(base), drop, paths)

    def checks(self) -> list[Check]:
        """The checks of every selected row and cell test, as gate/verdicts.py makes them."""
        found: list[Check] = []
        configs = self.dataset.configs
        rows, _ = headline(self.baseline_sets)
        for name, source in row_specs({config: list(by_length) for config, by_length in configs.items()}):
            if source.key in self.tests:
                found.extend(self._row_checks(name, source, rows.get(name)))
        for config, by_length in configs.items():
            if config_kind(config) != "rules":
                continue
            for _, length, placement, family in cells(config, list(by_length)):
                key = cell_key(config, length, placement, family)
                if key not in self.tests:
                    continue
                base_cell = self.baseline_sets[config][length]["cells"][placement][family]
                label = f"{config} {length} {placement} prompt, {'all families' if family == 'all' else family}"
                keep = _in_cell(placement, family)
                for metric, value in cell_metrics(self.thresholds, key, family, placement).items():
                    found.append(self._check(key, metric, label, SHARE if metric == "follow" else OPEN, value, False,
                                             base_cell[metric], 0.0 if metric == "follow" else None, config, [length], keep))
        return found

    def _row_checks(self, name: str, source: RowSource, baseline: float | None) -> list[Check]:
        config, key = source.config, source.key
        lengths = [source.length] if source.length is not None else list(self.dataset.configs[config])
        keep = (lambda item: _in_rows(item, source)) if not source.worst_case else (lambda item: True)
        if source.worst_case:
            threshold = self.thresholds.get(key, "retained")
            assert threshold is not None
            return [self._check(key, "retained", name, OPEN, threshold, False, baseline, None, config, lengths, keep)]
        if source.is_rules:
            metric = source.metric
            threshold = self.thresholds.get(key, metric)
            assert threshold is not None
            own = self._check(key, metric, name, SHARE if metric == "follow" else OPEN, threshold, False, baseline,
                              0.0 if metric == "follow" else None, config, lengths, keep)
        else:
            drop = self.thresholds.get(key, "drop")
            assert drop is not None
            threshold = (baseline if baseline is not None else 0.0) - drop
            own = self._check(key, "accuracy", name, SHARE, threshold, False, baseline, 0.0, config, lengths, keep, drop)
        found = [own]
        kl = self.thresholds.get(key, "kl", default=config_kind(config) in DRIFT_GATED)
        if kl is not None and self.baseline.has_drift:
            found.append(self._check(key, "kl", f"{name}{DRIFT_LABEL}", MEAN, kl, True, 0.0, None, config, lengths, keep))
        return found


def totals(records: Iterable[Mapping[str, Any]]) -> dict[str, Any] | None:
    """What the units' readings read of their items and tokens, together (None without any reading)."""
    records = list(records)
    if not records:
        return None
    order = [tuple(k) for r in records for k in r["order"]]
    read = {tuple(k) for r in records for k in r["read"]}
    tokens = {(c, n, i): count for r in records for c, n, i, count in r["tokens"]}
    return {"mode": records[0]["mode"], "alpha": records[0]["alpha"], "items": len(read), "of_items": len(order),
            "tokens": sum(tokens.get(k, 0) for k in read), "of_tokens": sum(tokens.get(k, 0) for k in order)}


def totals_text(found: Mapping[str, Any]) -> str:
    """``sequential reading (exact): 5 of 32 items read (21,450 of 180,220 tokens)``."""
    level = f" at alpha {found['alpha'] if found['alpha'] is not None else SEQUENTIAL_ALPHA:g}" if found["mode"] == CONFIDENT else ""
    return (f"sequential reading ({found['mode']}{level}): {found['items']} of {found['of_items']} items read "
            f"({found['tokens']:,} of {found['of_tokens']:,} tokens); --longctx-sequential off reads every item")


# ------------------------------------------------------------------ driving a reading


def checks_of(dataset: Dataset, baseline: Any, thresholds: Thresholds, tests: frozenset[str]) -> tuple[list[Check], list[ItemKey]]:
    """(the checks of the selected row and cell ``tests`` over ``dataset``, against ``baseline``; the order their
    items are read in)."""
    baseline_sets = compute_sets(dataset, baseline, None, thresholds.min_effect)
    first = Selection(dataset, baseline, baseline_sets, thresholds, tests, ()).checks()
    order = reading_order({key for check in first for key in check.items})
    return Selection(dataset, baseline, baseline_sets, thresholds, tests, order).checks(), order


def read(mode: str, alpha: float | None, checks: list[Check], order: list[ItemKey], tokens: dict[ItemKey, int],
         score: Callable[[ItemKey], Mapping[str, Any] | None]) -> Reading:
    """Read items in ``order`` while an open check needs one: ``score(key)`` scores it (when not scored yet) and
    returns its entry in its set's ``per_item``, against the baseline."""
    reading = Reading(mode, alpha, checks, order, tokens)
    while (key := reading.next_item()) is not None:
        reading.take(key, reading.figures(key, score(key)))
    return reading


def annotate(verdicts: Iterable[Verdict], records: Iterable[Mapping[str, Any]]) -> None:
    """Each verdict of a check a reading settled gets how (its word where it settled one)."""
    found = {(check["key"], check["metric"]): check["settled"] for record in records
             for check in record["checks"] if check["settled"] is not None}
    for verdict in verdicts:
        settled = found.get((verdict.key, verdict.metric))
        if settled is not None:
            verdict.settling = settling_from_json(settled)
