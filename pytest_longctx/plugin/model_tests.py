"""The tests the gate generates (collected as ``longctx``, parametrized by the plugin).

Each test scores what it needs once per session, through the shared gate run, and fails
with a message that names the row, cell or item, the values and the threshold.
"""
from __future__ import annotations

from typing import Any

import pytest

from pytest_longctx.data.records import config_kind
from pytest_longctx.errors import LongctxError

# which cases each test function takes (see GateSession.cases)
CASE_KINDS = {"test_baseline": "baseline", "test_item": "item", "test_cell": "cell", "test_row": "row"}


def _ensure(run: Any, case: Any, backend: Any, progress: Any) -> None:
    try:
        run.ensure([case.unit], backend, progress)
    except LongctxError as exc:
        failure = str(exc)
    else:
        return
    pytest.fail(failure, pytrace=False)  # outside the except: the message once, not chained to itself


def _recorder(request: Any) -> Any:
    """``record_property`` without its fixture, which warns under junit_family xunit2 in one
    process (never under xdist, whose workers have no junit file): the same properties reach
    the junit XML either way."""
    return lambda name, value: request.node.user_properties.append((name, value))


def test_baseline(longctx_case: Any, longctx_run: Any) -> None:
    pytest.fail(longctx_run.missing_baseline, pytrace=False)


def test_item(longctx_case: Any, longctx_run: Any, longctx_backend: Any, longctx_progress: Any, request: Any) -> None:
    case, record_property = longctx_case, _recorder(request)
    _ensure(longctx_run, case, longctx_backend, longctx_progress)
    problems, properties = longctx_run.item_report(case.config, case.length, case.item_id)
    for name, value in properties.items():
        record_property(f"longctx.{name}", value)
    if problems:
        pytest.fail(f"{case.key}: " + "; ".join(problems), pytrace=False)


def test_cell(longctx_case: Any, longctx_run: Any, longctx_backend: Any, longctx_progress: Any, request: Any) -> None:
    _check(longctx_case, longctx_run, longctx_backend, longctx_progress, _recorder(request))


def test_row(longctx_case: Any, longctx_run: Any, longctx_backend: Any, longctx_progress: Any, request: Any) -> None:
    _check(longctx_case, longctx_run, longctx_backend, longctx_progress, _recorder(request))


def _check(case: Any, run: Any, backend: Any, progress: Any, record_property: Any) -> None:
    _ensure(run, case, backend, progress)
    verdicts = [v for v in run.evaluate([case.config]).verdicts if v.key == case.key]
    assert verdicts, f"{case.key}: no verdict was computed (a bug in pytest-longctx)"
    for verdict in verdicts:
        record_property(f"longctx.{verdict.metric}", verdict.model)
        record_property(f"longctx.baseline_{verdict.metric}", verdict.baseline)
        record_property(f"longctx.threshold_{verdict.metric}", verdict.threshold)
    if not any(v.applicable for v in verdicts):
        reason = (f"no counted target (|eff_ref| >= {run.thresholds.min_effect:g} nat)" if config_kind(case.config) == "rules"
                  else "no scored item")
        pytest.skip(f"{case.key}: {reason}, nothing to check")
    failed = [v for v in verdicts if not v.passed]
    if failed:
        pytest.fail("\n".join(v.message() for v in failed), pytrace=False)
