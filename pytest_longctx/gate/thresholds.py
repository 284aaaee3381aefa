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
from typing import Iterable

from pytest_longctx.errors import LongctxError
from pytest_longctx.parse import NotANumber, finite_nonnegative

# metric -> what its value bounds
METRICS = {
    "drop": "largest allowed drop of accuracy below the baseline (facts, distant tool calls)",
    "retained": "lowest allowed retained rule effect (1.00 = as the baseline)",
    "follow": "lowest allowed share of rules followed",
    "item_drop": "largest allowed mean log-probability loss of one item, in nats",
    "kl": "largest allowed mean KL_K at far reads against the baseline's most likely tokens, in nats (drift)",
    # the compressor gate's (compress/run.py): no global value, defaults per row
    "retention": "lowest allowed share of facts kept by a context compressor",
    "savings": "lowest allowed realized token savings of a context compressor",
}


@dataclass(frozen=True)
class Override:
    """A threshold given for the checks whose key matches ``pattern``: ``PATTERN:METRIC=VALUE``."""

    pattern: str
    metric: str
    value: float
    source: str = field(default="", compare=False)  # where it was given, for messages
    strict: bool = field(default=True, compare=False)  # a pattern that matches no check is an error, else a warning

    @classmethod
    def parse(cls, text: str) -> Override:
        pattern, _, rest = text.rpartition(":")
        metric, _, value = rest.partition("=")
        if not pattern or metric not in METRICS or not value:
            raise ValueError(f"{text!r}: expected PATTERN:METRIC=VALUE with METRIC one of {', '.join(METRICS)}")
        try:
            threshold = finite_nonnegative(value)
        except NotANumber:
            raise ValueError(f"{text!r}: {value!r} is not a number") from None
        except ValueError:
            raise ValueError(f"{text!r}: the value must be a finite number >= 0") from None
        return cls(pattern, metric, threshold)

    def __str__(self) -> str:
        return f"{self.pattern}:{self.metric}={self.value:g}"


@dataclass(frozen=True)
class Thresholds:
    """How much a model may lose against its baseline: defaults per metric, and overrides by check
    key."""

    drop: float = 0.05
    retained: float = 0.90
    follow: float = 0.90
    item_drop: float = 1.0
    kl: float = 0.05  # calibrated on SmolLM2 (docs/evidence.md, "Why 0.05 nats"): the model itself 0, int8 far below it
    overrides: tuple[Override, ...] = ()
    # the verdict rule: None, the point estimate against the threshold; A, a row or cell fails only when its
    # shortfall beyond the threshold is significant at level A (--longctx-alpha, docs/metrics.md#uncertainty)
    alpha: float | None = None
    min_effect: float = 1.0  # rules: the reference's effect a target needs to be counted, nats (--longctx-min-effect)

    def get(self, key: str, metric: str, default: bool = True) -> float | None:
        """The threshold of ``metric`` at ``key``: the last matching override, else the
        global value when ``default`` (the metric applies there by default), else None."""
        found = getattr(self, metric) if default else None
        for override in self.overrides:
            if override.metric == metric and fnmatch.fnmatchcase(key, override.pattern):
                found = override.value
        return found

    def check_patterns(self, keys: Iterable[str]) -> list[str]:
        """Every override must name a check of this run (``keys``: every check key). One
        that names none is an error (given on the command line) or a warning (from an ini
        file, which may cover more than a run selects); the warnings are returned."""
        keys = sorted(keys)
        warnings = []
        for override in self.overrides:
            if any(fnmatch.fnmatchcase(key, override.pattern) for key in keys):
                continue
            message = (f"{override.source} '{override}': the pattern {override.pattern!r} matches no check of this run; "
                       f"the checks are named like {_examples(keys)}")
            if override.strict:
                raise LongctxError(message)
            warnings.append(message)
        return warnings

    def describe(self) -> dict[str, str]:
        values = {m: f"{getattr(self, m):g}" for m in METRICS if hasattr(self, m)}
        values["min_effect"] = f"{self.min_effect:g}"
        if self.alpha is not None:
            values["alpha"] = f"{self.alpha:g}"
        values.update({f"override {n}": str(o) for n, o in enumerate(self.overrides)})
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
