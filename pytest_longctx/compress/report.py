"""The compressor gate's reports, in the model gate's forms: the terminal table (the
full context in the baseline's column), junit suite properties and the results JSON; text from
data or options (session ids, errors, the compressor's name) with its control characters
written out, as in the model gate's reports."""
from __future__ import annotations

from typing import Any

from pytest_longctx.compress.run import CompressionEvaluation, CompressorRun
from pytest_longctx.gate.outcome import Happened
from pytest_longctx.metrics.faithfulness import compression_summary
from pytest_longctx.numbers import delta, number
from pytest_longctx.reports.finish import Finished
from pytest_longctx.reports.format import table, visible, write_json

HEADERS = ["row", "full context", "compressed", "delta", "threshold", "verdict"]


def gate_table(evaluation: CompressionEvaluation) -> str:
    lines = []
    for row in evaluation.rows:
        verdict = evaluation.verdict(row.key)
        lines.append([row.label, number(row.full), number(row.compressed), delta(row.compressed, row.full),
                      f">= {verdict.threshold:.3f}" if verdict else "reported", verdict.word if verdict else "-"])
    return table(HEADERS, lines)


def structure_line(summary: dict[str, Any]) -> str:
    """What the compressor did to the sessions' structure, which the savings alone do not show."""
    changes = summary["structure"]
    return (f"structure: {summary['sessions_restructured']} of {summary['items'] - summary['errors']} sessions changed; "
            f"messages merged {changes['merged']}, roles changed {changes['roles_changed']}, system messages inserted "
            f"{changes['system_inserted']} (content-token savings count the messages' contents alone: merging or "
            "re-wrapping them saves nothing there)")


def header(run: CompressorRun) -> str:
    reader = f"Layer B read by {run.options.model}" if run.options.model else "Layer A only (no model)"
    tokenizer = run.meta.get("tokenizer", "n/a")
    return (f"longctx compressor gate: {run.compressor.label} on {run.dataset.source}; {len(run.outcomes)} items "
            f"compressed; savings in tokens of {tokenizer}; {reader}")


def summary_lines(run: CompressorRun, finished: Finished) -> list[str]:
    evaluation, notes = finished.evaluation, finished.notes
    lines = [visible(header(run))]
    if evaluation.rows:
        lines.append(gate_table(evaluation))
        lines.append(structure_line(compression_summary(list(run.outcomes.values()))))
    errors = [o["error"] for o in run.outcomes.values() if o["error"]]
    if errors:
        lines.append(f"{len(errors)} item(s) could not be compressed (counted as keeping no fact):")
        lines.extend(visible(f"  {error}") for error in errors[:5])
        lines.extend([f"  and {len(errors) - 5} more"] if len(errors) > 5 else [])
    lines.extend(visible(f"longctx: warning: {w}") for w in run.warnings)
    lines.extend(visible(note) for note in notes)
    return lines


def suite_properties(run: CompressorRun, evaluation: CompressionEvaluation) -> list[tuple[str, str]]:
    properties = [("longctx.compressor", visible(run.compressor.label)),
                  ("longctx.tokenizer", visible(str(run.meta.get("tokenizer", "")))),
                  ("longctx.model", visible(str(run.options.model or "")))]
    for row in evaluation.rows:
        verdict = evaluation.verdict(row.key)
        properties += [(f"longctx.row.{row.key}", number(row.compressed, 6)),  # named by key: no space in a name
                       (f"longctx.full_row.{row.key}", number(row.full, 6)),
                       (f"longctx.threshold_row.{row.key}", number(verdict.threshold, 6) if verdict else "reported"),
                       (f"longctx.verdict.{row.key}", verdict.word if verdict else "reported")]
    return properties


def results_json(run: CompressorRun, evaluation: CompressionEvaluation) -> dict[str, Any]:
    return {
        "rows": {row.label: row.compressed for row in evaluation.rows},
        "full_rows": {row.label: row.full for row in evaluation.rows},
        "sets": evaluation.sets,
        "meta": run.meta,
        "verdicts": [v.to_json() for v in evaluation.verdicts],  # model: compressed, baseline: the full context
        "items": {"/".join(key): outcome for key, outcome in run.outcomes.items()},
    }


def finish(run: CompressorRun, junit: Any, happened: Happened | None = None) -> Finished:
    """At the end of the session (controller): the results JSON and the junit properties (``happened``, what the
    plugin saw of the run, changes nothing: this gate writes no baseline and no report that says PASS)."""
    evaluation = run.evaluate()
    notes = []
    if run.options.out:
        write_json(run.options.out, results_json(run, evaluation))
        notes.append(f"longctx: results written to {run.options.out}")
    if junit is not None:
        for name, value in suite_properties(run, evaluation):
            junit.add_global_property(name, value)
    return Finished(evaluation, notes)
