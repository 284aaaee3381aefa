"""A row's drift and the kind of damage it shows (docs/metrics.md#drift): the candidate's distribution against the baseline's
at far, near and control reads, how much more it moved far back than near (with a paired
interval over items), and what kind of damage that is (docs/metrics.md#damage-kinds).

Control reads see only an item's first 512 tokens: their drift is the floor of general
damage. Far drift is compared like with like, with near reads where every item has them,
else with control reads.

* far-specific: control drift within the threshold, far drift beyond it, and above the
  near (or control) drift beyond the paired interval: the model lost what lies far back;
* general: control drift beyond the threshold, and far drift not significantly more than
  twice the near (or control) drift: the model got worse at everything; or far drift beyond
  the threshold and not significantly above the control drift it is compared with (the
  same drift at every distance, the control reads just within the threshold);
* both: control drift beyond the threshold, and far drift significantly more than twice it;
* none: otherwise: a failing row then rests on hit flips (far drift within the threshold:
  a far excess of a thousandth of a nat can be significant, and is no damage), or on drift
  past the first 512 tokens that is the same near and far.

On one item there is no interval to resample: "significantly" then reads "at all", on the
point estimates, and the text says so (a row sequential reading settled on its first item).

Why twice, once the model is damaged everywhere: KL grows with how sure the baseline was,
and the baseline is surer at a target (an answer, a tool name) than at an ordinary
position of its text, so under damage that hits every read alike, far reads drift more in
nats than control reads do (SmolLM2 with 2-bit weights: 12.4 against 9.3 at 8k).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from pytest_longctx.gate.uncertainty import Sample, difference
from pytest_longctx.metrics.drift import ItemDrift, ReadSums, pooled
from pytest_longctx.metrics.item_figures import ItemFigures
from pytest_longctx.numbers import meets

FAR_SPECIFIC, GENERAL, BOTH, NONE = "far-specific", "general", "both", "none"
Interval = tuple[float, float]


@dataclass(frozen=True)
class GroupDrift:
    """The mean drift of one group of reads (far, near or control)."""

    reads: int
    kl: float | None  # mean KL_K, nats
    same_top1: float | None  # share of reads whose arg-max is the baseline's
    dlogp: float | None  # mean log-probability of the token read, model minus baseline


@dataclass(frozen=True)
class Drift:
    """A row's drift by group, its far-specific difference and its damage kind."""

    items: int  # items with drift figures
    far: GroupDrift
    near: GroupDrift
    control: GroupDrift
    against: str  # what far is compared with: "near" where every item of the row has near reads, else "control"
    difference: float | None  # far - against, mean KL_K
    interval: Interval | None  # its paired bootstrap 95 % interval over items
    doubled: Interval | None  # the interval of far - 2 x against: is far drift more than twice the other?
    dlogp_difference: float | None  # far - against, mean Δ log p
    dlogp_interval: Interval | None
    threshold: float  # the row's kl threshold: control drift beyond it is general damage

    @property
    def on_points(self) -> bool:
        """One item: no paired interval to test the far excess with (sequential reading often settles a failing row
        on its first item), so the kind rests on the point estimates, and its text says so."""
        return self.items < 2

    @property
    def far_excess(self) -> bool:
        """Far drift exceeds the near (or control) drift beyond the paired interval (on one item: at all)."""
        if self.on_points:
            return self.difference is not None and self.difference > 0
        return self.interval is not None and self.interval[0] > 0

    @property
    def far_dominant(self) -> bool:
        """Far drift is significantly more than twice the near (or control) drift (on one item: more at all)."""
        if self.on_points:
            other = self.near if self.against == "near" else self.control
            return self.far.kl is not None and other.kl is not None and self.far.kl > 2 * other.kl
        return self.doubled is not None and self.doubled[0] > 0

    @property
    def floor(self) -> GroupDrift:
        """The reads that tell general damage: the control reads, or the near ones where a row has
        no control reads (rules, agent sessions)."""
        return self.control if self.control.reads else self.near

    def beyond(self, group: GroupDrift) -> bool:
        """The group's drift is beyond the row's threshold."""
        return group.kl is not None and not meets(group.kl, self.threshold, at_most=True)

    @property
    def general(self) -> bool:
        """Drift beyond the threshold where nothing far back matters."""
        return self.beyond(self.floor)

    @property
    def kind(self) -> str:
        """far-specific, general, both or none; empty without far reads (nothing to tell)."""
        if not self.far.reads:
            return ""
        if self.general:
            return BOTH if self.far_dominant else GENERAL
        if not self.beyond(self.far):  # below the threshold drift locates no damage, however significant
            return NONE
        if self.far_excess:
            return FAR_SPECIFIC
        return GENERAL if self.against == "control" else NONE

    def text(self) -> str:
        """The kind with the figures it rests on, e.g. ``far-specific: control drift 0.000 within
        0.050 (near 0.167); far drift 1.803, +1.636 [1.48, 1.82] against near``."""
        kind = self.kind
        if not kind:
            return ""
        said = self._text(kind, "" if self.on_points else "significantly ")
        return said + "; on the point estimates of 1 item (no paired interval to test them)" if self.on_points else said

    def _text(self, kind: str, significantly: str) -> str:
        floor = "control" if self.control.reads else "near"
        level = f"{floor} drift {_n(self.floor.kl)} {'beyond' if self.general else 'within'} {self.threshold:.3f}"
        others = f"near {_n(self.near.kl)}" if self.control.reads else "no control reads"
        excess = f"{_signed(self.difference)} {_interval(self.interval)} against {self.against}"
        doubled = f"far - 2 x {self.against} {_interval(self.doubled)}"
        if kind == FAR_SPECIFIC:
            return f"{kind}: {level} ({others}); far drift {_n(self.far.kl)}, {excess}"
        if kind == GENERAL and not self.general:
            return (f"{kind}: {level} ({others}); far drift {_n(self.far.kl)} beyond it and not {significantly}more than "
                    f"the control drift ({excess})")
        if kind == GENERAL:
            return (f"{kind}: {level} ({others}); far drift {_n(self.far.kl)} not {significantly}more than twice the "
                    f"{self.against} drift ({excess}; {doubled})")
        if kind == BOTH:
            return (f"{kind}: {level} ({others}), and far drift {_n(self.far.kl)} {significantly}more than twice the "
                    f"{self.against} drift ({excess}; {doubled})")
        if not self.beyond(self.far):  # a failing row whose drift is within the threshold: the loss lies elsewhere
            return f"not located by drift: far drift {_n(self.far.kl)} within {self.threshold:.3f} ({floor} {_n(self.floor.kl)}, {others})"
        verdict = "not more" if self.on_points else "not significant"
        return f"not located by drift: {level} ({others}); far drift {_n(self.far.kl)}, {excess}, {verdict}"


