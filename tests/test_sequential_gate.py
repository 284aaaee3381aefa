"""Sequential reading through the plugin and ``longctx score``, on the tiny models the tests build: exact gives every
test, items' included, the outcome off gives and never forwards more tokens; a candidate that fails early, gated on
its rows alone, reads fewer items and forwards fewer tokens; pytest-xdist gives the same (tests/test_plugin.py); and
the results JSON's stopping record replays to the same stops."""
from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET

import pytest

from pytest_longctx.gate.sequential.reading import replay


def gate(pytester, gate_models, data_dir, gate_baseline, model, *args):
    return pytester.runpytest_inprocess(
        "-p", "no:cacheprovider", f"--longctx-model={gate_models[model]}", f"--longctx-data={data_dir}",
        "--longctx-lengths=2k", f"--longctx-baseline={gate_baseline}", "--longctx-cache-dir=off", "-rs", *args)


def outcomes(junit) -> dict[str, str]:
    """Each generated test's outcome in a junit file: passed, failed or skipped."""
    found = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = case.get("name")
        if name.startswith(("test_row[", "test_cell[", "test_item[")):
            found[name] = "failed" if case.find("failure") is not None else "skipped" if case.find("skipped") is not None else "passed"
    return found


def run(pytester, gate_models, data_dir, gate_baseline, model, sequential, *args):
    """(every generated test's outcome, the results JSON, the output) of one gate run."""
    junit, out = pytester.path / f"{model}-{sequential}.xml", pytester.path / f"{model}-{sequential}.json"
    result = gate(pytester, gate_models, data_dir, gate_baseline, model, f"--longctx-sequential={sequential}",
                  f"--junitxml={junit}", f"--longctx-out={out}", *args)
    return outcomes(junit), json.loads(out.read_text()), result


@pytest.mark.parametrize("model", ["degraded", "reference"])
def test_exact_gives_every_test_the_outcome_off_gives(pytester, gate_models, data_dir, gate_baseline, model):
    tests_off, results_off, result_off = run(pytester, gate_models, data_dir, gate_baseline, model, "off")
    tests_exact, results_exact, result_exact = run(pytester, gate_models, data_dir, gate_baseline, model, "exact")
    assert tests_exact == tests_off and len(tests_off) > 40 and any(t.startswith("test_item[") for t in tests_off)
    assert result_exact.ret == result_off.ret == (1 if model == "degraded" else 0)
    assert results_off["sequential"] is None
    off_words = {(v["key"], v["metric"]): v["verdict"] for v in results_off["verdicts"]}
    for verdict in results_exact["verdicts"]:  # every check exact settled has off's word
        settled = verdict["settled"]
        if settled is not None and settled["how"] == "bounds":
            assert settled["word"] == off_words[verdict["key"], verdict["metric"]] == verdict["verdict"], verdict
    # what off forwards: every needed item at once; exact reads every item whose own test is open, so here all but
    # the items whose baseline counts nothing (n/a in both modes), and never forwards more
    assert 0 < results_exact["tokens_forwarded"] <= results_off["tokens_forwarded"] == results_off["tokens_whole"]
    totals = results_exact["sequential"]["totals"]
    assert totals["tokens"] == results_exact["tokens_forwarded"] and totals["of_tokens"] == results_off["tokens_forwarded"]
    assert "sequential reading (exact):" in result_exact.stdout.str()
    assert not any("not read:" in line for line in result_exact.outlines)


def test_rows_alone_are_settled_early_and_forward_fewer_tokens(pytester, gate_models, data_dir, gate_baseline):
    """Gated on its rows and cells alone (``-k 'not test_item'``), the degraded candidate's drift fails on the first
    item of facts and tool calls: their second is not read, and exact forwards fewer tokens than off."""
    deselect = ("-k", "not test_item")
    tests_off, results_off, _ = run(pytester, gate_models, data_dir, gate_baseline, "degraded", "off", *deselect)
    tests_exact, results_exact, result = run(pytester, gate_models, data_dir, gate_baseline, "degraded", "exact", *deselect)
    assert tests_exact == tests_off and tests_off and not any(t.startswith("test_item[") for t in tests_off)
    totals = results_exact["sequential"]["totals"]
    assert totals["items"] < totals["of_items"]
    assert results_exact["tokens_forwarded"] < results_off["tokens_forwarded"]
    # the blame command's cost: blame reads every item of the blamed rows, the gate read fewer of them
    costs = [re.search(r"on these rows' (\d+) items, (.*?);", line) for line in result.outlines
             if line.startswith("longctx:   it scores at most")]
    ((items, said),) = [found.groups() for found in costs]
    read = sum(len(results_exact["scores"][config]["2k"]) for config in ("facts", "tool_calls"))  # the failing rows' sets
    assert said == f"every one of them (this run read {read}: sequential reading settled the verdicts sooner)"
    assert read < int(items)


def test_the_stopping_record_replays_and_confident_says_what_it_could_not_settle(pytester, gate_models, data_dir,
                                                                                  gate_baseline):
    for mode in ("exact", "confident"):
        _, results, result = run(pytester, gate_models, data_dir, gate_baseline, "degraded", mode, "-k", "not test_item")
        for unit, record in results["sequential"]["units"].items():
            again = replay(record)
            assert [s.settled.to_json() if s.settled else None for s in again.states] == \
                [c["settled"] for c in record["checks"]], unit
            assert again.read == [tuple(k) for step in record["steps"] for k in step["items"]]
    text = result.stdout.str()
    assert "sequential reading (confident at alpha 0.05):" in text
    hows = {v["settled"]["how"] for v in results["verdicts"] if v["settled"] is not None}
    assert "confidence sequence" in hows and "not settled" in hows  # its drift fails at once, two items settle no pass


def test_a_baseline_update_reads_everything_and_refuses_another_mode(pytester, gate_models, data_dir, tmp_path):
    result = gate(pytester, gate_models, data_dir, tmp_path / "new.json.gz", "reference", "--longctx-update-baseline",
                  "--longctx-sequential=exact")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.stderr.lines if "--longctx-sequential" in line]
    assert len(errors) == 1 and "a baseline update (--longctx-update-baseline) reads every item" in errors[0]


def test_longctx_score_reads_sequentially_against_a_reference(gate_models, data_dir, gate_baseline, tmp_path, capsys):
    from pytest_longctx.cli import main

    common = ["score", "--model", gate_models["degraded"], "--data", str(data_dir), "--lengths", "2k", "--sets",
              "facts,tool_calls", "--quiet", "--cache-dir", "off"]
    assert main([*common, "--sequential", "exact"]) == 2
    assert "--sequential exact: it stops once the checks against a reference are settled" in capsys.readouterr().err
    assert main([*common, "--sequential", "confident", "--reference_scores", str(gate_baseline), "--save_scores",
                 str(tmp_path / "x.json.gz")]) == 2
    assert "must hold every item" in capsys.readouterr().err
    out = tmp_path / "results.json"
    assert main([*common, "--sequential", "exact", "--reference_scores", str(gate_baseline), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    found = json.loads(out.read_text())
    record = found["sequential"]
    assert record["totals"]["items"] == 2 < record["totals"]["of_items"] == 4  # one item of each set settles the rows
    assert found["tokens_forwarded"] == record["totals"]["tokens"] < found["tokens_whole"] == record["totals"]["of_tokens"]
    assert "sequential reading (exact): 2 of 4 items read" in printed and "bounds FAIL" in printed
    assert [s.settled.to_json() for s in replay(record["units"]["facts"]).states] == \
        [c["settled"] for c in record["units"]["facts"]["checks"]]
