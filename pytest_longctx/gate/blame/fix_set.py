"""Blame's fix set (docs/blame.md#the-fix-set): which parts to keep from the original so that every
blamed row passes, searched, not sorted, and then run through the gate on the whole selection.

The greedy search scores, at each step, the candidate with the parts kept so far plus each part still in
question (the marginal gain of adding it) and keeps the best, until every blamed row passes (its far drift
within its threshold and its other checks, accuracy among them), the parts in question run out or the
search's budget of hybrids ends. The parts in question are the changed ones with a positive restore *or*
damage share: a part whose damage the others' cancels restores nothing alone and is only seen with them.
Once the rows pass, each part kept before the last is tried without (the others may have made it
needless). Where the group search's parts do not make the rows pass, the parts it cleared are searched
again from the fix set's hybrid (a second round), and the fix set searched again with what it finds."""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from pytest_longctx.backends.hybrids.pair import CANDIDATE, Part
from pytest_longctx.data.load import Dataset
from pytest_longctx.gate.blame.groups import GroupSearch
from pytest_longctx.gate.blame.records import BlameReport, Direction, PartBlame, RowState, Searched, passing
from pytest_longctx.gate.blame.scorer import Scorer
from pytest_longctx.gate.losses import losses
from pytest_longctx.options.table import CARRY

FIX_WIDTH = 8  # the fix set search's candidates per step (after the first): the leading parts not kept, by their larger share


def measure(report: BlameReport, scorer: Scorer, entries: Sequence[PartBlame]) -> None:
    """Each part of ``entries`` alone, restored and damaging, where not measured yet; parts left when the budget
    ends are marked untested."""
    plan = [(direction, entry) for direction in Direction for entry in entries if not entry.states(direction)]
    for n, (direction, entry) in enumerate(plan):
        if scorer.pace.spent():
            GroupSearch.leave([left for _, left in plan[n:]], Searched.UNTESTED)
            return
        label = f"hybrid {scorer.runs + 1}, part {n + 1}/{len(plan)}: {direction.value} {entry.name}"
        entry.states(direction).update(scorer(direction.base, [entry.part], label))


class FixBudget:
    """What the fix set search may spend: ``--fix-budget``, or what ``--budget`` leaves where that is less."""

    def __init__(self, fix_budget: int, scorer: Scorer):
        left = scorer.pace.left()
        self.hybrids, self.flag = (fix_budget, "--fix-budget") if fix_budget <= left else (int(max(0, left)), "--budget")


def fix(report: BlameReport, scorer: Scorer, fix_budget: int, changed: Sequence[PartBlame], every_part: bool) -> list[Part]:
    """The fix set by the greedy search, with a second round of the group search where it does not pass; the notes
    that say why it does not; returns the parts kept."""
    budget = FixBudget(fix_budget, scorer)
    kept, left = greedy(report, scorer, budget)
    rest = [p for p in changed if p.searched is not Searched.MEASURED]  # in the model's order
    if report.search == "groups" and not report.fixed and rest and not scorer.pace.spent():
        base = [p for p in report.parts if p.part in kept]
        more = GroupSearch(report, scorer, rest, base, report.fix_steps[-1] if report.fix_steps else report.candidate).run()
        if more:
            measure(report, scorer, more)
            report.fix_steps, report.fix_moves = [], []
            budget = FixBudget(fix_budget, scorer)
            kept, left = greedy(report, scorer, budget)
    untested = any(p.searched is Searched.UNTESTED for p in report.parts)
    unmeasured = [*(["in parts the budget left unmeasured (--budget)"] if untested else []),
                  *([] if every_part else ["in parts not measured (--parts)"])]
    elsewhere = " or ".join([*unmeasured, "in how the parts interact"])
    if not report.fix_set:
        report.notes.append(f"no part measured restores or causes any of the far drift: the damage lies {elsewhere}")
    elif not report.fixed and left:
        report.notes.append(f"the fix set search spent its budget of {budget.hybrids} hybrids with a blamed row still failing "
                            f"({len(report.fix_set)} parts kept, {left} in question not tried with them): a larger budget "
                            f"({budget.flag}) may find more")
    elif not report.fixed:
        measured = sum(bool(p.restore or p.damage) for p in report.parts)
        report.notes.append(f"with every part that restores or causes any far drift kept ({len(report.fix_set)} of "
                            f"{measured} measured), a blamed row still fails: the rest of the damage lies {elsewhere}")
    cleared = sum(p.searched is Searched.CLEARED for p in report.parts)
    if not report.fixed and cleared:
        report.notes.append(f"the group search cleared {cleared} parts in groups that moved the far drift by less than "
                            f"{CARRY:.0%}: where parts' damage cancels or masks within a group, one of them may matter; "
                            "--search exhaustive measures every part alone")
    return kept


