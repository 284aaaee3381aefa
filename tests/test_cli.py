"""``longctx score`` as a user runs it: a model folder, a data folder, the results JSON."""
from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
from kit.models import save_model

from pytest_longctx.backends.base import ReadResult
from pytest_longctx.cli import main


@pytest.fixture(scope="module")
def model_dir(qwen_model, qwen_tokenizer, tmp_path_factory):
    return save_model(tmp_path_factory.mktemp("tiny-model"), qwen_model, qwen_tokenizer)


def test_score_writes_results_and_prints_the_rows(model_dir, data_dir, tmp_path, capsys):
    out, scores = tmp_path / "r.json", tmp_path / "ref.json.gz"
    code = main(["score", "--model", str(model_dir), "--data", str(data_dir), "--lengths", "2k",
                 "--out", str(out), "--save_scores", str(scores)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    results = json.loads(out.read_text())
    assert set(results) >= {"rows", "sets", "reference", "mode", "meta"}
    assert results["mode"] == "ids" and results["reference"] is None
    assert results["meta"]["weights"] and results["meta"]["data"] and results["meta"]["device"] == "cpu"
    for name, _value in results["rows"].items():
        assert name in captured.out
    assert "Facts recalled at 2k tokens" in captured.out
    assert "items" in captured.err and "tokens/s" in captured.err and "ETA" in captured.err

    mine = tmp_path / "mine.json"
    assert main(["score", "--model", str(model_dir), "--data", str(data_dir), "--lengths", "2k", "--sets", "rules_en",
                 "--reference_scores", str(scores), "--out", str(mine), "--quiet"]) == 0
    against = json.loads(mine.read_text())
    assert against["reference"] == str(scores)
    # the model against its own scores: 1 up to float32 rounding (the second run reads rules_en alone,
    # so its prefix tree, and with it where the forward passes are cut, differs from the first's)
    assert against["rows"]["Rules kept far back, worst case (1.00 = as the original)"] == pytest.approx(1.0, abs=1e-5)


def test_the_console_script_reports_errors_in_one_line(data_dir, tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "pytest_longctx.cli", "score", "--model", "no-such-org/no-such-model",
         "--data", str(data_dir), "--lengths", "2k"],
        capture_output=True, text=True, env={"HF_HUB_OFFLINE": "1", "PATH": "", "HOME": str(tmp_path)},
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert lines == ["longctx: error: --model no-such-org/no-such-model: HF_HUB_OFFLINE=1 (offline), and the Hugging Face cache "
                     "does not hold this model; download it where there is a network (or unset the variable), or give its "
                     "local folder"]


class NaNBackend:
    """A backend whose every log-probability is NaN, as a float16 overflow gives."""

    tokenizer = None

    def read(self, ids, positions, tokens):
        return ReadResult([0] * len(positions), [[math.nan] * len(t) for t in tokens])


def make_nan_backend(model, dtype, device):
    return NaNBackend()


def test_nan_log_probabilities_are_one_clear_error_and_nothing_is_lost(data_dir, tmp_path, capsys):
    out = tmp_path / "r.json"
    code = main(["score", "--model", "x", "--backend", f"{__name__}:make_nan_backend", "--data", str(data_dir),
                 "--sets", "facts", "--lengths", "2k", "--out", str(out), "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert "non-finite log-probabilities" in err[-1] and "facts/2k/f0" in err[-1] and "--dtype float32" in err[-1]
    results = json.loads(out.read_text())
    assert results["sets"]["facts"]["2k"]["nonfinite"] == 2 * 3 and results["sets"]["facts"]["2k"]["scored"] == 0


def test_blame_and_compare_take_the_thresholds_the_gate_writes_for_them():
    from dataclasses import replace

    from pytest_longctx.cli.args import thresholds_of
    from pytest_longctx.cli.main import build_parser
    from pytest_longctx.gate.keys import check_keys
    from pytest_longctx.gate.thresholds import Thresholds, parse_overrides
    from pytest_longctx.plugin.blame import threshold_arguments

    overrides = parse_overrides(["tool_calls-2k:kl=0.03", "rules_en-*:retained=0.8", "tool_calls-2k-*:item_drop=2.5"],
                                "--longctx-threshold on the command line")
    run = Thresholds(drop=0.1, kl=0.123456789, alpha=0.05, min_effect=0.5, overrides=overrides)
    keys = check_keys({"tool_calls": {"2k": ["a1", "a2"]}})
    assert keys == {"tool_calls-2k-a1": {"item_drop"}, "tool_calls-2k-a2": {"item_drop"}, "tool_calls-2k": {"drop", "kl"}}
    written = threshold_arguments(run, keys)
    # the defaults are left out, and the rules pattern, which names no check of the selection
    assert written == ["--max-drop", "0.1", "--max-kl", "0.123456789", "--threshold", "tool_calls-2k:kl=0.03",
                       "--threshold", "tool_calls-2k-*:item_drop=2.5", "--alpha", "0.05", "--min-effect", "0.5"]
    expected = replace(run, overrides=(overrides[0], overrides[2]))
    for command in (["blame", "--reference", "a", "--model", "b"], ["compare", "base.json.gz", "results.json"]):
        assert thresholds_of(build_parser().parse_args([*command, *written])) == expected
        assert thresholds_of(build_parser().parse_args(command)) == Thresholds()
    assert threshold_arguments(Thresholds(), keys) == []


def test_a_blame_threshold_naming_no_check_is_one_line_before_any_model_is_loaded(data_dir, capsys):
    code = main(["blame", "--reference", "no-such-org/original", "--model", "no-such-org/candidate", "--data", str(data_dir),
                 "--sets", "tool_calls", "--lengths", "2k", "--limit", "1", "--threshold", "facts-*:kl=0.1"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith("longctx: error: --threshold 'facts-*:kl=0.1': the pattern 'facts-*' matches no check of this "
                               "run; the checks are named like tool_calls-2k")
