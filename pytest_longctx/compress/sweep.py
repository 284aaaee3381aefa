"""Compressors compared at matched realized savings (docs/metrics.md#faithfulness-of-context-compressors), never at matched knobs:
each method runs a sweep of one knob; every point's savings and retention are
measured; the Pareto front over (savings, retention) is marked, and each method's
retention is interpolated at common savings levels."""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from pytest_longctx.compress.interface import parse_value
from pytest_longctx.compress.rows import RowSpec
from pytest_longctx.data.records import FaithfulnessItem
from pytest_longctx.errors import LongctxError
from pytest_longctx.numbers import NA, delta, number
from pytest_longctx.options.table import COMPRESSORS
from pytest_longctx.parse import comma_list
from pytest_longctx.reports.format import table

# A knob sweep per built-in method and adapter, spanning light to heavy compression of
# the builtin sessions (about 900 tokens each; tool-heavy ones 5k to 30k).
DEFAULT_SWEEPS: dict[str, dict[str, list[Any]]] = {
    "identity": {},
    "last_tokens": {"tokens": [512, 256, 128]},
    "last_messages": {"count": [12, 8, 4]},
    "message_relevance": {"ratio": [0.25, 0.5, 0.75]},
    "sentence_relevance": {"ratio": [0.25, 0.5, 0.75]},
    "selective_context": {"ratio": [0.25, 0.5, 0.75, 0.9]},
    "ctxgate": {"budget_share": [0.9, 0.7, 0.5, 0.3]},
    "tooltrim": {"max_tokens": [1024, 512, 256, 128]},
    "llmlingua": {"rate": [0.7, 0.5, 0.3]},
}
DEFAULT_METHODS = COMPRESSORS  # compress-bench --methods: every built-in
MATCHED_SAVINGS = (0.25, 0.5, 0.75, 0.9)
# row key -> column header of the points table
COLUMNS = {"retention-verbatim": "verbatim", "retention-paraphrase": "paraphrase",
           "retention-low_surprisal": "low-surprisal", "retention-tool_heavy": "tool-heavy"}
ANCHORED = "(a)"  # a matched value read on the segment from the identity anchor to the method's lightest point


def parse_sweep(text: str) -> tuple[str, str, list[Any]]:
    """``METHOD:KNOB=V1,V2,...`` (METHOD a built-in or module:function)."""
    method, _, assignment = text.rpartition(":")
    knob, sep, values = assignment.partition("=")
    if not method or not sep or not knob.isidentifier() or not values.strip():
        raise LongctxError(f"--sweep {text!r}: expected METHOD:KNOB=V1,V2,... e.g. last_tokens:tokens=256,512")
    try:
        return method, knob, [parse_value(v) for v in comma_list(values, "256,512")]
    except ValueError as exc:
        raise LongctxError(f"--sweep {text!r}: {exc}") from None


def method_sweeps(methods: Sequence[str] | None, texts: Sequence[str], with_model: bool) -> dict[str, dict[str, list[Any]]]:
    """Each method's sweep: the ``--sweep`` texts given for it, else its default one
    (no methods: the default ones, selective_context only ``with_model``)."""
    chosen = methods or [m for m in DEFAULT_METHODS if with_model or m != "selective_context"]
    given: dict[str, dict[str, list[Any]]] = {}
    for text in texts:
        method, knob, values = parse_sweep(text)
        if method not in chosen:
            raise LongctxError(f"--sweep {text}: {method} is not among the methods ({', '.join(chosen)})")
        given.setdefault(method, {})[knob] = values
    return {m: given.get(m, DEFAULT_SWEEPS.get(m, {})) for m in chosen}


