"""A ladder's reports (``--longctx-model`` given several times): each candidate's rung made from its finished run
(gate/ladder.py's figures), and the one table of them, ordered by size on disk with the Pareto frontier marked and the
smallest passing candidate named, in the terminal summary, the markdown summary (and a CI step summary), the HTML
report with its picture (size against far drift), the junit properties and the results JSON (``ladder``,
``smallest_passing``). docs/reports.md#the-ladder says the format."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pytest_longctx.backends.aliases import resolve_model
from pytest_longctx.backends.weights_size import weights_bytes
from pytest_longctx.errors import LongctxError, without_credentials
from pytest_longctx.gate.comparison import Comparison, from_gate_run
from pytest_longctx.gate.ladder import Choice, Rung, by_size, frontier, noise_floor, smallest_passing
from pytest_longctx.gate.ladder_run import LadderRun
from pytest_longctx.gate.model_run import GateRun
from pytest_longctx.gate.outcome import FAIL, Happened
from pytest_longctx.numbers import delta, number
from pytest_longctx.reports import plots
from pytest_longctx.reports.finish import Finished, write_reports, write_results
from pytest_longctx.reports.format import html_text as escape
from pytest_longctx.reports.format import markdown_text, size_text, table, visible
from pytest_longctx.reports.html import html_figure, html_page, html_section, html_table
from pytest_longctx.reports.junit import suite_properties
from pytest_longctx.reports.markdown import md_table
from pytest_longctx.reports.results_json import results_json
from pytest_longctx.reports.tables import Section
from pytest_longctx.reports.text import drift_check, interval_text
from pytest_longctx.scoring.identity import Judged

LADDER_HEADERS = ["candidate", "compressed", "size", "far KL", "near KL", "control KL", "far - near/control", "damage",
                  "verdict", "items", "tokens", "seconds", "Pareto"]


@dataclass
class LadderReport:
    """What a finished ladder shows: its rungs by size, the frontier, the choice, and each candidate's comparison."""

    rungs: list[Rung]  # smallest first
    frontier: set[str]
    choice: Choice
    comparisons: dict[str, Comparison]
    against: str  # the baseline, in words
    notes: list[str] = field(default_factory=list)  # the noise floor, a run stopped early
    warnings: list[str] = field(default_factory=list)
    happened: Happened = field(default_factory=Happened)  # what the plugin saw of the run (gate/outcome.py)

    @property
    def verdict(self) -> str:
        """FAIL where any candidate fails, as the run does; PASS only where every candidate's selected checks were
        judged and passed; else what happened instead (gate/outcome.py)."""
        return self.happened.word(any(r.verdict == FAIL for r in self.rungs))

    @property
    def headline(self) -> str:
        """The one line naming the smallest candidate that passes, or why there is none."""
        if self.choice.candidate is not None:
            return f"smallest passing: {self.choice.reason}"
        return f"no candidate to ship: {self.choice.reason}"

    def ladder_table(self) -> Section:
        lines = []
        for r in self.rungs:
            excess = f"{delta(r.excess, 0.0)} {interval_text(r)} vs {r.against}".strip() if r.excess is not None else ""
            lines.append([r.candidate, r.what or ("the original" if r.original else "-"),
                          size_text(r.bytes) if r.bytes is not None else "unknown", number(r.far), number(r.near),
                          number(r.control), excess, r.damage or "-", r.verdict, str(r.items), f"{r.tokens:,}",
                          f"{r.seconds:.1f}", "*" if r.candidate in self.frontier else ""])
        return Section(f"Ladder: {len(self.rungs)} candidates against {self.against}, smallest first (far drift: of each "
                       "one's row that drifted most; Pareto *: no smaller candidate drifts less)", LADDER_HEADERS, lines)

    def rows_table(self) -> Section:
        """Each headline row, each candidate's value and its change from the baseline on the items it read."""
        names = list(dict.fromkeys(name for r in self.rungs for name in r.rows))
        lines = []
        for name in names:
            cells = []
            for r in self.rungs:
                evaluation = self.comparisons[r.candidate].evaluation
                model = r.rows.get(name)
                cells.append(f"{number(model)} ({delta(model, evaluation.baseline_rows.get(name))})" if name in r.rows else "")
            lines.append([name, *cells])
        return Section("Headline rows (each candidate's value, and its change from the baseline on the items it read)",
                       ["row", *(r.candidate for r in self.rungs)], lines)

    def why_lines(self) -> list[str]:
        """What kept a candidate from being judged, and each failing candidate's failing checks."""
        lines = [f"{r.candidate}: {r.why}" for r in self.rungs if r.why]
        for r in self.rungs:
            comparison = self.comparisons[r.candidate]
            failing = [v.message() for v in comparison.failing]
            if comparison.failing_items:
                failing.append(f"{len(comparison.failing_items)} item(s) lost more than allowed")
            lines += [f"{r.candidate}: {line}" for line in failing]
        return lines

    def to_json(self, runs: dict[str, GateRun]) -> dict[str, Any]:
        return {"ladder": [r.to_json(r.candidate in self.frontier) for r in self.rungs],
                "smallest_passing": self.choice.to_json(), "smallest_passing_reason": self.choice.reason,
                "outcome": self.verdict, "not_judged": self.happened.incomplete(),
                "against": self.against, "notes": self.notes, "warnings": self.warnings,
                "candidates": {name: results_json(runs[name], self.comparisons[name]) for name in self.comparisons}}


