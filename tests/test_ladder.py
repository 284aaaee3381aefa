"""A ladder: --longctx-model given several times. Its figures on hand-made rungs (the order by size, the Pareto
frontier, the smallest passing candidate, the noise floor), then the plugin on tiny models: each candidate's verdicts
are those of a run of it alone, a candidate that does not load is one rung that says why, and bad input is refused."""
from __future__ import annotations

import copy
import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from kit.models import save_model
from kit.needs import needs
from kit.runs import junit_outcomes, with_and_without_xdist

from pytest_longctx.data.records import Kind
from pytest_longctx.gate.ladder import Rung, by_size, frontier, item_drift, noise_floor, racing_order, smallest_passing
from pytest_longctx.metrics.drift import ItemDrift, ReadSums
from pytest_longctx.metrics.item_figures import ItemFigures

ROW, KEY = "Facts recalled at 2k tokens", "facts-2k"  # junit names a row by its key


def rung(name: str, size: int | None, far: float | None, verdict: str, **more) -> Rung:
    return Rung(candidate=name, model=f"out/{name}", what="", bytes=size, verdict=verdict, far=far, **more)


# -------------------------------------------------------------- the figures, on hand-made rungs


HAND_MADE = [rung("a", 100, 0.01, "PASS"), rung("b", 50, 0.2, "FAIL"), rung("c", 80, 0.005, "PASS"),
             rung("d", None, 0.0, "PASS"), rung("e", 120, 0.5, "FAIL"), rung("f", 80, None, "FAIL")]


def test_the_rungs_are_ordered_by_size_those_of_unknown_size_last_ties_as_given():
    assert [r.candidate for r in by_size(HAND_MADE)] == ["b", "c", "f", "a", "e", "d"]


def test_the_pareto_frontier_holds_the_candidates_no_smaller_one_drifts_less_than():
    # b is the smallest; c is larger than b but drifts less; a is larger than c and drifts more (off); e is larger
    # than b and drifts more (off); d and f lack a size or a drift, so they are on no frontier
    assert frontier(HAND_MADE) == {"b", "c"}
    # equal sizes hide neither; an equal drift from a smaller candidate does not hide a larger one
    assert frontier([rung("x", 10, 0.1, "PASS"), rung("y", 10, 0.05, "PASS"), rung("z", 20, 0.05, "PASS")]) == {"x", "y", "z"}


def test_the_smallest_passing_candidate_is_named_with_the_ones_of_unknown_size_beside_it():
    choice = smallest_passing(HAND_MADE)
    assert choice.candidate == "c" and choice.to_json() == "c"
    assert "c is the smallest candidate that passes (80 bytes)" in choice.reason and "d passed too, size unknown" in choice.reason


def test_no_smallest_passing_candidate_says_why():
    failing = [rung("a", 10, 0.3, "FAIL"), rung("b", 20, 0.2, "FAIL")]
    assert smallest_passing(failing).to_json() is None
    assert smallest_passing(failing).reason == "none of the 2 candidates passed"
    unsized = smallest_passing([rung("a", None, 0.0, "PASS"), rung("b", 20, 0.2, "FAIL")])
    assert unsized.candidate is None and unsized.reason.startswith("a passed, but the size of none of them on disk is known")


def test_the_originals_drift_is_the_noise_floor_and_a_threshold_too_close_to_it_is_said():
    original = rung("orig", 100, 0.03, "PASS", original=True, drift_row=ROW, drift_threshold=0.05)
    lines = noise_floor([original, rung("q4", 40, 0.2, "FAIL")])
    assert len(lines) == 2 and "orig, the original's weights, drifts 0.03 nats far back" in lines[0]
    assert "the drift threshold 0.05 is not well above that floor" in lines[1]
    roomy = noise_floor([Rung(**{**original.__dict__, "drift_threshold": 0.1})])  # 0.1 >= 2 x 0.03
    assert len(roomy) == 1
    assert noise_floor([rung("q4", 40, 0.2, "FAIL")]) == []  # no original, no floor


