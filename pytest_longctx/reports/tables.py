"""The comparison as tables (headers and cells as strings), shared by the text, markdown
and HTML reports, and the plain-text report of ``longctx compare``."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pytest_longctx.data.records import TOOL_KINDS, Kind, config_kind
from pytest_longctx.gate.comparison import Comparison
from pytest_longctx.gate.damage import summaries_of
from pytest_longctx.gate.keys import cell_key, cells
from pytest_longctx.gate.losses import TargetLoss
from pytest_longctx.gate.specs import FOLLOW, KL, RETAINED
from pytest_longctx.gate.verdict import Verdict, checks_word
from pytest_longctx.metrics.item_figures import ItemFigures
from pytest_longctx.metrics.rows import RowSource
from pytest_longctx.numbers import NA, delta, number
from pytest_longctx.reports.format import table, visible
from pytest_longctx.reports.text import (
    DRIFT_HEADERS,
    GATE_HEADERS,
    SETTLED_HEADERS,
    TERMINAL_HEADERS,
    damage_lines,
    drift_rows,
    gate_rows,
    interval_text,
    settled_rows,
)

MARK = ("⟦", "⟧")  # around the target in its text
HITS = {"facts": ("recalled", "missed"), "tool_calls": ("right", "wrong"), "rules": ("followed", "not followed")}

# (label, path into a set's metrics) of the facts and tool-call metrics shown side by side
SET_METRICS: dict[str, list[tuple[str, tuple[str, ...]]]] = {
    "facts": [("scored targets", ("scored",)), ("query accuracy", ("query_accuracy",)),
              ("token accuracy", ("token_accuracy",)), ("mean log-prob of answer tokens", ("mean_logprob",))],
    "tool_calls": [("scored targets", ("scored",)), ("far accuracy", ("far_accuracy",)),
                   ("fresh accuracy", ("fresh_accuracy",)), ("near accuracy", ("near_accuracy",)),
                   ("mean log-prob, far", ("far", "mean_logprob"))]
                  + [(f"{group} accuracy, {kind} targets", ("by_kind", kind, group, "accuracy"))
                     for kind in TOOL_KINDS for group in ("far", "near")],
}


@dataclass(frozen=True)
class Section:
    """A titled table of a report, its cells already formatted."""

    title: str
    headers: list[str]
    rows: list[list[str]]


def _value(metrics: dict[str, Any], path: tuple[str, ...]) -> Any:
    for key in path:
        metrics = metrics[key]
    return metrics


def _shown(value: Any) -> str:
    return str(value) if isinstance(value, int) else number(value)


def headline(comparison: Comparison, columns: bool = False) -> Section:
    """The headline rows; ``columns``: the terminal's table (interval and McNemar columns),
    else the interval beside the delta (markdown, HTML)."""
    if columns:
        return Section("Headline rows", TERMINAL_HEADERS, gate_rows(comparison.evaluation, columns=True))
    return Section("Headline rows", GATE_HEADERS, gate_rows(comparison.evaluation))


def drift(comparison: Comparison) -> Section:
    """Every row's drift at the reads: KL_K far / near / control, the far excess, the damage kind."""
    return Section("Drift at the reads (KL_K against the baseline's most likely tokens, nats)", DRIFT_HEADERS,
                   drift_rows(comparison.evaluation))


def sequential(comparison: Comparison) -> Section:
    """How sequential reading settled each check, titled with what it read of the selection (no rows without it)."""
    if comparison.sequential is None:
        return Section("", SETTLED_HEADERS, [])
    return Section(comparison.sequential.text(), SETTLED_HEADERS, settled_rows(comparison.evaluation))


def damage(comparison: Comparison) -> list[str]:
    """The damage kind of each failing row, with the figures it rests on."""
    return [line.strip() for line in damage_lines(comparison.evaluation)]


def _cell_kl(per_item: dict[str, ItemFigures], cell: RowSource) -> str:
    """Mean KL_K over a rules cell's reads, with and without the rule (n/a without drift)."""
    summaries = summaries_of(per_item, cell.counts)
    reads = sum(s.far.reads + s.near.reads for s in summaries)
    return number(sum(s.far.kl + s.near.kl for s in summaries) / reads) if reads else NA


