"""The tests the gate generates (collected as ``longctx``, parametrized by the plugin).

Each test scores what it needs once per pytest run, through the shared gate session, and
fails with a message that names the row, cell or item, the values and the threshold.
"""
from __future__ import annotations

from typing import Any

from pytest_longctx.backends.base import Backend
from pytest_longctx.gate.gate_session import Case, GateSession
from pytest_longctx.gate.model_run import GateRun
from pytest_longctx.plugin.checks import check_item, ensure_or_fail, fail, recorder, skip

# which cases each test function takes (see GateSession.cases)
CASE_KINDS = {"test_baseline": "baseline", "test_item": "item", "test_cell": "cell", "test_row": "row"}


def test_baseline(longctx_case: Case, longctx_run: GateRun) -> None:
    fail(longctx_run.missing_baseline)


def test_item(longctx_case: Case, longctx_run: GateRun, longctx_backend: Backend, longctx_progress: Any,
              request: Any) -> None:
    ensure_or_fail(longctx_run, [longctx_case.unit], longctx_backend, longctx_progress)
    unread = longctx_run.not_read(longctx_case.item)
    if unread:
        skip(f"{longctx_case.key}: {unread}")
    check_item(longctx_case, longctx_run, request)


def test_cell(longctx_case: Case, longctx_run: GateSession, longctx_backend: Backend, longctx_progress: Any,
              request: Any) -> None:
    _check(longctx_case, longctx_run, longctx_backend, longctx_progress, recorder(request))


def test_row(longctx_case: Case, longctx_run: GateSession, longctx_backend: Backend, longctx_progress: Any,
             request: Any) -> None:
    _check(longctx_case, longctx_run, longctx_backend, longctx_progress, recorder(request))


def _check(case: Case, run: GateSession, backend: Backend, progress: Any, record_property: Any) -> None:
    ensure_or_fail(run, [case.unit], backend, progress)
    verdicts = [v for v in run.evaluate([case.config]).verdicts if v.key == case.key]
    assert verdicts, f"{case.key}: no verdict was computed (a bug in pytest-longctx)"
    for verdict in verdicts:
        record_property(f"longctx.{verdict.metric}", verdict.model)
        record_property(f"longctx.baseline_{verdict.metric}", verdict.baseline)
        record_property(f"longctx.threshold_{verdict.metric}", verdict.threshold)
    if not any(v.applicable for v in verdicts):
        skip(f"{case.key}: {verdicts[0].why_not_applicable(run.options.thresholds.min_effect)}, nothing to check")
    failed = [v for v in verdicts if v.applicable and not v.passed]
    if failed:
        fail(*(v.message() for v in failed))
