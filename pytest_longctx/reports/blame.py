"""``longctx blame`` in the terminal: per blamed row, the parts ranked by how much of its far
drift restoring them takes away, what damaging the original with them adds, and the fix set."""
from __future__ import annotations

from typing import Any

from pytest_longctx.reports.format import table


def _n(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def _share(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0%}"


def _count(value: int) -> str:
    return f"{value / 1e6:.2f}M" if value >= 1e6 else f"{value:,}"


def _bytes(value: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if value >= size:
            return f"{value / size:.1f} {unit}"
    return f"{value} B"


def blame_text(found: Any) -> str:
    """The ranked tables, the fix set, its cost and its verification (a ``gate.blame.Blame``)."""
    if found.passed:
        return f"nothing to blame: {found.model} passes against {found.reference}'s baseline"
    lines = [f"blame: {found.model} against {found.reference}, {len(found.parts)} parts at --granularity {found.granularity}"]
    for row in found.rows:
        before = found.candidate[row]
        lines += ["", f"{row}: far drift {_n(before.far)} (threshold {before.threshold:.3f}), far excess {_n(before.excess)}"]
        body = [[str(n + 1), p.part.name, f"{_n(before.far)} -> {_n(p.restore[row].far)}", _share(found.restore_share(p, row)),
                 _share(found.restore_share(p, row, "excess")), _n(p.damage[row].far), _share(found.damage_share(p, row)),
                 _count(p.cost.parameters), "differ" if found.differ(p, row) else ""]
                for n, p in enumerate(found.parts)]
        lines.append(table(["rank", "part", "restore: far drift", "share", "excess share", "damage: far drift", "share",
                            "params", ""], body))
    lines.append("")
    if found.fix_set:
        spent = found.fix_cost
        state = "passes" if found.fixed else "does NOT bring every row within its threshold"
        lines.append(f"fix set ({len(found.fix_set)} parts, {state}): keep {', '.join(found.fix_set)} from the original")
        after = found.fix_steps[-1]
        lines += [f"  {row}: far drift {_n(found.candidate[row].far)} -> {_n(after[row].far)}" for row in found.rows]
        lines.append(f"  cost: {_count(spent.parameters)} parameters, {_bytes(spent.original_bytes)} at the original's dtype "
                     f"({_bytes(spent.candidate_bytes)} at the candidate's)")
    if found.verification is not None:
        verified = found.verification
        lines.append(f"verification, the fix set through the gate on the whole selection: "
                     f"{'PASS' if verified['passed'] else 'FAIL'} ({verified['checks']} checks)")
        lines += [f"  FAIL {message}" for message in verified["failing"]]
    lines += [f"note: {note}" for note in found.notes]
    return "\n".join(lines)