def rules_cells(comparison: Comparison) -> Section:
    """Every rules cell: the reference's and the model's mean effect, follow, retained, checks."""
    evaluation = comparison.evaluation
    by_key: dict[str, list[Verdict]] = {}
    for verdict in evaluation.verdicts:
        by_key.setdefault(verdict.key, []).append(verdict)
    lines = []
    for config, by_length in evaluation.sets.items():
        if config_kind(config) != Kind.RULES:
            continue
        for _, length, placement, family in cells(config, by_length):
            cell, key = by_length[length]["cells"][placement][family], cell_key(config, length, placement, family)
            verdicts = by_key.get(key, [])
            lines.append([key, str(cell["counted"]), number(cell["eff_ref_mean"]), number(cell["eff_mean"]),
                          number(cell[FOLLOW.name]), number(cell[RETAINED.name]),
                          _cell_kl(by_length[length]["per_item"], RowSource(config, RETAINED.name, length, placement, family)),
                          "; ".join(f"{v.metric} >= {v.threshold:g}" for v in verdicts),
                          "; ".join(f"{v.metric} {interval_text(v)}" for v in verdicts if v.interval is not None),
                          checks_word(verdicts)])
    headers = ["cell", "counted", "eff_ref mean", "eff mean", FOLLOW.name, RETAINED.name, "KL", "threshold", "interval", "verdict"]
    return Section("Rules cells (eff: log-prob gained by the rule, model; eff_ref: baseline)", headers, lines)


def set_metrics(comparison: Comparison) -> Section:
    evaluation = comparison.evaluation
    lines = []
    for config, by_length in evaluation.sets.items():
        for length, metrics in by_length.items():
            theirs = evaluation.baseline_sets[config][length]
            for label, path in SET_METRICS.get(config_kind(config), []):
                if path[0] == "by_kind" and not _value(theirs, path[:-1] + ("count",)):
                    continue  # no target of this kind and group
                model, base = _value(metrics, path), _value(theirs, path)
                change = f"{model - base:+d}" if isinstance(model, int) and isinstance(base, int) else delta(model, base)
                lines.append([f"{config}-{length}", label, _shown(base), _shown(model), change])
    return Section("Facts and tool calls", ["set", "metric", "baseline", "model", "delta"], lines)


def top(values: list, count: int) -> list:
    return values if count <= 0 else values[:count]


def items(comparison: Comparison, count: int) -> Section:
    """The items with a loss (an item with no target scored on both sides has none), worst first;
    all of them, by their metrics, when no per-target scores are at hand."""
    measured = [i for i in comparison.items if i.loss is not None] or comparison.items
    lines = [[i.key, i.metric, number(i.baseline), number(i.model), number(i.loss), f"<= {i.threshold:g}",
              i.verdict] for i in top(measured, count)]
    headers = ["item", "metric", "baseline", "model", "nats lost", "allowed", "verdict"]
    return Section(f"Items that lost the most ({len(comparison.failing_items)} of {len(comparison.items)} over the limit)",
                   headers, lines)


def target_head(target: TargetLoss) -> str:
    """One line: where, how far back, what was lost."""
    kind = config_kind(target.config)
    yes, no = HITS.get(kind, HITS["facts"])
    what = "rule effect" if kind == Kind.RULES else "log-prob"
    back = f", {target.distance_tokens} tokens back" if target.distance_tokens is not None else ""
    change = (f"{yes} -> {no}" if target.turned_miss else
              f"{no} -> {yes}" if target.hit_model and not target.hit_baseline else (yes if target.hit_model else no))
    return (f"{target.where}{back}: lost {target.loss:.3f} nats ({what} {target.baseline:.3f} -> {target.model:.3f}); "
            f"{change}")


def marked(target: TargetLoss) -> str:
    assert target.snippet is not None
    return f"{target.snippet.before}{MARK[0]}{target.snippet.target}{MARK[1]}{target.snippet.after}"


# ------------------------------------------------------------------ plain text


def failing_lines(comparison: Comparison) -> list[str]:
    """The failing checks that are not headline rows (rules cells); drift checks have a table of their own."""
    return [v.message() for v in comparison.failing if v.label not in comparison.evaluation.rows and v.metric != KL.name]


def _plain(section: Section) -> list[str]:
    return ["", section.title, table(section.headers, section.rows)] if section.rows else []


def text_report(comparison: Comparison, count: int = 10) -> str:
    """What ``longctx compare`` prints: control characters written out (tables: ``format.table``),
    the lines of a target's text kept."""
    verdict = comparison.verdict
    out = [visible(f"longctx compare: {comparison.header}; mode {comparison.mode}: {verdict}")]
    out += [visible(f"error: {error}") for error in comparison.errors]
    out += [visible(f"note: {note}") for note in comparison.notes]
    out += [visible(f"warning: {warning}") for warning in comparison.warnings]
    out += _plain(headline(comparison, columns=True)) + _plain(drift(comparison)) + [f"  {visible(line)}" for line in damage(comparison)]
    for section in (rules_cells(comparison), set_metrics(comparison), items(comparison, count)):
        out += _plain(section)
    failing = failing_lines(comparison)
    if failing:
        out += ["", "Failing cells", *(f"  {visible(line)}" for line in failing)]
    shown = top(comparison.targets, count)
    if shown:
        out += ["", f"Targets that lost the most ({len(shown)} of {len(comparison.targets)})"]
        for target in shown:
            out.append(visible(target_head(target)))
            if target.snippet is not None:
                out.append(f"    {visible(target.snippet.far)}")
                out += [f"    {visible(line)}" for line in marked(target).splitlines()]
    return "\n".join(out) + "\n"
