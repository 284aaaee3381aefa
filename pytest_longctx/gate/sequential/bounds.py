"""What a check's value over the whole selection can still be once some items are read (``exact``), and each
item's margin and the two bettors that test its mean (``confident``)."""
from __future__ import annotations

import math
from typing import Callable, Mapping

from pytest_longctx.gate.sequential.checks import Check, Figure
from pytest_longctx.gate.specs import Shape
from pytest_longctx.metrics.confidence_sequence import Bettor
from pytest_longctx.numbers import NA

# A read's KL_K is at least -log Q, Q the candidate's probability of the baseline's 16 tokens and its rest bucket:
# 1 up to float32 rounding, so no read goes below -1e-4 nats. A read item that does breaks the bound, and its
# check is read through.
KL_FLOOR = -1e-4


UNKNOWN = frozenset({"?"})  # a check whose value no bound limits yet


def unread_caps(check: Check, read: Mapping[int, Figure]) -> float:
    return sum(cap for n, cap in enumerate(check.caps) if n not in read)


def not_applicable(check: Check) -> bool:
    """No item of the check can count anything (every cap 0: no counted target, no far read, an item its baseline
    counts nothing of) and the check has no value without (the baseline has none either): its verdict is n/a
    whatever is read, so nothing need be."""
    return not any(check.caps) and check.word(None) == NA


def possible_words(check: Check, read: Mapping[int, Figure]) -> frozenset[str]:
    """The verdicts still possible for ``check`` once the items at these indices are read (their figures), every
    other item counting anything it can: one word means the check is settled."""
    unread = unread_caps(check, read)
    num, den = sum(f[0] for f in read.values()), sum(f[1] for f in read.values())
    if den + unread == 0:
        return frozenset({check.word(None)})
    shape = check.spec.shape
    if shape in (Shape.RATIO, Shape.ITEM):  # no bound before its last item is read
        return UNKNOWN if unread else frozenset({check.word(num / den if den else None)})
    if shape == Shape.SHARE:
        words = {check.word(num / (den + unread)), check.word((num + unread) / (den + unread))}
    else:
        if any(f[0] < KL_FLOOR * f[1] for f in read.values()):  # the floor does not hold: no bound from it
            return UNKNOWN if unread else frozenset({check.word(num / den)})
        lowest = (num + KL_FLOOR * unread) / (den + unread)
        words = {check.word(min(lowest, num / den) if den else lowest),
                 check.word(math.inf if unread else num / den)}
    if den == 0:  # every unread item may have nothing to count: no value at all
        words.add(check.word(None))
    return frozenset(words)


def range_text(check: Check, read: Mapping[int, Figure]) -> str:
    """The values still possible, in words: ``possible kl 0.225 to inf, needs <= 0.050``."""
    unread = unread_caps(check, read)
    num, den = sum(f[0] for f in read.values()), sum(f[1] for f in read.values())
    shape = check.spec.shape
    if shape in (Shape.RATIO, Shape.ITEM) or den + unread == 0:
        return ""
    if shape == Shape.SHARE:
        low, high = num / (den + unread), (num + unread) / (den + unread)
    else:
        low = (num + KL_FLOOR * unread) / (den + unread)
        low, high = (min(low, num / den) if den else low), (math.inf if unread else num / den)
    return f"possible {check.metric} {low:.3f} to {high:.3f}, needs {'<=' if check.spec.at_most else '>='} {check.threshold:.3f}"


# ------------------------------------------------------------------ the confidence sequence


def margin(check: Check, index: int, figure: Figure) -> float:
    """One item's margin: its mean over the population of items is at least 0 exactly when the check passes there
    (a share against ``baseline - drop``: hits - baseline hits + drop x scored; against an absolute threshold:
    hits - threshold x counted; drift: threshold x reads - KL sum)."""
    num, den = figure
    if check.spec.at_most:
        return check.threshold * den - num
    if check.drop is not None:
        return num - check.base[index] + check.drop * den
    return num - check.threshold * den


def margin_range(check: Check) -> tuple[float, float]:
    """The least and most an item's margin can be, from the most its items can count (drift: no most KL)."""
    most = max(check.caps, default=0.0)
    if check.spec.at_most:
        return -math.inf, check.threshold * most
    if check.drop is not None:
        return -most, (1.0 + check.drop) * most
    return -check.threshold * most, (1.0 - check.threshold) * most


def bettors(check: Check, alpha: float) -> tuple[Bettor | None, Bettor | None, Callable[[float], tuple[float, float]]]:
    """(the bettor whose win shows a PASS, the one whose win shows a FAIL, margin -> what each bets on): the margin
    in [0, 1] units where both ends are known (its null at the mean 0); drift's, without an upper end, in units of
    its upper end, FAIL only. A side without room to bet on (a range that does not straddle 0), and a check whose
    items' margins have no bound at all (a ratio of signed sums, one item's own figure), get None."""
    if check.spec.shape not in (Shape.SHARE, Shape.MEAN):
        return None, None, lambda x: (0.0, 0.0)
    low, high = margin_range(check)
    if math.isinf(low):
        if high <= 0:
            return None, None, lambda x: (0.0, 0.0)
        return None, Bettor(1.0, alpha), lambda x: (0.0, (high - x) / high)
    if not low < 0 < high:
        return None, None, lambda x: (0.0, 0.0)
    null = -low / (high - low)
    return (Bettor(null, alpha), Bettor(1.0 - null, alpha),
            lambda x: ((x - low) / (high - low), (high - x) / (high - low)))
