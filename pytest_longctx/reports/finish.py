"""How a model gate run finishes on the controller: the results JSON (``--longctx-out``), the
baseline (``--longctx-update-baseline``), the markdown summary (``--longctx-markdown PATH``;
appended to ``$GITHUB_STEP_SUMMARY`` when CI sets it), the HTML report (``--longctx-html PATH``)
and the junit suite properties, written; and what that leaves for the summary (``Finished``)."""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from pytest_longctx.errors import LongctxError
from pytest_longctx.gate.comparison import from_gate_run
from pytest_longctx.gate.model_run import GateRun
from pytest_longctx.gate.run_options import GateOptions
from pytest_longctx.paths import write_text_atomically
from pytest_longctx.reports.format import write_json
from pytest_longctx.reports.html import html_report
from pytest_longctx.reports.junit import suite_properties
from pytest_longctx.reports.markdown import ci_summary
from pytest_longctx.reports.results_json import results_json
from pytest_longctx.scoring.scores_file import UNJUDGEABLE, check_judgeable

STEP_SUMMARY = "GITHUB_STEP_SUMMARY"


@dataclass
class Finished:
    """What a finished gate leaves for its summary: the evaluation of all it scored, the lines
    about what it wrote, and why the run cannot pass as it stands (a file asked for is missing)."""

    evaluation: Any  # the gate's evaluation (gate/evaluation.Evaluation, compress/run.CompressionEvaluation)
    notes: list[str] = field(default_factory=list)
    failed: str | None = None


def step_summary() -> str | None:
    """The CI job's step summary file (GitHub Actions' ``$GITHUB_STEP_SUMMARY``), when there is one."""
    return os.environ.get(STEP_SUMMARY) or None


def append(path: str, text: str) -> None:
    """``text`` at the end of the file ``path`` (made, with its folders, where missing): how the gate's
    markdown and blame's after it reach a CI step summary."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target, "a", encoding="utf-8") as handle:
        handle.write(text)


def write_results(path: str, body: Callable[[], dict[str, Any]]) -> str:
    """The results JSON written to ``path``; the summary's note about it. The paths were checked before any work
    (gate/inputs.py); a failure now (a full disk, a folder removed meanwhile) is a note in the summary, not a
    traceback that hides the results."""
    try:
        write_json(path, body())
    except OSError as exc:
        return f"longctx: results NOT written to {path}: {exc.strerror or exc}"
    return f"longctx: results written to {path}"


def write_reports(options: GateOptions, markdown: Callable[[], str], html: Callable[[], str]) -> list[str]:
    """Write the reports asked for, each made only when asked for (``markdown()``: the markdown summary, also appended
    to a CI step summary; ``html()``: the HTML report); the summary's notes about them."""
    ci = step_summary()
    notes = []
    try:
        if options.markdown or ci:
            summary = markdown()
            if options.markdown:
                write_text_atomically(options.markdown, summary)
                notes.append(f"longctx: markdown summary written to {options.markdown}")
            if ci:
                append(ci, summary)
        if options.html:
            write_text_atomically(options.html, html())
            notes.append(f"longctx: HTML report written to {options.html}")
    except OSError as exc:
        notes.append(f"longctx: a report could not be written: {exc.filename}: {exc.strerror}")
    return notes


def finish(run: GateRun, junit: Any, stopped: str | None = None) -> Finished:
    """Everything the run was asked to write, and what it leaves for the summary. ``stopped``: why
    the pytest run ended before its tests all ran (the plugin says), or None."""
    evaluation = run.evaluate()
    notes = []
    failed = None
    options = run.options
    if options.out:
        notes.append(write_results(options.out, lambda: results_json(run, evaluation)))
    if options.update_baseline and run.baseline_path is not None:
        refused, dropped = run.baseline_update(stopped)
        if not refused:
            try:
                check_judgeable(run.baseline_file(), None, UNJUDGEABLE).save(run.baseline_path)
            except OSError as exc:
                refused = exc.strerror or str(exc)
            except LongctxError as exc:  # what it holds cannot make a baseline
                refused = str(exc)
        if refused:
            failed = f"baseline {run.baseline_path} NOT written: {refused}"
            notes.append(f"longctx: {failed}")
        else:
            narrowed = f", narrowed on purpose (--longctx-narrow-baseline): it dropped {dropped}" if dropped else ""
            notes.append(f"longctx: wrote baseline {run.baseline_path}{narrowed}; commit it beside the checkpoint")
    comparison = functools.cache(lambda: from_gate_run(run, evaluation))  # made once, and only for a report
    notes.extend(write_reports(options, lambda: ci_summary(comparison()), lambda: html_report(comparison())))
    if junit is not None:
        for name, value in suite_properties(run, evaluation):
            junit.add_global_property(name, value)
    return Finished(evaluation, notes, failed)
