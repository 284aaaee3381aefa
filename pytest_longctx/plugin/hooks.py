"""pytest hooks and fixtures of the gate. Inert without ``--longctx-model`` or
``--longctx-compressor``: nothing is added and neither torch nor transformers is
imported (nor by the compressor gate without a model)."""
from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_longctx.errors import LongctxError
from pytest_longctx.gate.options import add_options, read_options

RUN = pytest.StashKey[Any]()
FINAL = pytest.StashKey[Any]()  # (evaluation, notes) of the finished session, for the summary
KINDS = {"test_item": "item", "test_cell": "cell", "test_row": "row",
         "test_retention": "item", "test_threshold": "row"}  # the last two: the compressor gate's


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def _run(config: pytest.Config) -> Any:
    return config.stash.get(RUN, None)


def _is_compressor_run(run: Any) -> bool:
    return getattr(run, "kind", "model") == "compressor"


def pytest_configure(config: pytest.Config) -> None:
    if not (config.getoption("longctx_model", None) or config.getoption("longctx_compressor", None)):
        return
    try:
        options = read_options(config.getoption, config.getini, config.inipath)
        if options.compressor:
            from pytest_longctx.compress.run import CompressorRun

            config.stash[RUN] = CompressorRun(options, config.invocation_params.dir)
        else:
            from pytest_longctx.gate.model_run import GateRun

            config.stash[RUN] = GateRun(options, config.invocation_params.dir)
    except LongctxError as exc:
        raise pytest.UsageError(str(exc)) from None
    # pytest-xdist: keep each unit's tests (and so its scoring) on one worker.
    if getattr(config.option, "dist", None) == "load":
        config.option.dist = "loadgroup"


def _tests_module(run: Any) -> Any:
    """The module of the tests a run generates: the model gate's or the compressor gate's."""
    if _is_compressor_run(run):
        from pytest_longctx.plugin import compressor_tests

        return compressor_tests
    from pytest_longctx.plugin import model_tests as gate_tests

    return gate_tests


def _case(item: pytest.Item) -> Any:
    """The case a generated test runs; None for other tests and for the placeholder pytest
    makes when a kind has no case (e.g. no rules cells)."""
    case = getattr(getattr(item, "callspec", None), "params", {}).get("longctx_case")
    return case if hasattr(case, "needs") else None


class GateModule(pytest.Module):
    """The generated tests, collected from the already-imported tests module."""

    def _getobj(self) -> Any:
        return _tests_module(_run(self.config))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    run = _run(metafunc.config)
    if run is None or "longctx_case" not in metafunc.fixturenames:
        return
    kind = KINDS[metafunc.function.__name__]
    cases = [c for c in run.cases() if c.kind == kind]
    metafunc.parametrize("longctx_case", [pytest.param(c, id=c.key, marks=pytest.mark.xdist_group(c.unit)) for c in cases])


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    run = _run(config)
    if run is None:
        return
    module = GateModule.from_parent(session, path=Path(_tests_module(run).__file__), nodeid="longctx")
    generated = [i for i in module.collect() if isinstance(i, pytest.Item)]
    if run.missing_baseline:
        generated = [i for i in generated if i.originalname == "test_baseline"]
    else:  # drop the placeholders pytest makes for kinds with no case (e.g. no rules, no cells)
        generated = [i for i in generated if _case(i) is not None]
    if run.options.only and items:
        config.hook.pytest_deselected(items=list(items))
        items.clear()
    items.extend(generated)


def pytest_collection_finish(session: pytest.Session) -> None:
    run = _run(session.config)
    if run is not None:
        run.select(case for case in map(_case, session.items) if case is not None)


# ------------------------------------------------------------------ fixtures


@pytest.fixture(scope="session")
def longctx_run(request: pytest.FixtureRequest) -> Any:
    """The session's gate run (data, baseline, scores); internal to the generated tests."""
    run = _run(request.config)
    if run is None:
        pytest.skip("pytest-longctx is inactive: pass --longctx-model")
    return run


