"""The pytest plugin (the ``pytest11`` entry point): its hooks and fixtures."""
from pytest_longctx.plugin.hooks import (
    pytest_addoption,
    pytest_configure,
    pytest_generate_tests,
    pytest_collection_modifyitems,
    pytest_collection_finish,
    longctx_run,
    longctx_backend,
    longctx_baseline,
    longctx_progress,
    longctx_results,
    pytest_sessionfinish,
    pytest_testnodedown,
    pytest_terminal_summary,
)

__all__ = ["pytest_addoption", "pytest_configure", "pytest_generate_tests", "pytest_collection_modifyitems", "pytest_collection_finish", "longctx_run", "longctx_backend", "longctx_baseline", "longctx_progress", "longctx_results", "pytest_sessionfinish", "pytest_testnodedown", "pytest_terminal_summary"]
