"""Messages that send the user the right way: each of the cases below once said something that led nowhere (a
builder's internal line, "recreate it" for a file a newer release wrote, advice the next command refused, a
setting refused without saying it came from the ini file, a warning garbled by a prefix, a results JSON called
no scores file, another option's example). Each test asserts the whole line, or what it must say, and that
following it works where that can be run here."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from kit.runs import Hooks

from pytest_longctx.cli import main
from pytest_longctx.cli import score as score_command
from pytest_longctx.data.builtin.build import build
from pytest_longctx.data.load import load_dataset
from pytest_longctx.gate.run_options import read_options
from pytest_longctx.plugin import fixtures
from pytest_longctx.scoring.scores_file import load_scores

REPLACE = ("restore it (git checkout -- FILE), or remove it and recreate it (longctx score --save_scores, or pytest "
           "--longctx-update-baseline)")


@pytest.fixture
def gate(pytester, tiny_data, tiny_loaded, monkeypatch):
    """The gate in this process on the tiny model and data, with ``args`` of the test's own."""
    monkeypatch.setattr(fixtures, "load_backend", lambda *args, **kwargs: tiny_loaded)
    monkeypatch.setattr(score_command, "load_backend", lambda *args, **kwargs: tiny_loaded)

    def run(*args: str, **kwargs):
        return pytester.runpytest_inprocess("-p", "no:cacheprovider", "-p", "no:xdist", "--longctx-model=tiny",
                                            f"--longctx-data={tiny_data}", *args, **kwargs)

    return run


def errors(result) -> list[str]:
    return [line for line in result.errlines if line.strip()]


def test_a_step_summary_that_is_a_folder_is_named_before_any_work(gate, pytester, tiny_baseline):
    (pytester.path / "step").mkdir()
    pytester._monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(pytester.path / "step"))
    result = gate(f"--longctx-baseline={tiny_baseline}", "--longctx-html=report.html")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert errors(result) == [f"ERROR: $GITHUB_STEP_SUMMARY {pytester.path / 'step'}: cannot be written (it is a folder); "
                              "give a path in a writable folder"]


def test_a_step_summary_that_fails_while_written_drops_no_other_report(gate, pytester, tiny_baseline):
    step = pytester.path / "step.md"
    pytester._monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step))

    def becomes_a_folder(report):  # writable when checked, a folder when the summary is appended
        if report.when == "call" and not step.is_dir():
            step.mkdir()

    result = gate(f"--longctx-baseline={tiny_baseline}", "--longctx-html=report.html", "--longctx-markdown=summary.md",
                  plugins=[Hooks(runtest_logreport=becomes_a_folder)])
    assert result.ret == pytest.ExitCode.OK
    assert f"longctx: $GITHUB_STEP_SUMMARY {step}: NOT written (Is a directory)" in result.outlines
    assert "longctx: HTML report written to report.html" in result.outlines
    assert (pytester.path / "report.html").read_text().startswith("<!DOCTYPE html>")
    assert (pytester.path / "summary.md").read_text().startswith("## longctx: PASS")


