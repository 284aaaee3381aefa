"""The tests the gate generates (collected as ``longctx``, parametrized by the plugin).

Each test scores what it needs once per pytest run, through the shared gate session, and
fails with a message that names the row, cell or item, the values and the threshold.
"""
from __future__ import annotations

from typing import Any

from pytest_longctx.backends.base import Backend
from pytest_longctx.errors import LongctxError
from pytest_longctx.gate.gate_session import Case, GateSession
from pytest_longctx.gate.model_run import GateRun
from pytest_longctx.gate.verdict import FAIL
from pytest_longctx.numbers import NA
from pytest_longctx.plugin.checks import ensure_or_fail, fail, recorder, skip

# which cases each test function takes (see GateSession.cases)
CASE_KINDS = {"test_baseline": "baseline", "test_item": "item", "test_cell": "cell", "test_row": "row"}


def test_baseline(longctx_case: Case, longctx_run: GateSession) -> None:
    fail(_run_of(longctx_case, longctx_run).missing_baseline)


def test_item(longctx_case: Case, longctx_run: GateSession, longctx_progress: Any, request: Any) -> None:
    _check(longctx_case, longctx_run, longctx_progress, request)


def test_cell(longctx_case: Case, longctx_run: GateSession, longctx_progress: Any, request: Any) -> None:
    _check(longctx_case, longctx_run, longctx_progress, request)


def test_row(longctx_case: Case, longctx_run: GateSession, longctx_progress: Any, request: Any) -> None:
    _check(longctx_case, longctx_run, longctx_progress, request)


def _run_of(case: Case, session: Any) -> GateRun:
    """The run that judges the case: the gate's own, or the rung of a ladder's candidate."""
    return session if case.candidate is None else session.rungs[case.candidate]


def _backend(case: Case, request: Any) -> Backend:
    """The model the case judges: the ``longctx_backend`` fixture (which a conftest.py may override), or a ladder's
    candidate, loaded when its first test runs (``longctx_candidates``); one that does not load fails its tests."""
    if case.candidate is None:
        return request.getfixturevalue("longctx_backend")
    try:
        return request.getfixturevalue("longctx_candidates").backend(case.candidate)
    except LongctxError as exc:
        failure = str(exc)
    fail(failure)


def _check(case: Case, session: GateSession, progress: Any, request: Any) -> None:
    """Read the case's unit (once per run), then pass, fail or skip as the gate judges it."""
    run = _run_of(case, session)
    ensure_or_fail(run, [case.unit], _backend(case, request), progress)
    outcome = run.judge(case)
    record_property = recorder(request)
    for name, value in outcome.properties:
        record_property(name, value)
    if outcome.word == NA:
        skip(*outcome.lines)
    if outcome.word == FAIL:
        fail(*outcome.lines)
