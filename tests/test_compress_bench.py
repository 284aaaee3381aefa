"""longctx compress-bench: knob sweeps, the Pareto front and matched-savings comparison."""
from __future__ import annotations

import json

import pytest
from kit.items import write_split

from pytest_longctx.cli import main
from pytest_longctx.compress.bench import Bench
from pytest_longctx.compress.evaluate import REFERENCE_TOKENIZER
from pytest_longctx.compress.sweep import (
    DEFAULT_METHODS,
    DEFAULT_SWEEPS,
    Point,
    at_savings,
    matched_table,
    method_sweeps,
    pareto_front,
    parse_sweep,
    short_names,
)
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


def test_every_method_is_placed_at_matched_savings_from_the_identity_anchor():
    single, sweep = [point("one", 0.6, 0.7)], [point("a", 0.4, 0.8), point("a", 0.8, 0.4)]
    assert at_savings(single, 0.5, "retention") is None  # alone, a single point reaches no other savings
    assert at_savings(single, 0.3, "retention", anchored=True) == pytest.approx(0.85)  # halfway from (0, 1.0)
    assert at_savings(sweep, 0.2, "retention", anchored=True) == pytest.approx(0.9)
    assert at_savings(sweep, 0.9, "retention", anchored=True) is None  # never beyond the heaviest point
    rows = {line.split()[0]: line for line in matched_table([point("identity", 0.0, 1.0), *single, *sweep]).splitlines()}
    assert rows["identity"].split()[1:4] == ["0.00:", "1.00", "/"] and rows["identity"].count("n/a") == 1 + 4  # no paraphrase row here
    assert rows["one"].split()[1:3] == ["0.60:", "0.70"] and "0.88 / n/a (a)  0.75 / n/a (a)" in rows["one"]
    assert rows["one"].endswith("n/a             n/a")  # beyond its one point: not placed
    assert rows["a"].split()[1:] == ["0.40-0.80", "0.88", "/", "n/a", "(a)", "0.70", "/", "n/a", "0.45", "/", "n/a", "n/a"]


def test_display_names_are_short_unless_two_would_clash():
    assert short_names(["identity", "ctxgate", "my.pkg.context:compress", "tools:trim"]) == {
        "identity": "identity", "ctxgate": "ctxgate", "my.pkg.context:compress": "context", "tools:trim": "trim"}
    assert short_names(["a.x:trim", "b.y:trim"]) == {"a.x:trim": "a.x:trim", "b.y:trim": "b.y:trim"}


def test_sweeps_parse_with_module_paths_and_refuse_nonsense():
    assert parse_sweep("last_tokens:tokens=128,256") == ("last_tokens", "tokens", [128, 256])
    assert parse_sweep("my.mod:fn:ratio=0.5,'x'") == ("my.mod:fn", "ratio", [0.5, "x"])
    with pytest.raises(LongctxError, match="'x' is not a Python literal"):  # an unquoted word is no silent string
        parse_sweep("my.mod:fn:ratio=0.5,x")
    with pytest.raises(LongctxError, match="expected METHOD:KNOB=V1,V2"):
        parse_sweep("last_tokens=5")


def test_each_method_runs_its_given_sweep_else_its_default_one():
    assert list(method_sweeps(None, [], with_model=False)) == [m for m in DEFAULT_METHODS if m != "selective_context"]
    assert list(method_sweeps(None, [], with_model=True)) == list(DEFAULT_METHODS)
    chosen = method_sweeps(["identity", "last_tokens", "ctxgate"], ["last_tokens:tokens=64,32"], with_model=False)
    assert chosen == {"identity": {}, "last_tokens": {"tokens": [64, 32]}, "ctxgate": DEFAULT_SWEEPS["ctxgate"]}
    with pytest.raises(LongctxError, match=r"--sweep ctxgate:rate=1: ctxgate is not among the methods \(identity\)"):
        method_sweeps(["identity"], ["ctxgate:rate=1"], with_model=False)


