"""What blame measures and finds, as records: a blamed row in one model (``RowState``), a part with its
figures (``PartBlame``), a hybrid of the group search (``GroupTest``), a step of the cumulative search
(``KeepStep``), the verdict that the damage is spread (``Spread``), and the whole report
(``BlameReport``), whose ``to_json`` is the results file ``longctx blame --out`` writes."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any, Mapping, Sequence

from scipy.stats import spearmanr

from pytest_longctx.backends.hybrids.pair import CANDIDATE, ORIGINAL, Cost, Part, non_finite_kind
from pytest_longctx.gate.evaluation import Evaluation

DISAGREE = 0.25  # restore and damage shares further apart than this are said to differ (parts interact)


class Direction(str, Enum):
    """How a hybrid takes parts from the other side: restoring them in the candidate (the share of the
    candidate's far drift that goes), or damaging the original with them (the share that comes)."""

    RESTORE = "restore"
    DAMAGE = "damage"

    @property
    def base(self) -> str:
        """The model a hybrid of this direction takes parts into."""
        return CANDIDATE if self is Direction.RESTORE else ORIGINAL

    @property
    def doing(self) -> str:
        return "restored in the candidate" if self is Direction.RESTORE else "damaging the original"

    @property
    def other(self) -> Direction:
        return Direction.DAMAGE if self is Direction.RESTORE else Direction.RESTORE


class Searched(str, Enum):
    """How the search reached a changed part."""

    MEASURED = "measured"  # alone, in both directions
    CLEARED = "cleared"  # in a group that moved nothing: not measured alone
    UNTESTED = "untested"  # the budget (or a stop) ended the search before it was measured alone both ways
    RANKED = "ranked"  # spread damage: placed by its estimate in the cumulative search, not measured alone


@dataclass(frozen=True)
class RowState:
    """A row's far drift (mean KL_K, nats), far excess (far minus near or control) and verdict in one model."""

    far: float | None
    excess: float | None
    threshold: float
    passed: bool  # the row's check as the gate judges it: drift and accuracy


def row_states(evaluation: Evaluation, rows: Sequence[str]) -> dict[str, RowState]:
    found, failing = {}, evaluation.failing_rows()
    for row in rows:
        drift = evaluation.drift.get(row)
        figures = (drift.far.kl, drift.difference, drift.threshold) if drift else (None, None, 0.0)
        found[row] = RowState(*figures, passed=row not in failing)
    return found


def passing(states: Mapping[str, RowState]) -> bool:
    """Every row of ``states`` passes."""
    return all(state.passed for state in states.values())


def share(removed: float | None, of: float | None) -> float | None:
    return None if removed is None or of is None or of <= 0 else removed / of


@dataclass
class PartBlame:
    """One part: its cost, each blamed row's figures with it restored and with it damaged, and its first-order
    estimate."""

    part: Part
    cost: Cost
    restore: dict[str, RowState] = field(default_factory=dict)  # empty: not measured alone
    damage: dict[str, RowState] = field(default_factory=dict)
    unchanged: bool = False  # the compression left it as it was: its hybrids are the candidate and the original
    searched: Searched = Searched.MEASURED
    estimate: float | None = None  # the estimated mean restore share (None: no gradient, or unchanged)

    def states(self, direction: Direction) -> dict[str, RowState]:
        """The blamed rows with the part alone taken in ``direction`` (empty: not measured)."""
        return self.restore if direction is Direction.RESTORE else self.damage

    @property
    def name(self) -> str:
        return self.part.name


@dataclass(frozen=True)
class NonFinite:
    """A part whose tensors hold NaN or inf on one side of the pair: ``tensors`` maps each to what it holds."""

    side: str  # ORIGINAL or CANDIDATE
    part: str
    tensors: dict[str, str]

    @property
    def kind(self) -> str:
        """``NaN``, ``inf`` or ``NaN and inf``: what the part's tensors hold in all."""
        held = " and ".join(self.tensors.values())
        return non_finite_kind("NaN" in held, "inf" in held)


@dataclass(frozen=True)
class GroupTest:
    """One hybrid of the group search: ``parts`` restored in the candidate (or damaging the original), the
    blamed rows with it, and whether the group moves their far drift enough to be split."""

    parts: list[str]
    direction: Direction
    states: dict[str, RowState]
    carries: bool
    shares: list[float | None]  # per blamed row; in a second round, of the far drift left with the fix set restored
    second: bool = False  # a second round's: the group restored with the first round's fix set
    estimate: float | None = None  # the sum of its parts' estimates (first order: restores add)

    @property
    def name(self) -> str:
        return group_name(self.parts)

    @property
    def strength(self) -> float:
        return max(abs(s or 0.0) for s in self.shares)


def group_name(parts: Sequence[str]) -> str:
    """A group of parts as the report and the progress line name it: ``layer.0..layer.5 (6 parts)``."""
    return parts[0] if len(parts) == 1 else f"{parts[0]}..{parts[-1]} ({len(parts)} parts)"


@dataclass(frozen=True)
class KeepStep:
    """One hybrid of the cumulative search: the candidate with its ``kept`` leading parts (by estimate)
    restored, and the blamed rows with it."""

    kept: int
    states: dict[str, RowState]
    passed: bool
    estimate: float | None  # the estimated restore share of those parts together


@dataclass(frozen=True)
class Spread:
    """Why the damage was judged spread: the first split's halves both carry, and the estimate needs
    ``needed`` of the ``parts`` changed ones for ``SPREAD_SHARE`` of its total."""

    parts: int
    needed: int
    halves: list[float | None]  # each first half's mean restore share, measured
    leading: list[tuple[str, float]]  # the parts with the largest estimated shares, and the shares


@dataclass(frozen=True)
class Correlation:
    """How far the first-order estimate ranks as the measurements do: Spearman's rho between the estimated
    and the measured restore shares over ``hybrids`` restore hybrids of the candidate (None: fewer than 3)."""

    hybrids: int
    rho: float | None


@dataclass
class BlameReport:
    """Everything ``longctx blame`` found; ``rows`` empty when the candidate passes. ``stopped`` says why the
    run ended before its end (a signal, an error) and ``not_reached`` what it left; the report is then partial."""

    reference: str
    model: str
    granularity: str
    passed: bool  # the candidate passes the gate: nothing to blame
    rows: list[str] = field(default_factory=list)  # the blamed rows, in the gate's order
    candidate: dict[str, RowState] = field(default_factory=dict)
    parts: list[PartBlame] = field(default_factory=list)  # ranked, the unchanged ones last
    fix_set: list[str] = field(default_factory=list)
    fix_steps: list[dict[str, RowState]] = field(default_factory=list)  # the rows after each part added or dropped
    fix_moves: list[str] = field(default_factory=list)  # '+ part (best of N)', then '- part' or 'without part: fails'
    fix_hybrids: int = 0  # the hybrids the fix set search scored (its first step reads the parts' own restore hybrids)
    fixed: bool = False  # every blamed row passes with the fix set
    fix_cost: Cost | None = None
    candidate_bytes: int = 0  # the changed parts as the candidate holds them: what a fix set's bytes compare with
    recipe: list[str] = field(default_factory=list)  # how to make the fix set with the backend's own tools
    recipe_tool: str = ""  # whose: "llama.cpp" (a llama-quantize command), "llm-compressor" (a recipe in YAML) or "transformers" (Python)
    verification: dict[str, Any] | None = None  # the fix set's gate run on the whole selection
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # the baseline against the candidate, as the gate warns of it
    config: str = ""  # the candidate is the original's weights under another config: the identity record's words
    hybrids: int = 0  # the models scored on the blamed rows' items (parts, fix set steps, the original once if needed)
    search: str = "exhaustive"  # how the parts measured alone were chosen: exhaustive, groups, or cumulative (spread damage)
    groups: list[GroupTest] = field(default_factory=list)  # the group search's hybrids, in the order scored
    keep_steps: list[KeepStep] = field(default_factory=list)  # the cumulative search's hybrids, in the order scored
    spread: Spread | None = None
    estimates_why_not: str = ""  # why there is no first-order estimate (no gradient); "" where there is one
    estimate_seconds: float = 0.0
    exhaustive: int = 0  # the hybrids measuring every changed part both ways would take (2 per part)
    reuse: dict[str, int] | None = None  # token-layers on the items: all hybrids' ("items"), skipped from the boundaries
    non_finite: list[NonFinite] = field(default_factory=list)  # parts holding NaN or inf: nothing was scored or blamed
    budget: int | None = None  # --budget: the most models scored on the blamed items
    seconds_per_model: float | None = None  # measured: the mean wall time of a model scored on the blamed items
    expected: int = 0  # the models the run was expected to score on the blamed items, said before it started
    stopped: str = ""  # why it ended early ("" where it ran to its end): the report is partial
    not_reached: list[str] = field(default_factory=list)  # what a stopped run left

    # ---------------------------------------------------------------- shares

    def shares(self, states: Mapping[str, RowState], direction: Direction, row: str, figure: str = "far",
               against: Mapping[str, RowState] | None = None) -> float | None:
        """The share of the candidate's far drift (or excess; ``against``: another hybrid's) that a hybrid's
        ``states`` remove (restore) or cause (damage); None where the row was not measured."""
        before = getattr((against or self.candidate)[row], figure)
        after = getattr(states[row], figure) if row in states else None
        if direction is Direction.DAMAGE:
            return share(after, before)
        return share(None if before is None or after is None else before - after, before)

    def restore_share(self, part: PartBlame, row: str, figure: str = "far") -> float | None:
        return self.shares(part.restore, Direction.RESTORE, row, figure)

    def damage_share(self, part: PartBlame, row: str, figure: str = "far") -> float | None:
        return self.shares(part.damage, Direction.DAMAGE, row, figure)

    def mean_share(self, states: Mapping[str, RowState], direction: Direction = Direction.RESTORE) -> float | None:
        """A hybrid's share over the blamed rows, their mean (None: none measured)."""
        found = [s for s in (self.shares(states, direction, row) for row in self.rows) if s is not None]
        return sum(found) / len(found) if found else None

    def score(self, part: PartBlame) -> float:
        """The part's rank: its mean restore share of far drift over the blamed rows."""
        return self.mean_share(part.restore) or 0.0

    def prior(self, part: PartBlame) -> float:
        """How much the part may matter to the fix set: the larger of its mean restore and damage shares."""
        return max(self.score(part), self.mean_share(part.damage, Direction.DAMAGE) or 0.0)

    def gain(self, states: Mapping[str, RowState]) -> tuple[int, float]:
        """How good a hybrid is for the fix set: its blamed rows that pass, then its mean restore share of far drift."""
        return sum(states[row].passed for row in self.rows), self.mean_share(states) or 0.0

    def differ(self, part: PartBlame, row: str) -> bool:
        """Restore and damage tell different stories: the part interacts with the others."""
        restored, damaged = self.restore_share(part, row), self.damage_share(part, row)
        return restored is not None and damaged is not None and abs(restored - damaged) > DISAGREE

    def interacts(self, part: PartBlame, row: str) -> bool:
        """Restored alone the part makes the row's far drift worse, yet damaging the original with it causes some:
        its damage shows only beside the others'."""
        restored, damaged = self.restore_share(part, row), self.damage_share(part, row)
        return restored is not None and damaged is not None and restored < 0 < damaged

    @property
    def ranked(self) -> list[PartBlame]:
        """The changed parts, in their rank."""
        return [p for p in self.parts if not p.unchanged]

    @property
    def unchanged(self) -> list[PartBlame]:
        """The parts the compression left as they were: nothing to rank."""
        return [p for p in self.parts if p.unchanged]

    @property
    def partial(self) -> bool:
        return bool(self.stopped)

    # ---------------------------------------------------------------- the results file

    def to_json(self) -> dict[str, Any]:
        def state(found: Mapping[str, RowState]) -> dict[str, Any]:
            return {row: asdict(s) for row, s in found.items()}

        def part(n: int | None, p: PartBlame) -> dict[str, Any]:
            return {"part": p.name, "rank": n, "score": self.score(p), "estimate": p.estimate, "cost": asdict(p.cost),
                    "unchanged": p.unchanged, "searched": p.searched.value, "restore": state(p.restore),
                    "damage": state(p.damage),
                    "shares": {row: {"restore_far": self.restore_share(p, row),
                                     "restore_excess": self.restore_share(p, row, "excess"),
                                     "damage_far": self.damage_share(p, row),
                                     "damage_excess": self.damage_share(p, row, "excess"),
                                     "differ": self.differ(p, row), "interacts": self.interacts(p, row)} for row in self.rows}}

        return {
            "reference": self.reference, "model": self.model, "granularity": self.granularity, "passed": self.passed,
            "partial": self.partial, "stopped": self.stopped, "not_reached": self.not_reached,
            "rows": self.rows, "candidate": state(self.candidate), "notes": self.notes, "warnings": self.warnings, "config": self.config,
            "parts": [part(n + 1, p) for n, p in enumerate(self.ranked)] + [part(None, p) for p in self.unchanged],
            "fix_set": {"parts": self.fix_set, "fixed": self.fixed, "steps": [state(s) for s in self.fix_steps],
                        "moves": self.fix_moves, "hybrids": self.fix_hybrids,
                        "cost": asdict(self.fix_cost) if self.fix_cost else None, "candidate_bytes": self.candidate_bytes,
                        "recipe": self.recipe, "recipe_tool": self.recipe_tool},
            "verification": self.verification, "hybrids": self.hybrids, "reuse": self.reuse,
            "non_finite": [asdict(n) for n in self.non_finite],
            "estimate": {"why_not": self.estimates_why_not, "seconds": self.estimate_seconds,
                         "correlation": asdict(self.correlation()) if not self.estimates_why_not else None},
            "cost": {"budget": self.budget, "expected": self.expected, "seconds_per_model": self.seconds_per_model},
            "search": {"mode": self.search, "exhaustive": self.exhaustive,
                       "spread": asdict(self.spread) if self.spread else None,
                       "groups": [{"parts": g.parts, "direction": g.direction.value, "carries": g.carries, "shares": g.shares,
                                   "second_round": g.second, "estimate": g.estimate,
                                   "states": state(g.states)} for g in self.groups],
                       "keep_steps": [{"kept": s.kept, "passed": s.passed, "estimate": s.estimate, "states": state(s.states)}
                                      for s in self.keep_steps]},
        }

    def correlation(self) -> Correlation:
        """Spearman's rho of the estimate against the measured restore share, over every restore hybrid of the
        candidate scored (parts alone, groups of the first round, the cumulative search's steps)."""
        pairs = [(p.estimate, self.mean_share(p.restore)) for p in self.ranked if p.restore]
        pairs += [(g.estimate, self.mean_share(g.states)) for g in self.groups
                  if g.direction is Direction.RESTORE and not g.second and len(g.parts) > 1]
        pairs += [(s.estimate, self.mean_share(s.states)) for s in self.keep_steps]
        known = [(e, m) for e, m in pairs if e is not None and m is not None]
        if len(known) < 3 or len({e for e, _ in known}) < 2 or len({m for _, m in known}) < 2:
            return Correlation(len(known), None)
        rho = spearmanr([e for e, _ in known], [m for _, m in known]).statistic
        return Correlation(len(known), float(rho))
