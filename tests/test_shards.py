"""Shards merged into one verdict (gate/shards.py, gate/merge.py): the gate itself (``GateRun``, as pytest drives it)
split 1, 2 and 3 ways over every set kind the test data has, each part reading the drawn candidate's scores as the
engine would, then joined by ``merge_gate``: under ``off`` the merged results are the unsharded run's to the last
digit, under ``exact`` and ``confident`` every test's outcome, every verdict and every stopping record too; a part
reads no fewer items than the unsharded run reads of it; no model runs there (tests/kit/drawn.py). Then as users run
them: pytest --longctx-shard (with and without pytest-xdist) and longctx merge on a tiny trained model and a degraded
copy, against the unsharded run's junit XML and results JSON; a baseline made in shards against the one made whole;
and every refusal, one line each."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from kit.drawn import Drawn, NoModel, drawn
from kit.runs import run_pytest

from pytest_longctx.cli import main as longctx
from pytest_longctx.gate.comparison import from_gate_run
from pytest_longctx.gate.merge import merge_gate
from pytest_longctx.gate.model_run import GateRun
from pytest_longctx.gate.outcome import Happened
from pytest_longctx.gate.run_options import GateOptions
from pytest_longctx.gate.shard_file import read_part
from pytest_longctx.gate.thresholds import Thresholds, parse_overrides
from pytest_longctx.numbers import NA
from pytest_longctx.options.table import Sequential
from pytest_longctx.parse import Shard
from pytest_longctx.reports.finish import finish
from pytest_longctx.reports.results_json import results_json
from pytest_longctx.scoring.scores_file import load_scores


def options(mode: Sequential, data: Path, baseline: Path, thresholds: Thresholds, shard: Shard | None = None,
            out: Path | None = None) -> GateOptions:
    return GateOptions(model="drawn", data=str(data), sets=None, lengths=["2k"], limit=None, mode="auto",
                       baseline=str(baseline), update_baseline=False, out=str(out) if out else None, only=True,
                       dtype="float32", device="cpu", backend="hf", cache_dir="off", thresholds=thresholds,
                       sequential=mode, shard=shard)


def read(run: GateRun, scores, tokenizer, rows_only: bool) -> dict[str, str]:
    """Select the run's tests (all, or the rows and cells alone), read them through the drawn scores, and judge them."""
    cases = [c for c in run.cases() if not (rows_only and c.kind == "item")]
    run.select(cases)
    run.reader.source = Drawn(scores)
    run.ensure(sorted({c.unit for c in cases}), NoModel(tokenizer), progress=False)
    return {case.key: run.judge(case).word for case in cases}


def results(run: GateRun) -> dict:
    return json.loads(json.dumps(results_json(run, from_gate_run(run, run.evaluate(), Happened()))))


def parts(tmp: Path, count: int, mode: Sequential, data: Path, baseline: Path, thresholds: Thresholds, scores, tokenizer,
          rows_only: bool) -> tuple[list[str], list[GateRun], list[dict[str, str]]]:
    """Every part of a split ``count`` ways, each run as pytest runs it and written to its file: (the files, the runs,
    each part's outcomes)."""
    paths, runs, outcomes = [], [], []
    for index in range(1, count + 1):
        path = tmp / f"part-{index}-of-{count}.json"
        run = GateRun(options(mode, data, baseline, thresholds, Shard(index, count), path), Path.cwd())
        outcomes.append(read(run, scores, tokenizer, rows_only))
        finish(run, None)
        paths.append(str(path))
        runs.append(run)
    return paths, runs, outcomes


CASES = [  # (mode, damage, thresholds' overrides, the rows and cells alone)
    (Sequential.OFF, 0.1, "", False),
    (Sequential.EXACT, 0.5, "", True),
    (Sequential.EXACT, 0.01, "tool_calls-2k:kl=0.3", False),
    (Sequential.EXACT, 2.0, "*:kl=0.01", True),
    (Sequential.CONFIDENT, 0.5, "", True),
]


