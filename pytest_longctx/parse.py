"""Option values as the commands and the plugin read them: comma lists, whole numbers of at
least 1, finite numbers of at least 0.

Each parser raises ``ValueError`` saying what is wrong with the value; the caller names the
option and where the value came from (``option_value`` does it in the commands' form,
``--limit 0: must be at least 1``)."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Callable, TypeVar

from pytest_longctx.errors import LongctxError

T = TypeVar("T")


class NotANumber(ValueError):
    """The value is not a number at all (rather than one out of range)."""


def comma_list(text: str, example: str = "a,b") -> list[str]:
    """The items of a comma-separated list, stripped; empty items left out. A list of
    nothing (``""``, ``","``) is a ``ValueError`` showing ``example`` (what the option lists):
    it would silently mean "all"."""
    found = [part.strip() for part in text.split(",") if part.strip()]
    if not found:
        raise ValueError(f"expected a comma-separated list, e.g. {example}")
    return found


def whole_number(value: Any) -> int:
    """A whole number, of any sign."""
    try:
        return int(str(value).strip())
    except ValueError:
        raise NotANumber("expected a whole number") from None


def at_least_one(value: Any) -> int:
    """A whole number >= 1 (a count or a limit)."""
    number = whole_number(value)
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


@dataclass(frozen=True)
class Shard:
    """One part of a selection split ``count`` ways, the ``index``-th (from 1): ``2/3``."""

    index: int
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def shard(value: Any) -> Shard:
    """``K/N``: the K-th (from 1) of N shards."""
    given = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", str(value), re.ASCII)
    if given is None:
        raise ValueError("expected K/N, the shard (counted from 1) and how many there are, e.g. 2/3")
    found = Shard(int(given[1]), int(given[2]))
    if found.count < 1:
        raise ValueError("N, the number of shards, must be at least 1")
    if not 1 <= found.index <= found.count:
        raise ValueError(f"K counts the shards from 1 to N: give 1/{found.count} to {found.count}/{found.count}")
    return found


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
