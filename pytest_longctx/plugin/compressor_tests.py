"""The tests the compressor gate generates (collected as ``longctx``): one retention
test per item and one test per thresholded row."""
from __future__ import annotations

from typing import Any

from pytest_longctx.gate.gate_session import Case, GateSession
from pytest_longctx.plugin.checks import check_item, ensure_or_fail, fail, recorder, skip

# which cases each test function takes (see GateSession.cases)
CASE_KINDS = {"test_retention": "item", "test_threshold": "row"}


def _ensure(run: GateSession, request: Any) -> None:
    backend = request.getfixturevalue("longctx_backend") if run.options.model else None
    ensure_or_fail(run, ["faithfulness"], backend, request.getfixturevalue("longctx_progress"))


def test_retention(longctx_case: Case, longctx_run: GateSession, request: Any) -> None:
    _ensure(longctx_run, request)
    check_item(longctx_case, longctx_run, request)


def test_threshold(longctx_case: Case, longctx_run: GateSession, request: Any) -> None:
    record_property = recorder(request)
    _ensure(longctx_run, request)
    verdict = next((v for v in longctx_run.evaluate().verdicts if v.key == longctx_case.key), None)
    assert verdict is not None, f"{longctx_case.key}: no verdict was computed (a bug in pytest-longctx)"
    record_property(f"longctx.{verdict.metric}", verdict.model)
    record_property(f"longctx.full_{verdict.metric}", verdict.baseline)
    record_property(f"longctx.threshold_{verdict.metric}", verdict.threshold)
    if not verdict.applicable:
        skip(f"{longctx_case.key}: no value (no item scored), nothing to check")
    if not verdict.passed:
        fail(verdict.message())
