"""No PASS report without a verdict: the markdown summary, ``$GITHUB_STEP_SUMMARY``, the HTML report, the junit
properties and the results JSON say PASS only where every selected check was judged and passed; a model that
does not load (exit 4), Ctrl-C before scoring ends (exit 2) and ``-k`` deselecting every test of the gate
(exit 5) each say what happened instead, and pytest's exit status stands.

A tiny random model is handed to every run (what is tested is what the reports say, not how a model loads);
runs are in-process, the ones under pytest-xdist in a process of their own."""
from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from kit.models import save_model, tiny_qwen3
from kit.runs import Hooks, run_pytest

from pytest_longctx.cli import main
from pytest_longctx.errors import LongctxError
from pytest_longctx.plugin import fixtures

MODEL = "tiny"


def reports(folder: Path) -> dict[str, str]:
    """What each report says as its outcome: the markdown's and the step summary's heading, the HTML's heading
    and its class, the junit property, the results JSON's field."""
    html = (folder / "report.html").read_text()
    heading = re.search(r'<h1 class="verdict-(\w+)">longctx: ([^<]*)</h1>', html)
    properties = {p.get("name"): p.get("value") for p in ET.parse(folder / "junit.xml").iter("property")}
    return {"markdown": (folder / "summary.md").read_text().splitlines()[0],
            "step summary": (folder / "step.md").read_text().splitlines()[0],
            "html": f"{heading[2]} ({heading[1]})",
            "junit": properties["longctx.outcome"],
            "results": json.loads((folder / "results.json").read_text())["outcome"]}


def said(word: str, css: str) -> dict[str, str]:
    return {"markdown": f"## longctx: {word}", "step summary": f"## longctx: {word}", "html": f"{word} ({css})",
            "junit": word, "results": word}


def gate(pytester, data, baseline, *args, **kwargs):
    pytester._monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(pytester.path / "step.md"))
    return pytester.runpytest_inprocess(
        "-p", "no:cacheprovider", "-p", "no:xdist", f"--longctx-model={MODEL}", f"--longctx-data={data}",
        f"--longctx-baseline={baseline}", "--longctx-markdown=summary.md", "--longctx-html=report.html",
        "--longctx-out=results.json", "--junitxml=junit.xml", *args, **kwargs)


def test_a_run_that_judged_every_check_and_passed_says_pass(pytester, tiny_data, tiny_baseline, tiny_loaded, monkeypatch):
    monkeypatch.setattr(fixtures, "load_backend", lambda *args, **kwargs: tiny_loaded)
    result = gate(pytester, tiny_data, tiny_baseline)
    assert result.ret == pytest.ExitCode.OK
    assert reports(pytester.path) == said("PASS", "pass")
    assert "not judged" not in (pytester.path / "summary.md").read_text()


def test_a_model_that_does_not_load_is_not_run(pytester, tiny_data, tiny_baseline, monkeypatch):
    def refuse(*args, **kwargs):
        raise LongctxError("--model tiny: no such folder or file")

    monkeypatch.setattr(fixtures, "load_backend", refuse)
    result = gate(pytester, tiny_data, tiny_baseline)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert reports(pytester.path) == said("NOT RUN", "na")
    why = "the model did not load: --model tiny: no such folder or file"
    assert f"> **not judged**: {why}" in (pytester.path / "summary.md").read_text().splitlines()
    assert f"longctx: NOT RUN: {why}" in result.outlines
    assert 'class="verdict-pass"' not in (pytester.path / "report.html").read_text()


def test_ctrl_c_before_scoring_ends_is_stopped(pytester, tiny_data, tiny_baseline, tiny_loaded, monkeypatch):
    monkeypatch.setattr(fixtures, "load_backend", lambda *args, **kwargs: tiny_loaded)

    def ctrl_c(report):
        if report.when == "call" and report.nodeid.startswith("longctx::test_item[facts-1k-f0]"):
            raise KeyboardInterrupt  # after the first item, before the row is judged

    result = gate(pytester, tiny_data, tiny_baseline, plugins=[Hooks(runtest_logreport=ctrl_c)], no_reraise_ctrlc=True)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    assert reports(pytester.path) == said("STOPPED", "na")
    assert ("> **not judged**: the run was interrupted (KeyboardInterrupt)"
            in (pytester.path / "summary.md").read_text().splitlines())


