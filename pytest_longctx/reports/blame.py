"""``longctx blame``'s report, in the terminal, in markdown and in HTML: per blamed row, the
parts ranked by how much of its far drift restoring them takes away and what damaging the
original with them adds, then the fix set, its cost and its verification. The three share
their cells (``row_tables``, ``outcome``); only the layout differs."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pytest_longctx.backends.hybrids.pair import CANDIDATE
from pytest_longctx.gate.blame.records import Searched
from pytest_longctx.options.table import CARRY
from pytest_longctx.progress import clock_text
from pytest_longctx.reports import plots
from pytest_longctx.reports.format import html_text, markdown_code, size_text, table, visible
from pytest_longctx.reports.format import markdown_text as cell
from pytest_longctx.reports.html import NL, html_figure, html_page, html_section, html_table
from pytest_longctx.reports.markdown import fenced, md_table
from pytest_longctx.reports.tables import Section

HEADERS = ["rank", "part", "restore: far drift", "share", "estimate", "excess share", "damage: far drift", "share", "params", ""]
BARS = 40  # the parts a row's chart shows at most (its table shows them all)
# a pair's recipe by its tool (BlameReport.recipe_tool): the line before it, and the language its lines are in
RECIPES = {"llama.cpp": ("the fix set, made from the original by llama.cpp's quantizer:", "sh"),
           "llm-compressor": ("the fix set, made from the original by llm-compressor with this recipe:", "yaml"),
           "transformers": ("the fix set, made from the original by transformers with this quantization config:", "python")}


def _recipe(found: Any) -> tuple[str, str]:
    return RECIPES[found.recipe_tool]


def _n(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def _share(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0%}"


def _count(value: int) -> str:
    return f"{value / 1e6:.2f}M" if value >= 1e6 else f"{value:,}"


@dataclass(frozen=True)
class RowTable:
    """One blamed row: the candidate's figures and its parts' ranked cells."""

    row: str
    figures: str
    body: list[list[str]]


def _far(states: dict, row: str) -> str:
    return _n(states[row].far) if row in states else "-"


def _measured(states: dict, row: str, share: float | None) -> str:
    """A share where its hybrid was scored; "-" where it was not (the budget, the group search)."""
    return _share(share) if row in states else "-"


def _remark(found: Any, part: Any, row: str) -> str:
    if part.searched is Searched.UNTESTED:  # the budget ended before it was measured alone both ways: say which it was not
        return ("damage not measured (budget)" if part.restore and not part.damage
                else "restore not measured (budget)" if part.damage and not part.restore else "not measured (budget)")
    if part.searched is Searched.CLEARED:  # the group search did not measure it alone both ways
        return "cleared in a group"
    if part.searched is Searched.RANKED:
        return "ranked by its estimate"
    if found.interacts(part, row):
        damaged = found.damage_share(part, row)
        return (f"interacts: restored alone it adds far drift, yet damaging the original with it causes {_share(damaged)}: "
                "its damage shows only beside the others'")
    return "differ" if found.differ(part, row) else ""


def search_line(found: Any) -> tuple[str, list[str]] | None:
    """How the parts measured alone were chosen, and what it cost against measuring every part both ways."""
    if found.search == "cumulative":
        return _cumulative_line(found)
    if found.search != "groups":
        return None
    carried = [g for g in found.groups if g.carries]
    details = [f"{'second round, with the fix set restored: ' if g.second else ''}{g.direction.value} {g.name}: "
               f"{', '.join(_share(s) for s in g.shares)} of the far drift{' left' if g.second else ''}"
               f"{'' if g.estimate is None else f' (estimate {_share(g.estimate)})'}"
               f"{' (split)' if g.carries and len(g.parts) > 1 else ' (kept)' if g.carries else ''}" for g in found.groups]
    cleared = sum(p.searched is Searched.CLEARED for p in found.parts)
    return (f"group search: {len(found.groups)} group hybrids, {len(carried)} moving the far drift by {CARRY:.0%} or more; "
            f"{cleared} parts cleared without a hybrid of their own; {found.hybrids} models scored on the blamed items "
            f"in all, where measuring every changed part both ways takes {found.exhaustive} before the fix set "
            "(--search exhaustive)", details)


def _cumulative_line(found: Any) -> tuple[str, list[str]]:
    """Spread damage: why it was judged spread, and the bisection over the parts ranked by estimate."""
    spread = found.spread
    halves = " and ".join(_share(h) for h in spread.halves)
    leading = ", ".join(f"{name} {_share(value)}" for name, value in spread.leading)
    details = [f"the first halves restore {halves} of the far drift each; the estimate needs {spread.needed} of the "
               f"{spread.parts} changed parts for 80% of its total (leading: {leading})"]
    details += [f"keep the {s.kept} parts with the largest estimates (estimate {_share(s.estimate)}): "
                f"{'passes' if s.passed else 'fails'}" for s in found.keep_steps]
    return (f"the damage is spread over most of the {spread.parts} changed parts: a cumulative search kept parts in the "
            f"order of their estimated share, {len(found.keep_steps)} hybrids halving between a failing and a passing "
            f"keep set; {found.hybrids} models scored on the blamed items in all, where measuring every changed part both "
            f"ways takes {found.exhaustive} (--search exhaustive)", details)


def estimate_line(found: Any) -> tuple[str, list[str]] | None:
    """What the first-order estimate cost and how far its ranking agrees with the hybrids measured."""
    if found.passed or found.non_finite or not found.rows:
        return None
    if found.estimates_why_not:
        return f"no first-order estimate: {found.estimates_why_not}", []
    agree = found.correlation()
    said = ("too few hybrids to compare it with" if agree.rho is None
            else f"Spearman's rho {agree.rho:.2f} against the measured restore shares over {agree.hybrids} restore hybrids")
    return (f"first-order estimate of every changed part (one backward pass, {found.estimate_seconds:.1f} s): {said}", [])


def cost_line(found: Any) -> str | None:
    """The models the run scored, expected and bounded, and their time."""
    if not found.expected:
        return None
    each = "" if found.seconds_per_model is None else f", {found.seconds_per_model:.1f} s each"
    budget = f", budget {found.budget}" if found.budget is not None else ""
    total = ("" if found.seconds_per_model is None
             else f" ({clock_text(found.seconds_per_model * found.hybrids)} in all)")
    return (f"cost: {found.hybrids} models scored on the blamed items{total}{each}; expected about {found.expected}"
            f"{budget}")


def _listed(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def non_finite_lines(found: Any) -> list[str]:
    """Per side, the parts whose weights hold NaN or inf, and why nothing is blamed."""
    lines = []
    for side in dict.fromkeys(entry.side for entry in found.non_finite):
        entries = [entry for entry in found.non_finite if entry.side == side]
        kinds = {entry.kind for entry in entries}
        parts = (_listed([entry.part for entry in entries]) if len(kinds) == 1
                 else _listed([f"{entry.part} ({entry.kind})" for entry in entries]))
        held = f"{kinds.pop()} weights" if len(kinds) == 1 else "non-finite weights"
        tensors = [name for entry in entries for name in entry.tensors]
        shown = ", ".join(tensors[:3]) + (f", … ({len(tensors)} tensors)" if len(tensors) > 3 else "")
        fix = ("re-make the candidate (its compression wrote them) and gate it again" if side == CANDIDATE
               else "its baseline is no measure either: load the original again from a sound copy")
        lines.append(f"the {side}'s {parts} {'holds' if len(entries) == 1 else 'hold'} {held} ({shown}): a model with "
                     f"non-finite weights cannot be judged, so no part is blamed for its drift; {fix}")
    return lines


def headline(found: Any) -> str:
    if found.non_finite:
        return f"blame: {found.model} against {found.reference}: not judged, its weights are not all finite"
    if found.passed:
        return f"nothing to blame: {found.model} passes against {found.reference}'s baseline"
    same = len(found.unchanged)
    left = f" ({same} left unchanged by the compression: listed apart)" if same else ""
    partial = f"PARTIAL, {found.stopped}: " if found.partial else ""
    return (f"{partial}blame: {found.model} against {found.reference}, {len(found.parts)} parts at --granularity "
            f"{found.granularity}{left}")


def row_tables(found: Any) -> list[RowTable]:
    """Per blamed row, the changed parts ranked (a ``gate.blame.BlameReport``); the estimate is of all rows."""
    found_rows = []
    for row in found.rows:
        before = found.candidate[row]
        body = [[str(n + 1), p.part.name, f"{_n(before.far)} -> {_far(p.restore, row)}",
                 _measured(p.restore, row, found.restore_share(p, row)), _share(p.estimate),
                 _measured(p.restore, row, found.restore_share(p, row, "excess")), _far(p.damage, row),
                 _measured(p.damage, row, found.damage_share(p, row)), _count(p.cost.parameters), _remark(found, p, row)]
                for n, p in enumerate(found.ranked)]
        found_rows.append(RowTable(row, f"far drift {_n(before.far)} (threshold {before.threshold:.3f}), "
                                        f"far excess {_n(before.excess)}", body))
    return found_rows


def outcome(found: Any) -> list[tuple[str, list[str]]]:
    """The fix set, its cost, its verification and the notes: each line with its details."""
    lines: list[tuple[str, list[str]]] = [(line, []) for line in non_finite_lines(found)]
    if found.partial:
        lines.append((f"PARTIAL: {found.stopped}; not reached:", list(found.not_reached)))
    if found.unchanged and found.rows:
        lines.append((f"unchanged by the compression, not ranked (restoring one is the candidate, damaging with it the "
                      f"original): {', '.join(p.name for p in found.unchanged)}", []))
    for line in (estimate_line(found), search_line(found)):
        if line:
            lines.append(line)
    cost = cost_line(found)
    if cost:
        lines.append((cost, []))
    if found.fix_set:
        spent, after = found.fix_cost, found.fix_steps[-1]
        state = "passes" if found.fixed else "does NOT make every blamed row pass"
        details = [f"{row}: far drift {_n(found.candidate[row].far)} -> {_n(after[row].far)}" for row in found.rows]
        if found.fix_moves:
            details.append(f"searched: {', '.join(found.fix_moves)} ({found.fix_hybrids} hybrids beside the parts' own)")
        against = (f" (the changed parts take {size_text(found.candidate_bytes)} in the candidate)"
                   if found.candidate_bytes else "")
        details.append(f"cost: {_count(spent.parameters)} parameters, held in the hybrids measured at {spent.precision}; "
                       f"{size_text(spent.original_bytes)} at the original's precision, {size_text(spent.candidate_bytes)} at the "
                       f"candidate's{against}")
        lines.append((f"fix set ({len(found.fix_set)} parts, {state}): keep {', '.join(found.fix_set)} from the original",
                      details))
    if found.verification is not None:
        verified = found.verification
        lines.append((f"verification, the fix set through the gate on the whole selection: "
                      f"{'PASS' if verified['passed'] else 'FAIL'} ({verified['checks']} checks)",
                      [f"FAIL {message}" for message in verified["failing"]]))
    lines += [(f"warning: {warning}", []) for warning in found.warnings]
    lines += [(f"note: {note}", []) for note in found.notes]
    return lines


def _outcome_title(found: Any) -> tuple[str, str]:
    """The HTML section's id and the heading of what follows the tables."""
    return ("non-finite", "Not judged: non-finite weights") if found.non_finite else ("fix-set", "Fix set")