@pytest.mark.parametrize("mode,damage,override,rows_only", CASES)
def test_merged_shards_give_the_unsharded_run(every_kind, qwen_tokenizer, tmp_path, mode, damage, override, rows_only):
    data, baseline = every_kind
    thresholds = Thresholds(overrides=parse_overrides([override] if override else [], "test"))
    scores = drawn(load_scores(baseline), 7, damage, 0.0)
    whole = GateRun(options(mode, data, baseline, thresholds), Path.cwd())
    want = read(whole, scores, qwen_tokenizer, rows_only)
    expected = results(whole)
    assert FAIL_OR_PASS & set(want.values())
    for count in (1, 2, 3):
        paths, runs, outcomes = parts(tmp_path / str(count), count, mode, data, baseline, thresholds, scores, qwen_tokenizer,
                                      rows_only)
        for run, found in zip(runs, outcomes):  # a part judges its own items as the whole does, and nothing else
            mine = run.reader.part
            assert mine is not None and mine.shard_of is not None
            for key, word in found.items():
                case = next(c for c in run.cases() if c.key == key)
                assert word == (want[key] if case.kind == "item" and mine.mine(case.item) else NA), key
        # a part reads no fewer of its items than the whole run reads of them
        read_whole = {k for c, n, i, _ in whole.scores.items() for k in [(c, n, i)]}
        for run in runs:
            assert run.reader.part.slice(read_whole) <= {(c, n, i) for c, n, i, _ in run.scores.items()}
        merged = merge_gate([read_part(p) for p in paths], Path.cwd())
        assert {case.key: merged.judge(case).word for case in merged.cases() if case.key in merged.tests} == want
        found = results(merged)
        # what the parts forwarded together: the whole run's tokens and, under off, the prefix each unit's items share
        # once more for each further part that reads the unit
        assert found.pop("tokens_forwarded") == sum(run.reader.forwarded for run in runs)
        assert found == {k: v for k, v in expected.items() if k != "tokens_forwarded"}, count


FAIL_OR_PASS = {"PASS", "FAIL"}


# ------------------------------------------------------------------ as users run it: pytest in shards, then longctx merge


def gate(cwd: Path, model: str, data: Path, baseline: Path, *args: str, xdist: tuple[str, ...] = ("-p", "no:xdist")
         ) -> subprocess.CompletedProcess:
    """The gate on ``model`` over the test data's 2k facts and tool calls against ``baseline``, in a process of its own
    (without pytest-xdist unless ``xdist`` says how), every item read by the model (no score cache). Every set kind
    is split and merged above, without a model."""
    return run_pytest(cwd, *xdist, "--longctx-only", f"--longctx-model={model}", f"--longctx-data={data}",
                      "--longctx-lengths=2k", "--longctx-sets=facts,tool_calls", f"--longctx-baseline={baseline}",
                      "--longctx-cache-dir=off", *args, timeout=600)