@pytest.fixture(scope="session")
def longctx_backend(longctx_run: Any, request: pytest.FixtureRequest) -> Any:
    """The model under test as a backend (anything with ``read(ids, positions, tokens)``).
    Override it in the root conftest.py to hand in an already-loaded model."""
    from pytest_longctx.backends import load_backend
    from pytest_longctx.gate.model_run import env_worker, worker_device

    options = longctx_run.options
    # what loading says (a first-run conversion, the loader's progress) reaches the terminal
    capture = request.config.pluginmanager.getplugin("capturemanager")
    try:
        with capture.global_and_fixture_disabled() if capture and not env_worker() else contextlib.nullcontext():
            backend, _ = load_backend(options.model, options.backend, options.dtype,
                                      worker_device(options.device, env_worker()))
    except LongctxError as exc:
        pytest.fail(str(exc), pytrace=False)
    return backend


@pytest.fixture(scope="session")
def longctx_baseline(longctx_run: Any) -> Any:
    """The baseline scores file (``None`` while updating it)."""
    return longctx_run.baseline


@pytest.fixture(scope="session")
def longctx_progress(request: pytest.FixtureRequest) -> Any:
    """How scoring reports progress: on the terminal, past pytest's capture."""
    from pytest_longctx.scoring.progress import Progress
    from pytest_longctx.gate.model_run import env_worker

    if env_worker():
        return False  # xdist workers have no terminal of their own
    stream = _TerminalStream(request.config)
    return lambda items, tokens: Progress(items, tokens, label="longctx", stream=stream)


@pytest.fixture(scope="session")
def longctx_results(longctx_run: Any, longctx_backend: Any, longctx_progress: Any) -> Any:
    """Every selected item scored; ``.rows``, ``.sets``, ``.baseline_rows``, ``.verdicts``."""
    longctx_run.need_everything()
    try:
        longctx_run.ensure(["facts", "tool_calls", "rules", "faithfulness"], longctx_backend, longctx_progress)
    except LongctxError as exc:
        pytest.fail(str(exc), pytrace=False)
    return longctx_run.evaluate()


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


# ------------------------------------------------------------------ reports (controller)


@pytest.hookimpl(tryfirst=True)  # before junitxml writes its file
def pytest_sessionfinish(session: pytest.Session) -> None:
    run = _run(session.config)
    if run is None:
        return
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["longctx"] = run.export()
        return
    from _pytest.junitxml import xml_key

    if _is_compressor_run(run):
        from pytest_longctx.compress.report import finish

        session.config.stash[FINAL] = finish(run, session.config.stash.get(xml_key, None))
        return

    from pytest_longctx.reports.files import write_reports
    from pytest_longctx.reports.text import results_json, suite_properties, write_json

    evaluation = run.evaluate()
    notes = []
    options = run.options
    if options.out:
        write_json(options.out, results_json(run, evaluation))
        notes.append(f"longctx: results written to {options.out}")
    if options.update_baseline and run.baseline_path is not None:
        if run.failure or not any(True for _ in run.scores.items()):
            notes.append(f"longctx: baseline {run.baseline_path} NOT written: {run.failure or 'nothing was scored'}")
        else:
            run.baseline_file().save(run.baseline_path)
            notes.append(f"longctx: wrote baseline {run.baseline_path}; commit it beside the checkpoint")
    notes.extend(write_reports(run, evaluation))  # markdown / HTML reports (gate_reports.py)
    xml = session.config.stash.get(xml_key, None)
    if xml is not None:
        for name, value in suite_properties(run, evaluation):
            xml.add_global_property(name, value)
    session.config.stash[FINAL] = (evaluation, notes)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    run = _run(node.config)
    exported = getattr(node, "workeroutput", {}).get("longctx")
    if run is not None and exported:
        run.absorb(exported)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    run, final = _run(config), config.stash.get(FINAL, None)
    if run is None or final is None:
        return
    if _is_compressor_run(run):
        from pytest_longctx.compress.report import summary_lines
    else:
        from pytest_longctx.reports.text import summary_lines
    terminalreporter.section("longctx")
    for line in summary_lines(run, *final):
        terminalreporter.write_line(line)
