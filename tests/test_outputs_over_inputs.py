"""No output path over an input: every file a run writes (its own reports, the baseline it updates, pytest's
junit XML, the CI step summary, blame's and the commands' ``--out``) is compared, as a real path, with every
file and folder the run reads (the baseline, the data, the model, its tokenizer, blame's original), before
anything is read; a clash is one usage error naming both, and the input is left as it was. A loop of links
is one line, never "does not exist", and an update never replaces the link.

Writing a new file of another kind into an input's folder is no clash: a run's junit.xml beside a dataset is read by
nobody. Nothing is loaded: the check comes first, so the model folder, the data and the baseline here are stand-ins."""
from __future__ import annotations

from pathlib import Path

import pytest

from pytest_longctx.cli import main

CLASH = "it is the file of {other}, which writing it would overwrite; give {option} a path of its own"
HELD = "it is a file of {other}, which writing it would overwrite; give {option} a path outside it"
ADDED = "it would add a {kind} file to {other}, whose {kind} files the run reads; give {option} a path outside it"


@pytest.fixture
def here(pytester) -> Path:
    """A model folder, a data folder, a tokenizer folder and a baseline, as stand-ins: their bytes must not change."""
    (pytester.path / "model").mkdir()
    (pytester.path / "model" / "config.json").write_text('{"model_type": "qwen3"}')
    (pytester.path / "data" / "facts").mkdir(parents=True)
    (pytester.path / "data" / "facts" / "2k.jsonl").write_text("{}\n")
    (pytester.path / "b.json.gz").write_bytes(b"the baseline")
    (pytester.path / "cache" / "scores").mkdir(parents=True)
    (pytester.path / "cache" / "scores" / "answers.sqlite").write_bytes(b"the score cache")
    (pytester.path / "tok").mkdir()
    (pytester.path / "tok" / "tokenizer.json").write_text("{}")
    return pytester.path


