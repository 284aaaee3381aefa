"""A committed baseline is never destroyed or replaced by an incomplete run (issue 21): an
interrupted, stopped or erroring update writes nothing, a narrowed one needs
``--longctx-narrow-baseline``, no output may be the baseline's file (or another output's),
a baseline that is a symbolic link is written through, and a SIGTERM while the file is
written leaves no temporary file behind.

One baseline is made once (facts at 1k and 2k, rules_en at 1k: 16 items); every test works
on a copy of it. Runs are in-process (pytester, ``cli.main``); only the signal tests run a
process of their own."""
from __future__ import annotations

import gzip
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from kit.items import build_rows, write_split
from kit.models import tiny_qwen3
from kit.runs import Hooks, saved_scores

from pytest_longctx.backends.hf import TransformersBackend
from pytest_longctx.cli import main
from pytest_longctx.cli import score as score_command
from pytest_longctx.paths import write_atomically
from pytest_longctx.plugin import fixtures
from pytest_longctx.scoring.scores_file import ScoresFile, load_scores

LENGTHS = ("1k", "2k")
SPLITS = (("facts", "1k"), ("facts", "2k"), ("rules_en", "1k"))


MODEL = "tiny"  # what --longctx-model and --model name: every run gets the model below


@pytest.fixture(scope="module")
def loaded(qwen_tokenizer):
    """A tiny random model, made once and handed to every run: what is tested here is what a
    run writes, not how a model loads."""
    return TransformersBackend(tiny_qwen3(len(qwen_tokenizer)), qwen_tokenizer), qwen_tokenizer


@pytest.fixture(autouse=True)
def _load_once(loaded, monkeypatch):
    for module in (fixtures, score_command):
        monkeypatch.setattr(module, "load_backend", lambda *args, **kwargs: loaded)


@pytest.fixture(scope="module")
def data(qwen_tokenizer, tmp_path_factory) -> Path:
    """facts at 1k and 2k (2 items each), rules_en at 1k (12 items)."""
    folder = tmp_path_factory.mktemp("data")
    rows = build_rows(qwen_tokenizer, LENGTHS)
    for config, length in SPLITS:
        write_split(folder, config, length, rows[(config, length)])
    return folder


@pytest.fixture(scope="module")
def made(data, loaded, tmp_path_factory) -> Path:
    """The 16-item baseline, made once (``longctx score --save_scores`` writes the same file)."""
    return saved_scores(loaded, data, tmp_path_factory.mktemp("made") / "b.json.gz")


@pytest.fixture
def baseline(made, pytester) -> Path:
    """A copy of the baseline in the test's folder, where the run works."""
    path = pytester.path / "baselines" / "b.json.gz"
    path.parent.mkdir()
    shutil.copyfile(made, path)
    return path


def keys(path: Path) -> set[tuple[str, str, str]]:
    return {(c, n, i) for c, n, i, _ in load_scores(path).items()}


def update(pytester, data, path, *args, **kwargs):
    return pytester.runpytest_inprocess(
        "-p", "no:cacheprovider", "-p", "no:xdist", f"--longctx-model={MODEL}", f"--longctx-data={data}",
        f"--longctx-baseline={path}", "--longctx-update-baseline", *args, **kwargs)


def summary(result) -> list[str]:
    return [line for line in result.outlines if line.startswith("longctx: ")]


# ------------------------------------------------------------------ 1: only a complete run writes


def first_item_done(report) -> bool:
    return report.when == "call" and report.nodeid.startswith("longctx::test_item[facts-")


def test_an_interrupted_update_keeps_the_baseline(pytester, data, baseline):
    before = baseline.read_bytes()

    def ctrl_c(report):
        if first_item_done(report):
            raise KeyboardInterrupt  # Ctrl-C once the facts are scored

    result = update(pytester, data, baseline, plugins=[Hooks(runtest_logreport=ctrl_c)], no_reraise_ctrlc=True)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    assert summary(result) == [f"longctx: baseline {baseline} NOT written: the run was interrupted (KeyboardInterrupt)",
                               "longctx: STOPPED: the run was interrupted (KeyboardInterrupt)"]
    assert baseline.read_bytes() == before