def knob_grid(sweep: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """Every combination of the swept knobs' values (one point when nothing is swept)."""
    names = list(sweep)
    return [dict(zip(names, values)) for values in itertools.product(*(sweep[n] for n in names))]


@dataclass
class Point:
    """One compressor at one knob setting: its rows and metrics, a point of the Pareto table."""

    method: str  # its short display name
    knobs: dict[str, Any]
    rows: dict[str, tuple[float | None, float | None]]  # row key -> (full context, compressed)
    metrics: dict[str, Any]  # per split, with every breakdown
    overall: dict[str, Any] = field(default_factory=dict)  # compression_summary over every session
    intervals: dict[str, tuple[float, float] | None] = field(default_factory=dict)  # 95 % over sessions
    seconds: float | None = None  # compressing every session at this point

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


def short_names(specs: Sequence[str]) -> dict[str, str]:
    """A display name per compressor: a built-in's or an entry point's name as it is,
    ``module:function`` as the function's name (the module's last part for a function named
    ``compress``), unless two would show the same."""
    def short(spec: str) -> str:
        module, sep, function = spec.rpartition(":")
        if not sep:
            return spec
        return module.rpartition(".")[2] if function == "compress" else function

    names = {spec: short(spec) for spec in specs}
    taken = list(names.values())
    return {spec: name if taken.count(name) == 1 else spec for spec, name in names.items()}


def _curve(points: Sequence[Point], key: str, anchored: bool) -> list[tuple[float, float]]:
    """A method's (savings, value) points sorted; with ``anchored``, starting at the identity
    anchor (no savings, the full context's value) when none of its own is there."""
    known = sorted(xy for p in points if (xy := p.savings_and(key)) is not None)
    full = next((p.rows[key][0] for p in points if key in p.rows and p.rows[key][0] is not None), None)
    if not anchored or full is None or (known and known[0][0] <= 0.0):
        return known
    return [(0.0, full), *known]


def at_savings(points: Sequence[Point], savings: float, key: str, anchored: bool = False) -> float | None:
    """A method's ``key`` value at ``savings``, interpolated between the two points around
    it; None outside the savings its points reach. With ``anchored``, its curve starts at
    the identity anchor: a mix of the method and no compression on a share of the sessions
    reaches every point of that segment."""
    known = _curve(points, key, anchored)
    for (s0, v0), (s1, v1) in zip(known, known[1:]):
        if s0 <= savings <= s1:
            return v0 if s1 == s0 else v0 + (v1 - v0) * (savings - s0) / (s1 - s0)
    return next((v for s, v in known if s == savings), None)


def full_context_line(point: Point) -> str:
    """Layer B under the full context (the same for every point): what the deltas start from."""
    recall, logprob = point.rows["answer-recall"][0], point.rows["answer-logprob"][0]
    return (f"Layer B, full context: answers recalled {number(recall)}, answer log-probability "
            f"{number(logprob)} nats per token")


def _with_interval(value: float | None, interval: tuple[float, float] | None) -> str:
    return number(value) + (f" [{interval[0]:.2f}, {interval[1]:.2f}]" if interval else "")


def _structure(point: Point) -> str:
    """The structural changes a point made, summed over its sessions ("-" for none)."""
    changes = point.overall.get("structure") or {}
    shown = [f"{label} {changes[key]}" for key, label in (("merged", "merged"), ("roles_changed", "roles"),
                                                          ("system_inserted", "system+")) if changes.get(key)]
    return ", ".join(shown) or "-"


def cell_sizes(items: Sequence[FaithfulnessItem], specs: Sequence[RowSpec]) -> dict[str, int]:
    """How many sessions each row covers."""
    return {spec.key: sum(spec.chosen(item) for item in items) for spec in specs}


def pareto_table(points: Sequence[Point], layer_b: bool, sizes: Mapping[str, int] | None = None) -> str:
    """Every point: savings (rendered chat, with its interval; of contents alone; the mean of
    the sessions' own), retention (with its interval, with expansion where a compressor
    expands references, per cell with its size), structural changes, time, Layer B deltas."""
    front = pareto_front(points)
    sizes = sizes or {}
    columns = [key for key in COLUMNS if sizes.get(key, 1)]
    expanding = any(p.overall.get("retention_expanded") is not None for p in points)
    headers = ["method", "knob", "savings [95%]", "content", "per-session", "retention [95%]"]
    headers += ["expanded"] if expanding else []
    headers += [f"{COLUMNS[key]}" + (f" n={sizes[key]}" if key in sizes else "") for key in columns]
    headers += ["structure", "seconds"] + (["recall delta", "log-prob delta"] if layer_b else [])
    lines = []
    for n, p in enumerate(points):
        line = [p.method, p.knob_text, _with_interval(p.value("savings"), p.intervals.get("savings")),
                number(p.overall.get("content_savings")), number(p.overall.get("session_savings")),
                _with_interval(p.value("retention"), p.intervals.get("retention"))]
        line += [number(p.overall.get("retention_expanded"))] if expanding else []
        line += [number(p.value(k)) for k in columns]
        line += [_structure(p), NA if p.seconds is None else f"{p.seconds:.1f}"]
        if layer_b:
            pairs = (p.rows.get(key, (None, None)) for key in ("answer-recall", "answer-logprob"))
            line += [delta(compressed, full) for full, compressed in pairs]  # compressed - full
        lines.append(line + ["*" if n in front else ""])
    return table([*headers, "Pareto"], lines)


def _reached(points: Sequence[Point]) -> str:
    """The savings a method's points span; for a single point, what it retained there."""
    found = sorted(s for p in points if (s := p.value("savings")) is not None)
    if not found:
        return NA
    if len(points) == 1:
        return f"{found[0]:.2f}: {number(points[0].value('retention'), 2)} / {number(points[0].value('retention-paraphrase'), 2)}"
    return f"{found[0]:.2f}-{found[-1]:.2f}"


def matched_table(points: Sequence[Point]) -> str:
    """Retention overall / paraphrase of each method at common savings levels, every method
    on a curve from the identity anchor (no savings, the full context's retention) through
    its own points, so a method measured at one point only is placed too; a value read on
    the segment from the anchor is marked ``(a)``."""
    lines = []
    for method in dict.fromkeys(p.method for p in points):
        mine = [p for p in points if p.method == method]
        lightest = min((s for p in mine if (s := p.value("savings")) is not None), default=None)
        cells = []
        for level in MATCHED_SAVINGS:
            overall = at_savings(mine, level, "retention", anchored=True)
            paraphrase = at_savings(mine, level, "retention-paraphrase", anchored=True)
            mark = f" {ANCHORED}" if overall is not None and lightest is not None and level < lightest else ""
            cells.append(NA if overall is None else f"{overall:.2f} / {number(paraphrase, 2)}{mark}")
        lines.append([method, _reached(mine), *cells])
    return table(["method", "measured at", *(f"at {level:.0%} savings" for level in MATCHED_SAVINGS)], lines)
