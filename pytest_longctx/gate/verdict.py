"""One check's verdict (``Verdict``): the model's and the baseline's values, the threshold, its uncertainty, how
sequential reading settled it (``Settling``), and the words every report prints (PASS, FAIL, n/a, not needed)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pytest_longctx.gate.damage import Drift
from pytest_longctx.gate.outcome import FAIL, PASS
from pytest_longctx.gate.specs import FOLLOW, RETAINED
from pytest_longctx.gate.uncertainty import needed_items
from pytest_longctx.numbers import NA, meets, number

NOT_NEEDED = "not needed"  # the word of a check sequential reading left open: its test fails on another check

# how sequential reading (gate/sequential/) settled a check
BOUNDS = "bounds"  # exact: no outcome of the unread items can change its verdict
TESTED = "confidence sequence"  # confident: an anytime-valid test at alpha shows it within or beyond its threshold
READ_THROUGH = "read through"  # exact: its every item read; the verdict is the point estimate's
NOT_SETTLED = "not settled"  # confident: the selection ran out first; the point estimate's verdict stands
MOOT = "moot"  # left open: its test (the row or cell) already fails on another check
NA_AT_START = "n/a"  # no item can count anything in it: n/a whatever is read, so nothing is read for it


def verdict_word(passed: bool | None) -> str:
    """PASS, FAIL, or n/a for a check that does not apply (None)."""
    return NA if passed is None else PASS if passed else FAIL


@dataclass(frozen=True)
class Settling:
    """How sequential reading settled a check (docs/metrics.md#sequential-reading): after how many of its items
    and their tokens, how, on which word, and the figures it rests on."""

    mode: str  # exact or confident
    how: str  # BOUNDS, TESTED, READ_THROUGH, NOT_SETTLED, MOOT or NA_AT_START
    word: str | None  # the verdict settled on; None where the point estimate over the items read stands (or, MOOT, none)
    items: int  # the check's items read when it was settled
    of_items: int  # the check's items in the selection
    tokens: int  # the tokens its unit's reading had forwarded by then
    of_tokens: int  # of those reading every item of the unit forwards
    detail: str = ""  # what it rests on: the range still possible, or the test's e-values

    @property
    def was_open(self) -> bool:
        """Whether reading had anything to settle: not n/a from the start."""
        return self.how != NA_AT_START

    def text(self) -> str:
        """``settled FAIL after 1 of 8 items (2,101 of 16,790 tokens), exact: possible kl 0.225 to inf, needs <= 0.050``."""
        read = f"{self.items} of {self.of_items} items ({self.tokens:,} of {self.of_tokens:,} tokens)"
        said = {BOUNDS: f"settled {self.word} after {read}, {self.mode}",
                TESTED: f"settled {self.word} after {read}, {self.mode} ({TESTED})",
                READ_THROUGH: f"read through ({read}), {self.mode}",
                NOT_SETTLED: f"not settled after {read}, {self.mode}; the point estimate decides",
                MOOT: f"not needed after {read}, {self.mode}",
                NA_AT_START: f"n/a, not read for ({self.of_items} items), {self.mode}"}[self.how]
        return f"{said}: {self.detail}" if self.detail else said

    def to_json(self) -> dict[str, Any]:
        return {"mode": str(self.mode), "how": self.how, "word": self.word, "items": self.items, "of_items": self.of_items,
                "tokens": self.tokens, "of_tokens": self.of_tokens, "detail": self.detail}

    @classmethod
    def from_json(cls, found: dict[str, Any]) -> Settling:
        return cls(found["mode"], found["how"], found["word"], found["items"], found["of_items"], found["tokens"],
                   found["of_tokens"], found["detail"])


@dataclass
class Verdict:
    """One check of a row, cell or item: the model's and the baseline's values, the threshold, pass
    or fail."""

    key: str
    label: str  # the row name or a cell's description
    metric: str
    model: float | None
    baseline: float | None
    threshold: float  # the model value must reach this
    rule: str  # how the threshold came about
    losers: list[str] = field(default_factory=list)
    reference: str = "baseline"  # what ``baseline`` is the value of (compressor gate: the full context)
    # uncertainty (gate/uncertainty.py), where the per-item figures are at hand
    interval: tuple[float, float] | None = None  # paired bootstrap 95 % interval of model - baseline over items
    items: int | None = None  # the items sampled
    mdd: float | None = None  # minimum detectable drop of the selection
    lost: int | None = None  # McNemar, hit rows: targets the baseline hit and the model missed
    gained: int | None = None  # and the reverse
    p: float | None = None  # the two-sided exact McNemar p
    alpha: float | None = None  # --longctx-alpha: fail only on a significant shortfall
    bound: float | None = None  # with alpha: the one-sided (1 - alpha) upper bound of the margin (model - threshold)
    at_most: bool = False  # the value must stay at or below the threshold (drift), not reach it
    damage: Drift | None = None  # the row's drift figures and damage kind, where known
    floor: float | None = None  # the least value the metric can take (an accuracy's or a share's 0), where it has one
    settling: Settling | None = None  # sequential reading: how the check was settled (gate/sequential/)

    @property
    def vacuous(self) -> bool:
        """The threshold lies at or below any value the model can take: the check cannot fail (the
        baseline leaves no more than the allowed drop to lose). A model with no value where the baseline
        has one (its targets non-finite) still fails."""
        return self.model is not None and not self.at_most and self.floor is not None and self.threshold <= self.floor

    @property
    def applicable(self) -> bool:
        """n/a when neither side has a value (e.g. a rules cell with no counted target), or when the
        check cannot fail."""
        return (self.model is not None or self.baseline is not None) and not self.vacuous and not self.moot

    @property
    def moot(self) -> bool:
        """Sequential reading left it open: its test already fails on another check."""
        return self.settling is not None and self.settling.how == MOOT

    def why_not_applicable(self, min_effect: float) -> str:
        """Why the check is n/a, for the test that skips it."""
        if self.vacuous:
            return (f"the baseline's {self.metric} {number(self.baseline)} leaves no more than the allowed drop to lose "
                    f"(threshold {self.threshold:g}): the check cannot fail")
        return (f"no counted target (|eff_ref| >= {min_effect:g} nat)" if self.metric in (RETAINED.name, FOLLOW.name)
                else "no scored item")

    @property
    def within(self) -> bool:
        """The point estimate is on the right side of the threshold."""
        assert self.model is not None
        return meets(self.model, self.threshold, self.at_most)

    @property
    def passed(self) -> bool:
        """A value the baseline has and the model cannot produce (every target non-finite or
        unscored) fails."""
        if self.settling is not None and self.settling.word in (PASS, FAIL):  # what sequential reading settled
            return self.settling.word == PASS
        if self.model is None:
            return self.baseline is None
        if self.within:
            return True
        # --longctx-alpha: beyond the threshold, but not significantly (without a bound: the point rule)
        return self.alpha is not None and self.bound is not None and self.bound >= 0

    @property
    def allowed(self) -> float | None:
        """How far the value may move from the baseline's: the allowed drop of a relative
        threshold, the distance from the baseline to an absolute one (drift: the rise allowed)."""
        if self.baseline is None:
            return None
        return self.threshold - self.baseline if self.at_most else self.baseline - self.threshold

    @property
    def needs(self) -> str:
        """``>= 0.512`` or, for a value that must stay low, ``<= 0.050``."""
        return f"{'<=' if self.at_most else '>='} {self.threshold:.3f}"

    def uncertainty_text(self) -> str:
        """``interval [-0.19, -0.04] over 8 items; McNemar lost 5 / gained 1, p = 0.22``."""
        parts = []
        if self.interval is not None:
            parts.append(f"interval [{self.interval[0]:.2f}, {self.interval[1]:.2f}] over {self.items} items")
        elif self.items is not None:
            parts.append(f"no interval ({self.items} item{'' if self.items == 1 else 's'} to resample)")
        if self.lost is not None and self.gained is not None and self.p is not None:
            parts.append(f"McNemar lost {self.lost} / gained {self.gained}, p = {self.p:.2g}")
        if self.alpha is not None and self.model is not None and not self.within:
            if self.bound is None:
                parts.append(f"alpha {self.alpha:g}: no bound, judged by the point estimate")
            else:
                significant = "significant" if self.bound < 0 else "not significant"
                margin = f"threshold - {self.metric}" if self.at_most else f"{self.metric} - threshold"
                parts.append(f"alpha {self.alpha:g}: shortfall {significant} (upper {1 - self.alpha:.0%} bound of "
                             f"{margin} {self.bound:+.3f})")
        return "; ".join(parts)

    @property
    def word(self) -> str:
        """PASS, FAIL, n/a when the model has no value to judge, or ``not needed`` (sequential reading left it open)."""
        return NOT_NEEDED if self.moot else verdict_word(self.passed if self.applicable else None)

    def to_json(self, damage: str | None = None) -> dict[str, Any]:
        """The check as every results file keeps it: its values, threshold and word, its uncertainty, and
        ``damage``, its row's damage kind where the row fails (``Evaluation.verdicts_json``)."""
        return {"key": self.key, "label": self.label, "metric": self.metric, "model": self.model, "baseline": self.baseline,
                "reference": self.reference, "threshold": self.threshold, "rule": self.rule, "at_most": self.at_most,
                "verdict": self.word, "interval": self.interval, "items": self.items, "mdd": self.mdd, "lost": self.lost,
                "gained": self.gained, "p": self.p, "alpha": self.alpha, "bound": self.bound, "losers": self.losers,
                "damage": damage, "settled": self.settling.to_json() if self.settling is not None else None}

    def message(self) -> str:
        head = (f"{self.label}: {self.metric} {number(self.model)} ({self.reference} {number(self.baseline)}), "
                f"needs {self.needs} ({self.rule})")
        if self.model is None and self.baseline is not None:
            head += f"; the model has no value where the {self.reference} has one (its targets were non-finite or unscored)"
        uncertainty = self.uncertainty_text()
        if uncertainty:
            head += f"; {uncertainty}"
        if self.damage is not None and self.damage.kind:
            head += f"; damage {self.damage.text()}"
        if self.losers:
            head += "; lost the most: " + "; ".join(self.losers)
        if self.settling is not None:
            head += f"; {self.settling.text()}"
        return head


def checks_word(verdicts: list[Verdict]) -> str:
    """The word of several checks of one place: FAIL when any fails, PASS when all that
    apply pass, n/a when none applies, nothing when there is no check."""
    applicable = [v for v in verdicts if v.applicable]
    if not applicable:
        return NA if verdicts else ""
    return verdict_word(all(v.passed for v in applicable))


def too_small(verdict: Verdict) -> str | None:
    """A warning when the selection cannot detect the drop the check allows: its minimum
    detectable drop exceeds the allowed one (docs/metrics.md#uncertainty)."""
    allowed = verdict.allowed
    if verdict.mdd is None or verdict.items is None or allowed is None or allowed <= 0 or verdict.mdd <= allowed:
        return None
    return (f"{verdict.key}: the selection is too small to gate it: over {verdict.items} items it detects a drop of "
            f"{verdict.mdd:.3f} (power 0.8 at 0.05), the check allows {allowed:.3f}; about "
            f"{needed_items(verdict.items, verdict.mdd, allowed)} items would be needed")

