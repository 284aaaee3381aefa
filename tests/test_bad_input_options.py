"""Bad options and silent cases: each is one clear line and an exit status, never a check
that quietly does nothing (issue: hardening)."""
from __future__ import annotations

import subprocess

import pytest
from kit.models import save_model
from kit.runs import run_pytest

from pytest_longctx.cli import main
from pytest_longctx.errors import LongctxError


@pytest.fixture(scope="module")
def folders(qwen_model, qwen_tokenizer, tmp_path_factory):
    """The reference model and a copy with one NaN weight, saved as folders."""
    import copy

    import torch

    broken = copy.deepcopy(qwen_model)
    with torch.no_grad():
        broken.model.norm.weight[0] = float("nan")  # every position's hidden state, so every log-probability
    return {name: str(save_model(tmp_path_factory.mktemp(name), model, qwen_tokenizer))
            for name, model in (("reference", qwen_model), ("nan", broken))}


def pytest_run(cwd, *args: str) -> subprocess.CompletedProcess:
    """pytest in a process of its own, without xdist, within 10 minutes."""
    return run_pytest(cwd, "-p", "no:xdist", *args, timeout=600)


@pytest.fixture(scope="module")
def baseline(folders, data_dir, tmp_path_factory):
    path = tmp_path_factory.mktemp("baselines") / "reference.json.gz"
    made = pytest_run(tmp_path_factory.mktemp("update"), f"--longctx-model={folders['reference']}",
                      f"--longctx-data={data_dir}", "--longctx-lengths=2k", "--longctx-sets=facts,tool_calls",
                      f"--longctx-baseline={path}", "--longctx-update-baseline")
    assert made.returncode == 0, made.stdout[-2000:] + made.stderr[-2000:]
    return path


def test_a_nan_model_fails_its_rows_even_when_only_the_row_tests_run(folders, baseline, data_dir, tmp_path):
    done = pytest_run(tmp_path, "--longctx-only", f"--longctx-model={folders['nan']}", f"--longctx-data={data_dir}",
                      "--longctx-lengths=2k", "--longctx-sets=facts,tool_calls", f"--longctx-baseline={baseline}",
                      "-k", "test_row")
    assert done.returncode == 1, done.stdout[-3000:]
    assert "2 failed" in done.stdout and "skipped" not in done.stdout.splitlines()[-1]
    assert "the model has no value where the baseline has one" in done.stdout


def test_a_text_beyond_the_context_window_is_refused_unless_allowed(qwen_model, qwen_tokenizer, data_dir, tmp_path, capsys):
    import copy

    from pytest_longctx.data.load import load_dataset
    from pytest_longctx.scoring.modes import plan_reads

    needed = max(p.tokens_needed for p in plan_reads(load_dataset(data_dir, sets=["facts"], lengths=["2k"], limit=1), "ids"))
    short = copy.deepcopy(qwen_model)
    short.config.max_position_embeddings = needed - 1
    folder = save_model(tmp_path / "short", short, qwen_tokenizer)
    args = ["score", "--model", str(folder), "--data", str(data_dir), "--sets", "facts", "--lengths", "2k", "--limit", "1",
            "--quiet", "--cache-dir", "off"]
    assert main(args) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"is read over {needed} tokens, beyond the model's context window of {needed - 1}" in line
    assert "--allow-beyond-context" in line
    assert main([*args, "--allow-beyond-context"]) == 0


def test_rope_scaling_extends_the_window(qwen_model):
    import copy

    from pytest_longctx.backends.hf import TransformersBackend

    scaled = copy.deepcopy(qwen_model)
    assert TransformersBackend(scaled).context_window == scaled.config.max_position_embeddings
    scaled.config.rope_parameters = {"rope_type": "linear", "factor": 4.0, "rope_theta": 10000.0}
    assert TransformersBackend(scaled).context_window is None


def test_a_threshold_pattern_that_names_no_check_is_an_error(folders, baseline, data_dir, tmp_path):
    done = pytest_run(tmp_path, "--longctx-only", f"--longctx-model={folders['reference']}", f"--longctx-data={data_dir}",
                      "--longctx-lengths=2k", "--longctx-sets=facts", f"--longctx-baseline={baseline}",
                      "--longctx-threshold=facts-64k:drop=0.1")
    assert done.returncode == 4, done.stdout[-2000:] + done.stderr[-2000:]
    line = next(x for x in done.stderr.splitlines() if "facts-64k" in x)
    assert "matches no check of this run" in line and "facts-2k" in line


