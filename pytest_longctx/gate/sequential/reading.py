"""One unit's sequential reading (``Reading``): its items taken a group at a time (items that share a prefix are
read together, as a full read shares it), each check settled by its bounds (``exact``) or its two tests
(``confident``); the reading is its own stopping record (``to_json``, ``from_json``) and replays from it
(``replay``); ``totals`` are what the reports print of all of a run's readings."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

from pytest_longctx.data.records import ItemKey
from pytest_longctx.gate.sequential.bounds import UNKNOWN, bettors, margin, not_applicable, possible_words, range_text
from pytest_longctx.gate.sequential.checks import Check, Figure
from pytest_longctx.gate.specs import Shape
from pytest_longctx.gate.verdict import BOUNDS, FAIL, MOOT, NA_AT_START, NOT_SETTLED, PASS, READ_THROUGH, TESTED, Settling
from pytest_longctx.metrics.confidence_sequence import Bettor
from pytest_longctx.metrics.item_figures import ItemFigures
from pytest_longctx.options.table import SEQUENTIAL_ALPHA, Sequential

Cost = Callable[[Sequence[ItemKey], bool], int]  # (items read together, the first read of the unit) -> tokens forwarded


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


@dataclass(frozen=True)
class Step:
    """One step of a reading: the items read together (one group's needed items) and the tokens that forwarded."""

    items: tuple[ItemKey, ...]
    tokens: int


@dataclass
class Reading:
    """The sequential reading of one unit's sets: its checks, the order, which items are read together
    (``groups``: one number per group), what reading a group costs (``cost``) and what reading every item costs
    (``whole``), and the steps read. ``next_batch`` says what to read next (nothing once every selected test is
    settled); ``take`` each batch read."""

    mode: Sequential
    alpha: float | None  # --longctx-alpha (exact: a FAIL needs every item; confident: its level, else SEQUENTIAL_ALPHA)
    checks: list[Check]
    order: list[ItemKey]
    groups: Mapping[ItemKey, int]  # every item of the unit, the checks' and any other, and its group
    cost: Cost
    whole: int  # the tokens reading every item of the unit forwards (what off forwards)
    # a shard's part (gate/shards.py): the items it may read; the others stay unread, bounded as unread items are
    only: frozenset[ItemKey] | None = None
    steps: list[Step] = field(default_factory=list)
    states: list[CheckState] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.states = [CheckState(check) for check in self.checks]
        for state in self.states:
            if self.mode == Sequential.CONFIDENT:
                state.passing, state.failing, state.units = bettors(state.check, self.level)
            self._settle(state)
        self._moot()

    @property
    def level(self) -> float:
        return self.alpha if self.alpha is not None else SEQUENTIAL_ALPHA

    @property
    def read(self) -> list[ItemKey]:
        return [key for step in self.steps for key in step.items]

    @property
    def forwarded(self) -> int:
        return sum(step.tokens for step in self.steps)

    def needed(self) -> set[ItemKey]:
        """The unread items an open check counts."""
        read = set(self.read)
        return {key for state in self.states if state.settled is None for key in state.check.items} - read

    def next_batch(self) -> list[ItemKey]:
        """The first needed item, in order, with every other unread item of its group: read together they forward
        what they share once, and each read is computed exactly as a full read computes it (the same prefix tree
        within the group), so its figures are a full read's to the last bit."""
        needed = self.needed()
        first = next((key for key in self.order if key in needed and (self.only is None or key in self.only)), None)
        if first is None:
            return []
        read, rank = set(self.read), {key: n for n, key in enumerate(self.order)}
        group = [key for key in self.groups if self.groups[key] == self.groups[first] and key not in read]
        return sorted(group, key=lambda key: (rank.get(key, len(rank)), key))

    def figures(self, found: Mapping[ItemKey, ItemFigures | None]) -> dict[ItemKey, dict[int, Figure]]:
        """Item -> check (its index) -> the item's figure there, from the items' figures."""
        return {key: {n: state.check.figure(figures) for n, state in enumerate(self.states) if key in state.check.items}
                for key, figures in found.items()}

    def take(self, batch: Sequence[ItemKey], figures: Mapping[ItemKey, Mapping[int, Figure]]) -> None:
        """The items of ``batch`` are read together, each with its figure in each check that counts it."""
        self.steps.append(Step(tuple(batch), self.cost(batch, not self.steps)))
        for key in batch:
            for number, state in enumerate(self.states):
                check = state.check
                if key not in check.items:
                    continue
                index = check.items.index(key)
                figure = figures.get(key, {}).get(number, (0.0, 0.0))
                state.read[index] = figure
                state.order.append(index)
                if state.settled is None and state.units is not None:
                    for bettor, w in zip((state.passing, state.failing), state.units(margin(check, index, figure))):
                        if bettor is not None:
                            bettor.add(w)
        for state in self.states:
            if state.settled is None:
                self._settle(state)
        self._moot()

    def _settle(self, state: CheckState) -> None:
        check, read = state.check, state.read
        if not_applicable(check):
            state.settled = self._settling(state, NA_AT_START, None, "none of its items can count anything in the baseline")
            return
        if len(read) == len(check.items):
            tested = self.mode == Sequential.CONFIDENT and check.spec.shape in (Shape.SHARE, Shape.MEAN)
            state.settled = (self._settling(state, NOT_SETTLED, None, self._tested(state)) if tested
                             else self._settling(state, READ_THROUGH, None, ""))
            return
        if self.mode == Sequential.EXACT:
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

    def _tested(self, state: CheckState) -> str:
        said = [f"{side} e-value {bettor.wealth:.3g}" for side, bettor in (("within", state.passing), ("beyond", state.failing))
                if bettor is not None]
        if not said:
            return "no test can settle it before its last item (its items' margins have no bound)"
        return f"{', '.join(said)} against 1/alpha = {1 / self.level:g}"

    def _settling(self, state: CheckState, how: str, word: str | None, detail: str) -> Settling:
        return Settling(self.mode, how, word, len(state.read), len(state.check.items), self.forwarded, self.whole, detail)

    def _moot(self) -> None:
        """A test with a check settled FAIL fails: its open checks are not needed."""
        failing = {state.check.key for state in self.states if state.settled is not None and state.settled.word == FAIL}
        for state in self.states:
            if state.settled is None and state.check.key in failing:
                state.settled = self._settling(state, MOOT, None, f"{state.check.key} already fails on another check")

    @property
    def done(self) -> bool:
        return not self.next_batch()

    def settlings(self) -> dict[tuple[str, str], Settling]:
        """(test key, check name) -> how it was settled."""
        return {(state.check.key, state.check.metric): state.settled for state in self.states if state.settled is not None}

    def to_json(self) -> dict[str, Any]:
        """The stopping record: enough to replay the reading (``replay``) and to say how each check was settled."""
        return {
            "mode": str(self.mode), "alpha": self.alpha, "order": [list(k) for k in self.order],
            "groups": [[*key, group] for key, group in self.groups.items()], "whole": self.whole,
            "steps": [{"items": [list(k) for k in step.items], "tokens": step.tokens} for step in self.steps],
            "checks": [{**state.check.to_json(), "figures": [[n, *state.read[n]] for n in state.order],
                        "settled": state.settled.to_json() if state.settled is not None else None}
                       for state in self.states],
            **({"only": sorted(list(k) for k in self.only)} if self.only is not None else {}),
        }

    @classmethod
    def from_json(cls, found: Mapping[str, Any]) -> Reading:
        """The reading a stopping record holds, as it ended (its states as recorded, not replayed)."""
        reading = _unread(found)
        reading.steps = [Step(tuple(tuple(k) for k in step["items"]), step["tokens"]) for step in found["steps"]]
        for state, recorded in zip(reading.states, found["checks"]):
            state.read = {index: (num, den) for index, num, den in recorded["figures"]}
            state.order = [index for index, _, _ in recorded["figures"]]
            state.settled = Settling.from_json(recorded["settled"]) if recorded["settled"] is not None else None
        return reading


def _unread(found: Mapping[str, Any], cost: Cost | None = None) -> Reading:
    """The reading a stopping record describes, before any item is read (``cost``: else the recorded steps')."""
    steps = {tuple(tuple(k) for k in step["items"]): step["tokens"] for step in found["steps"]}

    def recorded(batch: Sequence[ItemKey], first: bool) -> int:
        if tuple(batch) not in steps:
            raise ValueError(f"the record reads no step of {', '.join('/'.join(k) for k in batch)}")
        return steps[tuple(batch)]

    only = frozenset(tuple(k) for k in found["only"]) if "only" in found else None
    return Reading(Sequential(found["mode"]), found["alpha"], [Check.from_json(c) for c in found["checks"]],
                   [tuple(k) for k in found["order"]], {tuple(g[:3]): g[3] for g in found["groups"]}, cost or recorded,
                   found["whole"], only)


def replay(found: Mapping[str, Any]) -> Reading:
    """The reading a stopping record describes, done again from its figures: a reviewer's check that every
    check was settled where and how the record says, and that no item past that was needed."""
    reading = _unread(found)
    figures: dict[ItemKey, dict[int, Figure]] = {}
    for number, (check, recorded) in enumerate(zip(reading.checks, found["checks"])):
        for index, num, den in recorded["figures"]:
            figures.setdefault(check.items[index], {})[number] = (num, den)
    for step in found["steps"]:
        batch = [tuple(k) for k in step["items"]]
        if reading.next_batch() != batch:
            raise ValueError(f"the record reads {', '.join('/'.join(k) for k in batch)} where the rule reads "
                             f"{', '.join('/'.join(k) for k in reading.next_batch()) or 'nothing'}")
        reading.take(batch, figures)
    if reading.next_batch():
        raise ValueError(f"the record stops before {'/'.join(reading.next_batch()[0])}, which an open check needs")
    return reading


@dataclass(frozen=True)
class Totals:
    """What a run's readings read, together: items, and tokens forwarded of what reading every item forwards."""

    mode: Sequential
    alpha: float | None
    items: int
    of_items: int
    tokens: int
    of_tokens: int

    def text(self) -> str:
        """``sequential reading (exact): 5 of 32 items read (21,450 of 180,220 tokens forwarded)``."""
        level = f" at alpha {self.alpha if self.alpha is not None else SEQUENTIAL_ALPHA:g}" if self.mode == Sequential.CONFIDENT else ""
        return (f"sequential reading ({self.mode}{level}): {self.items} of {self.of_items} items read "
                f"({self.tokens:,} of {self.of_tokens:,} tokens forwarded; --longctx-sequential off forwards the latter)")

    def to_json(self) -> dict[str, Any]:
        return {"mode": str(self.mode), "alpha": self.alpha, "items": self.items, "of_items": self.of_items,
                "tokens": self.tokens, "of_tokens": self.of_tokens}


def totals(readings: Iterable[Reading]) -> Totals | None:
    """What the units' readings read of their items and tokens, together (None without any reading)."""
    readings = list(readings)
    if not readings:
        return None
    return Totals(readings[0].mode, readings[0].alpha, sum(len(r.read) for r in readings),
                  sum(len(r.order) for r in readings), sum(r.forwarded for r in readings), sum(r.whole for r in readings))
