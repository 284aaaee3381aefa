"""The gate as users meet it, through pytester: pytest --longctx-model X."""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest
from kit.needs import needs
from kit.runs import junit_outcomes, run_alike, with_and_without_xdist

ROW, KEY = "Facts recalled at 2k tokens", "facts-2k"  # junit names a row by its key


def gate(pytester, models, data_dir, baseline, model="reference", *args):
    # option=value in one token: pytest takes a separate path-like value for a rootdir candidate
    return pytester.runpytest_inprocess(
        "-p", "no:cacheprovider", f"--longctx-model={models[model]}", f"--longctx-data={data_dir}",
        "--longctx-lengths=2k", f"--longctx-baseline={baseline}", *args,
    )


def test_inert_without_the_option(pytester):
    pytester.makepyfile(test_one="""
        import sys
        def test_nothing_heavy_imported():
            assert not [m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers')]
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert "longctx gate" not in result.stdout.str() and "longctx::" not in result.stdout.str()


def test_the_reference_passes_its_own_baseline(pytester, gate_models, data_dir, gate_baseline):
    junit = pytester.path / "junit.xml"
    result = gate(pytester, gate_models, data_dir, gate_baseline, "reference", f"--junitxml={junit}", "-rs")
    outcomes = result.parseoutcomes()
    assert result.ret == 0 and outcomes.get("failed", 0) == 0 and outcomes["passed"] > 30
    text = result.stdout.str()
    # what is skipped is n/a: items whose baseline counts nothing, rules rows and cells without a counted target
    skipped = [line for line in result.outlines if line.startswith("SKIPPED")]
    assert len(skipped) == outcomes.get("skipped", 0) and all("n/a:" in line or "nothing to check" in line for line in skipped)
    assert "longctx gate:" in text and ROW in text and "FAIL" not in text
    suite = ET.parse(junit).getroot().find("testsuite")
    properties = {p.get("name"): p.get("value") for p in suite.find("properties")}
    assert properties["longctx.model"] == gate_models["reference"]
    assert properties[f"longctx.verdict.{KEY}"] == "PASS"
    assert properties[f"longctx.row.{KEY}"] == properties[f"longctx.baseline_row.{KEY}"]
    item_cases = [c for c in suite.iter("testcase") if "test_item[facts-2k-" in c.get("name")]
    assert item_cases and all(c.find("properties") is not None for c in item_cases)


def test_a_degraded_model_fails_with_a_precise_message(pytester, gate_models, data_dir, gate_baseline):
    result = gate(pytester, gate_models, data_dir, gate_baseline, "degraded")
    assert result.ret == 1
    text = result.stdout.str()
    assert "FAIL" in text
    failed_rows = [line for line in text.splitlines() if line.startswith("FAILED") and "longctx::test_row[" in line]
    assert failed_rows, text[-3000:]
    # the message names the row, the model's and the baseline's values, and the threshold
    assert "needs >= " in text and "(baseline " in text


def test_selection_with_k_scores_only_what_is_needed(pytester, gate_models, data_dir, gate_baseline):
    result = gate(pytester, gate_models, data_dir, gate_baseline, "reference", "-k", "facts-2k-f0")
    result.assert_outcomes(passed=1)
    assert "1 items scored" in result.stdout.str()


def test_missing_baseline_says_how_to_make_it(pytester, gate_models, data_dir, tmp_path):
    result = gate(pytester, gate_models, data_dir, tmp_path / "nope.json.gz", "reference")
    result.assert_outcomes(failed=1)
    assert "--longctx-update-baseline" in result.stdout.str() and "does not exist" in result.stdout.str()


def test_invalid_option_values_name_the_option_and_source(pytester, gate_models, data_dir, gate_baseline):
    result = gate(pytester, gate_models, data_dir, gate_baseline, "reference", "--longctx-limit=many")
    assert result.ret == 4
    assert "--longctx-limit 'many' (on the command line): expected a whole number" in result.stderr.str()
    pytester.makeini("[pytest]\nlongctx_min_retained = lots\n")
    result = gate(pytester, gate_models, data_dir, gate_baseline, "reference")
    assert result.ret == 4
    assert "--longctx-min-retained 'lots' (from ini option longctx_min_retained in" in result.stderr.str()


def test_a_baseline_from_other_data_is_refused(pytester, gate_models, data_dir, gate_baseline, tmp_path, rows):
    import copy

    from kit.items import write_split

    changed = {key: copy.deepcopy(split) for key, split in rows.items() if key[1] == "2k"}
    changed[("facts", "2k")][0]["targets"][0]["distance_tokens"] += 1  # any field of an item counts
    for (config, split), split_rows in changed.items():
        write_split(tmp_path, config, split, split_rows)
    result = gate(pytester, gate_models, tmp_path, gate_baseline, "reference", "-k", "facts")
    assert result.ret == pytest.ExitCode.USAGE_ERROR  # before any model is loaded
    assert "was scored on different data" in result.stderr.str()


@needs("xdist", install='pip install -e ".[test]"')
def test_xdist_gives_the_same_verdicts_junit_summary_and_reading(pytester, gate_models, data_dir, gate_baseline):
    """The same gate with -n 0 and -n 2: the same outcomes, junit properties and summary, and sequential reading
    (exact, the default) reads the same items in the same order and settles every check alike. The tokens forwarded
    are not among them: each worker reads the units its tests need, and xdist spreads a unit's tests over both
    (docs/options.md#pytest-xdist), so -n 2 forwards at least what one process does."""
    runs = {}
    for workers, (result, junit, out) in with_and_without_xdist(pytester, gate_models["degraded"], data_dir, gate_baseline).items():
        assert result.ret == 1
        results = json.loads(out.read_text())
        summary = run_alike(result.stdout.str())
        verdicts = [(v["key"], v["metric"], v["verdict"]) for v in results["verdicts"]]
        properties, outcomes = junit_outcomes(junit)
        forwarded = int(properties.pop("longctx.tokens_forwarded"))
        assert forwarded == results["tokens_forwarded"] > 0
        runs[workers] = ((properties, outcomes), summary, results["sequential"], verdicts, forwarded)
    (properties0, outcomes0), summary0, reading0, verdicts0, forwarded0 = runs["0"]
    (properties2, outcomes2), summary2, reading2, verdicts2, forwarded2 = runs["2"]
    assert outcomes0 == outcomes2 and "failed" in outcomes0.values()
    assert properties0 == properties2 and properties0[f"longctx.verdict.{KEY}"] == "FAIL"
    assert summary0 == summary2 and any("FAIL" in line for line in summary0)
    assert reading0 == reading2 and reading0["totals"]["tokens"] == forwarded0 <= forwarded2
    assert verdicts0 == verdicts2 and any(key == "facts-2k" and word == "FAIL" for key, _, word in verdicts0)


def test_the_conftest_example_hands_in_a_loaded_model(pytester, gate_models, data_dir, gate_baseline):
    import json
    from pathlib import Path

    example = Path(__file__).parent.parent / "conftest_example.py"
    pytester.makeconftest(example.read_text())
    pytester.makepyfile(test_custom="from conftest import test_distant_tool_calls_stay_above_half\n")
    out = pytester.path / "results.json"
    result = gate(pytester, gate_models, data_dir, gate_baseline, "reference", "-k", "tool_calls or custom", "-rA",
                  f"--longctx-out={out}")
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed", 0) == 0, result.stdout.str()[-2000:]
    assert "PASSED test_custom.py::test_distant_tool_calls_stay_above_half" in result.stdout.str()
    assert json.loads(out.read_text())["meta"]["model"].endswith("(int8 weights)")


def test_only_runs_the_gate(pytester, gate_models, data_dir, gate_baseline):
    pytester.makepyfile(test_mine="def test_unrelated():\n    raise AssertionError('must not run')\n",
                        # a gate job need not install what the repository's own tests import
                        test_needs_more="import a_module_this_job_did_not_install\n")
    result = gate(pytester, gate_models, data_dir, gate_baseline, "reference", "--longctx-only")
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed", 0) == 0 and outcomes.get("errors", 0) == 0 and outcomes["passed"] >= 3
    assert "test_unrelated" not in result.stdout.str() and "a_module_this_job" not in result.stdout.str()
