"""Checks on the errors users read: each is one line."""
from __future__ import annotations

import pytest


def one_line(raised: pytest.ExceptionInfo) -> str:
    """The message of the error ``pytest.raises`` caught, after checking that it is one line."""
    message = str(raised.value)
    assert "\n" not in message
    return message
