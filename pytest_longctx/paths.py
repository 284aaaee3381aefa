"""Where pytest-longctx keeps what it builds once and reuses (builtin data, converted models)."""
from __future__ import annotations

import os
from pathlib import Path


def cache_dir(*parts: str) -> Path:
    """``$LONGCTX_CACHE``, else ``$XDG_CACHE_HOME/pytest-longctx``, else ``~/.cache/pytest-longctx``."""
    root = os.environ.get("LONGCTX_CACHE")
    if not root:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        root = os.path.join(base, "pytest-longctx")
    path = Path(root, *parts)
    path.mkdir(parents=True, exist_ok=True)
    return path