def test_the_racing_order_reads_first_the_items_earlier_candidates_drifted_most_on():
    keys = [("facts", "2k", f"f{n}") for n in range(6)]
    order = racing_order({keys[4]: 0.5, keys[1]: 2.0, keys[2]: 0.5})
    rest = sorted([keys[0], keys[3], keys[5]], key=lambda k: hashlib.sha256("/".join(k).encode()).hexdigest())
    tied = sorted([keys[4], keys[2]], key=lambda k: hashlib.sha256("/".join(k).encode()).hexdigest())
    assert sorted(keys, key=order) == [keys[1], *tied, *rest]


def test_an_items_drift_is_its_mean_far_kl_else_its_loss():
    reads = ReadSums(reads=4, kl=2.0, same_top1=3, dlogp_reads=4, dlogp=-1.0, nonfinite=0)
    none = ReadSums(reads=0, kl=0.0, same_top1=0, dlogp_reads=0, dlogp=0.0, nonfinite=0)
    assert item_drift(ItemFigures(Kind.FACTS, drift=ItemDrift(reads, none, none), loss=0.3)) == 0.5
    assert item_drift(ItemFigures(Kind.FACTS, drift=ItemDrift(none, reads, reads), loss=0.3)) == 0.3  # no far reads
    assert item_drift(ItemFigures(Kind.RULES, loss=0.7)) == 0.7
    assert item_drift(ItemFigures(Kind.RULES)) is None


# -------------------------------------------------------------- the plugin, on tiny models


def _gate(pytester, data_dir, baseline, models, *args):
    return pytester.runpytest_inprocess("-p", "no:cacheprovider", *(f"--longctx-model={m}" for m in models),
                                        f"--longctx-data={data_dir}", "--longctx-lengths=2k", f"--longctx-baseline={baseline}",
                                        *args)


def _weight_bytes(folder: str) -> int:
    """The bytes of a saved checkpoint's weight files, counted here from the folder."""
    return sum(p.stat().st_size for p in Path(folder).iterdir() if p.suffix in (".safetensors", ".bin"))


@pytest.fixture(scope="module")
def half_model(qwen_model, qwen_tokenizer, tmp_path_factory) -> str:
    """The reference's weights in bfloat16: half the bytes, and (on these items) drift well within the thresholds."""
    import torch

    return str(save_model(tmp_path_factory.mktemp("half"), copy.deepcopy(qwen_model).to(torch.bfloat16), qwen_tokenizer))