def blame_text(found: Any) -> str:
    """The report in the terminal: control characters written out."""
    lines = [headline(found)]
    for entry in row_tables(found):
        lines += ["", f"{entry.row}: {entry.figures}", table(HEADERS, entry.body)]
    if not found.passed:
        lines.append("")
    for line, details in outcome(found):
        lines += [line, *(f"  {detail}" for detail in details)]
    if found.recipe:
        lines += ["", _recipe(found)[0], *found.recipe]
    return "\n".join(visible(line, keep="\n") for line in lines)


def blame_markdown(found: Any, level: int = 2) -> str:
    """The report in GitHub-flavoured markdown (``--markdown``, a CI step summary), its heading at
    ``level`` (3: under the gate's summary)."""
    heading, sub = "#" * level, "#" * (level + 1)
    lines = [f"{heading} longctx blame: {markdown_code(found.model)}", "", cell(headline(found))]
    for entry in row_tables(found):
        lines += ["", f"{sub} {cell(entry.row)}", "", cell(entry.figures), "", md_table(HEADERS, entry.body)]
    done = outcome(found)
    if done:
        lines += ["", f"{sub} {_outcome_title(found)[1]}", ""]
    for line, details in done:
        lines += [f"- {cell(line)}", *(f"  - {cell(detail)}" for detail in details)]
    if found.recipe:
        title, language = _recipe(found)
        lines += ["", cell(title), "", fenced("\n".join(found.recipe), language)]
    return "\n".join(lines) + "\n"


