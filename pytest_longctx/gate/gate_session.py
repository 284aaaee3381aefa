"""What the pytest plugin drives: a gate session, one gate's run over one pytest session
(not a backend's KV-cache session, nor an agent session of the data). The model gate
(``gate/model_run.py``) and the compressor gate (``compress/run.py``) both implement it,
so the plugin's hooks never ask which one runs.

A gate session's life, as the plugin drives it:

1. made from the options once per pytest process (``pytest_configure``);
2. ``cases()``: every test it can generate; the plugin parametrizes the tests module's
   functions with them (a function takes the cases whose ``kind`` its module's
   ``CASE_KINDS`` names for it);
3. ``select(cases)``: the cases that survived ``-k`` and deselection, so scoring covers
   exactly what the selected tests need;
4. ``ensure(units, backend, progress)``: the generated tests score (or compress) on first
   need, once per unit, then judge an item (``item_report``) or a row or cell (the
   verdicts of ``evaluate()``);
5. on an xdist worker, ``export()`` hands the controller what it scored, and the
   controller's gate session ``absorb()``\\ s it;
6. on the controller, the gate's report functions finish the gate session (files, junit
   properties) and write the terminal summary.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Protocol, runtime_checkable

from pytest_longctx.backends.base import Backend
from pytest_longctx.data.records import RULES_CONFIGS, ItemKey
from pytest_longctx.gate.run_options import GateOptions

if TYPE_CHECKING:  # the verdicts import numpy, and every pytest run loads the plugin's hooks, which import this
    from pytest_longctx.gate.verdict import Verdict
    from pytest_longctx.metrics.item_figures import Sets
    from pytest_longctx.scoring.scores_file import ScoresFile

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
    candidate: str | None = None  # a ladder's candidate the test judges (gate/ladder_run.py); None for a run of one model

    @property
    def test_id(self) -> str:
        """The test's id: its key, with a ladder's candidate in brackets (``facts-2k[w8a8]``), so ``-k`` selects one."""
        return self.key if self.candidate is None else f"{self.key}[{self.candidate}]"

    @property
    def group(self) -> str:
        """What one pytest-xdist worker runs together: a unit's tests (of one candidate), which read it once."""
        return self.unit if self.candidate is None else f"{self.unit}[{self.candidate}]"

    @property
    def unit(self) -> str:
        """What is scored together: one config, or the three rules configs (they share their
        agent sessions, only the rule line differs)."""
        return unit_of(self.config)

    @property
    def item(self) -> ItemKey:
        """The item an item case checks."""
        assert self.length is not None and self.item_id is not None, f"{self.key}: not an item case"
        return self.config, self.length, self.item_id


def unit_of(config: str) -> str:
    return "rules" if config in RULES_CONFIGS else config


class GateEvaluation(Protocol):
    """What an evaluation gives the generated tests and ``longctx_results``: the verdict of
    every check of what is complete, and the sets they were computed from (the model gate's
    ``gate.evaluation.Evaluation``, the compressor gate's ``compress.run.CompressionEvaluation``)."""

    @property
    def verdicts(self) -> list[Verdict]: ...

    @property
    def sets(self) -> Sets: ...


@runtime_checkable
class GateSession(Protocol):
    """The state of one gate over one pytest session."""

    options: GateOptions
    warnings: list[str]  # what the summary and every report warn of (the front end may add its own)
    # the baseline the model gate judges against (the longctx_baseline fixture); None while it makes one,
    # and for the compressor gate, whose reference is the full context
    baseline: ScoresFile | None

    def cases(self) -> list[Case]:
        """Every test the gate generates for its data and options."""

    def select(self, cases: Iterable[Case]) -> None:
        """The cases whose tests were selected: scoring covers what they need, no more."""

    def need_everything(self) -> None:
        """Score every item, whatever was selected (a user's fixture asks for all results)."""

    def ensure(self, units: Iterable[str], backend: Backend | None, progress: Progress = True) -> None:
        """Score the needed items of these units not scored yet; a failure is raised as
        ``LongctxError`` and repeated to every later test. ``backend``: the model under test
        (None only where the gate runs without one: the compressor gate without a model)."""

    def evaluate(self, configs: Iterable[str] | None = None) -> GateEvaluation:
        """Rows, sets and verdicts of what is scored so far (of ``configs``; None: all)."""

    def item_report(self, key: ItemKey) -> tuple[list[str], dict[str, Any]]:
        """(problems, properties for the junit file) of one item once ``ensure``\\ d; its
        test fails on any problem."""

    def export(self) -> str:
        """What an xdist worker hands the controller, as JSON text."""

    def absorb(self, exported: str) -> None:
        """Take a worker's export into the controller's gate session."""
