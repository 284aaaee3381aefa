"""The two gates the plugin runs, the model gate (``--longctx-model``) and the compressor gate
(``--longctx-compressor``), each as the parts a pytest run needs of it: its gate session, the
module of its generated tests, what it writes when the run ends, its summary, and what follows
the summary. A gate's modules are imported when it starts, in ``start``, never before: a pytest
run without the gate loads none of them (tests/test_layering.py holds these deferred imports)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable

import pytest

from pytest_longctx.gate.gate_session import GateSession
from pytest_longctx.gate.outcome import Happened
from pytest_longctx.gate.run_options import GateOptions

if TYPE_CHECKING:  # the finish record sits with the reports, which import the engine
    from pytest_longctx.reports.finish import Finished


@dataclass
class Gate:
    """A running gate: its session and generated tests, and how it finishes and sums up."""

    session: GateSession
    tests: ModuleType  # the module of its generated tests, with CASE_KINDS
    write: Callable[[Any, Any, Happened], Finished]  # (session, junit, what the plugin saw of the run) -> what it wrote
    summarize: Callable[[Any, Finished], list[str]]  # (session, finished) -> the terminal summary's lines
    # (session, config, the finished evaluation once there is one) -> a plugin after the summary, or None
    follow: Callable[[Any, pytest.Config, Callable[[], Any]], Any] | None = None
    finished: Finished | None = None

    def finish(self, junit: Any, happened: Happened) -> pytest.ExitCode | None:
        """Write what was asked for (on the controller); the exit status the run must end with where it
        cannot pass as it stands (a file asked for is missing), else None."""
        self.finished = self.write(self.session, junit, happened)
        return pytest.ExitCode.TESTS_FAILED if self.finished.failed else None

    def summary_lines(self) -> list[str]:
        return self.summarize(self.session, self.finished) if self.finished is not None else []

    def follow_up(self, config: pytest.Config) -> Any:
        """The gate's plugin for after its summary (a failing model gate's blame), or None."""
        return self.follow(self.session, config, self.evaluation) if self.follow is not None else None

    def evaluation(self) -> Any:
        """The evaluation the finish computed; None before the run finished."""
        return self.finished.evaluation if self.finished is not None else None


def start(options: GateOptions, invocation_dir: Path) -> Gate:
    """The gate ``options`` name, its session made (data and baseline loaded, every check that needs no
    model done)."""
    if options.compressor:
        from pytest_longctx.compress import report
        from pytest_longctx.compress.run import CompressorRun
        from pytest_longctx.plugin import compressor_tests

        return Gate(CompressorRun(options, invocation_dir), compressor_tests, report.finish, report.summary_lines)
    if options.candidates:  # --longctx-model given several times: a ladder
        from pytest_longctx.gate.ladder_run import LadderRun
        from pytest_longctx.plugin import model_tests
        from pytest_longctx.reports import ladder

        return Gate(LadderRun(options, invocation_dir), model_tests, ladder.finish, ladder.summary_lines)
    from pytest_longctx.gate.model_run import GateRun
    from pytest_longctx.plugin import blame, model_tests
    from pytest_longctx.reports import finish, text

    return Gate(GateRun(options, invocation_dir), model_tests, finish.finish, text.summary_lines, blame.follow_up)
