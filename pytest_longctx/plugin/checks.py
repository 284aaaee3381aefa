"""What the generated tests of both gates do alike: score what a test needs (a failure as the
test's one line), fail or skip with lines whose control characters are written out, record
junit properties, and check one item."""
from __future__ import annotations

from typing import Any, NoReturn

import pytest

from pytest_longctx.backends.base import Backend
from pytest_longctx.errors import LongctxError
from pytest_longctx.gate.gate_session import Case, GateSession
from pytest_longctx.reports.format import visible


def ensure_or_fail(run: GateSession, units: list[str], backend: Backend | None, progress: Any) -> None:
    """``run.ensure``, a failure turned into the test's one-line failure."""
    try:
        run.ensure(units, backend, progress)
    except LongctxError as exc:
        failure = str(exc)
    else:
        return
    fail(failure)  # outside the except: the message once, not chained to itself


def fail(*messages: str) -> NoReturn:
    """Fail the test with one line per message, control characters written out: an id from
    the data is shown on the terminal and in the junit file, never acted on."""
    pytest.fail("\n".join(visible(m) for m in messages), pytrace=False)


def skip(*messages: str) -> NoReturn:
    pytest.skip("\n".join(visible(m) for m in messages))


def recorder(request: pytest.FixtureRequest) -> Any:
    """``record_property`` without its fixture, which warns under junit_family xunit2 in one
    process (never under xdist, whose workers have no junit file): the same properties reach
    the junit XML either way."""
    return lambda name, value: request.node.user_properties.append((name, value))


def check_item(case: Case, run: GateSession, request: pytest.FixtureRequest) -> None:
    """An item's test, once its unit is scored: its figures as junit properties, and a failure naming
    each of its problems."""
    problems, properties = run.item_report(case.item)
    record_property = recorder(request)
    for name, value in properties.items():
        record_property(f"longctx.{name}", value)
    if problems:
        fail(f"{case.key}: " + "; ".join(problems))
