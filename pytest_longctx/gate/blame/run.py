"""One blame run, start to end (docs/blame.md): the checks, the candidate judged, the blamed rows and their
items, the first-order estimate, the search, the fix set and its verification; its cost said before it starts,
its report handed on after each model scored, and marked partial where it stops early."""
from __future__ import annotations

import math
import sys
import time
from typing import Any, Callable, Sequence

from pytest_longctx.backends.base import describe
from pytest_longctx.backends.hybrids.pair import CANDIDATE, ORIGINAL, Pair, Part, RecordsBoundaries, can_record, select_parts
from pytest_longctx.data.load import Dataset
from pytest_longctx.errors import LongctxError
from pytest_longctx.gate.blame.checks import (
    check_baseline_tokenizer,
    check_made_by,
    check_tokenizers,
    choose_rows,
    non_finite_parts,
    rows_items,
)
from pytest_longctx.gate.blame.cumulative import keep_search, steps_for
from pytest_longctx.gate.blame.estimates import estimate, ordered, spread
from pytest_longctx.gate.blame.fix_set import fix, measure
from pytest_longctx.gate.blame.fix_set import verify as verify_fix_set
from pytest_longctx.gate.blame.groups import GroupSearch
from pytest_longctx.gate.blame.records import BlameReport, PartBlame, Searched, row_states
from pytest_longctx.gate.blame.scorer import Pace, Reading, Scorer
from pytest_longctx.gate.thresholds import Thresholds
from pytest_longctx.options.table import BUDGET, FIX_BUDGET, GROUPS_FROM
from pytest_longctx.progress import clock_text
from pytest_longctx.scoring.fingerprint import tokenizer_fingerprint
from pytest_longctx.scoring.identity import compare_judged, config_change
from pytest_longctx.scoring.pipeline import needed_fingerprints, score_sets
from pytest_longctx.scoring.scores_file import ScoresFile, check_fits

REUSE_FROM = 4  # changed parts from which the two scorings that record the layer boundaries pay for themselves
RUNNING = "still running: the results file is written after each model scored"


def expected_models(changed: int, unchanged: bool, search: str, records: bool, spread_damage: bool = False) -> int:
    """The models a run over ``changed`` parts is expected to score on the blamed items: the two recordings of
    the layer boundaries (``records``); the search: every part both ways (exhaustive); the two first halves
    and the bisection's steps (spread damage); or, for damage in about two parts, the first halves, three
    hybrids for each further level of halving and each part found measured both ways; the original once for
    the unchanged parts where it is not recorded; and a few fix set steps. An expectation, said before the
    run: the budget bounds it."""
    recorded = 2 if records else 0
    if search == "exhaustive":
        return recorded + 2 * changed + (1 if unchanged and not records else 0) + 2
    if spread_damage:
        return recorded + 2 + steps_for(changed)
    levels = max(0, math.ceil(math.log2(max(changed, 1))) - 1)
    return recorded + 2 + 3 * levels + 4 + (1 if unchanged and not records else 0) + 2


