"""The comparison in GitHub-flavoured markdown: the CI step summary and the full report.
Every text is shown literally (``format.markdown_text``): an id or an answer makes no link,
HTML tag or table cell."""
from __future__ import annotations

from typing import Sequence

from pytest_longctx.gate.comparison import Comparison
from pytest_longctx.reports import tables
from pytest_longctx.reports.format import backticks, markdown_code, visible
from pytest_longctx.reports.format import markdown_text as cell


def md_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """First column left-aligned, the others right-aligned, as in the terminal."""
    align = [":---"] + ["---:"] * (len(headers) - 1)
    return "\n".join("| " + " | ".join(cell(str(c)) for c in line) + " |" for line in [headers, align, *rows])


def fenced(text: str, language: str = "text") -> str:
    """A code block whose fence is longer than any run of backticks in ``text``."""
    text = visible(text, keep="\n")
    fence = backticks(text, 3)
    return f"{fence}{language}\n{text}\n{fence}"


def _heading(comparison: Comparison) -> list[str]:
    verdict = comparison.verdict
    lines = [f"## longctx: {verdict}", "",
             f"{cell(comparison.header)}; mode {cell(comparison.mode)}"]
    lines += [f"> **not judged**: {cell(comparison.not_judged)}"] if comparison.not_judged else []
    lines += [f"> **error**: {cell(error)}" for error in comparison.errors]
    lines += [f"> note: {cell(note)}" for note in comparison.notes]
    lines += [f"> warning: {cell(warning)}" for warning in comparison.warnings]
    return lines


def _failing(comparison: Comparison) -> list[str]:
    failing = tables.failing_lines(comparison)
    lines = ["", "### Failing cells", "", *(f"- {cell(line)}" for line in failing)] if failing else []
    over = comparison.failing_items
    if over:
        lines += ["", f"{len(over)} item(s) lost more than allowed: "
                  + ", ".join(f"{markdown_code(i.key)} ({i.loss:.3f} nats)" for i in tables.top(over, 10) if i.loss is not None)]
    return lines


def _section(section: tables.Section) -> list[str]:
    return ["", f"### {cell(section.title)}", "", md_table(section.headers, section.rows)] if section.rows else []


def _drift(comparison: Comparison) -> list[str]:
    """The drift table and the damage kind of each failing row (nothing without drift rows)."""
    damage = tables.damage(comparison)
    return _section(tables.drift(comparison)) + (["", *(f"- {cell(line)}" for line in damage)] if damage else [])


def ci_summary(comparison: Comparison) -> str:
    """What a CI run's step summary shows: the headline table, the drift table and the failing cells."""
    section = tables.headline(comparison)
    return "\n".join([*_heading(comparison), "", md_table(section.headers, section.rows), *_drift(comparison),
                      *_read(comparison), *_failing(comparison)]) + "\n"


def _read(comparison: Comparison) -> list[str]:
    """What sequential reading read of the selection, in a line (the full report has its table)."""
    title = tables.sequential(comparison).title
    return ["", cell(title)] if title else []


def markdown_report(comparison: Comparison, count: int = 10) -> str:
    lines = _heading(comparison) + _section(tables.headline(comparison)) + _drift(comparison)
    lines += _section(tables.sequential(comparison))
    for section in (tables.rules_cells(comparison), tables.set_metrics(comparison), tables.items(comparison, count)):
        lines += _section(section)
    lines += _failing(comparison)
    shown = tables.top(comparison.targets, count)
    if shown:
        lines += ["", f"### Targets that lost the most ({len(shown)} of {len(comparison.targets)})"]
        for target in shown:
            lines += ["", f"- {cell(tables.target_head(target))}"]
            if target.snippet is not None:
                lines += ["", fenced(f"{target.snippet.far}\n\n{tables.marked(target)}")]
    return "\n".join(lines) + "\n"