def failing(when: str):
    """A hook that makes the first facts item's ``when`` phase fail (a test failure at
    ``call``, an error at ``setup``), once the facts are scored."""

    @pytest.hookimpl(wrapper=True)
    def runtest_makereport(item, call):
        report = yield
        if report.when == when and item.nodeid.startswith("longctx::test_item[facts-1k-f1]"):
            report.outcome, report.longrepr = "failed", f"made to fail at {when}"
        return report

    return runtest_makereport


def internal_error(report):
    if first_item_done(report):
        raise RuntimeError("a plugin's hook broke")


@pytest.mark.parametrize(("hooks", "args", "status", "why", "outcome"), [
    (dict(runtest_makereport=failing("call")), ["-x"], pytest.ExitCode.TESTS_FAILED,
     "the run stopped before its last test (stopping after 1 failures; -x, --maxfail)", "FAIL"),
    (dict(runtest_makereport=failing("setup")), [], pytest.ExitCode.TESTS_FAILED, "1 of the gate's tests ended in an error",
     "STOPPED"),
    (dict(runtest_logreport=internal_error), [], pytest.ExitCode.INTERNAL_ERROR, "pytest stopped on an internal error",
     "STOPPED"),
], ids=["stopped", "erroring", "internal-error"])
def test_an_incomplete_update_writes_no_baseline(pytester, data, hooks, args, status, why, outcome):
    path = pytester.path / "new.json.gz"  # none before: nothing protects it but the rule
    result = update(pytester, data, path, *args, plugins=[Hooks(**hooks)])
    assert result.ret == status
    assert summary(result) == [f"longctx: baseline {path} NOT written: {why}", f"longctx: {outcome}: {why}"]
    assert not path.exists()


# ------------------------------------------------------------------ 3: a narrowed update


@pytest.mark.parametrize(("args", "dropped"), [
    (["-k", "facts-1k"], "14 of its 16 items (facts 2k: 2 of 2; rules_en: all 12 items)"),
    (["--longctx-sets=facts"], "12 of its 16 items (rules_en: all 12 items)"),
    (["--longctx-lengths=2k"], "14 of its 16 items (facts 1k: 2 of 2; rules_en: all 12 items)"),
    (["--longctx-limit=1"], "13 of its 16 items (facts 1k: 1 of 2; facts 2k: 1 of 2; rules_en 1k: 11 of 12)"),
], ids=["k", "sets", "lengths", "limit"])
def test_a_narrowed_update_keeps_the_baseline(pytester, data, baseline, args, dropped):
    before = baseline.read_bytes()
    result = update(pytester, data, baseline, *args)
    assert result.ret == pytest.ExitCode.TESTS_FAILED  # the file asked for was not written
    assert summary(result) == [
        f"longctx: baseline {baseline} NOT written: this run would drop {dropped}; give --longctx-narrow-baseline to narrow "
        "it on purpose, or update it with the selection it was made with (no -k, the same --longctx-sets, --longctx-lengths "
        "and --longctx-limit)"]
    assert baseline.read_bytes() == before


def test_narrowing_on_purpose_says_what_was_dropped(pytester, data, baseline):
    result = update(pytester, data, baseline, "-k", "facts-1k", "--longctx-narrow-baseline")
    assert result.ret == pytest.ExitCode.OK
    assert summary(result) == [
        f"longctx: wrote baseline {baseline}, narrowed on purpose (--longctx-narrow-baseline): it dropped 14 of its 16 "
        "items (facts 2k: 2 of 2; rules_en: all 12 items); commit it beside the checkpoint"]
    assert keys(baseline) == {("facts", "1k", "f0"), ("facts", "1k", "f1")}


