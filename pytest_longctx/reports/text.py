"""What people read in the terminal: the rows table of ``longctx score`` and the gate's
summary (its headline table and failing cells)."""
from __future__ import annotations

from typing import Any, Protocol

from pytest_longctx.gate.damage import NONE
from pytest_longctx.gate.evaluation import DRIFT_LABEL
from pytest_longctx.gate.sequential.reading import totals
from pytest_longctx.gate.specs import KL
from pytest_longctx.gate.verdict import FAIL, Verdict
from pytest_longctx.numbers import NA, delta, number
from pytest_longctx.reports.format import table, visible
from pytest_longctx.scoring.identity import header, made_by


def rows_table(rows: dict[str, float | None]) -> str:
    return table(["row", "value"], [[name, number(value)] for name, value in rows.items()])


GATE_HEADERS = ["row", "baseline", "model", "delta", "threshold", "verdict"]
# the terminal's gate table: the uncertainty in columns of its own, the verdict still last
TERMINAL_HEADERS = GATE_HEADERS[:5] + ["interval", "McNemar"] + GATE_HEADERS[5:]


class HasInterval(Protocol):
    """A figure with its paired bootstrap interval: a check's ``Verdict``, a row's far drift excess (``gate.damage.Drift``)."""

    @property
    def interval(self) -> tuple[float, float] | None: ...


def interval_text(found: HasInterval) -> str:
    """``[-0.19, -0.04]``: the 95 % interval of model - baseline; empty without one."""
    interval = found.interval
    return "" if interval is None else f"[{interval[0]:.2f}, {interval[1]:.2f}]"


def mcnemar_text(verdict: Verdict) -> str:
    """``-5 +1 p=0.22``: targets lost and gained against the baseline and the exact p (hit rows)."""
    if verdict.p is None:
        return ""
    return f"-{verdict.lost} +{verdict.gained} p={verdict.p:.2g}"


def row_word(evaluation: Any, verdict: Any) -> str:
    """A headline row's verdict: that of all its checks (its value's and its drift's), naming the ones
    that fail, ``FAIL (drift)``, so the table says what the row's test says."""
    failed = [c for c in evaluation.row_checks(verdict.label) if c.applicable and not c.passed]
    if failed:
        return f"{FAIL} ({', '.join('drift' if c.metric == KL.name else c.metric for c in failed)})"
    return evaluation.row_word(verdict.label)


def gate_rows(evaluation: Any, columns: bool = False) -> list[list[str]]:
    """The cells of the gate table: one line per headline row. ``columns``: the interval and
    McNemar in columns of their own (the terminal); else the interval beside the delta."""
    by_label = {v.label: v for v in evaluation.verdicts}
    lines = []
    for name, model in evaluation.rows.items():
        verdict = by_label[name]
        baseline = evaluation.baseline_rows.get(name)
        change, interval, word = delta(model, baseline), interval_text(verdict), row_word(evaluation, verdict)
        if columns:
            lines.append([name, number(baseline), number(model), change, verdict.needs, interval, mcnemar_text(verdict), word])
        else:
            lines.append([name, number(baseline), number(model), f"{change} {interval}".strip(), verdict.needs, word])
    return lines


def gate_table(evaluation: Any) -> str:
    """row | baseline | model | delta | threshold | interval | McNemar | verdict, for every headline row."""
    return table(TERMINAL_HEADERS, gate_rows(evaluation, columns=True))


DRIFT_HEADERS = ["row", "far KL", "near KL", "control KL", "far - near/control KL", "same top-1 far", "Δ log p far",
                 "threshold", "verdict", "damage (failing rows)"]


def drift_check(evaluation: Any, name: str) -> Any:
    """The drift check of a row, or None where the row's drift is shown but not gated."""
    return next((v for v in evaluation.verdicts if v.metric == KL.name and v.label == f"{name}{DRIFT_LABEL}"), None)


