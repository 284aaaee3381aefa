"""How sure a compressor's retention and savings are: 95 % bootstrap intervals over the
sessions (the unit of sampling), by the model gate's bootstrap (``gate/uncertainty.py``:
``scipy.stats.bootstrap``, percentile, 2,000 resamples, a fixed seed). Both figures are
ratios of sums over sessions (retained facts / facts; compressed / full tokens), so each
session's numerator and denominator are resampled together; the paired form is given a
reference of zero, which makes its difference the value itself."""
from __future__ import annotations

from typing import Sequence

from pytest_longctx.gate.uncertainty import Sample, difference
from pytest_longctx.metrics.faithfulness import RETAINED_FACTS, Outcome

Interval = tuple[float, float]


def _interval(pairs: list[tuple[float, float]]) -> Interval | None:
    found = difference(Sample.of((num, den, 0.0, den) for num, den in pairs))
    return None if found is None else found[0]


def retention_interval(outcomes: Sequence[Outcome]) -> Interval | None:
    """Of retained facts / facts; a failed session keeps none of its facts."""
    return _interval([(o[RETAINED_FACTS] if o["error"] is None else 0, o["facts"]) for o in outcomes])


def savings_interval(outcomes: Sequence[Outcome]) -> Interval | None:
    """Of 1 - compressed / full rendered-chat tokens, over the sessions compressed."""
    found = _interval([(o["tokens_compressed"], o["tokens_full"]) for o in outcomes if o["error"] is None])
    return None if found is None else (1 - found[1], 1 - found[0])
