"""Numbers as the gate's messages and reports show them (three decimals, ``n/a`` where a
value is missing), the one tolerance every check compares a value with its threshold by, and the floor
KL_K clamps the candidate's rest probability at (metrics/drift.py, and its differentiable twin in
backends/hybrids/first_order.py)."""
from __future__ import annotations

NA = "n/a"  # what a missing value (and a check that does not apply) shows as


def number(value: float | None, digits: int = 3) -> str:
    return NA if value is None else f"{value:.{digits}f}"


def delta(model: float | None, baseline: float | None) -> str:
    """``model - baseline`` with its sign."""
    return NA if model is None or baseline is None else f"{model - baseline:+.3f}"


REST_FLOOR = 1e-12  # q_r is clamped here: a candidate sure of the baseline's ids leaves no rest
ROUNDING = 1e-12  # how far a computed value may sit past its threshold and still meet it (float rounding)


def meets(value: float, threshold: float, at_most: bool = False) -> bool:
    """``value >= threshold`` (``at_most``: ``value <= threshold``) up to float rounding, so a
    share computed as 0.95 meets a threshold of 0.95; a NaN meets nothing."""
    return value <= threshold + ROUNDING if at_most else value >= threshold - ROUNDING
