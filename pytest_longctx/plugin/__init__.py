"""The pytest plugin (the ``pytest11`` entry point ``pytest_longctx.plugin``): its hooks
and fixtures, gathered here so that pytest registers them from one module."""
from pytest_longctx.plugin.fixtures import (
    longctx_backend,
    longctx_baseline,
    longctx_candidates,
    longctx_progress,
    longctx_results,
    longctx_run,
)
from pytest_longctx.plugin.hooks import (
    pytest_addoption,
    pytest_collection_finish,
    pytest_collection_modifyitems,
    pytest_configure,
    pytest_generate_tests,
    pytest_ignore_collect,
    pytest_sessionfinish,
    pytest_terminal_summary,
    pytest_testnodedown,
)

__all__ = [
    "longctx_backend", "longctx_baseline", "longctx_candidates", "longctx_progress", "longctx_results", "longctx_run",
    "pytest_addoption", "pytest_collection_finish", "pytest_collection_modifyitems", "pytest_configure",
    "pytest_generate_tests", "pytest_ignore_collect", "pytest_sessionfinish", "pytest_terminal_summary", "pytest_testnodedown",
]
