"""Thresholds relative to the baseline, and the overrides that set them per check.

Check keys (what thresholds and test ids name):
  rows   ``facts-8k``, ``tool_calls-8k``, ``rules_en-follow-8k``, ``rules_cs-retained-worst``
  cells  ``rules_en-32k-user-redirect``, ``rules_en-32k-system-all``
  items  ``facts-8k-<item id>``
An override ``PATTERN:METRIC=VALUE`` (shell-style pattern over keys) sets one metric's
threshold where it matches; the last matching override wins.
"""
from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field, replace
from typing import Iterable, Mapping

from pytest_longctx.errors import LongctxError
from pytest_longctx.options.table import METRICS, THRESHOLD_FIELDS, Metric
from pytest_longctx.parse import NotANumber, finite_nonnegative


@dataclass(frozen=True)
class Override:
    """A threshold given for the checks whose key matches ``pattern``: ``PATTERN:METRIC=VALUE``."""

    pattern: str
    metric: Metric
    value: float
    source: str = field(default="", compare=False)  # where it was given, for messages
    strict: bool = field(default=True, compare=False)  # a pattern that matches no check is an error, else a warning

    @classmethod
    def parse(cls, text: str) -> Override:
        pattern, _, rest = text.rpartition(":")
        metric, _, value = rest.partition("=")
        if not pattern or metric not in METRICS or not value:
            raise ValueError(f"{text!r}: expected PATTERN:METRIC=VALUE with METRIC one of {', '.join(map(str, METRICS))}")
        try:
            threshold = finite_nonnegative(value)
        except NotANumber:
            raise ValueError(f"{text!r}: {value!r} is not a number") from None
        except ValueError:
            raise ValueError(f"{text!r}: the value must be a finite number >= 0") from None
        return cls(pattern, Metric(metric), threshold)

    def __str__(self) -> str:
        return f"{self.pattern}:{self.metric}={self.value:g}"


@dataclass(frozen=True)
class Thresholds:
    """How much a model may lose against its baseline: defaults per metric, and overrides by check
    key."""

    # each default is its option's (options/table.py)
    drop: float = THRESHOLD_FIELDS[Metric.DROP.value].default
    retained: float = THRESHOLD_FIELDS[Metric.RETAINED.value].default
    follow: float = THRESHOLD_FIELDS[Metric.FOLLOW.value].default
    item_drop: float = THRESHOLD_FIELDS[Metric.ITEM_DROP.value].default
    kl: float = THRESHOLD_FIELDS[Metric.KL.value].default
    overrides: tuple[Override, ...] = ()
    # the verdict rule: None, the point estimate against the threshold; A, a row or cell fails only when its
    # shortfall beyond the threshold is significant at level A (--longctx-alpha, docs/metrics.md#uncertainty)
    alpha: float | None = THRESHOLD_FIELDS["alpha"].default
    min_effect: float = THRESHOLD_FIELDS["min_effect"].default  # rules: the reference's effect a target needs to count

    def value(self, metric: Metric) -> float | None:
        """The global value of ``metric`` (None for the compressor gate's, which have defaults per row)."""
        return {Metric.DROP: self.drop, Metric.RETAINED: self.retained, Metric.FOLLOW: self.follow,
                Metric.ITEM_DROP: self.item_drop, Metric.KL: self.kl}.get(metric)

    def get(self, key: str, metric: Metric, default: bool = True) -> float | None:
        """The threshold of ``metric`` at ``key``: the last matching override, else the
        global value when ``default`` (the metric applies there by default), else None."""
        found = self.value(metric) if default else None
        for override in self.overrides:
            if override.metric == metric and fnmatch.fnmatchcase(key, override.pattern):
                found = override.value
        return found

    def check_patterns(self, checks: Mapping[str, Iterable[str]]) -> list[str]:
        """Every override must set a metric of a check of this run (``checks``: every check key ->
        the metrics it has). One whose pattern matches no check, or only checks that have no such
        metric (``facts-8k:retained``: a facts row has drop and kl), would judge nothing: an error
        when given on the command line, a warning when from an ini file (which may cover more than a
        run selects); the warnings are returned."""
        keys = sorted(checks)
        warnings = []
        for override in self.overrides:
            matched = [key for key in keys if fnmatch.fnmatchcase(key, override.pattern)]
            if any(override.metric in checks[key] for key in matched):
                continue
            if matched:
                have = sorted({metric for key in matched for metric in checks[key]})
                message = (f"{override.source} '{override}': the checks {override.pattern!r} matches ({_examples(matched, 4)}) "
                           f"have no metric '{override.metric}'; they take {', '.join(have) or 'no threshold'}")
            else:
                message = (f"{override.source} '{override}': the pattern {override.pattern!r} matches no check of this run; "
                           f"the checks are named like {_examples(keys)}")
            if override.strict:
                raise LongctxError(message)
            warnings.append(message)
        return warnings

    def describe(self) -> dict[str, str]:
        values = {str(m): f"{value:g}" for m in METRICS if (value := self.value(m)) is not None}
        values["min_effect"] = f"{self.min_effect:g}"
        if self.alpha is not None:
            values["alpha"] = f"{self.alpha:g}"
        values.update({f"override_{n}": str(o) for n, o in enumerate(self.overrides)})
        return values


def _examples(keys: list[str], shown: int = 12) -> str:
    """Some check keys to name in a message: the shortest first (rows before cells and items)."""
    chosen = sorted(keys, key=lambda k: (len(k), k))[:shown]
    return ", ".join(chosen) + (f" ({len(keys) - shown} more)" if len(keys) > shown else "")


def parse_overrides(values: Iterable[str], source: str, strict: bool = True) -> tuple[Override, ...]:
    """``PATTERN:METRIC=VALUE`` lines given at ``source``; ``strict``: see ``Thresholds.check_patterns``."""
    found = []
    for value in values:
        try:
            override = Override.parse(value.strip())
        except ValueError as exc:
            raise LongctxError(f"{source}: {exc}") from None
        found.append(replace(override, source=source, strict=strict))
    return tuple(found)