def blame_pair(pair: Pair, dataset: Dataset, baseline: ScoresFile | None, *, thresholds: Thresholds | None = None,
               granularity: str = "layer", parts: Sequence[str] | None = None, rows: Sequence[str] | None = None,
               verify: bool = True, progress: bool = True, beyond_context: bool = False, cache_dir: str | None = "off",
               fix_budget: int = FIX_BUDGET, reuse: bool | None = None, reuse_every: int = 1, search: str = "groups",
               budget: int | None = BUDGET, report_to: Callable[[BlameReport], None] | None = None) -> BlameReport:
    """Blame the parts of the pair's candidate for its failing rows against the original's ``baseline`` (None:
    the original is scored on ``dataset`` first), reading the models as ``Reading`` says (the candidate's
    answers from the score cache in ``cache_dir`` where a gate run left them). ``search`` chooses how parts are
    searched (``SEARCHES``; "groups" with fewer than ``GROUPS_FROM`` changed parts measures every one),
    ``budget`` (None: no end) caps the models scored on the blamed items, and the fix set search scores at most
    ``fix_budget`` hybrids of them. ``reuse`` (None: with ``REUSE_FROM`` changed parts or more): where the pair
    can (transformers), each side's residual stream is kept at every ``reuse_every``-th layer boundary on the
    blamed items, and each hybrid on them starts from the boundary below its first changed part.
    ``report_to`` is handed the report before each model scored on the blamed items and at the end (where the
    run stops early too, marked partial, before the error goes on)."""
    thresholds = thresholds or Thresholds()
    reading = Reading(beyond_context, cache_dir, progress)
    names = pair.names
    chosen = select_parts(pair.parts(granularity), parts, granularity)
    check_tokenizers(pair)
    broken = non_finite_parts(pair, granularity)
    if broken:  # no hybrid of such a model reads anything but NaN: its parts' shares would be figures of nothing
        return BlameReport(names[0], names[1], granularity, passed=False, non_finite=broken)
    baseline, where, original = _baseline(pair, dataset, baseline, reading)
    report = BlameReport(names[0], names[1], granularity, passed=False, budget=budget)
    hand_on = (lambda: report_to(report)) if report_to else (lambda: None)
    scorer = Scorer(pair, baseline, thresholds, reading, Pace(budget), before=hand_on)
    started = time.monotonic()
    candidate, _, evaluation = scorer.gated(CANDIDATE, [], names[1], dataset, f"blame: the candidate {names[1]}")
    candidate_seconds = time.monotonic() - started
    # the one comparison of what was judged (scoring/identity.py), as the gate makes it: the baseline's warnings, and
    # the candidate as the original's own weights under another config
    report.warnings = compare_judged(baseline.meta, candidate.meta).warnings
    report.config = config_change(original, candidate.meta, "original")
    if not evaluation.failing_rows():
        report.passed = True
        return report
    report.rows = choose_rows(evaluation, rows, where)
    report.candidate = row_states(evaluation, report.rows)
    items = rows_items(dataset, evaluation, report.rows)
    scorer.blamed(report.rows, items)
    report.parts = [PartBlame(part, pair.cost([part]), unchanged=pair.unchanged(part)) for part in chosen]
    changed = [entry for entry in report.parts if not entry.unchanged]
    if report.config and not changed:  # nothing to restore or damage: the config is what changed
        report.notes.append(f"no part of the candidate differs from the original's: it is {report.config}; blame takes "
                            "weights apart, not a config: gate the original under the candidate's config, or give the "
                            "candidate the original's config")
        report.hybrids = scorer.runs
        return report
    report.exhaustive = 2 * len(changed)
    report.search = "groups" if search == "groups" and len(changed) >= GROUPS_FROM else "exhaustive"
    records = (len(changed) >= REUSE_FROM if reuse is None else reuse) and can_record(pair)
    report.expected = scorer.pace.expected = expected_models(len(changed), len(changed) < len(report.parts), report.search, records)
    if progress:
        print(_cost_line(report, changed, candidate_seconds * len(list(items.items())) / max(1, len(list(dataset.items())))),
              file=sys.stderr, flush=True)
    stage = Stage(report)
    report.stopped = RUNNING
    try:
        stage("recording the layer boundaries")
        original = scorer.record(reuse_every) if records else None
        stage("the first-order estimate")
        estimate(report, pair, evaluation, items, baseline, changed, progress)
        kept = _search(report, scorer, changed, stage)
        stage("the parts the compression left unchanged")
        _unchanged(report, scorer, original)
        report.notes += _budget_notes(report)
        # measured parts by their measured score, then the rest by their estimate, the unchanged apart
        report.parts.sort(key=lambda p: (p.unchanged, not p.restore, -(report.score(p) if p.restore else (p.estimate or 0.0))))
        stage("the fix set search")
        if report.search != "cumulative":
            kept = fix(report, scorer, fix_budget, changed, every_part=parts is None)
        report.fix_cost = pair.cost(kept)
        report.candidate_bytes = pair.cost([e.part for e in changed]).candidate_bytes
        report.recipe = pair.recipe(kept) if kept else []
        report.recipe_tool = pair.recipe_tool if report.recipe else ""
        if verify and report.fix_set:
            stage("the fix set's verification on the whole selection")
            report.verification = verify_fix_set(kept, scorer, dataset)
        report.stopped = ""
    except BaseException as error:
        report.stopped = "stopped by the user (Ctrl-C or SIGTERM)" if isinstance(error, KeyboardInterrupt) else (
            f"stopped by an error: {type(error).__name__}: {str(error).strip().splitlines()[0] if str(error).strip() else ''}")
        report.not_reached = stage.left(changed)
        raise
    finally:
        report.hybrids = scorer.runs
        report.seconds_per_model = scorer.pace.per_model
        if scorer.reuse and isinstance(pair, RecordsBoundaries):  # it recorded the sides' boundaries
            figures = pair.reuse_figures()
            report.reuse = {**figures, "every": reuse_every, "items": scorer.runs * figures["scoring"]}
        hand_on()
    return report


class Stage:
    """Where the run is, so that a run stopped early says what it did not reach."""

    ORDER = ("recording the layer boundaries", "the first-order estimate", "the search",
             "the parts the compression left unchanged", "the fix set search",
             "the fix set's verification on the whole selection")

    def __init__(self, report: BlameReport):
        self.report, self.now = report, ""

    def __call__(self, name: str) -> None:
        self.now = name

    def left(self, changed: Sequence[PartBlame]) -> list[str]:
        """The stage the run stopped in, the stages after it, and the changed parts it did not measure."""
        at = self.ORDER.index(self.now) if self.now in self.ORDER else 0
        found = [f"{name} (stopped in it)" if n == 0 else name for n, name in enumerate(self.ORDER[at:])]
        unmeasured = [e.name for e in changed if not (e.restore and e.damage) and e.searched is not Searched.CLEARED]
        if unmeasured and self.report.search != "cumulative":
            found.append(f"{len(unmeasured)} changed parts not measured alone both ways: {', '.join(unmeasured)}")
        return found


