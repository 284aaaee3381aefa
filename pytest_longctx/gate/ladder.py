"""A ladder of candidates judged against one baseline, as figures: each candidate's rung (what it is, its size on
disk, its drift, its verdict and what judging it cost), the rungs ordered by size, the Pareto frontier (no smaller
candidate drifts less far back), the smallest candidate that passes, where the original itself is a rung its drift as the
run's noise floor, and the racing order a candidate may read in (first the items the candidates before it drifted most
on). Pure: the rungs are made from the finished runs in reports/ladder.py."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from pytest_longctx.data.records import ItemKey
from pytest_longctx.gate.sequential.checks import item_digest
from pytest_longctx.gate.verdict import PASS
from pytest_longctx.metrics.item_figures import ItemFigures

# a drift threshold is "well above" the noise floor when at least this many times the original's own far drift
FLOOR_MARGIN = 2.0


@dataclass(frozen=True)
class Rung:
    """One candidate of a ladder, judged. The drift figures are those of its drift row: of its headline rows with drift
    figures, the one that drifted most far back."""

    candidate: str  # its name in the test ids (``facts-2k[w8a8]``)
    model: str  # the model as given (credentials removed)
    what: str  # what compresses it, as its identity record names it (tool, scheme, bits); empty for none or unknown
    bytes: int | None  # its weights on disk; None where unknown
    verdict: str  # PASS or FAIL: what a run of it alone ends with
    why: str | None = None  # what kept it from being judged (it did not load, the baseline refused it), else None
    drift_row: str | None = None  # the row its drift figures are of
    far: float | None = None  # mean KL_K at far reads, nats
    near: float | None = None
    control: float | None = None
    excess: float | None = None  # far minus near (or control) drift
    interval: tuple[float, float] | None = None  # the excess's paired bootstrap 95 % interval
    against: str = ""  # what far drift is compared with: near or control
    drift_threshold: float | None = None  # the drift row's KL threshold, where its drift is gated
    damage: str | None = None  # the damage kind of its worst failing row's drift, where one fails
    rows: dict[str, float | None] = field(default_factory=dict)  # its headline rows
    items: int = 0  # items read
    tokens: int = 0  # tokens forwarded
    seconds: float = 0.0  # loading and reading it
    original: bool = False  # the baseline's own weights, compressed alike: its drift is the run's noise floor

    @property
    def passed(self) -> bool:
        return self.verdict == PASS

    def to_json(self, frontier: bool) -> dict[str, Any]:
        return {"candidate": self.candidate, "model": self.model, "what": self.what, "bytes": self.bytes,
                "verdict": self.verdict, "why": self.why, "frontier": frontier, "original": self.original,
                "drift_row": self.drift_row, "far_kl": self.far, "near_kl": self.near, "control_kl": self.control,
                "far_excess": self.excess, "far_excess_interval": list(self.interval) if self.interval else None,
                "excess_against": self.against or None, "drift_threshold": self.drift_threshold, "damage": self.damage,
                "rows": self.rows, "items_read": self.items, "tokens_forwarded": self.tokens,
                "seconds": round(self.seconds, 3)}


def by_size(rungs: list[Rung]) -> list[Rung]:
    """The rungs smallest first; those whose size is unknown last, in the order given."""
    return sorted(rungs, key=lambda r: (r.bytes is None, r.bytes or 0))


def frontier(rungs: list[Rung]) -> set[str]:
    """The candidates on the Pareto frontier of size against far drift: no candidate smaller on disk drifts less far
    back. A rung whose size or far drift is unknown is on no frontier, and hides no other."""
    known = [(r.candidate, r.bytes, r.far) for r in rungs if r.bytes is not None and r.far is not None]
    return {name for name, size, far in known if not any(smaller < size and less < far for _, smaller, less in known)}


@dataclass(frozen=True)
class Choice:
    """The smallest candidate that passes, or None and why there is none."""

    candidate: str | None
    reason: str

    def to_json(self) -> Any:
        return self.candidate if self.candidate is not None else None


def smallest_passing(rungs: list[Rung]) -> Choice:
    """The passing candidate smallest on disk (the first given among equals)."""
    passing = [r for r in rungs if r.passed]
    if not passing:
        return Choice(None, f"none of the {len(rungs)} candidates passed")
    sized = [r for r in passing if r.bytes is not None]
    if not sized:
        return Choice(None, f"{', '.join(r.candidate for r in passing)} passed, but the size of none of them on disk is "
                            "known (a hub id the Hugging Face cache does not hold, a server)")
    best = by_size(sized)[0]
    unsized = [r.candidate for r in passing if r.bytes is None]
    also = f"; {', '.join(unsized)} passed too, size unknown" if unsized else ""
    return Choice(best.candidate, f"{best.candidate} is the smallest candidate that passes ({best.bytes:,} bytes){also}")


def noise_floor(rungs: list[Rung]) -> list[str]:
    """What the original's own drift, where it is a rung, says of the run: its far drift is what the engine, dtype or
    device alone moves (the run's noise floor), and a drift threshold not well above it (FLOOR_MARGIN times) gates
    the noise as much as the compression."""
    lines = []
    for rung in rungs:
        if not rung.original or rung.far is None:
            continue
        lines.append(f"noise floor: {rung.candidate}, the original's weights, drifts {rung.far:.4g} nats far back "
                     f"({rung.drift_row}) against its baseline: the drift of reading it here, not of compressing it")
        if rung.drift_threshold is not None and rung.drift_threshold < FLOOR_MARGIN * rung.far:
            lines.append(f"the drift threshold {rung.drift_threshold:g} is not well above that floor (less than "
                         f"{FLOOR_MARGIN:g} times it): remake the baseline with this run's engine, dtype and device, or "
                         "raise --longctx-max-kl")
    return lines


def item_drift(figures: ItemFigures) -> float | None:
    """How far a candidate moved on one item: its mean KL_K at far reads where it has drift figures, else the
    log-probability it lost per scored token (its item check's figure); None where neither is known."""
    far = figures.drift.far if figures.drift is not None else None
    if far is not None and far.reads:
        return far.kl / far.reads
    return figures.loss


def racing_order(drifts: Mapping[ItemKey, float]) -> Callable[[ItemKey], tuple[int, float, str]]:
    """The rank a candidate reads each set's items by under ``--longctx-ladder-order drift``: first the items the
    candidates before it drifted most on (``drifts``: the largest drift any of them showed on an item), then the rest,
    each by its digest as a run of one model reads them. Made from the earlier candidates' figures alone, before the
    candidate reads, so sequential reading's stopping rule holds as it does for any fixed order (SPEC 3.4)."""
    return lambda key: (0, -drifts[key], item_digest(key)) if key in drifts else (1, 0.0, item_digest(key))
