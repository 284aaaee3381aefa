"""How a model gate run finishes on the controller: the results JSON (``--longctx-out``), the
baseline (``--longctx-update-baseline``), the markdown summary (``--longctx-markdown PATH``;
appended to ``$GITHUB_STEP_SUMMARY`` when CI sets it), the HTML report (``--longctx-html PATH``)
and the junit suite properties, written; and what that leaves for the summary (``Finished``)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from pytest_longctx.errors import LongctxError
from pytest_longctx.gate.comparison import from_gate_run
from pytest_longctx.gate.model_run import GateRun
from pytest_longctx.gate.outcome import Happened
from pytest_longctx.gate.run_options import GateOptions
from pytest_longctx.gate.shard_file import shard_note, shard_record
from pytest_longctx.paths import STEP_SUMMARY, step_summary, write_text_atomically
from pytest_longctx.reports.format import write_json
from pytest_longctx.reports.html import html_report
from pytest_longctx.reports.junit import suite_properties
from pytest_longctx.reports.markdown import ci_summary
from pytest_longctx.reports.results_json import results_json
from pytest_longctx.scoring.scores_file import UNJUDGEABLE, check_judgeable


@dataclass
class Finished:
    """What a finished gate leaves for its summary: the evaluation of all it scored, the lines
    about what it wrote, and why the run cannot pass as it stands (a file asked for is missing)."""

    evaluation: Any  # the gate's evaluation (gate/evaluation.Evaluation, compress/run.CompressionEvaluation)
    notes: list[str] = field(default_factory=list)
    failed: str | None = None
    outcome: str = ""  # what every report's headline says (gate/outcome.py); empty where the gate writes none
    not_judged: str | None = None  # why some selected check was not judged


def append(path: str, text: str) -> None:
    """``text`` at the end of the file ``path`` (made, with its folders, where missing): how the gate's
    markdown and blame's after it reach a CI step summary."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target, "a", encoding="utf-8") as handle:
        handle.write(text)


def write_results(path: str, body: Callable[[], dict[str, Any]]) -> str:
    """The results JSON written to ``path``; the summary's note about it. The paths were checked before any work (the
    plugin); a failure now (a full disk, a folder removed meanwhile) is a note in the summary, not a traceback that
    hides the results."""
    try:
        write_json(path, body())
    except OSError as exc:
        return f"longctx: results NOT written to {path}: {exc.strerror or exc}"
    return f"longctx: results written to {path}"


def write_reports(options: GateOptions, markdown: Callable[[], str], html: Callable[[], str]) -> list[str]:
    """Write the reports asked for, each made only when asked for (``markdown()``: the markdown summary, also appended
    to a CI step summary; ``html()``: the HTML report) and each on its own (one that cannot be written keeps none of
    the others from being written); the summary's notes about them."""
    ci, notes = step_summary(), []
    summary = markdown() if options.markdown or ci else ""
    targets = (("--longctx-markdown", options.markdown, "markdown summary", lambda path: write_text_atomically(path, summary)),
               (f"${STEP_SUMMARY}", ci, "", lambda path: append(path, summary)),  # the CI job's own: said only when it fails
               ("--longctx-html", options.html, "HTML report", lambda path: write_text_atomically(path, html())))
    for option, path, what, write in targets:
        if not path:
            continue
        try:
            write(path)
        except OSError as exc:
            notes.append(f"longctx: {option} {path}: NOT written ({exc.strerror or exc})")
            continue
        if what:
            notes.append(f"longctx: {what} written to {path}")
    return notes


def finish(run: GateRun, junit: Any, happened: Happened | None = None) -> Finished:
    """Everything the run was asked to write, and what it leaves for the summary. ``happened``: what the plugin saw
    of the run (how many of the gate's tests ran, why it stopped early); every report says PASS only where every
    selected check was judged and passed (gate/outcome.py)."""
    happened = happened or Happened()
    evaluation = run.evaluate()
    comparison = from_gate_run(run, evaluation, happened)  # the one record the reports, junit and the results are made from
    notes = []
    failed = None
    options = run.options
    if options.out:
        notes.append(write_results(options.out, lambda: {**results_json(run, comparison),
                                                         **shard_record(run, happened.incomplete())}))
    if options.shard is not None:  # its part is in --longctx-out; longctx merge judges and reports on every part
        notes.append(shard_note(run))
    elif options.update_baseline and run.baseline_path is not None:
        refused, dropped = run.baseline_update(happened.incomplete())
        if not refused:
            try:
                check_judgeable(run.baseline_file(), None, UNJUDGEABLE).save(run.baseline_path)
            except OSError as exc:
                refused = exc.strerror or str(exc)
            except LongctxError as exc:  # what it holds cannot make a baseline
                refused = str(exc)
        if refused:
            failed = f"baseline {options.baseline} NOT written: {refused}"
            notes.append(f"longctx: {failed}")
        else:
            narrowed = f", narrowed on purpose (--longctx-narrow-baseline): it dropped {dropped}" if dropped else ""
            notes.append(f"longctx: wrote baseline {options.baseline}{narrowed}; commit it beside the checkpoint")
    if options.shard is None:  # a shard's part judges no row: the merge's reports and junit have them
        notes.extend(write_reports(options, lambda: ci_summary(comparison), lambda: html_report(comparison)))
    if junit is not None and options.shard is None:
        for name, value in suite_properties(run, comparison):
            junit.add_global_property(name, value)
    return Finished(evaluation, notes, failed, comparison.verdict, comparison.not_judged)