def test_narrow_baseline_without_an_update_is_a_usage_error(pytester, data, baseline):
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", f"--longctx-model={MODEL}", f"--longctx-data={data}",
                                          f"--longctx-baseline={baseline}", "--longctx-narrow-baseline")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert ("ERROR: --longctx-narrow-baseline: it lets an update drop items of the baseline it replaces; give it with "
            "--longctx-update-baseline, or leave it out") in result.stderr.lines


def test_save_scores_refuses_to_narrow_the_file_it_replaces(data, baseline, capsys):
    """``longctx score --save_scores`` follows the plugin's rule: a 1-item selection onto the
    16-item baseline is refused before any model loads, and written only when asked for."""
    before = baseline.read_bytes()
    narrow = ["score", "--model", MODEL, "--data", str(data), "--sets", "facts", "--lengths", "1k", "--limit", "1",
              "--quiet", "--save_scores", str(baseline)]
    assert main(narrow) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"longctx: error: --save_scores {baseline}: NOT written: this run would drop 15 of its 16 items (facts 1k: 1 of 2; "
        "facts 2k: 2 of 2; rules_en: all 12 items); give --narrow-baseline to narrow it on purpose, or score the selection "
        "it was made with (the same --sets, --lengths and --limit)"]
    assert baseline.read_bytes() == before
    assert main([*narrow, "--narrow-baseline"]) == 0
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"longctx: wrote {baseline}, narrowed on purpose (--narrow-baseline): it dropped 15 of its 16 items (facts 1k: 1 of 2; "
        "facts 2k: 2 of 2; rules_en: all 12 items)")
    assert keys(baseline) == {("facts", "1k", "f0")}


# ------------------------------------------------------------------ 3a: an old file that cannot be read


def _lfs_pointer(old: bytes) -> bytes:
    return b"version https://git-lfs.github.com/spec/v1\noid sha256:" + b"0" * 64 + b"\nsize 269291\n"


def _newer_version(old: bytes) -> bytes:
    return gzip.compress(json.dumps({**json.loads(gzip.decompress(old)), "version": 99}).encode())