def merge(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest_longctx.cli", "merge", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=600)


def split_run(cwd: Path, count: int, model: str, data: Path, baseline: Path, *args: str, xdist: tuple[str, ...]) -> list[str]:
    """Every shard of a split ``count`` ways run as a CI job runs it: the files they wrote."""
    paths = []
    for index in range(1, count + 1):
        path = cwd / f"part-{index}-of-{count}.json"
        done = gate(cwd, model, data, baseline, f"--longctx-shard={index}/{count}", f"--longctx-out={path}", *args, xdist=xdist)
        # a shard judges its own items (a degraded model fails some) and leaves the rows and cells to the merge
        assert done.returncode in (0, 1) and path.is_file(), done.stdout[-3000:] + done.stderr[-3000:]
        summary = done.stdout.split("\nlongctx gate: ", 1)[1].splitlines()  # what it read; no table: a part judges no row
        assert any(line.startswith(f"longctx: shard {index}/{count}: read ") for line in summary), summary
        assert not any(line.startswith(("row ", "failing cells")) for line in summary), summary
        paths.append(str(path))
    return paths


def junit_outcomes(path: Path) -> dict[str, str]:
    """Each test of a junit file, by the gate's key, and its outcome: failed, skipped or passed."""
    found = {}
    for case in ET.parse(path).iter("testcase"):
        key = case.get("name").split("[", 1)[1].rstrip("]")
        found[key] = next((tag for tag in ("failure", "skipped") if case.find(tag) is not None), "passed")
    return found


@pytest.mark.parametrize("name,mode,count,status,xdist", [("degraded", "off", 3, 1, ("-p", "no:xdist")),
                                                          ("reference", "exact", 2, 0, ("-n", "2"))])
def test_pytest_shards_merged_by_the_command_give_the_unsharded_run(gate_models, gate_baseline, data_dir, tmp_path, name,
                                                                   mode, count, status, xdist):
    """The shards run with or without pytest-xdist (``xdist``), the unsharded run without."""
    model = gate_models[name]
    whole = gate(tmp_path, model, data_dir, gate_baseline, f"--longctx-sequential={mode}", "--longctx-out=whole.json",
                 "--junitxml=whole.xml")
    assert whole.returncode == status, whole.stdout[-3000:] + whole.stderr[-3000:]
    paths = split_run(tmp_path, count, model, data_dir, gate_baseline, f"--longctx-sequential={mode}", xdist=xdist)
    done = merge(tmp_path, *paths, "--out=merged.json", "--junitxml=merged.xml", "--markdown=merged.md", "--html=merged.html")
    assert done.returncode == status, done.stdout[-3000:] + done.stderr[-3000:]
    assert junit_outcomes(tmp_path / "merged.xml") == junit_outcomes(tmp_path / "whole.xml")
    merged, expected = (json.loads((tmp_path / name).read_text()) for name in ("merged.json", "whole.json"))
    # every figure to the last digit (under exact, of the items the unsharded run reads: the merge replays its reading);
    # the parts forward the whole run's tokens, and the prefix a unit's items share once more in each further part
    assert merged.pop("tokens_forwarded") >= expected.pop("tokens_forwarded")
    assert merged == expected
    assert (tmp_path / "merged.md").read_text() and (tmp_path / "merged.html").read_text()


# ------------------------------------------------------------------ what is refused, in one line each


@pytest.fixture(scope="module")
def three_parts(every_kind, qwen_tokenizer, tmp_path_factory) -> tuple[list[str], Path]:
    """The three parts of a split of the drawn candidate's run under off (the files), and a part 2/3 of the same run
    at another kl threshold."""
    data, baseline = every_kind
    scores = drawn(load_scores(baseline), 3, 0.1, 0.0)
    tmp = tmp_path_factory.mktemp("parts")
    paths, _, _ = parts(tmp, 3, Sequential.OFF, data, baseline, Thresholds(), scores, qwen_tokenizer, True)
    other = tmp / "other"
    other.mkdir()
    found, _, _ = parts(other, 3, Sequential.OFF, data, baseline, Thresholds(kl=0.5), scores, qwen_tokenizer, True)
    return paths, Path(found[1])


def refused(capsys, *args: str) -> str:
    """``longctx merge ARGS``'s one error line, once its exit status says bad input (2)."""
    assert longctx(["merge", *args]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("longctx: error: "), lines
    return lines[0]


def test_a_part_missing_given_twice_or_of_another_option_set_is_refused(three_parts, capsys, tmp_path):
    (one, two, three), other = three_parts
    assert "shard 3/3 is missing" in refused(capsys, one, two)
    assert f"shard 2/3 is given twice: {two} and {two}" in refused(capsys, one, two, two, three)
    line = refused(capsys, one, str(other), three)
    assert f"{other} (shard 2/3): a part of another run" in line and "(options.thresholds.kl: 0.5 in it, 0.05 there)" in line
    made = tmp_path / "made.json.gz"
    assert f"--baseline {made}: these parts judge a model against baseline" in refused(capsys, one, two, three,
                                                                                       f"--baseline={made}")
    assert not list(tmp_path.iterdir())


def test_a_damaged_or_newer_part_is_refused_naming_it(three_parts, capsys, tmp_path):
    one, two, three = three_parts[0]
    truncated = tmp_path / "truncated.json"
    truncated.write_text(Path(two).read_text()[:5000])
    assert f"shard {truncated}: corrupt or truncated" in refused(capsys, one, str(truncated), three)
    newer = tmp_path / "newer.json"
    body = json.loads(Path(two).read_text())
    body["shard"]["version"] += 1
    newer.write_text(json.dumps(body))
    assert f"shard {newer}: written by a newer pytest-longctx" in refused(capsys, one, str(newer), three)
    whole = tmp_path / "whole.json"
    whole.write_text(json.dumps({k: v for k, v in body.items() if k != "shard"}))
    assert f"shard {whole}: not a shard's results" in refused(capsys, one, str(whole), three)


def edited(path: str, folder: Path, change) -> str:
    """A copy of the part at ``path`` whose shard record ``change`` edits in place."""
    body = json.loads(Path(path).read_text())
    change(body["shard"])
    copy = folder / f"edited-{Path(path).name}"
    copy.write_text(json.dumps(body))
    return str(copy)


def test_an_item_in_two_parts_or_a_part_that_failed_is_refused(three_parts, capsys, tmp_path):
    one, two, three = three_parts[0]
    theirs = json.loads(Path(one).read_text())["shard"]["slice"][0]
    doubled = edited(two, tmp_path, lambda record: record["slice"].append(theirs))
    assert f"item {'/'.join(theirs)} is in two parts, {one} (shard 1/3) and {doubled} (shard 2/3)" in refused(
        capsys, one, doubled, three)
    failed = edited(three, tmp_path, lambda record: record.update(failure="the server stopped answering"))
    assert (f"{failed} (shard 3/3): its reading failed (the server stopped answering); run that shard again, then merge"
            in refused(capsys, one, two, failed))


def test_merge_writes_over_no_file(three_parts, capsys, tmp_path):
    paths = three_parts[0]
    for option in ("--out", "--junitxml", "--markdown", "--html"):
        there = tmp_path / f"there{option}"
        there.write_text("kept")
        assert f"{option} {there}: it exists" in refused(capsys, *paths, f"{option}={there}")
        assert there.read_text() == "kept"


@pytest.mark.parametrize("args,said", [
    (["--longctx-shard=0/3"], "--longctx-shard '0/3' (on the command line): K counts the shards from 1 to N: give 1/3 to 3/3"),
    (["--longctx-shard=4/3"], "--longctx-shard '4/3' (on the command line): K counts the shards from 1 to N"),
    (["--longctx-shard=1/0"], "--longctx-shard '1/0' (on the command line): N, the number of shards, must be at least 1"),
    (["--longctx-shard=a/b"], "--longctx-shard 'a/b' (on the command line): expected K/N"),
    ([], "--longctx-shard 1/2: give the file this part is written to, --longctx-out PATH"),
    (["--longctx-out=part.json", "--longctx-markdown=m.md"],
     "--longctx-shard 1/2: --longctx-markdown is about the whole selection, which no shard holds: longctx merge PARTS writes "
     "it (--markdown PATH)"),
])
def test_a_shard_no_split_has_is_refused_before_anything_loads(tmp_path, args, said):
    shard = [] if any(a.startswith("--longctx-shard") for a in args) else ["--longctx-shard=1/2"]
    done = run_pytest(tmp_path, "-p", "no:xdist", "--longctx-model=no-such-model", *shard, *args, timeout=120)
    assert done.returncode == 4 and f"ERROR: {said}" in done.stderr, done.stdout[-2000:] + done.stderr[-2000:]
    assert "Traceback" not in done.stdout + done.stderr and not list(tmp_path.iterdir())


def test_a_baseline_made_in_shards_is_the_one_made_whole(gate_models, gate_baseline, data_dir, tmp_path, capsys):
    """The parts of a baseline update joined by ``longctx merge --baseline``: the file holds what the one made whole
    (the ``gate_baseline`` fixture, the same model and data) holds; a set of parts with one missing makes none."""
    paths = []
    for index in (1, 2, 3):
        path = tmp_path / f"update-{index}.json"
        done = run_pytest(tmp_path, "-p", "no:xdist", "--longctx-only", f"--longctx-model={gate_models['reference']}",
                          f"--longctx-data={data_dir}", "--longctx-lengths=2k", "--longctx-update-baseline",
                          "--longctx-cache-dir=off", f"--longctx-shard={index}/3", f"--longctx-out={path}", timeout=600)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        paths.append(str(path))
    joined = tmp_path / "joined.json.gz"
    assert "shard 3/3 is missing" in refused(capsys, *paths[:2], f"--baseline={joined}")
    assert not joined.exists()
    assert longctx(["merge", *paths, f"--baseline={joined}"]) == 0, capsys.readouterr()
    mine, whole = load_scores(joined), load_scores(gate_baseline)
    assert mine.scores == whole.scores and mine.rows == whole.rows and mine.sets == whole.sets and mine.mode == whole.mode
    assert {k: v for k, v in mine.meta.items() if k != "path"} == {k: v for k, v in whole.meta.items() if k != "path"}


def test_a_merge_against_another_baseline_than_the_parts_read_is_refused(every_kind, qwen_tokenizer, capsys, tmp_path):
    data, baseline = every_kind
    mine = tmp_path / "baseline.json.gz"
    shutil.copy(baseline, mine)
    scores = drawn(load_scores(baseline), 5, 0.1, 0.0)
    paths, _, _ = parts(tmp_path, 2, Sequential.OFF, data, mine, Thresholds(), scores, qwen_tokenizer, True)
    changed = load_scores(mine)
    changed.meta["note"] = "made again"
    changed.save(mine)
    assert f"baseline {mine}: not the one the parts were judged against" in refused(capsys, *paths)
    mine.unlink()
    assert f"baseline {mine}: the parts were judged against it" in refused(capsys, *paths)