def _drift_figures(run: GateRun, comparison: Comparison) -> dict[str, Any]:
    """The rung's drift figures: of its rows with drift, the one whose far drift is largest; and the damage kind of its
    first failing row that has one."""
    evaluation = comparison.evaluation
    drifted = [(name, found) for name, found in evaluation.drift.items() if found.far.kl is not None]
    failing = evaluation.failing_rows()
    damage = next((kind for name in evaluation.drift if name in failing and (kind := evaluation.damage_kind(name))), None)
    if not drifted:
        return {"damage": damage}
    name, found = max(drifted, key=lambda pair: pair[1].far.kl)
    check = drift_check(evaluation, name)
    return {"drift_row": name, "far": found.far.kl, "near": found.near.kl, "control": found.control.kl,
            "excess": found.difference, "interval": found.interval, "against": found.against,
            "drift_threshold": check.threshold if check is not None else None, "damage": damage}


def _bytes(model: str) -> int | None:
    try:
        return weights_bytes(resolve_model(model))
    except LongctxError:  # an alias whose package is missing: the rung says why it did not load
        return None


def rung_of(name: str, run: GateRun, comparison: Comparison, loading: float) -> Rung:
    """A candidate's rung, from its finished run and its comparison with the baseline."""
    judged = Judged.from_meta(run.scores.meta, str(run.options.model)) if run.scores.meta else None
    original = (judged is not None and run.baseline is not None
                and judged.same_weights(Judged.from_meta(run.baseline.meta)))
    return Rung(candidate=name, model=without_credentials(str(run.options.model)),
                what="; ".join(judged.compressions()) if judged is not None else "", bytes=_bytes(str(run.options.model)),
                verdict=comparison.verdict, why=run.failure or run.missing_baseline, **_drift_figures(run, comparison),
                rows=dict(comparison.evaluation.rows), items=sum(1 for _ in run.scores.items()),
                tokens=run.reader.forwarded, seconds=run.reader.seconds + loading, original=original)


def ladder_report(ladder: LadderRun, happened: Happened) -> LadderReport:
    """The finished ladder: every candidate with a selected test, each judged as a run of it alone; a candidate's
    verdict is PASS only where the run judged every selected check (``happened``: what the plugin saw of it)."""
    stopped = happened.incomplete()
    rung = Happened(not_run=happened.not_run, stopped=stopped)  # the run's counts are of every candidate's tests
    comparisons = {name: from_gate_run(ladder.rungs[name], ladder.rungs[name].evaluate(), rung) for name in ladder.selected}
    rungs = by_size([rung_of(name, ladder.rungs[name], comparisons[name], ladder.loading.get(name, 0.0))
                     for name in ladder.selected])
    notes = noise_floor(rungs)
    choice = smallest_passing(rungs)
    if stopped:  # a candidate may pass on what was read before the stop and fail on the rest
        notes.append(f"{stopped}: the ladder holds what was read before it stopped")
        choice = Choice(None, f"the run stopped early ({stopped}), so no candidate is judged whole")
    warnings = list(dict.fromkeys(w for c in comparisons.values() for w in c.warnings))
    against = f"baseline {ladder.baseline_path}" if ladder.baseline_path is not None else "no baseline"
    return LadderReport(rungs, frontier(rungs), choice, comparisons, against, notes, warnings, happened)


# -------------------------------------------------------------- the formats


def ladder_markdown(report: LadderReport) -> str:
    """The markdown summary (and CI step summary): the ladder, the rows, why candidates failed, the choice."""
    cell = markdown_text
    lines = [f"## longctx ladder: {report.verdict}", "", f"**{cell(report.headline)}**"]
    for section in (report.ladder_table(), report.rows_table()):
        lines += ["", f"### {cell(section.title)}", "", md_table(section.headers, section.rows)]
    why = report.why_lines()
    lines += ["", "### Why candidates failed", "", *(f"- {cell(line)}" for line in why)] if why else []
    lines += [f"> note: {cell(note)}" for note in report.notes]
    lines += [f"> warning: {cell(warning)}" for warning in report.warnings]
    return "\n".join(lines) + "\n"


