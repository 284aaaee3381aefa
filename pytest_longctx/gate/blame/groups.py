"""Blame's group search (docs/blame.md#the-search): adaptive group testing, so that k parts that matter among
n cost on the order of k·log2(n) hybrids instead of 2n.

The changed parts, in model order, are halved; restoring one of the two first halves is damaging the
original with the other (the unchanged parts are the same in both models), so they are judged both ways
from two hybrids. A group carries when it moves some blamed row's far drift by ``CARRY`` of it or more,
either way, or makes a row pass (restore) or fail (damage); a group that carries is halved (a
``Family``) in the direction that showed it most, and its halves tested that way, the likelier first
(the larger estimate, else the one whose hybrid starts higher and runs fewer layers): where it moves
the drift as much as the whole group (within ``CARRY``), the other is not tested. Where neither half
of a restored group carries, each may mask the other (each enough for the damage the other leaves):
both are tested in the damage direction too. A part alone that carries is kept; the rest are cleared.
A second round (``base``) restores its groups in the candidate with the fix set restored already,
judged against that hybrid's rows, so that a part whose drift is small beside another's is seen."""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Mapping, Sequence

from pytest_longctx.gate.blame.estimates import group_estimate
from pytest_longctx.gate.blame.records import BlameReport, Direction, GroupTest, PartBlame, RowState, Searched, group_name
from pytest_longctx.gate.blame.scorer import Scorer
from pytest_longctx.options.table import CARRY


@dataclass(frozen=True)
class Family:
    """A carrying group's two halves, to be tested in ``direction``; ``parent`` is the group's own test (None:
    the first split, of every changed part)."""

    halves: tuple[list[PartBlame], list[PartBlame]]
    direction: Direction
    parent: GroupTest | None

    @classmethod
    def of(cls, group: Sequence[PartBlame], direction: Direction, parent: GroupTest | None) -> Family:
        middle = (len(group) + 1) // 2
        return cls((list(group[:middle]), list(group[middle:])), direction, parent)

    @property
    def entries(self) -> list[PartBlame]:
        return [*self.halves[0], *self.halves[1]]


def judged(report: BlameReport, parts: Sequence[PartBlame], direction: Direction, states: dict[str, RowState],
           against: Mapping[str, RowState] | None = None, second: bool = False) -> GroupTest:
    """A group's hybrid judged: it carries when it moves some blamed row's far drift by ``CARRY`` of it or more,
    or makes a blamed row pass (restore) or fail (damage)."""
    shares = [report.shares(states, direction, row, against=against) for row in report.rows]
    # the blamed rows fail in the candidate and pass in the original: a restore that passes one, a damage that fails one
    flipped = any(states[row].passed == (direction is Direction.RESTORE) for row in report.rows)
    # to first order a group's damage share is its restore share: the sum of its parts' estimates either way
    return GroupTest([p.name for p in parts], direction, states, flipped or any(s is not None and abs(s) >= CARRY for s in shares),
                     shares, second, group_estimate(parts))


def same(half: GroupTest, group: GroupTest) -> bool:
    """``half`` carries and moves every blamed row's far drift as much as its whole ``group`` (a group that
    carries only by passing or failing a row has a share under ``CARRY``: a half that carries nothing is not it)."""
    return half.carries and all(a is not None and b is not None and abs(a - b) < CARRY for a, b in zip(half.shares, group.shares))


class GroupSearch:
    """The search over ``changed`` (the module's docstring); ``step`` tests one family, ``run`` all of them."""

    def __init__(self, report: BlameReport, scorer: Scorer, changed: Sequence[PartBlame], base: Sequence[PartBlame] = (),
                 against: Mapping[str, RowState] | None = None):
        self.report, self.scorer, self.base, self.against = report, scorer, list(base), against
        self.first_round = not base
        self.families: deque[Family] = deque([Family.of(changed, Direction.RESTORE, None)])
        self.kept: list[PartBlame] = []

    def test(self, group: list[PartBlame], direction: Direction) -> GroupTest:
        report, scorer = self.report, self.scorer
        label = (f"hybrid {scorer.runs + 1}, group search{'' if self.first_round else ', second round'}: "
                 f"{direction.value} {group_name([e.name for e in group])}")
        states = scorer(direction.base, [e.part for e in [*self.base, *group]], label)
        if len(group) == 1 and self.first_round:
            group[0].states(direction).update(states)
        report.groups.append(judged(report, group, direction, states, self.against, second=not self.first_round))
        return report.groups[-1]

    def likelier(self, family: Family) -> int:
        """Which half to test first: the one with the larger estimate, else the one whose hybrid starts higher (runs
        fewer layers)."""
        estimates = [group_estimate(half) for half in family.halves]
        if None not in estimates and estimates[0] != estimates[1]:
            return 0 if (estimates[0] or 0.0) > (estimates[1] or 0.0) else 1
        starts = [self.scorer.start(family.direction.base, [e.part for e in [*self.base, *half]]) for half in family.halves]
        return 1 if starts[1] > starts[0] else 0

    def step(self) -> None:
        """Test the next family's halves and queue the halves that carry."""
        family = self.families.popleft()
        halves, direction, parent = family.halves, family.direction, family.parent
        one = self.likelier(family)
        first = self.test(halves[one], direction)
        carriers: list[GroupTest | None] = [None, None]
        if parent is not None and same(first, parent):  # this half does what the group does
            carriers[one] = first if first.carries else None
        elif self.scorer.pace.spent():
            carriers[one] = first if first.carries else None
            self.leave(halves[1 - one], Searched.UNTESTED)
        else:
            tests = [first, first]  # in the halves' order
            tests[1 - one] = self.test(halves[1 - one], direction)
            if self.first_round and parent is None:  # the first halves: restoring one is damaging the original with the other
                tests += [judged(self.report, mine, Direction.DAMAGE, other.states) for mine, other in zip(halves, tests[1::-1])]
            elif self.first_round and direction is Direction.RESTORE and not any(t.carries for t in tests):  # each masks the other?
                if self.scorer.pace.left() >= 2:
                    tests += [self.test(group, Direction.DAMAGE) for group in halves]
                else:
                    self.leave([e for group in halves for e in group], Searched.UNTESTED)
            # a half that carries is split in the direction that shows it most (restore, or damage where others mask it)
            carriers = [max((t for t in tests[n::2] if t.carries), key=lambda t: t.strength, default=None) for n in range(2)]
        for group, carrier in zip(halves, carriers):
            if carrier is None:
                self.leave(group, Searched.CLEARED)
            elif len(group) == 1:
                group[0].searched = Searched.MEASURED
                self.kept.append(group[0])
            else:
                self.families.append(Family.of(group, carrier.direction, carrier))

    @staticmethod
    def leave(entries: Sequence[PartBlame], why: Searched) -> None:
        """Mark ``entries`` as not measured alone: cleared where nothing marked them before, untested always."""
        for entry in entries:
            if why is Searched.UNTESTED or entry.searched is Searched.MEASURED:
                entry.searched = why

    def run(self) -> list[PartBlame]:
        """Every family in turn, until none is left or the budget ends (the rest untested); the parts kept."""
        while self.families:
            if self.scorer.pace.spent():
                self.leave([e for family in self.families for e in family.entries], Searched.UNTESTED)
                self.families.clear()
                break
            self.step()
        return self.kept

    def stop(self, why: Searched) -> None:
        """End the search here: the parts of the families left are marked ``why``."""
        self.leave([e for family in self.families for e in family.entries], why)
        self.families.clear()
