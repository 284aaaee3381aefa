"""What an option's value, or a ``KEY=VALUE`` inside one, may be: its parser and how help and
errors say it. Every parser raises ``ValueError`` saying what is wrong with the value; the
caller names the option and the key. A blank value is never a value: an unset ``$VAR`` in a CI
job gives ``--longctx-model=`` or ``kv-cache=``, and a gate that read it as "not given" would
pass a model it never judged."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from pytest_longctx.data.lengths import length_name
from pytest_longctx.errors import LongctxError, actual, entered
from pytest_longctx.parse import (
    at_least_one,
    comma_list,
    finite_nonnegative,
    shard,
    significance_level,
    whole_number,
)

BLANK = "the value is empty (as \"$VAR\" gives when VAR is unset, e.g. in a CI job); give a value, or leave the option out"


def is_blank(value: Any) -> bool:
    return isinstance(value, str) and not value.strip()


@dataclass(frozen=True)
class Value:
    """The kind of value an option or key takes."""

    says: str  # how help, docs and errors name it: "a whole number >= 1"
    convert: Callable[[str], Any] = field(compare=False)  # raises ValueError saying what is wrong
    metavar: str = "VALUE"
    choices: tuple[str, ...] = ()

    def parse(self, raw: Any) -> Any:
        """The value ``raw`` (a string from a command line or ini file) stands for."""
        if is_blank(raw):
            raise ValueError(BLANK)
        return self.convert(raw)


def _text(raw: Any) -> str:
    """Text as given, stripped; a URL in it that carries a secret enters redacted (errors.entered): every
    model, data, server, reference and tokenizer is a text value, so no line made of one shows a secret."""
    return entered((actual(raw) if isinstance(raw, str) else str(raw)).strip())


def _choose(choices: tuple[str, ...]) -> Callable[[str], str]:
    def convert(raw: Any) -> str:
        chosen = str(raw).strip().lower()
        if chosen not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}")
        return chosen

    return convert


def _at_least(least: int) -> Callable[[str], int]:
    def convert(raw: Any) -> int:
        number = whole_number(raw)
        if number < least:
            raise ValueError(f"must be at least {least}")
        return number

    return convert


def _above_zero(raw: Any) -> float:
    number = finite_nonnegative(raw)
    if number <= 0:
        raise ValueError("must be above 0")
    return number


def _boolean(raw: Any) -> bool:
    word = str(raw).strip().lower()
    if word not in ("true", "false"):
        raise ValueError("expected true or false")
    return word == "true"


def _semicolons(raw: Any) -> list[str]:
    found = [part.strip() for part in str(raw).split(";") if part.strip()]
    if not found:
        raise ValueError("expected a ';'-separated list")
    return found


def text(metavar: str = "TEXT", says: str = "text") -> Value:
    return Value(says, _text, metavar)


def choice(*choices: str, metavar: str = "") -> Value:
    return Value(f"one of {', '.join(choices)}", _choose(choices), metavar or "|".join(choices), choices)


def whole(least: int, metavar: str = "N") -> Value:
    return Value(f"a whole number >= {least}", at_least_one if least == 1 else _at_least(least), metavar)


PATH = text("PATH", "a path")
FOLDER = text("DIR", "a folder")
def names(example: str) -> Value:
    """A comma-separated list of names; a list of nothing shows ``example``, what the option lists."""
    return Value("a comma-separated list", lambda raw: comma_list(str(raw), example), "A,B")


def _lengths(raw: Any) -> list[str]:
    """Lengths as the data names its splits (``2K`` and ``2048`` are ``2k``): the builder and the baseline
    know a length by that name."""
    found, parts = [], comma_list(str(raw), "2k,8k")
    for part in parts:
        try:
            found.append(length_name(part))
        except LongctxError:
            which = f"{part!r} is not a length: " if len(parts) > 1 else ""
            raise ValueError(f"{which}expected a length like 2k, 8k or 32k") from None
    return found


LENGTHS = Value("a comma-separated list of lengths", _lengths, "A,B")
ROWS = Value("a ';'-separated list", _semicolons, "ROWS")
COUNT = whole(1)
NUMBER = Value("a finite number >= 0", finite_nonnegative, "X")
POSITIVE = Value("a number above 0", _above_zero, "X")
LEVEL = Value("a significance level above 0 and below 0.5", significance_level, "A")
INTEGER = Value("a whole number", whole_number, "N")
SHARD = Value("K/N: the K-th of N shards, counted from 1", shard, "K/N")
BOOLEAN = Value("true or false", _boolean, "true|false")
