"""What people read: the headline table and the results JSON."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Sequence


def number(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A plain-text table: first column left-aligned, the others right-aligned."""
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(str(c).ljust(w) if i == 0 else str(c).rjust(w) for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def rows_table(rows: dict[str, float | None]) -> str:
    return table(["row", "value"], [[name, number(value)] for name, value in rows.items()])


def write_json(path: str | os.PathLike, body: dict[str, Any]) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    partial.write_text(json.dumps(body, indent=2, allow_nan=False) + "\n")
    os.replace(partial, path)


# ------------------------------------------------------------------ the gate's reports


def verdict_word(verdict: Any) -> str:
    if not verdict.applicable:
        return "n/a"
    return "PASS" if verdict.passed else "FAIL"


def delta(model: float | None, baseline: float | None) -> str:
    return "n/a" if model is None or baseline is None else f"{model - baseline:+.3f}"


GATE_HEADERS = ["row", "baseline", "model", "delta", "threshold", "verdict"]


def gate_rows(evaluation: Any) -> list[list[str]]:
    """The cells of the gate table: one line per headline row."""
    by_label = {v.label: v for v in evaluation.verdicts}
    lines = []
    for name, model in evaluation.rows.items():
        verdict = by_label[name]
        baseline = evaluation.baseline_rows.get(name)
        lines.append([name, number(baseline), number(model), delta(model, baseline),
                      f">= {verdict.threshold:.3f}", verdict_word(verdict)])
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
    lines.extend(f"longctx: warning: the baseline differs in {w}" for w in run.warnings)
    lines.extend(notes)
    return lines


def suite_properties(run: Any, evaluation: Any) -> list[tuple[str, str]]:
    """junit ``<properties>`` of the test suite: every row, the model, the baseline, the thresholds."""
    properties = [("longctx.model", str(run.options.model)),
                  ("longctx.baseline", str(run.baseline_path) if run.baseline_path else ""),
                  ("longctx.mode", run.scores.mode)]
    properties += [(f"longctx.threshold.{name}", value) for name, value in run.thresholds.describe().items()]
    for verdict in evaluation.verdicts:
        if verdict.label in evaluation.rows:
            properties += [(f"longctx.row.{verdict.label}", number(verdict.model, 6)),
                           (f"longctx.baseline_row.{verdict.label}", number(verdict.baseline, 6)),
                           (f"longctx.threshold_row.{verdict.label}", number(verdict.threshold, 6)),
                           (f"longctx.verdict.{verdict.label}", verdict_word(verdict))]
    return properties


def results_json(run: Any, evaluation: Any) -> dict[str, Any]:
    """The CLI's results JSON, plus the baseline's rows and the gate's verdicts."""
    return {
        "rows": evaluation.rows,
        "sets": evaluation.sets,
        "reference": str(run.baseline_path) if run.baseline is not None else None,
        "mode": run.scores.mode,
        "meta": run.scores.meta,
        "row_sources": evaluation.row_sources,
        "baseline_rows": evaluation.baseline_rows,
        "verdicts": [{"key": v.key, "label": v.label, "metric": v.metric, "model": v.model, "baseline": v.baseline,
                      "threshold": v.threshold, "verdict": verdict_word(v)} for v in evaluation.verdicts],
        "scores": run.scores.to_json()["scores"],  # per-target raw scores: what `longctx compare` reads
    }
