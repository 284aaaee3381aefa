"""Blame's search where the damage is spread (docs/blame.md#spread-damage): no few parts carry it, so
halving finds that every half carries and measuring parts alone costs more than the whole model's worth.
The changed parts are ordered by their estimated restore share, and the smallest leading set of them that
makes every blamed row pass is searched by bisection, each set verified by its hybrid: keeping none is the
candidate (it fails), keeping all is the original (it passes), so ``ceil(log2(n))`` hybrids find the
boundary between a failing and a passing set where passing grows with the set."""
from __future__ import annotations

from typing import Sequence

from pytest_longctx.backends.hybrids.pair import CANDIDATE
from pytest_longctx.gate.blame.estimates import group_estimate, ordered
from pytest_longctx.gate.blame.records import BlameReport, KeepStep, PartBlame, Searched, passing
from pytest_longctx.gate.blame.scorer import Scorer


def steps_for(parts: int) -> int:
    """The hybrids the bisection over ``parts`` ranked parts scores at most: ceil(log2(parts))."""
    return max(0, parts - 1).bit_length()


def keep_search(report: BlameReport, scorer: Scorer, changed: Sequence[PartBlame]) -> list[PartBlame]:
    """The smallest passing leading set found (the module's docstring), as the fix set: ``keep_steps`` holds each
    hybrid, ``fix_set`` the parts, ``fixed`` whether a tested set passes; empty where none short of every changed
    part passed, or the budget ended before one did."""
    ranked = ordered(changed)
    for entry in ranked:
        entry.searched = Searched.RANKED
    failing, passes = 0, len(ranked)  # keeping none fails (the candidate); keeping every changed part is the original
    best: KeepStep | None = None
    while passes - failing > 1 and not scorer.pace.spent():
        middle = (failing + passes) // 2
        kept = ranked[:middle]
        states = scorer(CANDIDATE, [e.part for e in kept],
                        f"hybrid {scorer.runs + 1}, cumulative search: keep the {middle} of {len(ranked)} parts with the "
                        f"largest estimates ({failing} fail, {passes} pass)")
        step = KeepStep(middle, states, passing(states), group_estimate(kept))
        report.keep_steps.append(step)
        if step.passed:
            passes, best = middle, step
        else:
            failing = middle
    report.fix_hybrids = len(report.keep_steps)
    report.fix_moves = [f"keep {s.kept}: {'passes' if s.passed else 'fails'}" for s in report.keep_steps]
    if best is None:
        done = passes - failing <= 1
        largest = max((s.kept for s in report.keep_steps), default=0)
        report.notes.append(
            f"the damage is spread and no keep set short of all {len(ranked)} changed parts passes (the largest "
            f"tried keeps {largest}): only the original passes; a lighter compression of the whole model is the fix"
            if done else
            f"the budget of {report.budget} models (--budget) ended before the cumulative search found a passing keep "
            f"set (between {failing} and {passes} of {len(ranked)} parts): a larger budget may find one")
        return []
    report.fix_steps = [best.states]
    report.fix_set, report.fixed = [e.name for e in ranked[:best.kept]], True
    if passes - failing > 1:
        report.notes.append(f"the budget of {report.budget} models (--budget) ended the cumulative search between {failing} "
                            f"and {passes} parts kept: a smaller passing keep set may exist")
    return ranked[:best.kept]
