"""pytest hooks of the gate. Inert without ``--longctx-model`` or ``--longctx-compressor``:
nothing is added and nothing heavy is imported (not numpy, not the scoring engine).

Each hook delegates to the running gate (plugin/gates.py's ``Gate``): its gate session (a
``GateSession``), the module of its generated tests, its finish and its summary. Which gate
runs is decided once, from the options, in ``pytest_configure``; no hook asks again."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _pytest.junitxml import xml_key

from pytest_longctx.errors import LongctxError, entered
from pytest_longctx.gate.gate_session import Case
from pytest_longctx.gate.outcome import Happened
from pytest_longctx.gate.run_options import read_options
from pytest_longctx.options.fronts import add_plugin_options, refuse_blank_plugin_values
from pytest_longctx.options.table import PYTEST, taken_by
from pytest_longctx.paths import STEP_SUMMARY, check_outputs, step_summary
from pytest_longctx.plugin.gates import Gate, start
from pytest_longctx.reports.format import visible


class Watch:
    """What happened to the gate's tests, as it happens: which were selected and which ran to an outcome or
    failed, an interruption (Ctrl-C, ``pytest.exit``, collection errors, xdist's ``--maxfail``), the tests that
    ended in an error, and a model that did not load. Registered as a plugin while a gate runs; under
    pytest-xdist the controller sees every test's report, and a worker's model failure comes with its output."""

    def __init__(self) -> None:
        self.interrupted: str | None = None
        self.errors = 0
        self.selected: set[str] = set()
        self.judged: set[str] = set()
        self.failed: set[str] = set()
        self.not_run: str | None = None  # why the gate judged nothing (the model did not load)

    def pytest_keyboard_interrupt(self, excinfo: Any) -> None:
        self.interrupted = f"the run was interrupted ({str(excinfo.value).strip() or excinfo.typename})"

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.selected |= {item.nodeid for item in session.items if _gate_test(item.nodeid)}

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        self.selected |= {nodeid for nodeid in ids if _gate_test(nodeid)}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if not _gate_test(report.nodeid):
            return
        if report.failed and report.when != "call":
            self.errors += 1
        if report.when == "call" or report.skipped:  # a test skipped in its setup (n/a, not read) was judged too
            self.judged.add(report.nodeid)
        if report.failed and report.when == "call":  # a check that failed; an error in its setup judged nothing
            self.failed.add(report.nodeid)

    def happened(self, session: pytest.Session, exitstatus: int) -> Happened:
        """What the run did of the gate's tests, for the outcome every report states (gate/outcome.py)."""
        return Happened(selected=len(self.selected), judged=len(self.judged & self.selected),
                        failed=len(self.failed), not_run=self.not_run, stopped=self.stopped(session, exitstatus))

    def stopped(self, session: pytest.Session, exitstatus: int) -> str | None:
        """Why the run ended before its tests all ran, or went wrong; None when it ran through."""
        if self.interrupted:
            return self.interrupted
        if exitstatus == pytest.ExitCode.INTERRUPTED:
            return "the run was interrupted"
        if exitstatus == pytest.ExitCode.INTERNAL_ERROR:
            return "pytest stopped on an internal error"
        if session.shouldfail or session.shouldstop:
            return f"the run stopped before its last test ({session.shouldfail or session.shouldstop}; -x, --maxfail)"
        if self.errors:
            return f"{self.errors} of the gate's tests ended in an error"
        return None


class NotRun:
    """The gate's options were given but no gate was named: the summary says the gate did not run."""

    def __init__(self, given: list[str]):
        self.given = given

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        terminalreporter.section("longctx")
        terminalreporter.write_line(f"longctx: the gate did not run: {', '.join(self.given)} given without --longctx-model "
                                    "(or --longctx-compressor), which names what to gate; nothing was judged", yellow=True)


GATE_NODEID = "longctx"  # the generated tests' module


def _gate_test(nodeid: str) -> bool:
    return nodeid.split("::")[0] == GATE_NODEID
# the exit statuses after which pytest writes its terminal summary (and so the gate's)
SUMMARY_STATUSES = (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED, pytest.ExitCode.INTERRUPTED,
                    pytest.ExitCode.USAGE_ERROR, pytest.ExitCode.NO_TESTS_COLLECTED)
NOT_RUN = "longctx_not_run"  # the key of a worker's output that says its model did not load
RUNNING = pytest.StashKey[Gate]()
WATCH = pytest.StashKey[Watch]()
SHOWN = pytest.StashKey[bool]()  # the gate's summary was written


def running(config: pytest.Config) -> Gate | None:
    return config.stash.get(RUNNING, None)


def not_run(config: pytest.Config, why: str) -> None:
    """Record that the gate judged nothing, and why (the model did not load): its reports say so, never PASS."""
    watch = config.stash.get(WATCH, None)
    if watch is not None:
        watch.not_run = watch.not_run or why


def pytest_addoption(parser: pytest.Parser) -> None:
    add_plugin_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    try:  # before "no model, nothing to do": --longctx-model= must not make the gate vanish
        refuse_blank_plugin_values(lambda dest: config.getoption(dest, None))
    except LongctxError as exc:
        raise pytest.UsageError(str(exc)) from None
    if not (config.getoption("longctx_model", None) or config.getoption("longctx_compressor", None)):
        if config.getoption("longctx_knob", None):
            raise pytest.UsageError("--longctx-knob: knobs set a context compressor's parameters; name the compressor "
                                    "with --longctx-compressor")
        if config.getoption("longctx_blame", None):
            raise pytest.UsageError("--longctx-blame: blames a failing model gate; name the model with --longctx-model")
        given = [o.plugin_flag for o in taken_by(PYTEST) if config.getoption(o.plugin_dest, None) not in (None, False, [])]
        if given:  # the run passes without the gate: the summary says so
            config.pluginmanager.register(NotRun(given), "longctx-not-run")
        return
    try:
        options = read_options(config.getoption, config.getini, config.inipath)
        if options.compressor and config.getoption("longctx_blame"):
            raise LongctxError("--longctx-blame: blames a model gate's failing rows (--longctx-model with a baseline), "
                               "not a compressor gate's; leave it out")
        outputs, inputs = options.files(config.invocation_params.dir)
        check_outputs([*outputs, *pytest_outputs(config, options)], inputs)  # before anything is read or written
        run = config.stash[RUNNING] = start(options, config.invocation_params.dir)
        run.session.warnings.extend(_rootdir_taken_from_an_option(config))
        follow = run.follow_up(config)
    except LongctxError as exc:
        raise pytest.UsageError(visible(str(exc))) from None
    config.stash[WATCH] = Watch()
    config.pluginmanager.register(config.stash[WATCH], "longctx-watch")
    if follow is not None:
        config.pluginmanager.register(follow, "longctx-follow-up")
    # pytest-xdist: keep each unit's tests (and so its scoring) on one worker; the mark is
    # registered here too, so a run without pytest-xdist installed does not warn about it.
    config.addinivalue_line("markers", "xdist_group(name): run these tests on one pytest-xdist worker")
    if getattr(config.option, "dist", None) == "load":
        config.option.dist = "loadgroup"


# what pytest and its plugins write, by the option that names the file and its dest
PYTEST_OUTPUTS = (("--junitxml", "xmlpath"), ("--report-log", "report_log"), ("--html", "htmlpath"))


def pytest_outputs(config: pytest.Config, options: Any) -> list[tuple[str, str | None]]:
    """The files the pytest run writes besides the gate's own: pytest's junit XML, its plugins' reports, and
    for the model gate the CI job's step summary its markdown is appended to."""
    found = [(flag, getattr(config.option, dest, None)) for flag, dest in PYTEST_OUTPUTS]
    return found + ([] if options.compressor else [(f"${STEP_SUMMARY}", step_summary())])


def _rootdir_taken_from_an_option(config: pytest.Config) -> list[str]:
    """pytest chooses its root folder before it knows the plugin's options, so a path given to one as a
    separate word (``--longctx-baseline baselines/b.json.gz``) can become it, and the generated tests'
    ids then read ``../longctx::...``: a warning naming the option and the one-word form."""
    rootpath, here, given = config.rootpath, config.invocation_params.dir, list(config.invocation_params.args)
    if config.inipath is not None or rootpath == here:
        return []
    found = []
    for option in taken_by(PYTEST):
        if option.value is not None and option.plugin_flag in given[:-1]:
            value = entered(given[given.index(option.plugin_flag) + 1])  # as every line shows an option's value
            if (here / value).resolve().is_relative_to(rootpath):
                found.append(f"pytest took its root folder ({rootpath}) from {option.plugin_flag}'s value, given as a "
                             f"separate word, so the gate's test ids read from there; give it as {option.plugin_flag}={value}")
    return found[:1]


def _case(item: pytest.Item) -> Case | None:
    """The case a generated test runs; None for other tests and for the placeholder pytest
    makes when a kind has no case (e.g. no rules cells)."""
    case = getattr(getattr(item, "callspec", None), "params", {}).get("longctx_case")
    return case if isinstance(case, Case) else None


class GateModule(pytest.Module):
    """The generated tests, collected from the running gate's already-imported tests module."""

    def _getobj(self) -> Any:
        return running(self.config).tests


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    run = running(metafunc.config)
    if run is None or "longctx_case" not in metafunc.fixturenames:
        return
    kind = run.tests.CASE_KINDS[metafunc.function.__name__]
    cases = [c for c in run.session.cases() if c.kind == kind]
    metafunc.parametrize("longctx_case", [pytest.param(c, id=c.test_id, marks=pytest.mark.xdist_group(c.group)) for c in cases])


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    run = running(config)
    if run is None:
        return
    module = GateModule.from_parent(session, path=Path(run.tests.__file__), nodeid=GATE_NODEID)
    # the functions whose kind has no case are left out
    generated = [i for i in module.collect() if isinstance(i, pytest.Item) and _case(i) is not None]
    if any(_case(i).candidate is not None for i in generated):  # a ladder: a candidate's tests together, in its rung's
        # order, so one candidate is loaded at a time
        order = {case: n for n, case in enumerate(run.session.cases())}
        generated.sort(key=lambda i: order[_case(i)])
    # reported as collected (the terminal said "collected 0 items" before running them all)
    config.hook.pytest_collectreport(report=pytest.CollectReport(module.nodeid, "passed", None, generated))
    if run.session.options.only and items:  # none left, as pytest_ignore_collect kept the modules out
        config.hook.pytest_deselected(items=list(items))
        items.clear()
    items.extend(generated)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """With --longctx-only the repository's own test modules are not imported at all: a gate job
    need not install what they import. Folders are still walked, so their conftest.py files (a
    fixture handing in a model) load as usual."""
    run = running(config)
    if run is None or not run.session.options.only or collection_path.is_dir() or collection_path.name == "conftest.py":
        return None
    return True


def pytest_collection_finish(session: pytest.Session) -> None:
    run = running(session.config)
    if run is not None:
        run.session.select(case for case in map(_case, session.items) if case is not None)


@pytest.hookimpl(tryfirst=True)  # before junitxml writes its file
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    run = running(session.config)
    if run is None:
        return
    workeroutput = getattr(session.config, "workeroutput", None)
    watch = session.config.stash[WATCH]
    if workeroutput is not None:  # an xdist worker: the controller reports
        workeroutput["longctx"] = run.session.export()
        workeroutput[NOT_RUN] = watch.not_run
        return
    status = run.finish(session.config.stash.get(xml_key, None), watch.happened(session, exitstatus))
    if status is not None and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = status  # a file asked for is missing: not a pass
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if exitstatus not in SUMMARY_STATUSES and reporter is not None:
        _summary(reporter, session.config)  # pytest writes no summary after an internal error: the gate's still shows


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    run = running(node.config)
    output = getattr(node, "workeroutput", {})
    if run is not None and output.get("longctx"):
        run.session.absorb(output["longctx"])
    if run is not None and output.get(NOT_RUN):
        not_run(node.config, output[NOT_RUN])


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    _summary(terminalreporter, config)


def _summary(terminalreporter: Any, config: pytest.Config) -> None:
    run = running(config)
    if run is None or run.finished is None or config.stash.get(SHOWN, False):
        return
    config.stash[SHOWN] = True
    terminalreporter.section("longctx")
    for line in run.summary_lines():
        terminalreporter.write_line(line)
