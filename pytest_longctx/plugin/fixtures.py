"""The gate's fixtures: its gate session, the model under test as a backend, progress on the
terminal, and every result at once for a user's own tests."""
from __future__ import annotations

import contextlib
import gc
import sys
import time
from typing import Any, Iterator

import pytest

from pytest_longctx.backends import load_backend
from pytest_longctx.backends.base import Backend, close
from pytest_longctx.errors import LongctxError
from pytest_longctx.gate.gate_session import GateEvaluation, GateSession
from pytest_longctx.gate.run_options import GateOptions
from pytest_longctx.plugin.checks import fail
from pytest_longctx.plugin.hooks import not_run, running
from pytest_longctx.progress import labelled
from pytest_longctx.reports.format import visible


def worker_of(config: pytest.Config) -> str | None:
    """The pytest-xdist worker this run is (``gw0``, …); None in a controller or alone. Asked of the run's
    config, not of the environment, which a pytest run inside a worker's test (pytester) inherits."""
    workerinput = getattr(config, "workerinput", None)
    return workerinput.get("workerid") if workerinput is not None else None


def worker_device(device: str, worker: str | None) -> str:
    """Under pytest-xdist with several GPUs, worker ``gwN`` takes GPU ``N`` (mod count)."""
    if device != "auto" or not worker or not worker.startswith("gw"):
        return device
    import torch

    count = torch.cuda.device_count()
    return f"cuda:{int(worker[2:]) % count}" if count > 1 else device


@pytest.fixture(scope="session")
def longctx_run(request: pytest.FixtureRequest) -> GateSession:
    """The running gate's session (data, baseline, scores); internal to the generated tests."""
    run = running(request.config)
    if run is None:
        pytest.skip("pytest-longctx is inactive: pass --longctx-model")
    return run.session


def _load(options: GateOptions, request: pytest.FixtureRequest) -> Backend:
    """The model ``options`` name, loaded, what loading says (a first-run conversion, the loader's progress) on the
    terminal; a failure raised as ``LongctxError``."""
    capture = request.config.pluginmanager.getplugin("capturemanager")
    reporter = request.config.pluginmanager.getplugin("terminalreporter")
    worker = worker_of(request.config)
    if reporter is not None and not worker:
        reporter.ensure_newline()  # past the test's "longctx " on its own line (was "longctx longctx: converting")
    with capture.global_and_fixture_disabled() if capture and not worker else contextlib.nullcontext():
        backend, _ = load_backend(options.model, options.backend, options.dtype, worker_device(options.device, worker),
                                  options.backend_options, options.trust_remote_code, kv_press=options.kv_press)
    return backend


@pytest.fixture(scope="session")
def longctx_backend(longctx_run: GateSession, request: pytest.FixtureRequest) -> Iterator[Backend]:
    """The model under test as a backend (anything with ``read(ids, positions, tokens)``),
    closed at the end of the session. Override it in the root conftest.py to hand in an
    already-loaded model."""
    if longctx_run.options.candidates:
        fail(f"longctx_backend: this run is a ladder of {len(longctx_run.options.candidates)} candidates, loaded one at "
             "a time, with results per candidate (its results JSON, --longctx-out); a test of your own that needs the "
             "model or its results (longctx_backend, longctx_results) runs with one --longctx-model")
    try:
        backend = _load(longctx_run.options, request)
    except LongctxError as exc:
        failure = str(exc)
    else:
        yield backend
        close(backend)
        return
    not_run(request.config, f"the model did not load: {failure}")
    if not worker_of(request.config):  # one line and a usage error, not the same failure in every generated test
        pytest.exit(visible(f"longctx: the model did not load: {failure}"), returncode=pytest.ExitCode.USAGE_ERROR)
    fail(failure)  # outside the except: the message once, not chained to itself


class Candidates:
    """A ladder's candidates, loaded as their tests ask for them, one in memory at a time: asking for another closes
    the one loaded. One that does not load is said once to the ladder and to each of its tests."""

    def __init__(self, ladder: Any, request: pytest.FixtureRequest):
        self.ladder, self.request = ladder, request
        self.loaded: tuple[str, Backend] | None = None
        self.failed: dict[str, str] = {}  # candidate -> why it did not load

    def backend(self, candidate: str) -> Backend:
        if candidate in self.failed:
            raise LongctxError(self.failed[candidate])
        if self.loaded is not None and self.loaded[0] == candidate:
            return self.loaded[1]
        self.close()
        started = time.perf_counter()
        try:
            backend = _load(self.ladder.rungs[candidate].options, self.request)
        except LongctxError as exc:
            self.ladder.loaded(candidate, time.perf_counter() - started, str(exc))
            self.failed[candidate] = self.ladder.rungs[candidate].failure
            raise LongctxError(self.failed[candidate]) from None
        self.ladder.loaded(candidate, time.perf_counter() - started, None)
        self.loaded = (candidate, backend)
        return backend

    def close(self) -> None:
        """Release the candidate in memory, and what its reading keeps of it, before the next is loaded."""
        if self.loaded is not None:
            self.ladder.rungs[self.loaded[0]].reader.release()
            close(self.loaded[1])
            self.loaded = None
            gc.collect()


@pytest.fixture(scope="session")
def longctx_candidates(longctx_run: GateSession, request: pytest.FixtureRequest) -> Iterator[Candidates]:
    """A ladder's candidates (``--longctx-model`` given several times), loaded one at a time as their tests run."""
    candidates = Candidates(longctx_run, request)
    yield candidates
    candidates.close()


@pytest.fixture(scope="session")
def longctx_baseline(longctx_run: GateSession) -> Any:
    """The baseline scores file (``None`` while updating it, and for the compressor gate)."""
    return longctx_run.baseline


@pytest.fixture(scope="session")
def longctx_progress(request: pytest.FixtureRequest) -> Any:
    """How scoring reports progress: on the terminal, past pytest's capture."""
    if worker_of(request.config):
        return False  # xdist workers have no terminal of their own
    stream = _TerminalStream(request.config)
    return labelled("longctx", stream)


@pytest.fixture(scope="session")
def longctx_results(longctx_run: GateSession, longctx_backend: Backend, longctx_progress: Any) -> GateEvaluation:
    """Every selected item scored; ``.rows``, ``.sets``, ``.baseline_rows``, ``.verdicts``."""
    longctx_run.need_everything()
    try:
        longctx_run.ensure(["facts", "tool_calls", "rules", "faithfulness"], longctx_backend, longctx_progress)
    except LongctxError as exc:
        failure = str(exc)
    else:
        return longctx_run.evaluate()
    fail(failure)


class _TerminalStream:
    def __init__(self, config: pytest.Config):
        self.capture = config.pluginmanager.getplugin("capturemanager")
        self.stream = sys.__stderr__

    def isatty(self) -> bool:
        return bool(self.stream and self.stream.isatty())

    def write(self, text: str) -> None:
        with self.capture.global_and_fixture_disabled():
            self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()
