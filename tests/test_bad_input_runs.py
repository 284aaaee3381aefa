"""Runs that used to lose their work or end in a traceback: each case is one line and an exit
status (issue 13, items 3 and 7, and ``longctx build --force``).

"Cannot be written" is made so that it holds for root too (these tests run as root, where
permission bits do not bite): a path under a regular file, a folder in ``/proc``, and a
read-only score cache, opened ``?mode=ro`` because ``os.access`` is made to say so."""
from __future__ import annotations

import os
import shutil
import sqlite3
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from kit.items import write_split
from kit.models import save_model, tiny_qwen3
from kit.runs import run_pytest

from pytest_longctx.backends.base import ReadResult
from pytest_longctx.cli import main

PROC = "/proc/longctx-test"  # no file can be made there, not even by root


@pytest.fixture(scope="module")
def model_dir(qwen_tokenizer, tmp_path_factory) -> Path:
    """A tiny random qwen3 with the Qwen3.5 tokenizer, saved as a folder."""
    return save_model(tmp_path_factory.mktemp("tiny"), tiny_qwen3(len(qwen_tokenizer)), qwen_tokenizer)


@pytest.fixture(scope="module")
def facts_dir(rows, tmp_path_factory) -> Path:
    """The facts config at 2k: enough to score, fast."""
    folder = tmp_path_factory.mktemp("facts")
    write_split(folder, "facts", "2k", rows[("facts", "2k")])
    return folder


@pytest.fixture
def a_file(tmp_path) -> Path:
    path = tmp_path / "a-file"
    path.write_text("a regular file, not a folder\n")
    return path


def score(model_dir, facts_dir, *args: str) -> list[str]:
    return ["score", "--model", str(model_dir), "--data", str(facts_dir), "--lengths", "2k", "--limit", "1", "--quiet", *args]


def err_lines(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.strip() and not line.startswith("Loading weights")]


def gate_args(model_dir, facts_dir, *args) -> list[str]:
    return ["-p", "no:cacheprovider", f"--longctx-model={model_dir}", f"--longctx-data={facts_dir}", "--longctx-lengths=2k",
            "--longctx-limit=1", *args]


