"""What people read in the terminal: the rows table of ``longctx score`` and the gate's
summary (its headline table and failing cells)."""
from __future__ import annotations

from typing import Any

from pytest_longctx.numbers import delta, number
from pytest_longctx.reports.format import table


def rows_table(rows: dict[str, float | None]) -> str:
    return table(["row", "value"], [[name, number(value)] for name, value in rows.items()])


GATE_HEADERS = ["row", "baseline", "model", "delta", "threshold", "verdict"]
# the terminal's gate table: the uncertainty in columns of its own, the verdict still last
TERMINAL_HEADERS = GATE_HEADERS[:5] + ["interval", "McNemar"] + GATE_HEADERS[5:]


def interval_text(verdict: Any) -> str:
    """``[-0.19, -0.04]``: the 95 % interval of model - baseline; empty without one."""
    interval = getattr(verdict, "interval", None)
    return "" if interval is None else f"[{interval[0]:.2f}, {interval[1]:.2f}]"


def mcnemar_text(verdict: Any) -> str:
    """``-5 +1 p=0.22``: targets lost and gained against the baseline and the exact p (hit rows)."""
    if getattr(verdict, "p", None) is None:
        return ""
    return f"-{verdict.lost} +{verdict.gained} p={verdict.p:.2g}"


def gate_rows(evaluation: Any, columns: bool = False) -> list[list[str]]:
    """The cells of the gate table: one line per headline row. ``columns``: the interval and
    McNemar in columns of their own (the terminal); else the interval beside the delta."""
    by_label = {v.label: v for v in evaluation.verdicts}
    lines = []
    for name, model in evaluation.rows.items():
        verdict = by_label[name]
        baseline = evaluation.baseline_rows.get(name)
        change, interval = delta(model, baseline), interval_text(verdict)
        if columns:
            lines.append([name, number(baseline), number(model), change, f">= {verdict.threshold:.3f}", interval,
                          mcnemar_text(verdict), verdict.word])
        else:
            lines.append([name, number(baseline), number(model), f"{change} {interval}".strip(),
                          f">= {verdict.threshold:.3f}", verdict.word])
    return lines


def gate_table(evaluation: Any) -> str:
    """row | baseline | model | delta | threshold | interval | McNemar | verdict, for every headline row."""
    return table(TERMINAL_HEADERS, gate_rows(evaluation, columns=True))


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
    lines.extend(f"longctx: warning: {w}" for w in evaluation.warnings)
    lines.extend(notes)
    return lines