def test_a_bench_runs_without_the_command(tmp_path):
    write_split(tmp_path, "faithfulness", "train", build_faithfulness(seed=0, limit=18))
    bench = Bench.prepare(["identity", "last_messages"], ["last_messages:count=8,4"], str(tmp_path), suites=["low_surprisal"])
    assert [c.label for c in bench.compressors] == ["identity", "last_messages count=8", "last_messages count=4"]
    assert len(bench.pairs) == 6 and {item.suite for _, item in bench.pairs} == {"low_surprisal"}
    notes: list[str] = []
    result = bench.run(cache_dir="off", note=notes.append)
    assert [note.split(" sessions in ")[0] for note in notes] == ["identity: 6", "last_messages count=8: 6", "last_messages count=4: 6"]
    assert (result.sessions, result.tokenizer, result.model, result.layer_b) == (6, REFERENCE_TOKENIZER, None, False)
    assert result.cells["retention-low_surprisal"] == 6 and result.cells["retention-verbatim"] == 0
    assert [(p.method, p.knobs) for p in result.points] == [("identity", {}), ("last_messages", {"count": 8}),
                                                           ("last_messages", {"count": 4})]
    assert result.points[0].value("retention") == 1.0 and "answer-recall" not in result.points[0].rows  # no Layer B
    body = result.to_json()
    assert body["meta"] == {"data": str(tmp_path), "sessions": 6, "tokenizer": REFERENCE_TOKENIZER, "model": None,
                            "cells": result.cells}
    assert [p["spec"] for p in body["points"]] == ["identity", "last_messages", "last_messages"]
    json.dumps(body, allow_nan=False)  # what --out writes


def test_the_command_prints_both_tables_and_writes_every_point(tmp_path, capsys):
    write_split(tmp_path, "faithfulness", "train", build_faithfulness(seed=0, limit=18))
    out = tmp_path / "bench.json"
    code = main(["compress-bench", "--data", str(tmp_path), "--methods", "identity,last_messages,sentence_relevance",
                 "--sweep", "last_messages:count=10,4", "--out", str(out), "--quiet"])
    printed = capsys.readouterr().out
    assert code == 0
    assert "18 sessions from" in printed and "Qwen3.5" in printed and "none (give --model)" in printed
    lines = {tuple(line.split()[:2]): line for line in printed.splitlines() if line.split()}
    assert lines[("identity", "-")].split()[2:9] == ["0.000", "[0.00,", "0.00]", "0.000", "0.000", "1.000", "[1.00,"]
    assert lines[("identity", "-")].endswith("*") and "verbatim n=6" in printed and "low-surprisal n=6" in printed
    assert "tool-heavy" not in printed  # no session of that suite: no column
    assert ("last_messages", "count=4") in lines and ("sentence_relevance", "ratio=0.75") in lines
    matched = printed.split("at 50% savings")[1]
    assert "identity" in matched and "0.00: 1.00 / 1.00" in matched
    body = json.loads(out.read_text())
    assert [(p["method"], p["knobs"]) for p in body["points"]][:3] == [
        ("identity", {}), ("last_messages", {"count": 10}), ("last_messages", {"count": 4})]
    assert body["meta"]["cells"]["retention-verbatim"] == 6 and all(p["seconds"] >= 0 for p in body["points"])
    heavy = body["points"][2]
    assert heavy["rows"]["retention"][1] == heavy["sets"]["train"]["retention"] < 1
    low, high = heavy["intervals"]["retention"]
    assert low < heavy["rows"]["retention"][1] < high and low >= 0.0 and high <= 1.0
    low, high = heavy["intervals"]["savings"]
    assert low < heavy["summary"]["savings"] < high
    assert heavy["summary"]["content_savings"] > 0.5 and heavy["summary"]["structure"]["merged"] == 0
    assert heavy["sets"]["train"]["by_depth"]["early"]["retention"] <= heavy["sets"]["train"]["by_depth"]["recent"]["retention"]


def test_suites_select_sessions_and_an_unknown_one_is_one_line(tmp_path, capsys):
    write_split(tmp_path, "faithfulness", "train", build_faithfulness(seed=0, limit=18))
    assert main(["compress-bench", "--data", str(tmp_path), "--methods", "identity", "--suites", "low_surprisal", "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("6 sessions from") and "low-surprisal n=6" in printed and "verbatim" not in printed
    assert main(["compress-bench", "--data", str(tmp_path), "--suites", "tools", "--quiet"]) == 2
    assert "--suites tools: no suite tools; the suites are standard, low_surprisal, tool_heavy" in capsys.readouterr().err


def test_selective_context_needs_a_model_and_says_so(tmp_path, capsys):
    write_split(tmp_path, "faithfulness", "train", build_faithfulness(seed=0, limit=2))
    assert main(["compress-bench", "--data", str(tmp_path), "--methods", "selective_context", "--quiet"]) == 2
    assert "selective_context reads the model's log-probabilities" in capsys.readouterr().err