@pytest.fixture(scope="module")
def baseline(model_dir, facts_dir, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("baselines") / "tiny.json.gz"
    made = run_pytest(tmp_path_factory.mktemp("update"), "-p", "no:xdist",
                      *gate_args(model_dir, facts_dir, f"--longctx-baseline={path}", "--longctx-update-baseline"), timeout=600)
    assert made.returncode == 0, made.stdout[-3000:] + made.stderr[-3000:]
    return path


# ------------------------------------------------------------------ 3: outputs checked first


def test_score_out_that_cannot_be_written_is_refused_before_any_work(model_dir, facts_dir, a_file, capsys):
    out = a_file / "results.json"
    assert main(score(model_dir, facts_dir, "--out", str(out))) == 2
    captured = capsys.readouterr()
    assert captured.err.strip().splitlines() == [
        f"longctx: error: --out {out}: cannot be written ({a_file} is a file, not a folder); give a path in a writable folder"]
    assert captured.out == ""  # nothing was scored


def test_save_scores_in_proc_is_refused_before_any_work(model_dir, facts_dir, capsys):
    assert main(score(model_dir, facts_dir, "--save_scores", f"{PROC}/ref.json.gz")) == 2
    captured = capsys.readouterr()
    assert captured.err.strip().splitlines() == [
        f"longctx: error: --save_scores {PROC}/ref.json.gz: cannot be written (no file can be made in /proc: "
        "No such file or directory); give a path in a writable folder"]
    assert captured.out == ""


def test_gate_out_that_cannot_be_written_is_a_usage_error(pytester, model_dir, facts_dir, baseline, a_file):
    result = pytester.runpytest_inprocess(*gate_args(model_dir, facts_dir, f"--longctx-baseline={baseline}",
                                                     f"--longctx-out={a_file}/results.json"))
    assert result.ret == 4
    assert (f"ERROR: --longctx-out {a_file}/results.json: cannot be written ({a_file} is a file, not a folder); "
            "give a path in a writable folder") in result.stderr.lines


def test_a_baseline_to_update_that_cannot_be_written_is_a_usage_error(pytester, model_dir, facts_dir):
    result = pytester.runpytest_inprocess(*gate_args(model_dir, facts_dir, f"--longctx-baseline={PROC}/b.json.gz",
                                                     "--longctx-update-baseline"))
    assert result.ret == 4
    assert (f"ERROR: --longctx-baseline {PROC}/b.json.gz: cannot be written (no file can be made in /proc: "
            "No such file or directory); give a path in a writable folder") in result.stderr.lines


@pytest.mark.parametrize("option", ["markdown", "html"])
def test_gate_reports_that_cannot_be_written_are_a_usage_error(pytester, model_dir, facts_dir, baseline, a_file, option):
    result = pytester.runpytest_inprocess(*gate_args(model_dir, facts_dir, f"--longctx-baseline={baseline}",
                                                     f"--longctx-{option}={a_file}/report"))
    assert result.ret == 4
    assert (f"ERROR: --longctx-{option} {a_file}/report: cannot be written ({a_file} is a file, not a folder); "
            "give a path in a writable folder") in result.stderr.lines


def test_compress_bench_out_that_cannot_be_written_is_refused_first(capsys):
    assert main(["compress-bench", "--methods", "last_tokens", "--limit", "1", "--out", f"{PROC}/points.json"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"longctx: error: --out {PROC}/points.json: cannot be written (no file can be made in /proc: No such file or "
        "directory); give a path in a writable folder"]


def test_compressor_gate_out_that_cannot_be_written_is_a_usage_error(pytester, a_file):
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--longctx-compressor=last_tokens",
                                          f"--longctx-out={a_file}/results.json")
    assert result.ret == 4
    assert (f"ERROR: --longctx-out {a_file}/results.json: cannot be written ({a_file} is a file, not a folder); "
            "give a path in a writable folder") in result.stderr.lines


def test_a_read_only_score_cache_degrades_to_no_cache_with_one_warning(model_dir, facts_dir, tmp_path, capsys, monkeypatch):
    cache = tmp_path / "cache"
    cache.mkdir()
    sqlite3.connect(cache / "answers.sqlite").execute("CREATE TABLE answers (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    writable = os.access
    # root may write anything: say the file is read-only, so it is opened ?mode=ro, as for a user without the right
    monkeypatch.setattr(os, "access", lambda path, mode, **kw: False if str(path).endswith("answers.sqlite")
                        else writable(path, mode, **kw))
    out = tmp_path / "results.json"
    assert main(score(model_dir, facts_dir, "--cache-dir", str(cache), "--out", str(out))) == 0
    assert err_lines(capsys) == [
        f"longctx: warning: score cache {cache}/answers.sqlite: cannot be written (attempt to write a readonly database); "
        "scoring without a cache (--cache-dir / --longctx-cache-dir: another folder, or 'off')"]
    assert out.exists()  # the work is kept


def test_an_unwritable_cache_folder_degrades_to_no_cache_with_one_warning(model_dir, facts_dir, a_file, tmp_path, capsys):
    out = tmp_path / "results.json"
    assert main(score(model_dir, facts_dir, "--cache-dir", f"{a_file}/cache", "--out", str(out))) == 0
    assert err_lines(capsys) == [
        f"longctx: warning: score cache folder {a_file}/cache: cannot be made ({a_file} is a file, not a folder); scoring "
        "without a cache (--cache-dir / --longctx-cache-dir: another folder, or 'off')"]
    assert out.exists()


def test_the_gate_with_an_unwritable_cache_folder_warns_once_in_its_summary(pytester, model_dir, facts_dir, baseline):
    result = pytester.runpytest_inprocess(*gate_args(model_dir, facts_dir, f"--longctx-baseline={baseline}",
                                                     f"--longctx-cache-dir={PROC}/cache"))
    assert result.ret == 0
    warnings = [line for line in result.outlines if "score cache" in line]
    assert warnings == [f"longctx: warning: score cache folder {PROC}/cache: cannot be made (no file can be made in /proc: "
                        "No such file or directory); scoring without a cache (--cache-dir / --longctx-cache-dir: another "
                        "folder, or 'off')"]


def test_a_user_cache_that_cannot_be_made_is_one_line(model_dir, a_file, capsys, monkeypatch):
    monkeypatch.setenv("LONGCTX_CACHE", str(a_file))  # the builtin data is built there
    assert main(["score", "--model", str(model_dir), "--lengths", "2k", "--quiet"]) == 2
    [line] = err_lines(capsys)
    assert line.startswith(f"longctx: error: cache folder {a_file}/builtin/")
    assert line.endswith(f": cannot be made ({a_file} is a file, not a folder); set LONGCTX_CACHE to a writable folder")


def test_a_corrupt_score_cache_names_the_file_and_says_deleting_it_is_safe(model_dir, facts_dir, tmp_path, capsys):
    (tmp_path / "answers.sqlite").write_bytes(b"not a database " * 100)
    assert main(score(model_dir, facts_dir, "--cache-dir", str(tmp_path))) == 0
    assert err_lines(capsys) == [
        f"longctx: warning: score cache {tmp_path}/answers.sqlite: damaged (file is not a database); scoring without a "
        "cache; deleting the file is safe (it holds only answers of past forward passes, computed again when missing)"]


# ------------------------------------------------------------------ 7: one line, not a traceback


@pytest.mark.parametrize("damage", ["truncated", "not safetensors"])
def test_corrupt_or_truncated_safetensors(model_dir, facts_dir, tmp_path, capsys, damage):
    broken = tmp_path / "broken"
    shutil.copytree(model_dir, broken)
    weights = broken / "model.safetensors"
    size = weights.stat().st_size
    if damage == "truncated":
        with open(weights, "r+b") as handle:
            handle.truncate(size // 2)
        reason = f"truncated or damaged ({size // 2} bytes, its header describes {size})"
    else:
        weights.write_bytes(b"<html>rate limited</html>")
        reason = "not a safetensors file, or truncated (25 bytes)"
    assert main(score(broken, facts_dir)) == 2
    assert err_lines(capsys) == [f"longctx: error: --model {broken}: cannot load it: {weights}: {reason}; "
                                 "re-download or re-save the model"]


def test_an_unknown_device(model_dir, facts_dir, capsys):
    assert main(score(model_dir, facts_dir, "--device", "tpu")) == 2
    assert err_lines(capsys) == ["longctx: error: --device tpu: expected auto, cpu, cuda, cuda:N or mps"]


def test_lengths_0_on_the_builtin_data_is_one_line_and_builds_nothing(model_dir, capsys):
    assert main(["score", "--model", str(model_dir), "--lengths", "0", "--quiet"]) == 2
    assert err_lines(capsys) == ["longctx: error: --lengths 0: the builder needs at least 2k tokens "
                                 "(a rule and its targets lie 512+ tokens apart)"]


def test_a_length_that_is_no_length_is_refused_before_building_is_announced(model_dir, capsys):
    assert main(["score", "--model", str(model_dir), "--lengths", "3q", "--quiet"]) == 2
    assert err_lines(capsys) == ["longctx: error: --lengths: expected a length like 2k, 8k or 32k (given '3q')"]


@pytest.mark.parametrize("where", ["under a file", "in /proc"])
def test_build_out_that_cannot_be_written(a_file, capsys, where):
    out, reason = (a_file / "bench", f"{a_file} is a file, not a folder") if where == "under a file" else (
        Path(PROC), "no file can be made in /proc: No such file or directory")
    assert main(["build", "--out", str(out), "--sets", "faithfulness", "--limit", "1"]) == 2
    assert err_lines(capsys) == [f"longctx: error: --out {out}: cannot be written ({reason}); give a path in a writable folder"]


def test_build_into_a_folder_that_is_not_empty_needs_force(tmp_path, capsys, monkeypatch):
    (tmp_path / "README.md").write_text("my notes\n")
    assert main(["build", "--out", str(tmp_path), "--sets", "faithfulness", "--limit", "1"]) == 2
    assert err_lines(capsys) == [f"longctx: error: --out {tmp_path}: the folder is not empty, and building replaces its "
                                 "README.md and parquet files; pass --force to build into it anyway, or give a new folder"]
    assert (tmp_path / "README.md").read_text() == "my notes\n"
    built = []
    monkeypatch.setattr("pytest_longctx.cli.build.build", lambda out, *args: built.append(out))
    assert main(["build", "--out", str(tmp_path), "--sets", "faithfulness", "--limit", "1", "--force"]) == 0
    assert built == [tmp_path]


def raising_factory(model, dtype, device):
    raise ValueError("no such checkpoint on this server")


def path_only_factory(path):
    return path


class DictBackend:
    """Answers ``read`` with a dict instead of a ``ReadResult``."""

    tokenizer = None

    def read(self, ids, positions, tokens):
        return {"top1": [0] * len(positions), "logprobs": [[-1.0] * len(t) for t in tokens]}


def dict_factory(model, dtype, device):
    return DictBackend()


def test_a_backend_factory_that_raises(facts_dir, capsys):
    assert main(score("x", facts_dir, "--backend", f"{__name__}:raising_factory")) == 2
    assert err_lines(capsys) == [f"longctx: error: --backend {__name__}:raising_factory: the factory failed for model x: "
                                 "ValueError: no such checkpoint on this server"]


def test_a_backend_factory_with_the_wrong_signature(facts_dir, capsys):
    assert main(score("x", facts_dir, "--backend", f"{__name__}:path_only_factory")) == 2
    assert err_lines(capsys) == [f"longctx: error: --backend {__name__}:path_only_factory: the factory cannot be called as "
                                 "factory(model=..., dtype=..., device=...) (missing a required argument: 'path')"]


def test_a_backend_whose_read_returns_the_wrong_type(facts_dir, capsys):
    assert main(score("x", facts_dir, "--backend", f"{__name__}:dict_factory")) == 2
    assert err_lines(capsys) == [
        "longctx: error: backend DictBackend: read() returned dict; expected ReadResult(top1, logprobs): per position asked, "
        "the top-1 token id and the log-probabilities of the tokens asked for (pytest_longctx.backends.base)"]


def test_a_plain_tuple_from_read_is_accepted():
    from pytest_longctx.scoring.answers import checked_answers as _answers

    for result in (ReadResult([3, 4], [[-1.0], [-2.0, -3.0]]), ([3, 4], [[-1.0], [-2.0, -3.0]])):
        assert _answers(DictBackend(), "read", result, [0, 1], [[5], [6, 7]], 0) == {
            0: (3, {5: -1.0}, None), 1: (4, {6: -2.0, 7: -3.0}, None)}


def test_a_local_model_path_that_does_not_exist(facts_dir, tmp_path, capsys):
    missing = tmp_path / "no-such-model"
    assert main(score(missing, facts_dir)) == 2
    assert err_lines(capsys) == [f"longctx: error: --model {missing}: no such folder or file "
                                 "(a model folder, a .gguf file, a hub id ORG/NAME or an alias: qwen2.5-coder-0.5b, "
                                 "qwen2.5-coder-0.5b-gguf, smollm2-135m, smollm2-135m-gguf)"]


def test_a_stale_baseline_is_said_once(pytester, model_dir, facts_dir, baseline, rows, tmp_path):
    import copy

    changed = copy.deepcopy(rows[("facts", "2k")])
    changed[0]["targets"][0]["distance_tokens"] += 1
    write_split(tmp_path / "changed", "facts", "2k", changed)
    result = pytester.runpytest_inprocess(*gate_args(model_dir, tmp_path / "changed", f"--longctx-baseline={baseline}"))
    assert result.ret == pytest.ExitCode.USAGE_ERROR  # said once, before any test runs
    stale = [line for line in result.errlines if "it is stale" in line]
    assert len(stale) == 1 and stale[0].startswith(f"ERROR: baseline {baseline}: facts/2k/f0 was scored on different data")
    assert "During handling of the above exception" not in result.stdout.str() + result.stderr.str()


def test_the_missing_baseline_hint_names_no_local_path(pytester, model_dir, facts_dir, tmp_path, monkeypatch):
    from pytest_longctx.backends import aliases

    monkeypatch.setattr(aliases, "_ALIASES", dict(aliases._ALIASES))  # the alias registered below is dropped after
    result = pytester.runpytest_inprocess(*gate_args(model_dir, facts_dir, f"--longctx-baseline={tmp_path}/b.json.gz"))
    assert result.ret == 1
    hint = next(line for line in result.outlines if "does not exist" in line)
    assert f"pytest --longctx-model <original-model-id-or-alias> --longctx-baseline {tmp_path}/b.json.gz" in hint
    assert hint.endswith(f"(in --longctx-model put the original model's hub id or alias, not a local path like {model_dir})")
    # an alias (or a hub id) is named as given
    pytester.makeconftest(f"from pytest_longctx.backends.aliases import register_alias\n"
                          f"register_alias('tiny-test', lambda: {str(model_dir)!r})\n")
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--longctx-model=tiny-test", f"--longctx-data={facts_dir}",
                                          "--longctx-lengths=2k", f"--longctx-baseline={tmp_path}/b.json.gz")
    hint = next(line for line in result.outlines if "does not exist" in line)
    assert f"pytest --longctx-model tiny-test --longctx-baseline {tmp_path}/b.json.gz" in hint


@pytest.mark.parametrize("family", ["xunit2", "xunit1"])
def test_junit_properties_without_record_property_warnings(pytester, model_dir, facts_dir, baseline, family):
    junit = pytester.path / "junit.xml"
    result = pytester.runpytest_inprocess(*gate_args(model_dir, facts_dir, f"--longctx-baseline={baseline}",
                                                     f"--junitxml={junit}", "-o", f"junit_family={family}"))
    assert result.ret == 0
    assert "warnings summary" not in result.stdout.str() and "is incompatible with junit_family" not in result.stdout.str()
    cases = {case.get("name"): {p.get("name") for p in case.iter("property")} for case in ET.parse(junit).iter("testcase")}
    assert {"longctx.targets", "longctx.mean_logprob"} <= cases["test_item[facts-2k-f0]"]
    assert {"longctx.accuracy", "longctx.baseline_accuracy"} <= cases["test_row[facts-2k]"]