def test_a_threshold_pattern_from_the_ini_file_that_names_no_check_is_a_warning(folders, baseline, data_dir, tmp_path):
    (tmp_path / "pytest.ini").write_text("[pytest]\nlongctx_threshold =\n    rules_en-*:follow=0.5\n")
    done = pytest_run(tmp_path, "--longctx-only", f"--longctx-model={folders['reference']}", f"--longctx-data={data_dir}",
                      "--longctx-lengths=2k", "--longctx-sets=facts", f"--longctx-baseline={baseline}")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "longctx: warning: ini option longctx_threshold" in done.stdout and "matches no check" in done.stdout
    assert "PytestUnknownMarkWarning" not in done.stdout  # xdist_group is registered without pytest-xdist too


@pytest.mark.parametrize("args, expected", [
    (["--longctx-knob=ratio=0.5"], "--longctx-knob: knobs set a context compressor's parameters"),
    (["--longctx-compressor=last_tokens", "--longctx-knob=tokens=abc"],
     "--longctx-knob tokens=abc: 'abc' is not a Python literal"),
    (["--longctx-compressor=last_tokens", "--longctx-knob=tokens=-5"],
     "compressor last_tokens: knob tokens=-5 is out of range: it must be at least 0"),
    (["--longctx-compressor=message_relevance", "--longctx-knob=ratio='half'"],
     "compressor message_relevance: knob ratio='half' is not a number"),
    (["--longctx-compressor=identity", "--longctx-lengths=,"], "--longctx-lengths ',' (on the command line): expected a comma"),
])
def test_bad_compressor_options_are_one_usage_error(args, expected, tmp_path):
    done = pytest_run(tmp_path, "--longctx-only", *args)
    assert done.returncode == 4, done.stdout[-2000:] + done.stderr[-2000:]
    assert expected in done.stderr


def test_an_empty_list_option_is_an_error_not_all(data_dir, capsys):
    for argv in (["score", "--model", "x", "--data", str(data_dir), "--lengths", ","], ["build", "--out", "unused", "--lengths", ","]):
        assert main(argv) == 2
        assert capsys.readouterr().err.strip() == "longctx: error: --lengths: expected a comma-separated list, e.g. 2k,8k (given ',')"


EMPTY = "the value is empty (as \"$VAR\" gives when VAR is unset, e.g. in a CI job); give a value, or leave the option out"


@pytest.mark.parametrize("args, named", [
    (["--longctx-model="], "--longctx-model"),
    (["--longctx-model", "  "], "--longctx-model"),
    (["--longctx-model=smollm2-135m", "--longctx-baseline="], "--longctx-baseline"),
    (["--longctx-compressor="], "--longctx-compressor"),
    (["--longctx-model=smollm2-135m", "--longctx-blame", "--longctx-blame-reference="], "--longctx-blame-reference"),
])
def test_an_empty_model_or_baseline_option_is_a_usage_error_not_a_vanished_gate(args, named, tmp_path):
    """``--longctx-model="$MODEL"`` with MODEL unset: the gate's tests must not vanish while the
    rest of the suite passes green."""
    (tmp_path / "test_other.py").write_text("def test_other():\n    pass\n")
    for only in ([], ["--longctx-only"]):
        done = pytest_run(tmp_path, *only, *args)
        assert done.returncode == 4, done.stdout[-2000:] + done.stderr[-2000:]
        assert done.stderr.strip() == f"ERROR: {named}: {EMPTY}"
        assert "passed" not in done.stdout


@pytest.mark.parametrize("argv, named", [
    (["score", "--model", ""], "--model"),
    (["score", "--model", "m", "--save_scores", " "], "--save_scores/--save-scores"),
    (["compare", "", "results.json"], "BASELINE"),
    (["blame", "--reference", "r", "--model", "", "--baseline", "b"], "--model"),
    (["score", "--model", "m", "--backend-option", "dtype=x", "--backend-option", ""], "--backend-option"),
])
def test_an_empty_value_of_a_command_option_is_one_line(argv, named, capsys):
    assert main(argv) == 2
    assert capsys.readouterr().err.strip() == f"longctx: error: {named}: {EMPTY}"


