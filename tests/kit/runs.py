"""Runs as the tests make them: pytest in a process of its own, as a user runs it from a shell, and what its output
shows; hooks a test hands an in-process run; a tiny model's baseline made by `longctx score`."""
from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from pathlib import Path

import pytest

from pytest_longctx.cli import main
from pytest_longctx.cli import score as score_command


def run_pytest(cwd: Path | str, *args: str, environment: Mapping[str, str] | None = None,
               timeout: float | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m pytest -p no:cacheprovider -q ARGS`` run in ``cwd`` by this Python, with ``environment``
    added to this process's, within ``timeout`` seconds when given; its output captured as text."""
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args], capture_output=True,
                          text=True, cwd=cwd, env={**os.environ, **(environment or {})}, timeout=timeout)


def gate_summary(text: str) -> list[str]:
    """The lines of the gate's terminal summary in a pytest output: after its ``longctx gate:`` line,
    up to the next ``====`` rule or ``FAILED`` line."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("longctx gate:"))
    end = next(i for i in range(start, len(lines)) if lines[i].startswith("====") or lines[i].startswith("FAILED"))
    return lines[start + 1:end]


def run_alike(text: str) -> list[str]:
    """The gate's summary lines that two runs of one selection share: not the line naming the results file, nor the
    tokens forwarded (under pytest-xdist each worker reads the units its tests need: docs/options.md#pytest-xdist)."""
    return [line for line in gate_summary(text) if "results written to" not in line and "forwarded" not in line]


def with_and_without_xdist(pytester, model: Path | str, data: Path | str, baseline: Path | str, *args: str) -> dict[str, tuple]:
    """The gate on ``model`` against ``baseline`` over ``data``'s 2k items run in a process of its own with ``-n 0``
    and ``-n 2``, each writing a junit file and a results file: {workers: (its RunResult, junit path, results path)}.
    Neither keeps a score cache, so each forwards its own tokens (the second is not answered from the first's cache)."""
    runs = {}
    for workers in ("0", "2"):
        junit, out = pytester.path / f"junit-{workers}.xml", pytester.path / f"results-{workers}.json"
        result = pytester.runpytest_subprocess(
            "-p", "no:cacheprovider", "-n", workers, f"--junitxml={junit}", f"--longctx-model={model}",
            f"--longctx-data={data}", "--longctx-lengths=2k", f"--longctx-baseline={baseline}", f"--longctx-out={out}",
            "--longctx-cache-dir=off", *args)
        runs[workers] = (result, junit, out)
    return runs


class Hooks:
    """Hooks of a test's own, handed to the run as a plugin (a conftest.py in the test's folder
    would see only the tests under it, not the gate's)."""

    def __init__(self, **hooks):
        for name, hook in hooks.items():
            setattr(self, f"pytest_{name}", hook)


def saved_scores(loaded: tuple, data: Path, path: Path) -> Path:
    """The scores of the model ``loaded`` hands in (``(backend, tokenizer)``, as ``load_backend`` returns it) on every
    item of ``data``, saved at ``path`` by ``longctx score --save_scores``: a baseline of that model."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(score_command, "load_backend", lambda *args, **kwargs: loaded)
        assert main(["score", "--model", "tiny", "--data", str(data), "--quiet", "--save_scores", str(path)]) == 0
    return path


def junit_outcomes(path: Path) -> tuple[dict[str, str], dict[str, str]]:
    """(the suite's properties, test name -> passed / failed / skipped) of a junit file."""
    suite = ET.parse(path).getroot().find("testsuite")
    properties = {p.get("name"): p.get("value") for p in suite.find("properties")}
    outcomes = {}
    for case in suite.iter("testcase"):
        outcome = "failed" if case.find("failure") is not None else "skipped" if case.find("skipped") is not None else "passed"
        outcomes[case.get("name")] = outcome
    return properties, outcomes
