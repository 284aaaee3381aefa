"""One unit's sequential reading (``Reading``): items taken one at a time, each check settled by its bounds
(``exact``) or its two tests (``confident``), the stopping record and its replay, the totals the reports
print, and the verdicts annotated with how each check was settled."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from pytest_longctx.data.records import ItemKey
from pytest_longctx.gate.sequential.bounds import UNKNOWN, bettors, margin, possible_words, range_text
from pytest_longctx.gate.sequential.checks import Check, Figure
from pytest_longctx.gate.verdict import BOUNDS, FAIL, MOOT, NOT_SETTLED, PASS, READ_THROUGH, TESTED, Settling, Verdict
from pytest_longctx.metrics.confidence_sequence import Bettor
from pytest_longctx.options.table import SEQUENTIAL_ALPHA, SEQUENTIAL_MODES

EXACT, CONFIDENT, OFF = SEQUENTIAL_MODES


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