def test_a_ladder_gives_each_candidate_the_verdicts_of_a_run_of_it_alone(pytester, gate_models, data_dir, gate_baseline,
                                                                           half_model):
    models = {"degraded": gate_models["degraded"], "reference": gate_models["reference"], "half": half_model}
    names = {Path(m).name: label for label, m in models.items()}  # the ladder names a candidate by its folder
    out, junit, md, html = (pytester.path / name for name in ("ladder.json", "ladder.xml", "ladder.md", "ladder.html"))
    ladder = _gate(pytester, data_dir, gate_baseline, models.values(), f"--longctx-out={out}", f"--junitxml={junit}",
                   f"--longctx-markdown={md}", f"--longctx-html={html}")
    assert ladder.ret == 1  # the degraded candidate fails, so the run does
    results, (properties, outcomes) = json.loads(out.read_text()), junit_outcomes(junit)
    alone = {}
    for label, model in models.items():
        own_out, own_junit = pytester.path / f"{label}.json", pytester.path / f"{label}.xml"
        result = _gate(pytester, data_dir, gate_baseline, [model], f"--longctx-out={own_out}", f"--junitxml={own_junit}")
        alone[label] = (result.ret, json.loads(own_out.read_text()), *junit_outcomes(own_junit))
    for folder, label in names.items():
        ret, own_results, own_properties, own_outcomes = alone[label]
        mine = {name.replace(f"[{folder}]]", "]"): outcome for name, outcome in outcomes.items() if name.endswith(f"[{folder}]]")}
        assert mine == own_outcomes and len(mine) > 30, label  # every test, the same outcome
        theirs = results["candidates"][folder]
        assert theirs["verdicts"] == own_results["verdicts"] and theirs["rows"] == own_results["rows"], label
        assert theirs["sequential"] == own_results["sequential"], label  # read alike, settled alike
        assert theirs["outcome"] == own_results["outcome"] == own_properties["longctx.outcome"], label
        assert properties[f"longctx.{folder}.verdict.{KEY}"] == own_properties[f"longctx.verdict.{KEY}"]
        found = next(r for r in results["ladder"] if r["candidate"] == folder)
        assert found["verdict"] == ("PASS" if ret == 0 else "FAIL"), label
        assert found["bytes"] == _weight_bytes(models[label])
        assert properties[f"longctx.ladder.verdict.{folder}"] == found["verdict"]
    assert [alone[label][0] for label in models] == [1, 0, 0]  # a fail rung and two pass rungs
    assert results["outcome"] == properties["longctx.outcome"] == "FAIL" and results["not_judged"] is None
    # smallest first (the two float32 candidates are equal in size: as given), the smallest passing one named
    assert [names[r["candidate"]] for r in results["ladder"]] == ["half", "degraded", "reference"]
    half = Path(half_model).name
    assert results["smallest_passing"] == half and properties["longctx.ladder.smallest_passing"] == half
    frontier_of = {names[r["candidate"]]: r["frontier"] for r in results["ladder"]}
    assert frontier_of["half"] and not frontier_of["degraded"]  # half is smaller and drifts less
    original = next(r for r in results["ladder"] if names[r["candidate"]] == "reference")
    assert original["original"] and original["what"] == ""
    text = ladder.stdout.str()
    assert f"longctx: smallest passing: {half} is the smallest candidate that passes" in text
    assert "noise floor:" in text
    assert f"**smallest passing: {half} is the smallest candidate" in md.read_text()
    page = html.read_text()
    assert 'id="ladder-table"' in page and (f'id="rung-{half}"' in page or "No plot: matplotlib" in page)


WATCH = """
import gc, json, pathlib, sys

ALIVE = []

def pytest_runtest_teardown(item):
    torch = sys.modules.get("torch")
    found = [] if torch is None else [
        o.config._name_or_path for o in gc.get_objects()
        if isinstance(o, torch.nn.Module) and hasattr(o, "config") and type(o).__name__.endswith("ForCausalLM")]
    ALIVE.append([item.name, sorted(set(found))])
    pathlib.Path("alive.json").write_text(json.dumps(ALIVE))
"""


def test_one_candidate_is_in_memory_at_a_time(pytester, gate_models, data_dir, gate_baseline, half_model):
    """After every test of a ladder, the models alive in the process: the candidate the test judged, and no other."""
    pytester.makepyfile(watch_models=WATCH)
    pytester.syspathinsert()
    models = [half_model, gate_models["degraded"], gate_models["reference"]]
    result = _gate(pytester, data_dir, gate_baseline, models, "-p", "watch_models", "-k", "test_row")
    assert result.ret == 1
    alive = json.loads((pytester.path / "alive.json").read_text())
    candidates = {Path(m).name: str(m) for m in models}
    seen = []
    for name, loaded in alive:
        judged = name.rsplit("[", 1)[1].rstrip("]")
        assert [m for m in loaded if m in candidates.values()] == [candidates[judged]], (name, loaded)
        seen.append(judged)
    assert list(dict.fromkeys(seen)) == list(candidates)  # candidate by candidate, in the order given


