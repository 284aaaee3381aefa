"""``KEY=VALUE`` settings inside an option (``--backend-option cache-type-k=q8_0``, a press's
``snapkv:compression_ratio=0.5``, a compressor's ``--knob ratio=0.5``): split in one way
everywhere, and checked against the table of keys their owner declares.

Whatever the option, a setting without ``=``, a blank key, a blank value, a key given twice,
an unknown key (with the keys there are) and a value of the wrong kind are each one line
naming the option and the key; nothing is dropped or read as "not given"."""
from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from pytest_longctx.errors import LongctxError, actual, entered
from pytest_longctx.options.values import BLANK, Value, is_blank


@dataclass(frozen=True)
class Key:
    """One ``KEY=VALUE`` an owner takes."""

    name: str  # as the user writes it: cache-type-k
    value: Value
    help: str
    default: Any = None
    field: str = ""  # the owner's field it sets; empty: the name with underscores

    @property
    def target(self) -> str:
        return self.field or self.name.replace("-", "_")


def _refuse(option: str, setting: str, problem: str) -> LongctxError:
    return LongctxError(f"{option} {setting}: {problem}")


def split_settings(option: str, settings: Iterable[str], example: str) -> dict[str, str]:
    """``KEY=VALUE`` settings (repeatable) as {key: value}, the key and value stripped; each key
    once, neither blank. ``example`` shows the form in the message (``cache-type-k=q8_0``)."""
    found: dict[str, str] = {}
    for given in settings:
        setting = entered(given if isinstance(given, str) else str(given))  # from an API caller too: shown redacted
        key, equals, value = actual(setting).partition("=")  # split as given
        key = key.strip()
        if not equals or not key:
            raise _refuse(option, repr(setting), f"expected KEY=VALUE, e.g. {example}")
        if is_blank(value):
            raise _refuse(option, f"{key}=", BLANK)
        if key in found:
            raise _refuse(option, key, f"given twice ({key}={found[key]} and {setting})")
        found[key] = entered(value.strip())
    return found


@dataclass(frozen=True)
class KeyTable:
    """The keys one owner takes inside an option, e.g. the llama.cpp backend's ``--backend-option``s."""

    option: str  # how messages name the option: --backend-option
    owner: str  # who takes the keys: "the llama.cpp backend"
    keys: tuple[Key, ...]
    # keys beyond the table are the owner's own and checked where it uses them (vLLM's engine arguments):
    # what they are, for messages and docs; empty: every key must be in the table
    others: str = ""

    def key(self, name: str) -> Key | None:
        return next((k for k in self.keys if k.name == name), None)

    def default(self, name: str) -> Any:
        """The declared default of key ``name``: what the owner's settings hold when it is not given."""
        key = self.key(name)
        assert key is not None, f"{self.owner} declares no key {name}"
        return key.default

    def names(self) -> list[str]:
        return [k.name for k in self.keys]

    def unknown(self, name: str, value: str, option: str = "") -> LongctxError:
        close = difflib.get_close_matches(name, self.names(), n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        takes = ", ".join(self.names()) or "no keys"
        return _refuse(option or self.option, f"{name}={value}", f"{self.owner} has no option {name!r}{hint}; it takes {takes}")

    def parse(self, given: Mapping[str, str], option: str = "") -> tuple[dict[str, Any], dict[str, str]]:
        """(the table's keys by field, parsed; the others, as given) for settings split by
        ``split_settings``. An unknown key, where the table takes no others, or a value its key's
        kind refuses, is one line naming ``option`` (default: the table's)."""
        values: dict[str, Any] = {}
        others: dict[str, str] = {}
        for name, raw in given.items():
            key = self.key(name)
            if key is None:
                if not self.others:
                    raise self.unknown(name, raw, option)
                others[name] = raw
                continue
            try:
                values[key.target] = key.value.parse(raw)
            except ValueError as exc:
                raise _refuse(option or self.option, f"{name}={raw}", str(exc)) from None
        return values, others

    def example(self) -> str:
        """A setting to show in a message: the first key with its default, or its kind."""
        first = self.keys[0] if self.keys else None
        return f"{first.name}={first.default if first.default not in (None, '') else first.value.metavar}" if first else "KEY=VALUE"