def test_compare_on_the_results_of_a_run_that_scored_nothing_says_so(gate, pytester, tiny_baseline, capsys):
    gate(f"--longctx-baseline={tiny_baseline}", "--longctx-out=results.json", "-k", "no-such-test")
    results = pytester.path / "results.json"
    assert main(["compare", str(tiny_baseline), str(results)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"longctx: error: results {results}: holds no scores and no metrics: the run that wrote it judged nothing (nothing "
        "was selected: every test of the gate was deselected (-k, -m)); there is nothing to compare: give the results of "
        "a run that scored the model"]


@pytest.mark.parametrize("given", ["2K", "2048", " 2k", "2k,2K"])
def test_a_length_is_named_as_the_data_names_it(given):
    values = {"longctx_model": "m", "longctx_lengths": given}
    assert read_options(values.get, lambda name: None, None).lengths in (["2k"], ["2k", "2k"])


def test_a_length_that_is_none_is_one_line_naming_the_option(pytester):
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--longctx-model=m", "--longctx-lengths=2kk")
    assert errors(result) == ["ERROR: --longctx-lengths '2kk' (on the command line): expected a length like 2k, 8k or 32k"]
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--longctx-model=m", "--longctx-lengths=2k,2kk")
    assert errors(result) == ["ERROR: --longctx-lengths '2k,2kk' (on the command line): '2kk' is not a length: expected "
                              "a length like 2k, 8k or 32k"]


def test_the_builder_builds_a_length_between_the_cards(qwen_tokenizer, tmp_path):
    # was: "builder: rules session 0 at 3k has fewer than 5 rules with far targets"
    build(tmp_path, ["3k"], 0, ["rules_en"], limit=1)
    items = load_dataset(str(tmp_path), sets=["rules_en"], lengths=["3k"]).configs["rules_en"]["3k"]
    assert len(items) == 3 and all(item.targets for item in items)


def rewritten(source: Path, target: Path, change) -> Path:
    body = json.loads(gzip.decompress(source.read_bytes()))
    target.write_bytes(gzip.compress(json.dumps(change(body)).encode()))
    return target


def test_a_baseline_of_a_newer_format_says_upgrade(tiny_baseline, tmp_path, capsys):
    newer = rewritten(tiny_baseline, tmp_path / "newer.json.gz", lambda body: {**body, "version": 3})
    with pytest.raises(Exception) as raised:
        load_scores(newer, "baseline")
    assert str(raised.value) == (f"baseline {newer}: format version 3, written by a newer pytest-longctx (this one reads 1 "
                                 "and 2); upgrade pytest-longctx to read it (pip install -U pytest-longctx)")


def test_a_truncated_baseline_is_told_what_the_update_then_takes(gate, pytester, tiny_baseline):
    truncated = pytester.path / "b.json.gz"
    truncated.write_bytes(tiny_baseline.read_bytes()[:100])
    result = gate(f"--longctx-baseline={truncated}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    [line] = errors(result)
    assert line.startswith(f"ERROR: baseline {truncated}: corrupt or truncated (") and line.endswith(f"); {REPLACE}")
    truncated.unlink()  # as the line says: removed, then recreated
    assert gate(f"--longctx-baseline={truncated}", "--longctx-update-baseline").ret == pytest.ExitCode.OK
    assert load_scores(truncated).scores


def test_a_mode_the_ini_file_sets_is_refused_naming_the_ini_file(gate, pytester, tiny_baseline):
    ini = pytester.makeini("[pytest]\nlongctx_sequential = confident\n")
    result = gate("--longctx-baseline=new.json.gz", "--longctx-update-baseline")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert errors(result) == [
        f"ERROR: longctx_sequential = confident (ini file {ini}): a baseline update (--longctx-update-baseline) reads every "
        "item, so a baseline holds them all; the ini file sets it for every run: give --longctx-sequential off on this "
        "command line"]
    assert gate("--longctx-baseline=new.json.gz", "--longctx-update-baseline", "--longctx-sequential=off").ret == 0


def test_score_against_a_reference_made_under_compression_warns_in_one_sentence(gate, tiny_baseline, tiny_data, tmp_path,
                                                                               capsys):
    def with_a_kv_cache(body):
        body["meta"]["judged"]["kv_cache"] = "k=q4_0 v=q4_0"
        return body

    reference = rewritten(tiny_baseline, tmp_path / "ref.json.gz", with_a_kv_cache)
    assert main(["score", "--model", "tiny", "--data", str(tiny_data), "--quiet", "--reference_scores", str(reference)]) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("longctx: warning:")]
    assert warnings == ["longctx: warning: the reference was itself made under compression (KV cache k=q4_0 v=q4_0): the "
                        "candidate (uncompressed) is judged against a compressed reference, not the original model; make "
                        "the reference from the uncompressed model unless this is meant"]


def test_a_results_json_given_as_reference_scores_is_called_one(gate, pytester, tiny_baseline, tiny_data, capsys):
    gate(f"--longctx-baseline={tiny_baseline}", "--longctx-out=results.json")
    results = pytester.path / "results.json"
    assert main(["score", "--model", "tiny", "--data", str(tiny_data), "--quiet", "--reference_scores", str(results)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"longctx: error: reference scores {results}: a results JSON (longctx score --out, pytest --longctx-out), not a "
        "scores file; give a scores file: one longctx score --save_scores wrote, or a baseline"]


@pytest.mark.parametrize(("args", "line"), [
    (["blame", "--model", "m", "--reference", "r", "--parts", ","],
     "longctx: error: --parts: expected a comma-separated list, e.g. layer.3,lm_head (given ',')"),
    (["score", "--model", "m", "--sets", ","], "longctx: error: --sets: expected a comma-separated list, e.g. "
                                               "facts,tool_calls (given ',')"),
    (["compress-bench", "--methods", ","], "longctx: error: --methods: expected a comma-separated list, e.g. "
                                           "last_tokens,ctxgate (given ',')"),
], ids=["parts", "sets", "methods"])
def test_an_empty_list_shows_an_example_of_its_own_option(capsys, args, line):
    assert main(args) == 2
    assert capsys.readouterr().err.splitlines() == [line]


def test_an_empty_list_of_sets_in_the_plugin_shows_configs(pytester):
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--longctx-model=m", "--longctx-sets=,")
    assert errors(result) == ["ERROR: --longctx-sets ',' (on the command line): expected a comma-separated list, e.g. "
                              "facts,tool_calls"]