def _truncated(old: bytes) -> bytes:
    return old[:len(old) // 2]


def _results_json(old: bytes) -> bytes:
    return json.dumps({"rows": {}, "sets": {}, "mode": "ids", "meta": {}}).encode()


# how each damage is said: the problem in the parentheses, and what fixes it before "remove it first"
UNREADABLE = {
    "lfs-pointer": (_lfs_pointer, "is a Git LFS pointer, not the file", "fetch it (git lfs pull), or "),
    "newer-version": (_newer_version, "format version 99, written by a newer pytest-longctx (this one reads 1 and 2)",
                      "upgrade pytest-longctx to read it (pip install -U pytest-longctx), or "),
    "truncated-gzip": (_truncated, "corrupt or truncated (EOFError: Compressed file ended before the end-of-stream "
                                   "marker was reached", ""),
    "not-a-scores-file": (_results_json, "a results JSON (longctx score --out, pytest --longctx-out), not a scores file", ""),
}


def unreadable_refusal(problem: str, remedy: str) -> tuple[str, str]:
    """The refusal's text after "NOT written: ", as (its start, its end): a corrupt file's
    problem ends in the decompressor's own words."""
    return (f"cannot tell what replacing the file there would drop: it cannot be read ({problem}",
            f"; {remedy}remove it first if it really is to be replaced")


def damaged(baseline: Path, damage: str) -> bytes:
    baseline.write_bytes(UNREADABLE[damage][0](baseline.read_bytes()))
    return baseline.read_bytes()


def refused_as_unreadable(line: str, prefix: str, damage: str) -> bool:
    start, end = unreadable_refusal(*UNREADABLE[damage][1:])
    return line.startswith(prefix + start) and line.endswith(end)


def refused_before_any_work(result, baseline, damage: str) -> bool:
    """The run's one usage error (exit 4), before any test ran: the file there cannot be read."""
    lines = [line for line in result.errlines if line.strip()]
    return (result.ret == pytest.ExitCode.USAGE_ERROR and len(lines) == 1
            and refused_as_unreadable(lines[0], f"ERROR: --longctx-update-baseline: baseline {baseline}: NOT written: ", damage))


@pytest.mark.parametrize("damage", list(UNREADABLE))
def test_a_narrowed_update_over_a_file_that_cannot_be_read_keeps_it(pytester, data, baseline, damage):
    """Was: the guard read the old file, failed, and let the narrow run replace it (exit 0). Now refused
    before anything is scored."""
    before = damaged(baseline, damage)
    result = update(pytester, data, baseline, "-k", "facts-1k")
    assert refused_before_any_work(result, baseline, damage)
    assert baseline.read_bytes() == before


@pytest.mark.parametrize("args", [[], ["-k", "facts-1k", "--longctx-narrow-baseline"]], ids=["whole", "narrow-on-purpose"])
def test_no_update_replaces_a_git_lfs_pointer(pytester, data, baseline, args):
    """Whatever is selected, what the pointer stands for is unknown: the real baseline may hold more."""
    before = damaged(baseline, "lfs-pointer")
    result = update(pytester, data, baseline, *args)
    assert refused_before_any_work(result, baseline, "lfs-pointer")
    assert baseline.read_bytes() == before


@pytest.mark.parametrize("damage", list(UNREADABLE))
@pytest.mark.parametrize("args", [["--sets", "facts", "--lengths", "1k", "--limit", "1"],
                                  ["--sets", "facts", "--lengths", "1k", "--limit", "1", "--narrow-baseline"], []],
                         ids=["narrow", "narrow-on-purpose", "whole"])
def test_save_scores_over_a_file_that_cannot_be_read_is_refused_before_any_work(data, baseline, capsys, damage, args):
    """Was: ``longctx score --save_scores`` replaced it, exit 0."""
    before = damaged(baseline, damage)
    assert main(["score", "--model", MODEL, "--data", str(data), *args, "--quiet", "--save_scores", str(baseline)]) == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1 and refused_as_unreadable(lines[0], f"longctx: error: --save_scores {baseline}: NOT written: ",
                                                     damage), lines
    assert captured.out == ""  # nothing was scored
    assert baseline.read_bytes() == before


def _with_a_nan(baseline: Path) -> None:
    body = json.loads(gzip.decompress(baseline.read_bytes()))
    body["scores"]["facts"]["1k"]["f0"]["targets"][0]["logprobs"][0] = None  # how a NaN is kept
    baseline.write_bytes(gzip.compress(json.dumps(body).encode()))


def test_a_baseline_that_cannot_judge_still_holds_its_items(pytester, data, baseline, capsys):
    """A NaN in the old file makes it unfit to judge, not empty: a narrowed update is refused as
    narrowing (was: replaced, exit 0), and a whole one replaces it."""
    _with_a_nan(baseline)
    before = baseline.read_bytes()
    result = update(pytester, data, baseline, "-k", "facts-1k")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert summary(result)[0].startswith(f"longctx: baseline {baseline} NOT written: this run would drop 14 of its 16 "
                                         "items"), summary(result)
    narrow = ["score", "--model", MODEL, "--data", str(data), "--sets", "facts", "--quiet", "--save_scores", str(baseline)]
    assert main(narrow) == 2
    assert "this run would drop 12 of its 16 items (rules_en: all 12 items)" in capsys.readouterr().err
    assert baseline.read_bytes() == before
    assert update(pytester, data, baseline).ret == pytest.ExitCode.OK
    assert len(keys(baseline)) == 16  # and it judges now


def test_narrow_baseline_without_save_scores_is_an_error(data, capsys):
    assert main(["score", "--model", MODEL, "--data", str(data), "--narrow-baseline", "--quiet"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "longctx: error: --narrow-baseline: it lets --save_scores drop items of the file it replaces; give it with "
        "--save_scores, or leave it out"]


# ------------------------------------------------------------------ 3b: a file's permissions


def test_a_read_only_baseline_is_refused_not_replaced(pytester, data, baseline, capsys):
    before = baseline.read_bytes()
    baseline.chmod(0o444)
    refusal = ("cannot be written (the file is read-only, mode 0444, so it is not replaced: chmod u+w it to replace it); "
               "give a path in a writable folder")
    result = update(pytester, data, baseline)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert f"ERROR: --longctx-baseline {baseline}: {refusal}" in result.stderr.lines
    capsys.readouterr()
    assert main(["score", "--model", MODEL, "--data", str(data), "--quiet", "--save_scores", str(baseline)]) == 2
    assert capsys.readouterr().err.splitlines() == [f"longctx: error: --save_scores {baseline}: {refusal}"]
    assert baseline.read_bytes() == before and stat.S_IMODE(baseline.stat().st_mode) == 0o444


def test_a_replaced_baseline_keeps_its_permissions(pytester, data, baseline):
    baseline.chmod(0o640)
    inode = baseline.stat().st_ino
    result = update(pytester, data, baseline)
    assert result.ret == pytest.ExitCode.OK, result.outlines[-20:]
    assert baseline.stat().st_ino != inode and stat.S_IMODE(baseline.stat().st_mode) == 0o640


def test_a_folder_made_meanwhile_by_another_process_stands(tmp_path):
    """Two processes converting one model at once (``pytest -n 2`` on an empty cache): the second
    finds the first's complete folder where its own would go; that is success, not an OSError."""
    target = tmp_path / "models" / "converted"

    def write(partial: Path) -> None:
        partial.mkdir()
        (partial / "config.json").write_text("this process")
        target.mkdir(parents=True)  # the other worker's rename lands first
        (target / "config.json").write_text("the other process")

    assert write_atomically(target, write) == target
    assert (target / "config.json").read_text() == "the other process"
    assert sorted(p.name for p in target.parent.iterdir()) == ["converted"]  # no temporary folder left


# ------------------------------------------------------------------ 4: no output is the baseline's file


@pytest.mark.parametrize(("args", "refused", "other"), [
    (["--longctx-out=./baselines/b.json.gz"], "--longctx-out ./baselines/b.json.gz", None),
    (["--longctx-update-baseline", "--longctx-html=baselines/../baselines/b.json.gz"],
     "--longctx-html baselines/../baselines/b.json.gz", None),
    (["--longctx-markdown=link.json.gz"], "--longctx-markdown link.json.gz", None),
    (["--longctx-markdown=r.txt", "--longctx-html=./r.txt"], "--longctx-html ./r.txt", "--longctx-markdown r.txt"),
], ids=["out", "html-updating", "markdown-link", "two-reports"])
def test_an_output_on_the_baseline_is_refused_before_any_work(pytester, data, baseline, args, refused, other):
    (pytester.path / "link.json.gz").symlink_to(baseline)
    before = baseline.read_bytes()
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", f"--longctx-model={MODEL}", f"--longctx-data={data}",
                                          "--longctx-baseline=baselines/b.json.gz", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    option, other = refused.split()[0], other or "--longctx-baseline baselines/b.json.gz"  # the baseline as given
    assert (f"ERROR: {refused}: it is the file of {other}, which writing it would overwrite; give {option} a path of its own"
            in result.stderr.lines)
    assert baseline.read_bytes() == before and not (pytester.path / "r.txt").exists()


def cli_refusal(capsys, args, refused, other) -> None:
    assert main(args) == 2
    option = refused.split()[0]
    assert capsys.readouterr().err.splitlines() == [
        f"longctx: error: {refused}: it is the file of {other}, which writing it would overwrite; give {option} a path of its own"]


def test_compare_out_on_its_inputs_is_refused(made, tmp_path, capsys):
    link = tmp_path / "link.json.gz"
    link.symlink_to(made)
    before = made.read_bytes()
    cli_refusal(capsys, ["compare", str(made), str(made), "--out", str(link)], f"--out {link}", f"BASELINE {made}")
    results = tmp_path / "results.json"
    results.write_text("{}")
    cli_refusal(capsys, ["compare", str(made), str(results), "--out", f"{tmp_path}/./results.json"],
                f"--out {tmp_path}/./results.json", f"RESULTS {results}")
    assert made.read_bytes() == before and results.read_text() == "{}"


def test_score_outputs_on_the_reference_are_refused(data, made, tmp_path, capsys):
    link = tmp_path / "link.json.gz"
    link.symlink_to(made)
    before = made.read_bytes()
    score = ["score", "--model", MODEL, "--data", str(data), "--reference_scores", str(link)]
    cli_refusal(capsys, [*score, "--out", str(made)], f"--out {made}", f"--reference_scores {link}")
    cli_refusal(capsys, [*score, "--save_scores", str(made)], f"--save_scores {made}", f"--reference_scores {link}")
    cli_refusal(capsys, [*score, "--out", f"{tmp_path}/s.json.gz", "--save_scores", f"{tmp_path}/x/../s.json.gz"],
                f"--save_scores {tmp_path}/x/../s.json.gz", f"--out {tmp_path}/s.json.gz")
    assert made.read_bytes() == before


# ------------------------------------------------------------------ 5: a link is written through


def test_an_update_writes_through_a_baseline_link(pytester, data, baseline):
    link = pytester.path / "b-link.json.gz"
    link.symlink_to(baseline)
    inode = baseline.stat().st_ino
    result = update(pytester, data, link)
    assert result.ret == pytest.ExitCode.OK, result.outlines[-20:]
    assert summary(result) == [f"longctx: wrote baseline {link}; commit it beside the checkpoint"]
    assert link.is_symlink() and link.resolve() == baseline
    assert baseline.stat().st_ino != inode and len(keys(baseline)) == 16  # replaced whole, in one rename
    assert sorted(p.name for p in baseline.parent.iterdir()) == ["b.json.gz"]  # no temporary file left


def test_save_scores_writes_through_a_link(data, tmp_path):
    target = tmp_path / "kept" / "ref.json.gz"
    target.parent.mkdir()
    ScoresFile(mode="ids", meta={}).save(target)  # holds nothing: nothing to drop
    link = tmp_path / "ref.json.gz"
    link.symlink_to(target)
    assert main(["score", "--model", MODEL, "--data", str(data), "--sets", "facts", "--lengths", "1k", "--limit", "1",
                 "--quiet", "--save_scores", str(link)]) == 0
    assert link.is_symlink() and keys(target) == {("facts", "1k", "f0")}
    assert sorted(p.name for p in target.parent.iterdir()) == ["ref.json.gz"]


# ------------------------------------------------------------------ 2: SIGTERM while the file is written

SLOW_WRITE = """
import gzip, sys, time
from pytest_longctx.scoring.scores_file import ScoresFile

def slow(self, data, write=gzip.GzipFile.write):
    write(self, data)
    print("writing", flush=True)
    time.sleep(60)

gzip.GzipFile.write = slow
ScoresFile(mode="ids", meta={}).save(sys.argv[1])
"""


def test_sigterm_while_the_baseline_is_written_leaves_no_partial_file(baseline, tmp_path):
    before = baseline.read_bytes()
    script = tmp_path / "slow_write.py"
    script.write_text(textwrap.dedent(SLOW_WRITE))
    writer = subprocess.Popen([sys.executable, str(script), str(baseline)], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])})
    assert writer.stdout.readline() == "writing\n"
    writer.send_signal(signal.SIGTERM)
    assert writer.wait(timeout=30) == -signal.SIGTERM  # ended as SIGTERM ends a process
    assert sorted(p.name for p in baseline.parent.iterdir()) == ["b.json.gz"]
    assert baseline.read_bytes() == before