def ladder_picture(report: LadderReport) -> str | None:
    """Size on disk against far drift, coloured by verdict, the drift threshold as a line; None without matplotlib or
    without a candidate whose size and drift are known."""
    points = [(r.candidate, r.bytes, r.far, r.passed) for r in report.rungs if r.bytes is not None and r.far is not None]
    if not points or not plots.available():
        return None
    threshold = next((r.drift_threshold for r in report.rungs if r.drift_threshold is not None), None)
    return plots.ladder_plot(points, threshold)


def ladder_html(report: LadderReport) -> str:
    verdict = report.verdict
    why = report.why_lines()
    parts = [f'<header><h1 class="verdict-{verdict.lower()}">longctx ladder: {verdict}</h1>',
             f"<p><strong>{escape(report.headline)}</strong></p>",
             "".join(f'<p class="note">{escape(note)}</p>' for note in report.notes), "</header>",
             html_section("ladder", report.ladder_table().title, html_table(report.ladder_table(), "ladder-table")),
             html_section("picture", "Size on disk against far drift",
                          html_figure("ladder-plot", ladder_picture(report),
                                      "each candidate's size against the far drift of its row that drifted most; green "
                                      "passed, red failed; the dashed line is the drift threshold")),
             html_section("rows", report.rows_table().title, html_table(report.rows_table(), "rows-table")),
             html_section("why", "Why candidates failed", "<ul>" + "".join(f"<li>{escape(w)}</li>" for w in why) + "</ul>")
             if why else "",
             "".join(f'<p class="note">warning: {escape(w)}</p>' for w in report.warnings)]
    return html_page(f"longctx ladder: {verdict}", parts)


def ladder_properties(ladder: LadderRun, report: LadderReport) -> list[tuple[str, str]]:
    """junit properties: the choice, each rung's verdict, size and far drift, and each candidate's own properties
    (those of a run of it alone) under ``longctx.NAME.``."""
    properties = [("longctx.outcome", report.verdict), ("longctx.ladder.smallest_passing", visible(report.choice.candidate or "")),
                  ("longctx.ladder.smallest_passing_reason", visible(report.choice.reason))]
    for r in report.rungs:
        properties += [(f"longctx.ladder.verdict.{r.candidate}", r.verdict),
                       (f"longctx.ladder.bytes.{r.candidate}", "" if r.bytes is None else str(r.bytes)),
                       (f"longctx.ladder.far_kl.{r.candidate}", number(r.far, 6)),
                       (f"longctx.ladder.frontier.{r.candidate}", str(r.candidate in report.frontier).lower())]
        own = suite_properties(ladder.rungs[r.candidate], report.comparisons[r.candidate])
        properties += [(f"longctx.{visible(r.candidate)}.{name.removeprefix('longctx.')}", value) for name, value in own]
    return properties


def finish(ladder: LadderRun, junit: Any, happened: Happened | None = None) -> Finished:
    """Everything the ladder was asked to write; its report for the summary."""
    report = ladder_report(ladder, happened or Happened())
    notes = [write_results(ladder.options.out, lambda: report.to_json(ladder.rungs))] if ladder.options.out else []
    notes += write_reports(ladder.options, lambda: ladder_markdown(report), lambda: ladder_html(report))
    if junit is not None:
        for name, value in ladder_properties(ladder, report):
            junit.add_global_property(name, value)
    return Finished(report, notes, None, report.verdict, report.happened.incomplete())


def summary_lines(ladder: LadderRun, finished: Finished) -> list[str]:
    """The terminal summary: the ladder, the rows, why candidates failed, the choice, the warnings, what was written."""
    report: LadderReport = finished.evaluation
    ladder_section, rows = report.ladder_table(), report.rows_table()
    lines = [visible(ladder_section.title) + ":", table(ladder_section.headers, ladder_section.rows)]
    if rows.rows:
        lines += [rows.title + ":", table(rows.headers, rows.rows)]
    lines += [visible(f"  {line}") for line in report.why_lines()]
    lines += [visible(f"longctx: {note}") for note in report.notes]
    lines += [visible(f"longctx: warning: {w}") for w in dict.fromkeys([*ladder.warnings, *report.warnings])]
    lines += [visible(note) for note in finished.notes]
    lines.append(visible(f"longctx: {report.headline}"))
    return lines
