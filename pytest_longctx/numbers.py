"""Numbers as the gate's messages and reports show them: three decimals, ``n/a`` where a
value is missing."""
from __future__ import annotations

NA = "n/a"  # what a missing value (and a check that does not apply) shows as


def number(value: float | None, digits: int = 3) -> str:
    return NA if value is None else f"{value:.{digits}f}"


def delta(model: float | None, baseline: float | None) -> str:
    """``model - baseline`` with its sign."""
    return NA if model is None or baseline is None else f"{model - baseline:+.3f}"
