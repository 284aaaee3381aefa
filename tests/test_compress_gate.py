"""The compressor gate as users meet it: pytest --longctx-compressor module:function
(Layer A: no model, no torch)."""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest
import scipy.stats  # noqa: F401  # loaded once here: a gate run in-process (pytester) must not load numpy's extensions again
from kit.items import write_split
from kit.needs import needs

from pytest_longctx.data.builtin.faithfulness import build_faithfulness

ROW = "retention-paraphrase"  # the row "Facts retained, paraphrase probes", as junit names it


@pytest.fixture(scope="module")
def sessions_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sessions")
    write_split(folder, "faithfulness", "train", build_faithfulness(seed=0, limit=24))
    return folder


def gate(pytester, sessions_dir, compressor, *args, inprocess=True):
    run = pytester.runpytest_inprocess if inprocess else pytester.runpytest_subprocess
    return run("-p", "no:cacheprovider", f"--longctx-compressor={compressor}", f"--longctx-data={sessions_dir}", *args)


def _properties(junit):
    suite = ET.parse(junit).getroot().find("testsuite")
    return {p.get("name"): p.get("value") for p in suite.find("properties")}, suite


def test_the_identity_compressor_passes_with_everything_kept(pytester, sessions_dir):
    junit, out = pytester.path / "junit.xml", pytester.path / "results.json"
    result = gate(pytester, sessions_dir, "identity", f"--junitxml={junit}", f"--longctx-out={out}")
    result.assert_outcomes(passed=24 + 2)  # an item test each, and the verbatim and paraphrase rows
    text = result.stdout.str()
    assert "longctx compressor gate: identity on" in text and "Qwen3.5" in text and "Layer A only" in text
    assert [line.split() for line in text.splitlines() if line.startswith("Realized savings ")] == [
        ["Realized", "savings", "0.000", "0.000", "+0.000", "reported", "-"]]
    properties, suite = _properties(junit)
    assert properties[f"longctx.row.{ROW}"] == properties[f"longctx.full_row.{ROW}"] == "1.000000"
    assert properties[f"longctx.verdict.{ROW}"] == "PASS" and properties["longctx.compressor"] == "identity"
    item = next(c for c in suite.iter("testcase") if "test_retention[faithfulness-train-s0003]" in c.get("name"))
    recorded = {p.get("name"): p.get("value") for p in item.find("properties")}
    assert recorded["longctx.retained"] == "1" and recorded["longctx.depth"] and recorded["longctx.tokens_full"]
    results = json.loads(out.read_text())
    assert results["rows"]["Facts retained"] == 1.0 and results["rows"]["Realized savings"] == 0.0
    assert results["sets"]["faithfulness"]["train"]["by_depth"]["early"]["retention"] == 1.0
    assert len(results["items"]) == 24 and results["meta"]["compressor"] == "identity"


def test_truncation_fails_the_rows_and_the_verbatim_items_that_lost_their_fact(pytester, sessions_dir):
    out = pytester.path / "results.json"
    result = gate(pytester, sessions_dir, "last_messages", "--longctx-knob=count=6", f"--longctx-out={out}")
    assert result.ret == 1
    text = result.stdout.str()
    assert "FAILED longctx::test_threshold[retention-verbatim]" in text
    assert "Facts retained, verbatim probes: retention" in text and "(full context 1.000), needs >= 1.000" in text
    items = json.loads(out.read_text())["items"]
    lost = {key.split("/")[-1] for key, outcome in items.items() if outcome["retained"] == 0}
    failed = {line.split("faithfulness-train-")[1].split("]")[0] for line in text.splitlines()
              if line.startswith("FAILED longctx::test_retention[")}
    verbatim = {r["id"] for r in build_faithfulness(seed=0, limit=24)
                if r["probe_type"] == "verbatim" and r["suite"] == "standard"}
    assert failed == lost & verbatim and lost - verbatim, "lost paraphrase facts are judged by their row"
    assert "lost the fact" in text


def test_a_compressor_that_raises_fails_its_item_only(pytester, sessions_dir):
    pytester.makepyfile(mycompress="""
        def compress(messages, probe, *, keep=4):
            if "cluster" in probe or "namespace" in probe:
                raise RuntimeError("no clusters here")
            return messages[-keep:]
    """)
    result = gate(pytester, sessions_dir, "mycompress:compress", "--longctx-knob=keep=100", "-k", "test_retention")
    text = result.stdout.str()
    failed = [line for line in text.splitlines() if line.startswith("FAILED")]
    assert failed and all("test_retention" in line for line in failed)
    assert "compressor mycompress:compress keep=100 raised RuntimeError: no clusters here" in text
    assert result.parseoutcomes()["passed"] == 24 - len(failed)
    assert f"{len(failed)} item(s) could not be compressed" in text


def test_bad_options_are_usage_errors_in_one_line(pytester, sessions_dir):
    for args, expected in ((("--longctx-knob=nonsense",), "--longctx-knob 'nonsense': expected KEY=VALUE"),
                           (("--longctx-knob=size=3",), "compressor last_tokens: unknown knob size; it takes tokens")):
        result = gate(pytester, sessions_dir, "last_tokens", *args)
        assert result.ret == 4 and expected in result.stderr.str()


@needs("xdist", install='pip install -e ".[test]"')
def test_no_torch_and_the_same_verdicts_under_xdist(pytester, sessions_dir):
    pytester.makeconftest("""
        import sys
        def pytest_sessionfinish(session):
            if not hasattr(session.config, "workerinput"):
                print("torch imported:", "torch" in sys.modules)
    """)
    runs = {}
    for workers in ("0", "2"):
        junit = pytester.path / f"junit-{workers}.xml"
        result = gate(pytester, sessions_dir, "message_relevance", "--longctx-knob=ratio=0.5", "-n", workers,
                      f"--junitxml={junit}", inprocess=False)
        assert result.ret == 1 and "torch imported: False" in result.stdout.str()
        properties, suite = _properties(junit)
        outcomes = {c.get("name"): c.find("failure") is None for c in suite.iter("testcase")}
        runs[workers] = properties, outcomes
    assert runs["0"] == runs["2"] and runs["0"][0][f"longctx.verdict.{ROW}"] == "FAIL"
