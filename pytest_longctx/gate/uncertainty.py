"""How sure a verdict is (docs/metrics.md#uncertainty): items are the unit of
sampling, since the targets of one item are correlated.

* a paired bootstrap over items (``scipy.stats.bootstrap``: the same resample for the model
  and the baseline, 2,000 resamples, a fixed seed, percentile 95 % interval) of the
  model-minus-baseline difference of a row's value; a row's value is a ratio of sums over
  items, so the per-item numerators and denominators are resampled;
* an exact McNemar test on the discordant target pairs of a hit row (facts recalled,
  distant tool-call targets right): lost, gained and the two-sided p of
  ``scipy.stats.binomtest(lost, lost + gained, 0.5)``;
* the minimum detectable drop of the selection: ``(z_0.975 + z_0.8) x`` the bootstrap
  standard deviation of the paired difference (power 0.8 at a two-sided 0.05);
* under ``--longctx-alpha A``, the one-sided ``1 - A`` upper bound of
  ``model - threshold`` over the same resamples (the threshold recomputed per resample
  when it is relative to the baseline).

Every bootstrap starts from the same seed, so the numbers are the same in one process, on
an xdist worker and on the controller.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

import numpy as np
from scipy import stats

from pytest_longctx.gate.specs import CheckSpec
from pytest_longctx.metrics.item_figures import ItemFigures

SEED = 14  # every bootstrap draws its resamples from a generator seeded with this
RESAMPLES = 2000
CONFIDENCE = 0.95
POWER = 0.8
Z_DETECT = float(stats.norm.ppf(1 - (1 - CONFIDENCE) / 2) + stats.norm.ppf(POWER))  # z_0.975 + z_0.8 = 2.80


@dataclass(frozen=True)
class Sample:
    """A row's value per item, for the model and the baseline: numerators and denominators
    (the row's value is ``sum(numerators) / sum(denominators)``); items with nothing to count
    on either side are left out."""

    model_num: tuple[float, ...]
    model_den: tuple[float, ...]
    base_num: tuple[float, ...]
    base_den: tuple[float, ...]

    @classmethod
    def of(cls, pairs: Iterable[tuple[float, float, float, float]]) -> Sample:
        kept = [p for p in pairs if p[1] > 0 or p[3] > 0]
        columns = list(zip(*kept)) if kept else [(), (), (), ()]
        return cls(*(tuple(float(x) for x in column) for column in columns))

    @property
    def items(self) -> int:
        return len(self.model_num)

    def arrays(self) -> tuple[np.ndarray, ...]:
        return tuple(np.asarray(x, dtype=float) for x in (self.model_num, self.model_den, self.base_num, self.base_den))


@dataclass(frozen=True)
class Uncertainty:
    """What the bootstrap and McNemar say about one check."""

    items: int  # items sampled
    interval: tuple[float, float] | None = None  # 95 % interval of model - baseline
    sd: float | None = None  # bootstrap standard deviation of model - baseline
    bound: float | None = None  # one-sided (1 - alpha) upper bound of model - threshold (with alpha)
    lost: int | None = None  # McNemar (hit rows): baseline hit, model miss
    gained: int | None = None  # the reverse
    p: float | None = None  # two-sided exact p of lost vs gained

    @property
    def mdd(self) -> float | None:
        """The minimum detectable drop: power 0.8 at a two-sided 0.05."""
        return None if self.sd is None else Z_DETECT * self.sd


def _ratio(num: np.ndarray, den: np.ndarray, axis: int) -> np.ndarray:
    top, bottom = num.sum(axis=axis), den.sum(axis=axis)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(bottom > 0, top / np.where(bottom > 0, bottom, 1.0), np.nan)


def _bootstrap(sample: Sample, statistic: Any, confidence: float) -> Any:
    """scipy's paired percentile bootstrap over the items, from the fixed seed; None with
    fewer than two items or when a resample has nothing to count (a NaN interval)."""
    if sample.items < 2:
        return None
    with warnings.catch_warnings():  # a NaN interval (checked below) is no warning of ours to pass on
        warnings.simplefilter("ignore", stats.DegenerateDataWarning)
        result = stats.bootstrap(sample.arrays(), statistic, paired=True, vectorized=True, axis=-1, method="percentile",
                                 n_resamples=RESAMPLES, confidence_level=confidence,
                                 random_state=np.random.default_rng(SEED))
    low, high = float(result.confidence_interval.low), float(result.confidence_interval.high)
    return None if math.isnan(low) or math.isnan(high) else result


def difference(sample: Sample) -> tuple[tuple[float, float], float] | None:
    """(95 % interval, standard deviation) of the bootstrap of model - baseline."""

    def statistic(mn: np.ndarray, md: np.ndarray, bn: np.ndarray, bd: np.ndarray, axis: int = -1) -> np.ndarray:
        return _ratio(mn, md, axis) - _ratio(bn, bd, axis)

    result = _bootstrap(sample, statistic, CONFIDENCE)
    if result is None:
        return None
    interval = (float(result.confidence_interval.low), float(result.confidence_interval.high))
    return interval, float(result.standard_error)


def upper_bound(sample: Sample, threshold: float, relative_drop: float | None, alpha: float,
                at_most: bool = False) -> float | None:
    """The one-sided ``1 - alpha`` upper bound of the margin model - threshold (``at_most``:
    threshold - model) over the same resamples: the upper end of the two-sided
    ``1 - 2 alpha`` percentile interval. ``relative_drop``: the threshold is the baseline's
    value less this, recomputed per resample; else ``threshold``."""

    def statistic(mn: np.ndarray, md: np.ndarray, bn: np.ndarray, bd: np.ndarray, axis: int = -1) -> np.ndarray:
        model = _ratio(mn, md, axis)
        bound = threshold if relative_drop is None else _ratio(bn, bd, axis) - relative_drop
        return bound - model if at_most else model - bound

    result = _bootstrap(sample, statistic, 1 - 2 * alpha)
    return None if result is None else float(result.confidence_interval.high)


def mcnemar(pairs: Iterable[tuple[bool, bool]]) -> tuple[int, int, float]:
    """(lost, gained, two-sided exact p) over (baseline hit, model hit) pairs of targets."""
    lost = gained = 0
    for base, model in pairs:
        lost += bool(base and not model)
        gained += bool(model and not base)
    p = float(stats.binomtest(lost, lost + gained, 0.5).pvalue) if lost + gained else 1.0
    return lost, gained, p


def needed_items(items: int, mdd: float, allowed: float) -> int:
    """About how many items would bring the minimum detectable drop down to ``allowed``
    (the standard deviation falls as one over the square root of the items)."""
    return math.ceil(items * (mdd / allowed) ** 2)


# ------------------------------------------------------------------ one check over items


def measure(spec: CheckSpec, mine: Mapping[str, ItemFigures], theirs: Mapping[str, ItemFigures],
            keep: Callable[[ItemFigures], bool], threshold: float, relative_drop: float | None,
            alpha: float | None) -> Uncertainty:
    """The uncertainty of one check (``spec``) from both sides' items' figures (item id -> figures): the items
    ``keep`` accepts that both sides hold (drift: the model's, against the baseline's 0), paired."""
    rows, pairs = [], []
    for item_id, figures in mine.items():
        other = theirs.get(item_id)
        model = spec.figure(figures) if keep(figures) else None
        base = spec.baseline_share(model, other) if model is not None else None
        if model is None or base is None:
            continue
        rows.append((model.part, model.whole, base.part, base.whole))
        if spec.hits is not None and other is not None:
            a, b = spec.hits(figures), spec.hits(other)
            pairs += [(hb, hm) for hm, hb in zip(a or (), b or ()) if hm is not None and hb is not None]
    sample = Sample.of(rows)
    found = difference(sample)
    interval, sd = found if found is not None else (None, None)
    bound = upper_bound(sample, threshold, relative_drop, alpha, at_most=spec.at_most) if alpha is not None else None
    lost = gained = p = None
    if spec.hits is not None:
        lost, gained, p = mcnemar(pairs)
    return Uncertainty(sample.items, interval, sd, bound, lost, gained, p)
