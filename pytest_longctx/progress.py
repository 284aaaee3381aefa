"""Progress of long scoring runs on stderr: items done, tokens/s, ETA.

On a terminal one line is rewritten in place; elsewhere (CI logs, pytest) a new line
is written at most every ``interval`` seconds, so logs stay short.
"""
from __future__ import annotations

import sys
import time
from typing import Callable, Protocol, TextIO


def clock_text(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}" if seconds >= 3600 else f"{seconds // 60}:{seconds % 60:02d}"


class Display(Protocol):
    """What the engine shows its progress on: ``Progress``, or one part of a run's (``RunProgress.part``)."""

    detail: Callable[[], str] | None

    def advance(self, items: int = 0, tokens: int = 0) -> None: ...

    def close(self) -> None: ...


class Progress:
    """Items done, tokens per second and ETA of a long run, on a stream (stderr by default)."""

    def __init__(self, total_items: int, total_tokens: int, label: str = "scoring", stream: TextIO | None = None,
                 interval: float | None = None, clock: Callable[[], float] = time.monotonic):
        self.total_items, self.total_tokens, self.label = total_items, total_tokens, label
        self.stream = stream if stream is not None else sys.stderr
        self.live = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.interval = interval if interval is not None else (0.2 if self.live else 10.0)
        self.clock = clock
        self.started = clock()
        self.last_shown = float("-inf")
        self.items = self.tokens = 0
        self.shown: tuple[int, int] | None = None
        self.detail: Callable[[], str] | None = None  # more to show after the figures (a server's requests in flight)

    def remaining(self) -> float:
        """Seconds left at the rate so far (NaN before any token)."""
        rate = self.tokens / max(self.clock() - self.started, 1e-9)
        return (self.total_tokens - self.tokens) / rate if rate > 0 else float("nan")

    def line(self) -> str:
        elapsed = max(self.clock() - self.started, 1e-9)
        rate = self.tokens / elapsed
        eta = self.remaining()
        eta_text = clock_text(eta) if eta == eta else "?"
        detail = f"; {self.detail()}" if self.detail is not None else ""
        return (f"{self.label}: {self.items}/{self.total_items} items, {self.tokens:,}/{self.total_tokens:,} tokens, "
                f"{rate:,.0f} tokens/s, elapsed {clock_text(elapsed)}, ETA {eta_text}{detail}")

    def advance(self, items: int = 0, tokens: int = 0) -> None:
        self.items += items
        self.tokens += tokens
        now = self.clock()
        if now - self.last_shown >= self.interval:
            self.last_shown = now
            self._show()

    def close(self) -> None:
        if self.shown != (self.items, self.tokens):
            self._show()
        if self.live:
            self.stream.write("\n")
            self.stream.flush()

    def _show(self) -> None:
        self.shown = (self.items, self.tokens)
        if self.live:
            self.stream.write("\r\x1b[2K" + self.line())
        else:
            self.stream.write(self.line() + "\n")
        self.stream.flush()


def labelled(label: str, stream: TextIO | None = None) -> Callable[[int, int], Progress]:
    """A factory of progress displays under ``label``: what the engine calls once it knows the
    items and tokens to come."""
    return lambda items, tokens: Progress(items, tokens, label=label, stream=stream)


class RunProgress:
    """One progress line for a run that reads its items in many parts (a gate reads unit by unit, and under
    sequential reading a group at a time): each part's progress (``part``, what the engine makes) adds to the one
    line, and the totals are the most the run may still read (``bound``), which shrinks as its checks settle."""

    def __init__(self, progress: Progress):
        self.progress = progress

    def bound(self, items: int, tokens: int) -> None:
        """The most the run may read, in all: what it has read and what it may still need."""
        self.progress.total_items, self.progress.total_tokens = items, tokens

    def part(self, items: int, tokens: int) -> Display:
        """The engine's progress display of one part: its advances go to the run's line, and its close leaves it."""
        return _Part(self.progress)

    def close(self) -> None:
        self.progress.close()


class _Part:
    """One part's progress display, shown on the run's line."""

    def __init__(self, whole: Progress):
        self.whole = whole

    @property
    def detail(self) -> Callable[[], str] | None:
        return self.whole.detail

    @detail.setter
    def detail(self, value: Callable[[], str] | None) -> None:
        self.whole.detail = value

    def advance(self, items: int = 0, tokens: int = 0) -> None:
        self.whole.advance(items=items, tokens=tokens)

    def close(self) -> None:
        """A part ends; the run's line goes on."""
