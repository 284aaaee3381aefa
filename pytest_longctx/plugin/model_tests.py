"""The tests the gate generates (collected as ``longctx``, parametrized by the plugin).

Each test scores what it needs once per pytest run, through the shared gate session, and
fails with a message that names the row, cell or item, the values and the threshold.
"""
from __future__ import annotations

from typing import Any

from pytest_longctx.backends.base import Backend
from pytest_longctx.gate.gate_session import Case
from pytest_longctx.gate.model_run import GateRun
from pytest_longctx.gate.verdict import FAIL
from pytest_longctx.numbers import NA
from pytest_longctx.plugin.checks import ensure_or_fail, fail, recorder, skip

# which cases each test function takes (see GateSession.cases)
CASE_KINDS = {"test_baseline": "baseline", "test_item": "item", "test_cell": "cell", "test_row": "row"}


def test_baseline(longctx_case: Case, longctx_run: GateRun) -> None:
    fail(longctx_run.missing_baseline)


def test_item(longctx_case: Case, longctx_run: GateRun, longctx_backend: Backend, longctx_progress: Any,
              request: Any) -> None:
    _check(longctx_case, longctx_run, longctx_backend, longctx_progress, recorder(request))


def test_cell(longctx_case: Case, longctx_run: GateRun, longctx_backend: Backend, longctx_progress: Any,
              request: Any) -> None:
    _check(longctx_case, longctx_run, longctx_backend, longctx_progress, recorder(request))


def test_row(longctx_case: Case, longctx_run: GateRun, longctx_backend: Backend, longctx_progress: Any,
             request: Any) -> None:
    _check(longctx_case, longctx_run, longctx_backend, longctx_progress, recorder(request))


def _check(case: Case, run: GateRun, backend: Backend, progress: Any, record_property: Any) -> None:
    """Read the case's unit (once per run), then pass, fail or skip as the gate judges it."""
    ensure_or_fail(run, [case.unit], backend, progress)
    outcome = run.judge(case)
    for name, value in outcome.properties:
        record_property(name, value)
    if outcome.word == NA:
        skip(*outcome.lines)
    if outcome.word == FAIL:
        fail(*outcome.lines)