def _chart(found: Any) -> str:
    """The ranked restore and damage shares of every blamed row as bars (the first ``BARS`` parts)."""
    shown = found.ranked[:BARS]
    caption = (f"Per part, ranked: the share of the row's far drift that restoring it removes (restore) and that "
               f"damaging the original with it causes (damage); the first {len(shown)} of {len(found.ranked)} changed parts.")
    if not plots.available():
        return html_figure("blame-plot", None, caption)
    panels = {row: [(p.part.name, found.restore_share(p, row), found.damage_share(p, row)) for p in shown]
              for row in found.rows}
    return html_figure("blame-plot", plots.blame_plot(panels), caption)


def _list(lines: list[tuple[str, list[str]]]) -> str:
    return "<ul>" + "".join(f"<li>{html_text(line)}" + ("<ul>" + "".join(f"<li>{html_text(d)}</li>" for d in details) + "</ul>"
                                                          if details else "") + "</li>" for line, details in lines) + "</ul>"


def blame_sections(found: Any) -> list[str]:
    """The report's sections in HTML: the chart and tables of the blamed rows, the fix set."""
    parts = []
    if found.rows:
        tables = [f"<h3>{html_text(e.row)}</h3><p>{html_text(e.figures)}</p>" + html_table(Section(e.row, HEADERS, e.body),
                                                                                          f"blame-table-{n}")
                  for n, e in enumerate(row_tables(found))]
        parts.append(html_section("blame", "Parts ranked by the far drift restoring them removes", _chart(found), *tables))
    done = outcome(found)
    recipe = f"<p>{html_text(_recipe(found)[0])}</p><pre>{html_text(NL.join(found.recipe), keep=NL)}</pre>" if found.recipe else ""
    if done:
        parts.append(html_section(*_outcome_title(found), _list(done), recipe))
    return parts


def blame_html(found: Any) -> str:
    """The report as one self-contained HTML file: a bar chart of the shares, the tables, the fix set."""
    header = f"<header><h1>longctx blame: {html_text(found.model)}</h1><p>{html_text(headline(found))}</p></header>"
    return html_page(f"longctx blame: {found.model}", [header, *blame_sections(found)])


def beside_drift(report: str, found: Any) -> str:
    """The gate's HTML report with the blame's sections after its drift section (else at its end)."""
    start = report.find('<section id="drift">')
    at = report.index("</section>", start) + len("</section>") if start >= 0 else report.rindex("</body>")
    return report[:at] + "".join(blame_sections(found)) + report[at:]
