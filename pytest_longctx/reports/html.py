"""The HTML report: one self-contained file (inline CSS and SVG, no script, nothing
fetched) with the headline table, accuracy by distance, rule effects against the
reference's, every cell, and a drill-down of the items that lost the most. Every text is
shown literally (``format.html_text``), in elements and attributes alike."""
from __future__ import annotations

from typing import Sequence

from pytest_longctx.data.records import Kind, config_kind
from pytest_longctx.gate.comparison import Comparison
from pytest_longctx.gate.distance import KINDS, buckets, drift_buckets
from pytest_longctx.gate.losses import TargetLoss
from pytest_longctx.gate.verdict import FAIL, PASS
from pytest_longctx.numbers import NA, delta, number
from pytest_longctx.reports import plots, tables
from pytest_longctx.reports.format import html_text as escape

DRILL_ITEMS = 25
VERDICT_CLASS = {PASS: "pass", FAIL: "fail", NA: "na"}
TEXT_COLUMNS = {"metric", "kind"}  # left-aligned besides the first
NL = "\n"  # the one control character a <pre> keeps

CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2rem auto; max-width: 72rem; padding: 0 1rem; color: #1d2329; }
h1 { font-size: 1.5rem; margin-bottom: .25rem; } h2 { font-size: 1.15rem; margin-top: 2rem; border-bottom: 1px solid #d5dae0; }
table { border-collapse: collapse; margin: .5rem 0; } th, td { padding: .2rem .6rem; border-bottom: 1px solid #e6e9ed; }
th { text-align: right; background: #f3f5f7; } td { text-align: right; }
th:first-child, td:first-child, .text { text-align: left; }
td.pass { color: #1b7a35; font-weight: 600; } td.fail { color: #c0262d; font-weight: 700; } td.na { color: #7a848e; }
.verdict-pass { color: #1b7a35; } .verdict-fail { color: #c0262d; } .verdict-na { color: #7a848e; }
.note { color: #5b6570; } figure { margin: .5rem 0; } figure svg { max-width: 100%; height: auto; }
pre { white-space: pre-wrap; background: #f7f8fa; padding: .5rem; border-left: 3px solid #d5dae0; }
mark { background: #ffd8a8; font-weight: 700; } details { margin: .3rem 0; } summary { cursor: pointer; }
"""


def html_table(section: tables.Section, table_id: str) -> str:
    head = "".join(f'<th class="text">{escape(h)}</th>' if h in TEXT_COLUMNS else f"<th>{escape(h)}</th>"
                   for h in section.headers)
    body = []
    for row in section.rows:
        cells = []
        for header, value in zip(section.headers, row):
            css = VERDICT_CLASS.get(value) if header == "verdict" else "text" if header in TEXT_COLUMNS else None
            cells.append(f'<td class="{css}">{escape(value)}</td>' if css else f"<td>{escape(value)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f'<table id="{table_id}"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


def html_section(section_id: str, title: str, *parts: str) -> str:
    return f'<section id="{section_id}"><h2>{escape(title)}</h2>{"".join(parts)}</section>'


def html_figure(figure_id: str, svg: str | None, caption: str) -> str:
    if svg is None:
        return '<p class="note">No plot: matplotlib is not installed (pip install "pytest-longctx[report]").</p>'
    return f'<figure id="{figure_id}">{svg}<figcaption class="note">{escape(caption)}</figcaption></figure>'


def _distance(comparison: Comparison) -> str:
    panels = {title: buckets(comparison.targets, kind) for kind, title in KINDS.items()}
    panels = {title: found for title, found in panels.items() if found}
    if not panels:
        return html_section("distance", "How far back", '<p class="note">No facts or tool-call target with a known '
                        "distance was scored on both sides (the items' data is needed for distances).</p>")
    rows = [[title, b.label, str(b.count), number(b.baseline), number(b.model),
             delta(b.model, b.baseline)] for title, found in panels.items() for b in found]
    svg = plots.distance_plot(panels) if plots.available() else None
    return html_section("distance", "How far back: share right by distance to what the target needs",
                    html_figure("distance-plot", svg, "Facts: every answer token top-1; tool calls: the target token top-1."),
                    html_table(tables.Section("", ["kind", "tokens back", "targets", "baseline", "model", "delta"], rows),
                           "distance-table"))


def _drift(comparison: Comparison) -> str:
    """The drift table, the damage kind of each failing row, and drift by distance."""
    section = tables.drift(comparison)
    if not section.rows:
        return ""
    damage = "".join(f"<li>{escape(line)}</li>" for line in tables.damage(comparison))
    panels = {title: drift_buckets(comparison.reads[kind]) for kind, title in KINDS.items() if kind in comparison.reads}
    rows = [[title.split()[0], b.label, str(b.reads), number(b.kl), number(b.baseline), number(b.model), delta(b.model, b.baseline)]
            for title, found in panels.items() for b in found]
    parts = [html_table(section, "drift-table"), f"<ul>{damage}</ul>" if damage else ""]
    if panels:
        svg = plots.drift_plot(panels) if plots.available() else None
        parts += [html_figure("drift-plot", svg, "The model's drift from the baseline's next-token distribution at every read, "
                          "by how far back the needed text lies; control reads see only the item's first 512 tokens."),
                  html_table(tables.Section("", ["kind", "tokens back", "reads", "KL_K", "log p baseline", "log p model", "delta"],
                                        rows), "drift-distance-table")]
    return html_section("drift", section.title, *parts)


def _sequential(comparison: Comparison) -> str:
    """How sequential reading settled each check (nothing where every item was read)."""
    section = tables.sequential(comparison)
    return html_section("sequential", "Sequential reading", f'<p class="note">{escape(section.title)}</p>',
                        html_table(section, "sequential-table")) if section.rows else ""


def _effects(comparison: Comparison) -> str:
    evaluation = comparison.evaluation
    parts = []
    for config, by_length in evaluation.sets.items():
        if config_kind(config) != Kind.RULES:
            continue
        points = []
        for target in comparison.targets:
            if target.config == config:
                figures = by_length[target.length]["per_item"][target.item_id]
                points.append((figures.placement, figures.family, target.baseline, target.model))
        if plots.available():
            parts.append(f"<h3>{escape(config)}</h3>" + html_figure(
                f"effects-plot-{escape(config)}", plots.effects_plot(points),
                "Each counted target's rule effect; solid line: as the baseline, dashed: half of it "
                "(below it the rule counts as not followed)."))
        elif not parts:
            parts.append(html_figure("effects-plot", None, ""))
    cells = tables.rules_cells(comparison)
    if not cells.rows:
        return ""
    return html_section("rules", "Rule effects against the baseline's", *parts, html_table(cells, "rules-table"))


def _snippet(target: TargetLoss) -> str:
    if target.snippet is None:
        return ""
    s = target.snippet
    return (f'<p class="note">{escape(s.far)}</p>'
            f"<pre>{escape(s.before, keep=NL)}<mark>{escape(s.target, keep=NL)}</mark>{escape(s.after, keep=NL)}</pre>")


def _drill_down(comparison: Comparison) -> str:
    by_item: dict[str, list[TargetLoss]] = {}
    for target in comparison.targets:
        by_item.setdefault(f"{target.config}/{target.length}/{target.item_id}", []).append(target)
    blocks: list[str] = []
    lost = [i for i in comparison.items if f"{i.config}/{i.length}/{i.item_id}" in by_item][:DRILL_ITEMS]
    for item in lost:
        found = by_item[f"{item.config}/{item.length}/{item.item_id}"]
        verdict = item.verdict
        summary = (f"{item.key}: {item.metric} {number(item.baseline)} -> {number(item.model)}, "
                   f"lost {number(item.loss)} nats (allowed {item.threshold:g}) {verdict}")
        targets = "".join(f"<li>{escape(tables.target_head(t))}{_snippet(t)}</li>" for t in found)
        opened = " open" if not blocks else ""  # the worst item, unfolded
        blocks.append(f'<details class="item"{opened}><summary class="verdict-{VERDICT_CLASS[verdict]}">'
                      f"{escape(summary)}</summary><ol>{targets}</ol></details>")
    items = tables.items(comparison, DRILL_ITEMS)
    return html_section("items", items.title, html_table(items, "items-table"),
                    f"<h3>Targets of the {len(blocks)} items that lost the most, in their text</h3>", *blocks)


def _notes(lines: Sequence[str]) -> str:
    return "".join(f'<p class="note">{escape(line)}</p>' for line in lines)


def _warnings(lines: Sequence[str]) -> str:
    """The run's warnings, folded under one line that counts them: the tables and plots stay in view."""
    if not lines:
        return ""
    return (f'<details class="warnings"><summary>{len(lines)} warning{"s" if len(lines) != 1 else ""}</summary>'
            f"{_notes(lines)}</details>")


def html_report(comparison: Comparison) -> str:
    verdict = comparison.verdict
    failing, sets = tables.failing_lines(comparison), tables.set_metrics(comparison)
    parts = [
        f'<header><h1 class="verdict-{VERDICT_CLASS.get(verdict, "na")}">longctx: {escape(verdict)}</h1>',
        f"<p>{escape(comparison.header)}; mode {escape(comparison.mode)}</p>",
        f'<p class="verdict-na">not judged: {escape(comparison.not_judged)}</p>' if comparison.not_judged else "",
        "".join(f'<p class="verdict-fail">{escape(error)}</p>' for error in comparison.errors),
        _notes(comparison.notes), _warnings(comparison.warnings), "</header>",
        html_section("headline", "Headline rows", html_table(tables.headline(comparison), "headline-table")),
        html_section("failing", "Failing cells", "<ul>" + "".join(f"<li>{escape(f)}</li>" for f in failing) + "</ul>")
        if failing else "",
        _drift(comparison),
        _sequential(comparison),
        _distance(comparison),
        _effects(comparison),
        html_section("sets", "Facts and tool calls", html_table(sets, "sets-table")) if sets.rows else "",
        _drill_down(comparison),
    ]
    return html_page(f"longctx: {comparison.model} ({verdict})", parts)


def html_page(title: str, parts: Sequence[str]) -> str:
    """A self-contained HTML file: the report's style and ``parts`` (HTML already escaped)."""
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>'
            f"<style>{CSS}</style></head><body>{''.join(parts)}</body></html>\n")