def _baseline(pair: Pair, dataset: Dataset, baseline: ScoresFile | None,
              reading: Reading) -> tuple[ScoresFile, str, dict[str, Any]]:
    """The original's baseline, checked against the pair and the data (or scored now), where it comes from, and the
    original as its backend loaded it (``describe``: what the identity record compares)."""
    names, tokenizer = pair.names, pair.tokenizer
    with pair.hybrid(ORIGINAL, [], names[0]) as backend:
        original = describe(backend)
        if baseline is None:
            scored = score_sets(backend, tokenizer, dataset, progress=reading.progress, cache=reading.cache(backend, []),
                                beyond_context=reading.beyond_context).as_baseline()
            return scored, f"the original {names[0]}, scored now", original
        if not baseline.has_drift:
            raise LongctxError(f"--baseline {baseline.path}: holds no drift blocks (the most likely tokens at every "
                               "read, written since scores file version 2): re-make it from the original")
        check_baseline_tokenizer(baseline, pair)
        check_fits(baseline, baseline.mode, tokenizer_fingerprint(tokenizer, baseline.mode),
                   needed_fingerprints(dataset), what="--baseline")
        check_made_by(baseline, original, names[0])
    return baseline, f"baseline {baseline.path}", original


def _cost_line(report: BlameReport, changed: Sequence[PartBlame], seconds: float) -> str:
    """What the run is expected to cost, said before it starts: models, and their time where the candidate's
    scoring measured it (a score cache that answered measured nothing)."""
    at_most = f", at most {report.budget} (--budget)" if report.budget is not None else " (no --budget)"
    each = (f", about {seconds:.0f} s each (the candidate's scoring of these items): about "
            f"{clock_text(seconds * min(report.expected, report.budget or report.expected))}"
            if seconds >= 1.0 else ": the time per model is shown once the first is scored")
    return (f"blame: {len(report.rows)} blamed rows, {len(changed)} changed parts; {report.search} search expected to "
            f"score about {report.expected} models on their items{at_most}{each}")


def _search(report: BlameReport, scorer: Scorer, changed: Sequence[PartBlame], stage: Stage) -> list[Part]:
    """The parts measured alone, by the search the report names; spread damage (seen at the first split of
    the group search) turns it cumulative, which ends with the fix set. Returns the cumulative search's keep
    set (empty for the others: the fix set search follows)."""
    stage("the search")
    if report.search == "exhaustive":
        measure(report, scorer, ordered(changed))
        return []
    search = GroupSearch(report, scorer, changed)  # in the model's order: a half is a run of layers
    search.step()  # the first split: both halves, both ways
    found = spread(report, changed, report.groups)
    if found is not None:
        report.search, report.spread = "cumulative", found
        search.stop(Searched.RANKED)
        report.expected = scorer.pace.expected = scorer.runs + steps_for(len(changed))
        return [e.part for e in keep_search(report, scorer, changed)]
    measure(report, scorer, search.run())
    return []


def _unchanged(report: BlameReport, scorer: Scorer, original: dict[str, Any] | None) -> None:
    """Restoring an unchanged part reads as the candidate, damaging with it as the original (recorded, or
    scored once where the budget allows)."""
    if not report.unchanged or report.search == "cumulative" or (original is None and scorer.pace.spent()):
        return
    original = original or scorer(ORIGINAL, [], "the original, for the parts the compression left unchanged")
    for entry in report.unchanged:
        entry.restore.update(report.candidate)
        entry.damage.update(original)


def _budget_notes(report: BlameReport) -> list[str]:
    """What the budget left unmeasured, as the table marks it: the parts measured in neither direction (no figures,
    not in the fix set), and those measured in one only (no share in the other)."""
    untested = [p for p in report.parts if p.searched is Searched.UNTESTED]
    ended = f"the budget of {report.budget} models (--budget) ended before"
    notes = []
    unmeasured = [p.name for p in untested if not p.restore and not p.damage]
    if unmeasured:
        notes.append(f"{ended} {len(unmeasured)} changed part(s) were measured: {', '.join(unmeasured)}; they are in "
                     "neither the ranking's figures nor the fix set")
    for measured in (p for p in untested if bool(p.restore) != bool(p.damage)):
        did = "restored in the candidate" if measured.restore else "damaging the original"
        missing = "damage" if measured.restore else "restore"
        outside = "" if measured.restore else ", and it is not in the fix set"  # the fix set's first step reads restores
        notes.append(f"{ended} {measured.name} was measured both ways: the table shows its figures {did} alone, no "
                     f"{missing} share{outside}")
    return notes