def drift_rows(evaluation: Any) -> list[list[str]]:
    """One line per row with drift figures: KL_K by group, the far excess with its interval,
    the same top-1 rate and Δ log p at far reads, the check, and the damage kind of a failing row."""
    failing = evaluation.failing_rows()
    lines = []
    for name, found in evaluation.drift.items():
        check = drift_check(evaluation, name)
        excess = (f"{delta(found.difference, 0.0)} {interval_text(found)} vs {found.against}".strip()
                  if found.difference is not None else "")
        lines.append([name, number(found.far.kl), number(found.near.kl), number(found.control.kl), excess,
                      number(found.far.same_top1), number(found.far.dlogp),
                      check.needs if check else "-", check.word if check else "-",
                      _damage_word(evaluation.damage_kind(name)) if name in failing else "-"])
    return lines


def _damage_word(kind: str | None) -> str:
    """A failing row's damage kind in the drift table: ``none`` said as what it means."""
    return NA if kind is None else "not located by drift" if kind == NONE else kind


def damage_lines(evaluation: Any) -> list[str]:
    """What kind of damage each failing row shows, with the figures it rests on."""
    return [f"  {name}: {found.text()}" for name, found in evaluation.drift.items() if evaluation.damage_kind(name)]


SETTLED_HEADERS = ["check", "metric", "settled", "items", "tokens", "on"]


def settled_rows(evaluation: Any) -> list[list[str]]:
    """One line per check sequential reading had open (not n/a from the start): how it was settled, after how many of
    its items and how many of its unit's tokens, and on what."""
    lines = []
    for verdict in evaluation.verdicts:
        found = verdict.settling
        if found is None or not found.was_open:
            continue
        how = f"{found.how} {found.word}" if found.word else found.how
        lines.append([verdict.key, verdict.metric, how, f"{found.items} of {found.of_items}",
                      f"{found.tokens:,} of {found.of_tokens:,}", found.detail])
    return lines


def summary_lines(run: Any, finished: Any) -> list[str]:
    """The model gate's terminal summary: what was gated against what, the tables, the failing cells,
    the warnings, and what was written (``finished``: reports/finish.py's ``Finished``)."""
    options, evaluation, notes = run.options, finished.evaluation, finished.notes
    against = ("itself (updating the baseline)" if options.update_baseline else
               f"baseline {options.baseline}" if run.baseline_path is not None else "no baseline")
    scored = sum(1 for _ in run.scores.items())
    forwarded = f", {run.reader.forwarded:,} tokens forwarded" if run.reader.forwarded or scored else ""
    said = header(run.scores.meta, run.baseline.meta if run.baseline is not None else None, against, str(options.model))
    lines = [visible(f"longctx gate: {said}; mode {run.scores.mode or 'n/a'}, {scored} items scored{forwarded}")]
    if not options.update_baseline and run.baseline is not None and run.baseline.meta.get("backend") != run.scores.meta.get("backend"):
        lines.append(visible(f"baseline made by {made_by(run.baseline.meta)}; model read by {made_by(run.scores.meta)}"))
    if options.shard is None:  # a shard's part judges no row or cell (longctx merge judges every part): no tables
        lines.extend(_judged(run, evaluation))
    lines.extend(visible(f"longctx: warning: {w}") for w in [*run.warnings, *evaluation.warnings])
    lines.extend(visible(note) for note in notes)
    if finished.not_judged:  # PASS and FAIL are pytest's to say; what kept checks from being judged is the gate's
        lines.append(visible(f"longctx: {finished.outcome}: {finished.not_judged}"))
    return lines


def _judged(run: Any, evaluation: Any) -> list[str]:
    """The summary's tables: the rows, the drift, what sequential reading read, and the failing cells."""
    found: list[str] = []
    if evaluation.rows:
        found.append(gate_table(evaluation))
        found.extend(visible(f"n/a: {note}") for note in evaluation.notes)
    if evaluation.drift:
        found.append("drift at the reads, against the baseline's most likely tokens (KL_K in nats; docs/metrics.md#drift):")
        found.append(table(DRIFT_HEADERS, drift_rows(evaluation)))
        found.extend(visible(line) for line in damage_lines(evaluation))
    reading = totals(run.readings.values())
    if reading is not None:
        found.append(reading.text() + ":")
        found.append(table(SETTLED_HEADERS, settled_rows(evaluation)))
    failing = [v for v in evaluation.verdicts if v.applicable and not v.passed and v.label not in evaluation.rows
               and v.metric != KL.name]
    if failing:
        found.append("failing cells:")
        found.extend(visible(f"  {v.key}: {v.message()}") for v in failing)
    return found
