"""How a compressor asks to be called, beyond ``compress(messages, probe, **knobs)``.

A compressor declares these with the ``conventions(...)`` decorator; one without it is
called the plain way:

* ``probe="last_message"``: the probe is given as the last message too, a user turn, as
  compressors built for chat requests take the current prompt. That message must come
  back last and unchanged; it is taken off before anything is measured.
* ``expand=fn`` with ``refs=PATTERN``: the compressed messages may stand in for dropped
  content with references, found in their contents by the regular expression ``refs``
  (its first group is the reference); ``fn(ref)`` returns the content, or None. Facts
  are then counted twice: in the messages as they are (what a reader sees), and with
  every reference expanded (what a reader could fetch).
* ``requires=DIST`` and ``extra=NAME``: the distribution the compressor needs; when it
  is not installed the compressor cannot be resolved, with one line naming
  ``pip install "pytest-longctx[NAME]"``.
* ``ranges={KNOB: (LOW, HIGH)}``: the smallest and largest value of numeric knobs (HIGH
  None: no largest), checked before any session is compressed.
* ``cache=(DIST, ...)``: a slow compressor's outputs are kept on disk between runs, keyed
  by the session, the knobs, the compressor's source, what it is given (the tokenizer,
  the model) and these distributions' versions.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol, runtime_checkable

PROBE_ARGUMENT, PROBE_LAST_MESSAGE = "argument", "last_message"


@dataclass(frozen=True)
class Conventions:
    probe: str = PROBE_ARGUMENT
    expand: Callable[[str], str | None] | None = None
    refs: re.Pattern[str] | None = None
    requires: str | None = None
    extra: str | None = None
    cache: tuple[str, ...] = ()
    ranges: Mapping[str, tuple[float, float | None]] = field(default_factory=dict)

    def references(self, text: str) -> list[str]:
        """The references a compressed text makes, in order, each once."""
        if self.refs is None:
            return []
        return list(dict.fromkeys(match.group(1) for match in self.refs.finditer(text)))


def conventions(*, probe: str = PROBE_ARGUMENT, expand: Callable[[str], str | None] | None = None, refs: str | None = None,
                requires: str | None = None, extra: str | None = None, cache: tuple[str, ...] = (),
                ranges: Mapping[str, tuple[float, float | None]] | None = None) -> Callable[[Any], Any]:
    """Declare how the decorated compressor is called (see the module's docstring)."""
    if probe not in (PROBE_ARGUMENT, PROBE_LAST_MESSAGE):
        raise ValueError(f"probe={probe!r}: expected {PROBE_ARGUMENT!r} or {PROBE_LAST_MESSAGE!r}")
    if (expand is None) != (refs is None):
        raise ValueError("expand and refs go together: the function that expands a reference, and the pattern that finds one")
    pattern = re.compile(refs) if refs is not None else None
    if pattern is not None and pattern.groups < 1:
        raise ValueError(f"refs={refs!r}: the pattern needs a group that captures the reference")
    declared = Conventions(probe, expand, pattern, requires, extra, tuple(cache), dict(ranges or {}))

    def declare(function: Any) -> Any:
        function.longctx_conventions = declared
        return function

    return declare


@runtime_checkable
class Declared(Protocol):
    """A compressor the ``conventions`` decorator marked."""

    longctx_conventions: Conventions


def declared(function: Any) -> Conventions:
    """What ``function`` declared, or the plain conventions."""
    found = function.longctx_conventions if isinstance(function, Declared) else None
    return found if isinstance(found, Conventions) else Conventions()
