"""Compressors compared at matched realized savings (docs/metrics.md#faithfulness-of-context-compressors), never at matched knobs:
each method runs a sweep of one knob; every point's savings and retention are
measured; the Pareto front over (savings, retention) is marked, and each method's
retention is interpolated at common savings levels."""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from pytest_longctx.compress.interface import parse_value
from pytest_longctx.errors import LongctxError
from pytest_longctx.numbers import NA, delta, number
from pytest_longctx.parse import comma_list
from pytest_longctx.reports.format import table

# A knob sweep per built-in method, spanning light to heavy compression of the builtin
# sessions (about 900 tokens each).
DEFAULT_SWEEPS: dict[str, dict[str, list[Any]]] = {
    "identity": {},
    "last_tokens": {"tokens": [512, 256, 128]},
    "last_messages": {"count": [12, 8, 4]},
    "message_relevance": {"ratio": [0.25, 0.5, 0.75]},
    "sentence_relevance": {"ratio": [0.25, 0.5, 0.75]},
    "selective_context": {"ratio": [0.25, 0.5, 0.75, 0.9]},
}
MATCHED_SAVINGS = (0.25, 0.5, 0.75, 0.9)
COLUMNS = ("retention", "retention-verbatim", "retention-paraphrase", "retention-low_surprisal")


def parse_sweep(text: str) -> tuple[str, str, list[Any]]:
    """``METHOD:KNOB=V1,V2,...`` (METHOD a built-in or module:function)."""
    method, _, assignment = text.rpartition(":")
    knob, sep, values = assignment.partition("=")
    if not method or not sep or not knob.isidentifier() or not values.strip():
        raise LongctxError(f"--sweep {text!r}: expected METHOD:KNOB=V1,V2,... e.g. last_tokens:tokens=256,512")
    try:
        return method, knob, [parse_value(v) for v in comma_list(values)]
    except ValueError as exc:
        raise LongctxError(f"--sweep {text!r}: {exc}") from None


def knob_grid(sweep: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """Every combination of the swept knobs' values (one point when nothing is swept)."""
    names = list(sweep)
    return [dict(zip(names, values)) for values in itertools.product(*(sweep[n] for n in names))]


@dataclass
class Point:
    """One compressor at one knob setting: its rows and metrics, a point of the Pareto table."""

    method: str
    knobs: dict[str, Any]
    rows: dict[str, tuple[float | None, float | None]]  # row key -> (full context, compressed)
    metrics: dict[str, Any]

    @property
    def knob_text(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.knobs.items()) or "-"

    def value(self, key: str) -> float | None:
        return self.rows.get(key, (None, None))[1]

    def savings_and(self, key: str) -> tuple[float, float] | None:
        """(realized savings, the row's value), when both are known."""
        savings, value = self.value("savings"), self.value(key)
        return None if savings is None or value is None else (savings, value)


def pareto_front(points: Sequence[Point]) -> set[int]:
    """Indices of the points no other point matches or beats in both savings and retention."""
    known = {n: xy for n, p in enumerate(points) if (xy := p.savings_and("retention")) is not None}
    return {n for n, (s, r) in known.items()
            if not any(m != n and s2 >= s and r2 >= r and (s2, r2) != (s, r) for m, (s2, r2) in known.items())}


def at_savings(points: Sequence[Point], savings: float, key: str) -> float | None:
    """A method's ``key`` value at ``savings``, interpolated between the two sweep points
    around it; None outside the savings its sweep reached."""
    known = sorted(xy for p in points if (xy := p.savings_and(key)) is not None)
    for (s0, v0), (s1, v1) in zip(known, known[1:]):
        if s0 <= savings <= s1:
            return v0 if s1 == s0 else v0 + (v1 - v0) * (savings - s0) / (s1 - s0)
    return next((v for s, v in known if s == savings), None)


def full_context_line(point: Point) -> str:
    """Layer B under the full context (the same for every point): what the deltas start from."""
    recall, logprob = point.rows["answer-recall"][0], point.rows["answer-logprob"][0]
    return (f"Layer B, full context: answers recalled {number(recall)}, answer log-probability "
            f"{number(logprob)} nats per token")


def pareto_table(points: Sequence[Point], layer_b: bool) -> str:
    front = pareto_front(points)
    headers = ["method", "knob", "savings", "retention", "verbatim", "paraphrase", "low-surprisal"]
    headers += ["recall delta", "log-prob delta"] if layer_b else []
    lines = []
    for n, p in enumerate(points):
        line = [p.method, p.knob_text, number(p.value("savings")), *(number(p.value(k)) for k in COLUMNS)]
        if layer_b:
            pairs = (p.rows.get(key, (None, None)) for key in ("answer-recall", "answer-logprob"))
            line += [delta(compressed, full) for full, compressed in pairs]  # compressed - full
        lines.append(line + ["*" if n in front else ""])
    return table([*headers, "Pareto"], lines)


def matched_table(points: Sequence[Point]) -> str:
    """Retention overall / paraphrase of each method at common savings levels."""
    methods = list(dict.fromkeys(p.method for p in points))
    lines = []
    for method in methods:
        mine = [p for p in points if p.method == method]
        if len(mine) < 2:  # a single point (identity) has no range to interpolate in
            continue
        cells = []
        for level in MATCHED_SAVINGS:
            overall, paraphrase = at_savings(mine, level, "retention"), at_savings(mine, level, "retention-paraphrase")
            cells.append(NA if overall is None else f"{overall:.2f} / {number(paraphrase, 2)}")
        lines.append([method, *cells])
    return table(["method", *(f"at {level:.0%} savings" for level in MATCHED_SAVINGS)], lines)