# ------------------------------------------------------------------ one schema (issue: one schema, one identity)


@pytest.mark.parametrize("setting, named", [
    ("--longctx-backend-option=kv-cache=", "--longctx-backend-option kv-cache=: " + EMPTY),
    ("--longctx-backend-option=kv-cach=fp8", "the transformers backend has no option 'kv-cach' (did you mean kv-cache?)"),
    ("--longctx-backend-option=device-map=everywhere", "--longctx-backend-option device-map=everywhere: expected one of"),
])
def test_a_blank_unknown_or_wrong_backend_setting_is_a_usage_error_before_anything_loads(setting, named, tmp_path):
    """kv-cache= (an unset $VAR) gated the plain model and passed with drift 0.000: the blank value read as
    "not given". Refused now, like an unknown key or a value of another kind, before any model or data."""
    done = pytest_run(tmp_path, "--longctx-only", "--longctx-model=no-such-model-is-loaded", setting)
    assert done.returncode == 4, done.stdout[-2000:] + done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ERROR: --longctx-backend-option ") and named in lines[0], lines


@pytest.mark.parametrize("argv, line", [
    (["score", "--model", "m", "--backend", "vllm-server", "--backend-option", "api-key-env="],
     "--backend-option api-key-env=: " + EMPTY),
    (["score", "--model", "m", "--backend", "llama.cpp", "--backend-option", "threads=four"],
     "--backend-option threads=four: expected a whole number"),
    (["blame", "--reference", "r", "--model", "m", "--backend", "llama.cpp", "--reference-option", "cache-type-k="],
     "--reference-option cache-type-k=: " + EMPTY),
    (["score", "--model", "m", "--backend", "vllm", "--backend-option", "prompt-rows=maybe"],
     "--backend-option prompt-rows=maybe: expected true or false"),
])
def test_a_blank_or_wrong_backend_setting_of_a_command_is_one_line_before_any_work(argv, line, capsys):
    assert main(argv) == 2
    assert capsys.readouterr().err.strip() == f"longctx: error: {line}"


def test_a_threshold_metric_the_matched_checks_do_not_have_is_an_error(folders, baseline, data_dir, tmp_path):
    """facts-2k:retained=2 was accepted and judged nothing: a facts row has drop and kl, not retained."""
    done = pytest_run(tmp_path, "--longctx-only", f"--longctx-model={folders['reference']}", f"--longctx-data={data_dir}",
                      "--longctx-lengths=2k", "--longctx-sets=facts", f"--longctx-baseline={baseline}",
                      "--longctx-threshold=facts-2k:retained=2")
    assert done.returncode == 4, done.stdout[-2000:] + done.stderr[-2000:]
    line = next(x for x in done.stderr.splitlines() if "facts-2k:retained" in x)
    assert "have no metric 'retained'; they take drop, kl" in line


def test_a_threshold_metric_no_matched_check_has_is_refused_by_compare_and_blame_too():
    from pytest_longctx.gate.keys import check_keys
    from pytest_longctx.gate.thresholds import Thresholds, parse_overrides

    checks = check_keys({"facts": {"2k": ["a"]}, "rules_en": {"2k": ["r"]}})
    for text, takes in (("facts-2k:retained=2", "drop, kl"), ("facts-2k-a:kl=1", "item_drop"),
                        ("rules_en-2k-user-*:drop=0.1", "follow, retained")):
        with pytest.raises(LongctxError, match=f"have no metric .*; they take {takes}$"):
            Thresholds(overrides=parse_overrides([text], "--threshold")).check_patterns(checks)
    for text in ("facts-*:kl=0.1", "rules_en-2k-user-*:follow=0.5", "rules_en-follow-2k:kl=0.2", "facts-2k-a:item_drop=2"):
        assert Thresholds(overrides=parse_overrides([text], "--threshold")).check_patterns(checks) == []


def test_blame_help_renders(capsys):
    """``longctx blame --help`` crashed (TypeError: %o format) on a bare % from a help string."""
    with pytest.raises(SystemExit) as done:
        main(["blame", "--help"])
    assert done.value.code == 0
    assert "5% or more" in capsys.readouterr().out