def test_k_selects_one_candidate_by_its_name_in_the_test_ids(pytester, gate_models, data_dir, gate_baseline):
    reference = Path(gate_models["reference"]).name
    out = pytester.path / "one.json"
    result = _gate(pytester, data_dir, gate_baseline, gate_models.values(), "-k", f"facts and {reference}",
                   f"--longctx-out={out}", "-v")
    assert result.ret == 0
    ran = [line for line in result.outlines if "::test_" in line and ("PASSED" in line or "SKIPPED" in line)]
    assert ran and all(f"[{reference}]]" in line for line in ran)
    assert f"test_row[facts-2k[{reference}]]" in result.stdout.str()
    assert [r["candidate"] for r in json.loads(out.read_text())["ladder"]] == [reference]


def test_a_candidate_that_does_not_load_is_one_rung_that_says_why(pytester, gate_models, data_dir, gate_baseline, tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text('{"model_type": "qwen3"}')  # no weights
    out = pytester.path / "ladder.json"
    result = _gate(pytester, data_dir, gate_baseline, [broken, gate_models["reference"]], "-k", "facts",
                   f"--longctx-out={out}")
    assert result.ret == 1
    outcomes = result.parseoutcomes()
    failed = [line for line in result.outlines if line.startswith("FAILED")]
    assert failed and all("[broken]]" in line for line in failed)  # the reference is judged, and passes
    assert outcomes["passed"] >= 1
    assert "the model did not load" in result.stdout.str()
    results = json.loads(out.read_text())
    rung_of = {r["candidate"]: r for r in results["ladder"]}
    assert rung_of["broken"]["verdict"] == "FAIL" and "the model did not load" in rung_of["broken"]["why"]
    assert rung_of["broken"]["bytes"] is None and results["ladder"][-1]["candidate"] == "broken"  # unknown size last
    assert results["smallest_passing"] == Path(gate_models["reference"]).name


def test_a_candidate_the_baseline_refuses_is_one_rung_that_says_why(pytester, gate_models, data_dir, gate_baseline,
                                                                     bpe_model, bpe_tokenizer, tmp_path):
    other = str(save_model(tmp_path / "other-tokenizer", bpe_model, bpe_tokenizer))  # not the baseline's tokenizer
    out = pytester.path / "ladder.json"
    result = _gate(pytester, data_dir, gate_baseline, [other, gate_models["reference"]], "-k", "facts",
                   f"--longctx-out={out}")
    assert result.ret == 1
    failed = [line for line in result.outlines if line.startswith("FAILED")]
    assert failed and all("[other-tokenizer]]" in line for line in failed)
    rung_of = {r["candidate"]: r for r in json.loads(out.read_text())["ladder"]}
    assert "made with another tokenizer" in rung_of["other-tokenizer"]["why"]
    assert rung_of["other-tokenizer"]["verdict"] == "FAIL" and rung_of[Path(gate_models["reference"]).name]["verdict"] == "PASS"


def test_bad_ladders_are_refused_before_anything_loads(pytester, gate_models, data_dir, gate_baseline, tmp_path):
    reference, degraded = gate_models["reference"], gate_models["degraded"]
    twin = tmp_path / "elsewhere" / Path(reference).name  # another folder of the same name
    shutil.copytree(reference, twin)
    refused = {
        "given 2 times; name each candidate of the ladder once": [reference, degraded, reference],
        "the same weights; give each candidate once": [reference, reference + "/"],
        "both would be named": [reference, twin],
    }
    for words, models in refused.items():
        result = _gate(pytester, data_dir, gate_baseline, models)
        assert result.ret == pytest.ExitCode.USAGE_ERROR and words in result.stderr.str(), words
    result = _gate(pytester, data_dir, gate_baseline, [reference], "--longctx-ladder-order=drift")
    assert result.ret == pytest.ExitCode.USAGE_ERROR and "orders the reading of a ladder's candidates" in result.stderr.str()
    for option, words in ((f"--longctx-out={degraded}/results.json", f"it would add a .json file to --longctx-model {degraded},"),
                          ("--longctx-shard=1/2", "a shard is a part of one model's run; give --longctx-model once")):
        result = _gate(pytester, data_dir, gate_baseline, [reference, degraded], option)
        assert result.ret == pytest.ExitCode.USAGE_ERROR and words in result.stderr.str(), (option, result.stderr.str())
    for option, words in (("--longctx-update-baseline", "a baseline is made from one model, the original"),
                          ("--longctx-blame", "blames one failing candidate")):
        result = _gate(pytester, data_dir, gate_baseline, [reference, degraded], option)
        assert result.ret == pytest.ExitCode.USAGE_ERROR, option
        assert words in result.stderr.str() and "give --longctx-model once (given 2 times" in result.stderr.str()


def test_the_racing_order_gives_the_verdicts_of_the_digest_order(pytester, gate_models, data_dir, gate_baseline,
                                                                  half_model):
    found = {}
    for order in ("digest", "drift"):
        junit = pytester.path / f"{order}.xml"
        result = _gate(pytester, data_dir, gate_baseline, [half_model, gate_models["degraded"]], "--longctx-cache-dir=off",
                       f"--longctx-ladder-order={order}", f"--junitxml={junit}")
        assert result.ret == 1
        found[order] = junit_outcomes(junit)[1]
    assert found["digest"] == found["drift"] and "failed" in found["drift"].values()


@needs("xdist", install='pip install -e ".[test]"')
def test_a_ladder_under_xdist_gives_the_same_verdicts(pytester, gate_models, data_dir, gate_baseline):
    runs = {}
    for workers, (result, junit, out) in with_and_without_xdist(pytester, gate_models["reference"], data_dir, gate_baseline,
                                                              f"--longctx-model={gate_models['degraded']}").items():
        assert result.ret == 1
        results = json.loads(out.read_text())
        rungs = [(r["candidate"], r["verdict"], r["items_read"], r["far_kl"]) for r in results["ladder"]]
        verdicts = {name: found["verdicts"] for name, found in results["candidates"].items()}
        runs[workers] = (junit_outcomes(junit)[1], rungs, verdicts, results["smallest_passing"])
    assert runs["0"] == runs["2"]


# -------------------------------------------------------------- longctx ladder


def test_the_ladder_command_runs_pytest_with_the_plugins_options():
    from pytest_longctx.cli.ladder import pytest_words
    from pytest_longctx.cli.main import build_parser

    args = build_parser().parse_args(["ladder", "out/a", "out/b.gguf", "--longctx-baseline", "b.json.gz", "--longctx-only",
                                      "--longctx-threshold", "facts-*:accuracy=0.1", "--longctx-model", "c"])
    assert pytest_words(args) == ["--longctx-only", "--longctx-model=out/a", "--longctx-model=out/b.gguf",
                                  "--longctx-model=c", "--longctx-baseline=b.json.gz",
                                  "--longctx-threshold=facts-*:accuracy=0.1"]


def test_the_ladder_command_gates_its_candidates(gate_models, data_dir, gate_baseline, tmp_path):
    out = tmp_path / "ladder.json"
    result = subprocess.run([sys.executable, "-m", "pytest_longctx.cli", "ladder", gate_models["degraded"],
                             gate_models["reference"], f"--longctx-data={data_dir}", "--longctx-lengths=2k",
                             "--longctx-sets=facts", f"--longctx-baseline={gate_baseline}", f"--longctx-out={out}"],
                            capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 1, result.stdout[-2000:] + result.stderr[-2000:]  # the degraded candidate fails
    results = json.loads(out.read_text())
    assert results["smallest_passing"] == Path(gate_models["reference"]).name
    assert "longctx: smallest passing:" in result.stdout
    alone = subprocess.run([sys.executable, "-m", "pytest_longctx.cli", "ladder", gate_models["reference"]],
                           capture_output=True, text=True, cwd=tmp_path)
    assert alone.returncode == 2 and "give two candidates or more" in alone.stderr
