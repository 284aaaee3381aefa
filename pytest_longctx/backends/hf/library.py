"""torch, imported on first use by the transformers backend, with the line that says how to install it."""
from __future__ import annotations

from typing import Any

from pytest_longctx.errors import LongctxError


def import_torch() -> Any:
    try:
        import torch
    except ImportError:
        raise LongctxError(
            "the transformers backend needs torch: pip install torch (the build that fits the machine), "
            "then pip install 'pytest-longctx[hf]'"
        ) from None
    return torch