def contents(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def gate(pytester, *args: str, environment: dict[str, str] | None = None):
    for name, value in (environment or {}).items():
        pytester._monkeypatch.setenv(name, value)
    return pytester.runpytest_inprocess("-p", "no:cacheprovider", "--longctx-model=model", "--longctx-data=data", *args)


@pytest.mark.parametrize(("args", "environment", "refused", "other", "message"), [
    (["--longctx-baseline=b.json.gz", "--junitxml=b.json.gz"], {}, "--junitxml b.json.gz", "--longctx-baseline b.json.gz",
     CLASH),
    (["--longctx-baseline=b.json.gz", "--longctx-update-baseline", "--junitxml=./b.json.gz"], {},
     "--junitxml ./b.json.gz", "--longctx-baseline b.json.gz", CLASH),
    (["--longctx-baseline=b.json.gz", "--longctx-out=r.json", "--junitxml=r.json"], {}, "--junitxml r.json",
     "--longctx-out r.json", CLASH),
    (["--longctx-baseline=b.json.gz", "--longctx-out=model/config.json"], {}, "--longctx-out model/config.json",
     "--longctx-model model", HELD),
    (["--longctx-baseline=b.json.gz", "--longctx-out=model/results.json"], {}, "--longctx-out model/results.json",
     "--longctx-model model", ADDED),
    (["--longctx-baseline=b.json.gz", "--longctx-html=data/facts/2k.jsonl"], {}, "--longctx-html data/facts/2k.jsonl",
     "--longctx-data data", HELD),
    (["--longctx-baseline=b.json.gz", "--longctx-markdown=data/facts/8k.jsonl"], {}, "--longctx-markdown data/facts/8k.jsonl",
     "--longctx-data data", ADDED),  # a new file the loader would read as the next split
    (["--longctx-baseline=b.json.gz"], {"GITHUB_STEP_SUMMARY": "b.json.gz"}, "$GITHUB_STEP_SUMMARY b.json.gz",
     "--longctx-baseline b.json.gz", CLASH),
    (["--longctx-baseline=b.json.gz", "--longctx-backend=vllm-server", "--longctx-model=http://gpu-box:8000/v1",
      "--longctx-backend-option=tokenizer=tok", "--longctx-out=tok/tokenizer.json"], {},
     "--longctx-out tok/tokenizer.json", "--longctx-backend-option tokenizer tok", HELD),
    (["--longctx-baseline=b.json.gz", "--longctx-cache-dir=cache", "--longctx-out=cache/scores/answers.sqlite"], {},
     "--longctx-out cache/scores/answers.sqlite", "--longctx-cache-dir cache", HELD),
], ids=["junit-baseline", "junit-updated-baseline", "junit-results", "out-model-config", "out-new-json-in-model",
        "html-over-data", "markdown-new-split", "step-summary-baseline", "out-tokenizer", "out-over-the-score-cache"])
def test_an_output_over_an_input_is_one_usage_error_before_anything_is_read(pytester, here, args, environment, refused,
                                                                            other, message):
    before = contents(here)
    result = gate(pytester, *args, environment=environment)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    option = refused.split()[0]
    kind = Path(refused.split()[-1]).suffix
    assert f"ERROR: {refused}: {message.format(other=other, option=option, kind=kind)}" in result.stderr.lines
    assert contents(here) == before and "wrote baseline" not in result.stdout.str()


def test_a_loop_of_links_as_the_baseline_is_said_and_never_replaced(pytester, here):
    (here / "loop1").symlink_to("loop2")
    (here / "loop2").symlink_to("loop1")
    line = ("ERROR: --longctx-baseline loop1: a symbolic link that leads back to itself (a loop of links), so it names no "
            "file; point it at the file, or remove it")
    for update in ([], ["--longctx-update-baseline"]):
        result = gate(pytester, "--longctx-baseline=loop1", *update)
        assert result.ret == pytest.ExitCode.USAGE_ERROR and line in result.stderr.lines, result.stderr.lines
        assert (here / "loop1").is_symlink() and (here / "loop2").is_symlink()


@pytest.mark.parametrize(("args", "refused", "other", "message"), [
    (["blame", "--reference", "model", "--model", "other", "--out", "model/config.json"], "--out model/config.json",
     "--reference model", HELD),
    (["blame", "--reference", "other", "--model", "model", "--out", "model/blame.json"], "--out model/blame.json",
     "--model model", ADDED),
    (["blame", "--reference", "other", "--model", "model", "--baseline", "b.json.gz", "--html", "b.json.gz"],
     "--html b.json.gz", "--baseline b.json.gz", CLASH),
    (["score", "--model", "model", "--out", "model/config.json"], "--out model/config.json", "--model model", HELD),
    (["score", "--model", "m", "--data", "data", "--save_scores", "data/facts/2k.jsonl"], "--save_scores data/facts/2k.jsonl",
     "--data data", HELD),
    (["compress-bench", "--model", "model", "--out", "model/config.json"], "--out model/config.json", "--model model", HELD),
    (["compare", "b.json.gz", "r.json", "--data", "data", "--out", "data/facts/3k.jsonl"], "--out data/facts/3k.jsonl",
     "--data data", ADDED),
], ids=["blame-out-original", "blame-out-new-json-in-candidate", "blame-html-baseline", "score-out-model", "score-save-data",
        "bench-out-model", "compare-out-data"])
def test_every_command_checks_its_outputs_against_its_inputs(here, monkeypatch, capsys, args, refused, other, message):
    monkeypatch.chdir(here)
    (here / "other").mkdir()
    before = contents(here)
    assert main(args) == 2
    option = refused.split()[0]
    kind = Path(refused.split()[-1]).suffix
    assert capsys.readouterr().err.splitlines() == [
        f"longctx: error: {refused}: {message.format(other=other, option=option, kind=kind)}"]
    assert contents(here) == before


def test_a_new_file_of_a_kind_the_folder_does_not_hold_is_no_clash(pytester, here):
    result = gate(pytester, "--longctx-baseline=missing.json.gz", "--longctx-html=data/report.html",
                  "--junitxml=model/junit.xml", "-k", "nothing")  # no baseline, nothing selected: nothing is read
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED, result.stderr.lines
