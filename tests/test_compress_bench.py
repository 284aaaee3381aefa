"""longctx compress-bench: knob sweeps, the Pareto front and matched-savings comparison."""
from __future__ import annotations

import json

import pytest
from itemkit import write_split

from pytest_longctx.cli import main
from pytest_longctx.compress.sweep import Point, at_savings, pareto_front, parse_sweep
from pytest_longctx.data.builtin.faithfulness import build_faithfulness
from pytest_longctx.errors import LongctxError


def point(method, savings, retention, **knobs):
    return Point(method, knobs, {"savings": (0.0, savings), "retention": (1.0, retention)}, {})


def test_the_pareto_front_keeps_the_points_nothing_beats():
    points = [point("a", 0.0, 1.0), point("a", 0.5, 0.6), point("b", 0.5, 0.8), point("b", 0.8, 0.8),
              point("c", 0.9, 0.1), point("c", 0.9, 0.1)]
    assert pareto_front(points) == {0, 3, 4, 5}  # (0.5, 0.6) and (0.5, 0.8) are beaten by (0.8, 0.8); ties stay


def test_matched_savings_interpolate_within_a_sweep_only():
    sweep = [point("a", 0.6, 0.4), point("a", 0.2, 0.9), point("a", 0.4, 0.8)]
    assert at_savings(sweep, 0.5, "retention") == pytest.approx(0.6)
    assert at_savings(sweep, 0.2, "retention") == 0.9
    assert at_savings(sweep, 0.1, "retention") is None and at_savings(sweep, 0.7, "retention") is None


def test_sweeps_parse_with_module_paths_and_refuse_nonsense():
    assert parse_sweep("last_tokens:tokens=128,256") == ("last_tokens", "tokens", [128, 256])
    assert parse_sweep("my.mod:fn:ratio=0.5,'x'") == ("my.mod:fn", "ratio", [0.5, "x"])
    with pytest.raises(LongctxError, match="'x' is not a Python literal"):  # an unquoted word is no silent string
        parse_sweep("my.mod:fn:ratio=0.5,x")
    with pytest.raises(LongctxError, match="expected METHOD:KNOB=V1,V2"):
        parse_sweep("last_tokens=5")


def test_the_command_prints_both_tables_and_writes_every_point(tmp_path, capsys):
    write_split(tmp_path, "faithfulness", "train", build_faithfulness(seed=0, limit=18))
    out = tmp_path / "bench.json"
    code = main(["compress-bench", "--data", str(tmp_path), "--methods", "identity,last_messages,sentence_relevance",
                 "--sweep", "last_messages:count=10,4", "--out", str(out), "--quiet"])
    printed = capsys.readouterr().out
    assert code == 0
    assert "18 sessions from" in printed and "Qwen3.5" in printed and "none (give --model)" in printed
    lines = {tuple(line.split()[:2]): line.split() for line in printed.splitlines() if line.split()}
    assert lines[("identity", "-")][2:7] == ["0.000", "1.000", "1.000", "1.000", "1.000"] and lines[("identity", "-")][-1] == "*"
    assert ("last_messages", "count=4") in lines and ("sentence_relevance", "ratio=0.75") in lines
    assert "at 50% savings" in printed and "identity" not in printed.split("at 50% savings")[1]
    body = json.loads(out.read_text())
    assert [(p["method"], p["knobs"]) for p in body["points"]][:3] == [
        ("identity", {}), ("last_messages", {"count": 10}), ("last_messages", {"count": 4})]
    heavy = body["points"][2]
    assert heavy["rows"]["retention"][1] == heavy["sets"]["train"]["retention"] < 1
    assert heavy["sets"]["train"]["by_depth"]["early"]["retention"] <= heavy["sets"]["train"]["by_depth"]["recent"]["retention"]


def test_selective_context_needs_a_model_and_says_so(tmp_path, capsys):
    write_split(tmp_path, "faithfulness", "train", build_faithfulness(seed=0, limit=2))
    assert main(["compress-bench", "--data", str(tmp_path), "--methods", "selective_context", "--quiet"]) == 2
    assert "selective_context reads the model's log-probabilities" in capsys.readouterr().err
