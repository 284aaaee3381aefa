"""What people read in the terminal: the rows table of ``longctx score`` and the gate's
summary (its headline table and failing cells)."""
from __future__ import annotations

from typing import Any

from pytest_longctx.numbers import delta, number
from pytest_longctx.reports.format import table


def rows_table(rows: dict[str, float | None]) -> str:
    return table(["row", "value"], [[name, number(value)] for name, value in rows.items()])


GATE_HEADERS = ["row", "baseline", "model", "delta", "threshold", "verdict"]


def gate_rows(evaluation: Any) -> list[list[str]]:
    """The cells of the gate table: one line per headline row."""
    by_label = {v.label: v for v in evaluation.verdicts}
    lines = []
    for name, model in evaluation.rows.items():
        verdict = by_label[name]
        baseline = evaluation.baseline_rows.get(name)
        lines.append([name, number(baseline), number(model), delta(model, baseline),
                      f">= {verdict.threshold:.3f}", verdict.word])
    return lines


def gate_table(evaluation: Any) -> str:
    """row | baseline | model | delta | threshold | verdict, for every headline row."""
    return table(GATE_HEADERS, gate_rows(evaluation))


def summary_lines(run: Any, evaluation: Any, notes: list[str]) -> list[str]:
    options = run.options
    baseline = "itself (updating the baseline)" if options.update_baseline else f"baseline {run.baseline_path}"
    scored = sum(1 for _ in run.scores.items())
    lines = [f"longctx gate: {options.model} against {baseline}; mode {run.scores.mode or 'n/a'}, {scored} items scored"]
    if evaluation.rows:
        lines.append(gate_table(evaluation))
    failing = [v for v in evaluation.verdicts if v.applicable and not v.passed and v.label not in evaluation.rows]
    if failing:
        lines.append("failing cells:")
        lines.extend(f"  {v.key}: {v.message()}" for v in failing)
    lines.extend(f"longctx: warning: {w}" for w in run.warnings)
    lines.extend(notes)
    return lines

