"""What the pytest plugin drives: a gate session. The model gate (``gate/model_run.py``)
and the compressor gate (``compress/run.py``) both implement it, so the plugin's hooks
never ask which one runs.

A session's life, as the plugin drives it:

1. made from the options once per pytest process (``pytest_configure``);
2. ``cases()``: every test it can generate; the plugin parametrizes the tests module's
   functions with them (a function takes the cases whose ``kind`` its module's
   ``CASE_KINDS`` names for it);
3. ``select(cases)``: the cases that survived ``-k`` and deselection, so scoring covers
   exactly what the selected tests need;
4. ``ensure(units, backend, progress)``: the generated tests score (or compress) on first
   need, once per unit;
5. on an xdist worker, ``export()`` hands the controller what it scored, and the
   controller's session ``absorb()``\\ s it;
6. on the controller, the gate's report functions finish the session (files, junit
   properties) and write the terminal summary.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Protocol, runtime_checkable

from pytest_longctx.data.records import RULES_CONFIGS, ItemKey
from pytest_longctx.gate.options import GateOptions

Progress = Callable[[int, int], Any] | bool  # a factory of progress displays; False: none


@dataclass(frozen=True)
class Case:
    """One generated test: the baseline's absence, an item, a rules cell or a headline row."""

    kind: str  # "baseline", "item", "cell", "row"
    key: str  # the test id and threshold key
    needs: frozenset[ItemKey]
    config: str
    length: str | None = None
    item_id: str | None = None

    @property
    def unit(self) -> str:
        """What is scored together: one config, or the three rules configs (they share sessions)."""
        return unit_of(self.config)


def unit_of(config: str) -> str:
    return "rules" if config in RULES_CONFIGS else config


@runtime_checkable
class GateSession(Protocol):
    """The state of one gate over one pytest session."""

    options: GateOptions

    def cases(self) -> list[Case]:
        """Every test the gate generates for its data and options."""

    def select(self, cases: Iterable[Case]) -> None:
        """The cases whose tests were selected: scoring covers what they need, no more."""

    def need_everything(self) -> None:
        """Score every item, whatever was selected (a user's fixture asks for all results)."""

    def ensure(self, units: Iterable[str], backend: Any, progress: Progress = True) -> None:
        """Score the needed items of these units not scored yet; a failure is raised as
        ``LongctxError`` and repeated to every later test."""

    def evaluate(self) -> Any:
        """Rows, sets and verdicts of what is scored so far."""

    def export(self) -> str:
        """What an xdist worker hands the controller, as JSON text."""

    def absorb(self, exported: str) -> None:
        """Take a worker's export into the controller's session."""
