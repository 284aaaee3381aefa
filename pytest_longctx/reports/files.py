"""The reports a gate run writes besides the terminal summary: the markdown summary
(``--longctx-markdown PATH``; appended to ``$GITHUB_STEP_SUMMARY`` when CI sets it) and
the HTML report (``--longctx-html PATH``)."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

STEP_SUMMARY = "GITHUB_STEP_SUMMARY"


def _write(path: str, text: str, append: bool = False) -> None:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target, "a" if append else "w", encoding="utf-8") as handle:
        handle.write(text)


def write_reports(run: Any, evaluation: Any) -> list[str]:
    """Write the reports asked for; the summary's notes about them."""
    options, step_summary = run.options, os.environ.get(STEP_SUMMARY)
    if not (options.markdown or options.html or step_summary):
        return []
    from pytest_longctx.gate.comparison import from_gate_run

    comparison = from_gate_run(run, evaluation)
    notes = []
    try:
        if options.markdown or step_summary:
            from pytest_longctx.reports.markdown import ci_summary

            summary = ci_summary(comparison)
            if options.markdown:
                _write(options.markdown, summary)
                notes.append(f"longctx: markdown summary written to {options.markdown}")
            if step_summary:
                _write(step_summary, summary, append=True)
        if options.html:
            from pytest_longctx.reports.html import html_report

            _write(options.html, html_report(comparison))
            notes.append(f"longctx: HTML report written to {options.html}")
    except OSError as exc:
        notes.append(f"longctx: a report could not be written: {exc.filename}: {exc.strerror}")
    return notes