def _n(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def _signed(value: float | None) -> str:
    return "n/a" if value is None else f"{value:+.3f}"


def _interval(interval: Interval | None) -> str:
    return "[no interval]" if interval is None else f"[{interval[0]:.2f}, {interval[1]:.2f}]"


def _group(found: Mapping[str, Any]) -> GroupDrift:
    return GroupDrift(found["reads"], found["kl"], found["same_top1"], found["dlogp"])


def excess(summaries: list[ItemDrift], against: str, times: float = 1.0,
           dlogp: bool = False) -> tuple[Interval, float] | None:
    """The paired bootstrap (interval, sd) over items of far minus ``times`` x ``against`` of mean KL_K (``dlogp``:
    of mean Δ log p) per read."""

    def share(sums: ReadSums, scale: float) -> tuple[float, float]:
        return (scale * sums.dlogp, sums.dlogp_reads) if dlogp else (scale * sums.kl, sums.reads)

    sample = Sample.of((*share(s.far, 1.0), *share(s.group(against), times)) for s in summaries)
    return difference(sample)


def summaries_of(per_item: Mapping[str, ItemFigures], keep: Callable[[ItemFigures], bool]) -> list[ItemDrift]:
    """The drift of the items of one set's ``per_item`` that ``keep`` accepts (items without one, read without
    the baseline's top-k or elsewhere, are left out)."""
    return [figures.drift for figures in per_item.values() if figures.drift is not None and keep(figures)]


def row_drift(summaries: list[ItemDrift], threshold: float) -> Drift | None:
    """A row's drift from its items' sums; None without any."""
    if not summaries:
        return None
    groups = pooled(summaries)
    # like with like where every item has near reads to resample; else the control reads every item has
    against = "near" if all(s.near.reads for s in summaries) else "control"
    far, other = groups["far"], groups[against]
    kl_found = excess(summaries, against)
    doubled = excess(summaries, against, times=2.0)
    dlogp_found = excess(summaries, against, dlogp=True)
    return Drift(
        items=len(summaries), far=_group(far), near=_group(groups["near"]), control=_group(groups["control"]), against=against,
        difference=None if far["kl"] is None or other["kl"] is None else far["kl"] - other["kl"],
        interval=kl_found[0] if kl_found else None, doubled=doubled[0] if doubled else None,
        dlogp_difference=None if far["dlogp"] is None or other["dlogp"] is None else far["dlogp"] - other["dlogp"],
        dlogp_interval=dlogp_found[0] if dlogp_found else None, threshold=threshold)