def greedy(report: BlameReport, scorer: Scorer, budget: FixBudget) -> tuple[list[Part], int]:
    """The greedy fix set (the module's docstring); the first step reads the parts' own restore hybrids, scored
    already. Sets the fix set, the hybrids it took and whether it passes; returns the parts kept and how many parts
    in question were left untried."""
    # in question: changed parts that restore or cause some far drift, the one that matters most first
    pool = sorted((p for p in report.parts if not p.unchanged and p.restore and report.prior(p) > 0), key=lambda p: -report.prior(p))
    kept: list[PartBlame] = []
    states: Mapping[str, RowState] = report.candidate
    spent = 0

    def with_parts(parts: list[Part], label: str) -> dict[str, RowState]:
        """The candidate with ``parts`` restored; ``spent`` counts it where it was scored (not read again)."""
        nonlocal spent
        runs = scorer.runs
        found = scorer(CANDIDATE, parts, label)
        spent += scorer.runs - runs
        return found

    while pool and not passing(states) and (not kept or spent < budget.hybrids):
        if kept:
            tried = pool[:min(FIX_WIDTH, budget.hybrids - spent)]
            scored = []
            for n, entry in enumerate(tried):
                label = f"hybrid {scorer.runs + 1}, fix set step {len(kept) + 1}: + {entry.name} ({n + 1}/{len(tried)})"
                scored.append((entry, with_parts([p.part for p in kept] + [entry.part], label)))
                if passing(scored[-1][1]):
                    break  # nothing beats a pass: the search stops here
        else:
            scored = [(entry, entry.restore) for entry in pool]  # the parts' own restore hybrids
        best, states = max(scored, key=lambda pair: report.gain(pair[1]))  # the first of equals
        kept.append(best)
        pool.remove(best)
        report.fix_steps.append(dict(states))
        report.fix_moves.append(f"+ {best.name} (best of {len(scored)})")
    if passing(states):
        for entry in list(kept[:-1]):  # the last one made them pass; an earlier one may be needless with it
            if spent >= budget.hybrids:
                report.notes.append(f"the fix set search spent its budget of {budget.hybrids} hybrids before trying each part "
                                    f"without the others: it may hold a part they make needless ({budget.flag})")
                break
            rest = [p.part for p in kept if p is not entry]
            trial = with_parts(rest, f"hybrid {scorer.runs + 1}, fix set: without {entry.name}")
            if passing(trial):
                kept.remove(entry)
                report.fix_steps.append(trial)
            report.fix_moves.append(f"- {entry.name}" if passing(trial) else f"without {entry.name}: fails")
    report.fix_set, report.fix_hybrids, report.fixed = [p.name for p in kept], spent, passing(states)
    return [p.part for p in kept], 0 if passing(states) else len(pool)


def verify(kept: Sequence[Part], scorer: Scorer, dataset: Dataset) -> dict[str, Any]:
    """The candidate with ``kept`` from the original (the fix set's hybrid) through the gate on the whole selection
    (where it is the blamed items, as the fix set's search scored that hybrid on them)."""
    same = scorer.covers(dataset)
    baseline_sets = scorer.items_sets if same else scorer.baseline_sets(dataset)
    scores, sets, evaluation = scorer.gated(CANDIDATE, kept, "fix set", scorer.items if same else dataset,
                                            "blame: verifying the fix set", baseline_sets, reuse=same and scorer.reuse)
    items, _ = losses(scores, scorer.baseline, sets, baseline_sets, scorer.thresholds, dataset)
    failing = [v.message() for v in evaluation.verdicts if v.applicable and not v.passed]
    failing += [f"{i.key}: mean loss {i.loss:.3f} nats, needs <= {i.threshold:.3f}" for i in items if not i.passed]
    return {"passed": not failing, "failing": failing, "checks": len([v for v in evaluation.verdicts if v.applicable])}
