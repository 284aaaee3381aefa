"""Option values as the commands and the plugin read them: comma lists, whole numbers of at
least 1, finite numbers of at least 0.

Each parser raises ``ValueError`` saying what is wrong with the value; the caller names the
option and where the value came from (``option_value`` does it in the commands' form,
``--limit 0: must be at least 1``)."""
from __future__ import annotations

import math
from typing import Any, Callable, TypeVar

from pytest_longctx.errors import LongctxError

T = TypeVar("T")


class NotANumber(ValueError):
    """The value is not a number at all (rather than one out of range)."""


def refuse_blank(values: dict[str, Any]) -> None:
    """Refuse, in one line naming them, the options of ``values`` (``{flag: value}``) given a value
    that is empty or only spaces, as an unset ``$MODEL`` in a CI job gives ``--model=``. Such a
    value never means "not given": a gate that read it so would pass a model it never judged.
    Each value of a repeatable option (a list) is looked at."""
    def blank(value: Any) -> bool:
        return isinstance(value, str) and not value.strip()

    flags = [flag for flag, value in values.items()
             if blank(value) or (isinstance(value, (list, tuple)) and any(map(blank, value)))]
    if flags:
        raise LongctxError(f"{', '.join(flags)}: the value is empty (as \"$VAR\" gives when VAR is unset, e.g. in a "
                           "CI job); give a value, or leave the option out")


def comma_list(text: str) -> list[str]:
    """The items of a comma-separated list, stripped; empty items left out. A list of
    nothing (``""``, ``","``) is a ``ValueError``: it would silently mean "all"."""
    found = [part.strip() for part in text.split(",") if part.strip()]
    if not found:
        raise ValueError("expected a comma-separated list, e.g. 2k,8k")
    return found


def at_least_one(value: Any) -> int:
    """A whole number >= 1 (a count or a limit)."""
    try:
        number = int(value)
    except ValueError:
        raise NotANumber("expected a whole number") from None
    if number < 1:
        raise ValueError("must be at least 1")
    return number


def finite_nonnegative(value: Any) -> float:
    """A finite number >= 0 (a threshold)."""
    try:
        number = float(value)
    except ValueError:
        raise NotANumber("expected a number") from None
    if not math.isfinite(number) or number < 0:
        raise ValueError("must be a finite number >= 0")
    return number


def significance_level(value: Any) -> float:
    """A significance level: a number above 0 and below 0.5 (e.g. 0.05)."""
    try:
        number = float(value)
    except ValueError:
        raise NotANumber("expected a number") from None
    if not 0 < number < 0.5:
        raise ValueError("must be a significance level above 0 and below 0.5, e.g. 0.05")
    return number


def option_value(option: str, value: Any, parse: Callable[[Any], T]) -> T:
    """``parse(value)``, or one line naming the option: ``--limit 0: must be at least 1``."""
    try:
        return parse(value)
    except ValueError as exc:
        raise LongctxError(f"{option} {value}: {exc}") from None


def check_limit(limit: int | None) -> int | None:
    """``--limit``: None (every item) or at least 1."""
    return None if limit is None else option_value("--limit", limit, at_least_one)


def scalar(text: str) -> Any:
    """A ``key=value`` value as command lines take it: true/false, a whole or decimal number,
    else the text (vLLM's engine arguments, a KV-cache press's arguments)."""
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text.strip()