def test_compare_of_a_stopped_runs_results_is_no_pass_either(pytester, tiny_data, tiny_baseline, tiny_loaded, monkeypatch,
                                                            capsys):
    monkeypatch.setattr(fixtures, "load_backend", lambda *args, **kwargs: tiny_loaded)

    def ctrl_c(report):
        if report.when == "call" and report.nodeid.startswith("longctx::test_item[facts-1k-f0]"):
            raise KeyboardInterrupt

    gate(pytester, tiny_data, tiny_baseline, plugins=[Hooks(runtest_logreport=ctrl_c)], no_reraise_ctrlc=True)
    results = pytester.path / "results.json"
    assert json.loads(results.read_text())["scores"]  # it holds what it scored before it stopped
    capsys.readouterr()
    main(["compare", str(tiny_baseline), str(results), "--format", "markdown"])
    shown = capsys.readouterr().out.splitlines()
    assert shown[0] == "## longctx: STOPPED"
    assert (f"> **not judged**: the run that wrote {results} did not judge every check: the run was interrupted "
            "(KeyboardInterrupt)") in [line.replace("\\", "") for line in shown]


def test_deselecting_every_test_of_the_gate_selects_nothing(pytester, tiny_data, tiny_baseline, tiny_loaded, monkeypatch):
    monkeypatch.setattr(fixtures, "load_backend", lambda *args, **kwargs: tiny_loaded)
    result = gate(pytester, tiny_data, tiny_baseline, "-k", "no-such-test")
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    assert reports(pytester.path) == said("NOTHING SELECTED", "na")


def test_a_failing_check_stays_fail_when_the_run_then_stops(pytester, tiny_data, tiny_baseline, tiny_loaded, monkeypatch):
    monkeypatch.setattr(fixtures, "load_backend", lambda *args, **kwargs: tiny_loaded)

    @pytest.hookimpl(wrapper=True)
    def runtest_makereport(item, call):
        report = yield
        if report.when == "call" and item.nodeid.startswith("longctx::test_item[facts-1k-f0]"):
            report.outcome, report.longrepr = "failed", "made to fail"
        return report

    result = gate(pytester, tiny_data, tiny_baseline, "-x", plugins=[Hooks(runtest_makereport=runtest_makereport)])
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert reports(pytester.path) == said("FAIL", "fail")


@pytest.fixture(scope="module")
def models(qwen_tokenizer, tmp_path_factory) -> dict[str, Path]:
    """The tiny model saved (the baseline's own weights), and a folder that does not load."""
    folder = tmp_path_factory.mktemp("models")
    (folder / "broken").mkdir()
    (folder / "broken" / "config.json").write_text('{"model_type": "no-such-architecture"}')
    return {"tiny": save_model(folder / "tiny", tiny_qwen3(len(qwen_tokenizer)), qwen_tokenizer), "broken": folder / "broken"}


@pytest.mark.parametrize(("model", "args", "status", "word"), [
    ("tiny", [], 0, "PASS"),  # the controller counts the tests its workers collected
    ("tiny", ["-k", "no-such-test"], 5, "NOTHING SELECTED"),
    ("broken", [], 1, "NOT RUN"),  # a worker's model failure errors its tests, and comes with its output
], ids=["passing", "deselected", "not-loading"])
def test_under_xdist_the_controller_says_the_same(tiny_data, tiny_baseline, models, tmp_path, model, args, status, word):
    result = run_pytest(tmp_path, "-n", "2", f"--longctx-data={tiny_data}", f"--longctx-baseline={tiny_baseline}",
                        f"--longctx-model={models[model]}", "--longctx-markdown=summary.md", *args, timeout=600)
    assert result.returncode == status, result.stdout[-3000:] + result.stderr[-3000:]
    assert (tmp_path / "summary.md").read_text().splitlines()[0] == f"## longctx: {word}"
