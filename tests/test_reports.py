"""``longctx compare`` and its text, markdown, JSON and HTML reports, checked against plain
recomputations from the raw per-target scores and the hand-built items."""
from __future__ import annotations

import copy
import gzip
import json

import pytest
from kit.needs import needs
from kit.reports import score_pair

from pytest_longctx.cli import main

FACTS_ROW = "Facts recalled at 2k tokens"
TOOLS_ROW = "Distant tool calls at 2k tokens"


@pytest.fixture(scope="module")
def pair(qwen_model, qwen_tokenizer, data_dir, tmp_path_factory):
    return score_pair(qwen_model, qwen_tokenizer, data_dir, tmp_path_factory.mktemp("pair"))


def compare(capsys, *args):
    code = main(["compare", *map(str, args)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def compare_json(capsys, *args):
    code, out, err = compare(capsys, *args, "--format", "json", "--top", "0")
    assert code in (0, 1), err
    return code, json.loads(out)


def raw(results, config):
    return {item_id: s.targets for item_id, s in results.scores.scores[config]["2k"].items()}


def mean(xs):
    return sum(xs) / len(xs)


def scored(record):
    return "unaligned" not in record and None not in record.get("logprobs", [record.get("score_with"), record.get("score_without")])


# ------------------------------------------------------------------ numbers


def test_rows_cells_and_verdicts_match_a_plain_recomputation(pair, rows, capsys):
    code, report = compare_json(capsys, pair.baseline, pair.results)
    mine, theirs = raw(pair.degraded, "facts"), raw(pair.reference, "facts")

    def recalled(records):
        flat = [r for targets in records.values() for r in targets if scored(r)]
        return sum(all(r["hits"]) for r in flat) / len(flat)

    assert report["rows"][FACTS_ROW] == pytest.approx(recalled(mine))
    assert report["baseline_rows"][FACTS_ROW] == pytest.approx(recalled(theirs))

    far = {row["id"]: [t["far"] for t in row["targets"]] for row in rows[("tool_calls", "2k")]}

    def far_accuracy(records):
        hits = [r["hits"][0] for i, targets in records.items() for r, f in zip(targets, far[i]) if f and scored(r)]
        return sum(hits) / len(hits)

    assert report["rows"][TOOLS_ROW] == pytest.approx(far_accuracy(raw(pair.degraded, "tool_calls")))
    verdicts = {v["label"]: v for v in report["verdicts"]}
    for row in (FACTS_ROW, TOOLS_ROW):
        expected = "FAIL" if report["rows"][row] < report["baseline_rows"][row] - 0.05 else "PASS"
        assert verdicts[row]["verdict"] == expected and verdicts[row]["threshold"] == pytest.approx(
            report["baseline_rows"][row] - 0.05)
    assert verdicts[FACTS_ROW]["verdict"] == "FAIL"  # the noise costs this model its recall

    # a rules cell: retained = sum(eff) / sum(eff_ref) over targets the reference reacts to by >= 1 nat
    kinds = {row["id"]: (row["placement"], row["family"]) for row in rows[("rules_en", "2k")]}
    effects = [(b["score_with"] - b["score_without"], a["score_with"] - a["score_without"])
               for i, targets in raw(pair.degraded, "rules_en").items() if kinds[i] == ("user", "redirect")
               for a, b in zip(targets, raw(pair.reference, "rules_en")[i])]
    counted = [(ref, eff) for ref, eff in effects if abs(ref) >= 1.0]
    cell = report["sets"]["rules_en"]["2k"]["cells"]["user"]["redirect"]
    assert counted and cell["counted"] == len(counted)
    assert cell["retained"] == pytest.approx(sum(e for _, e in counted) / sum(r for r, _ in counted))
    cell_verdict = next(v for v in report["verdicts"] if v["key"] == "rules_en-2k-user-redirect")
    assert cell_verdict["verdict"] == ("PASS" if cell["retained"] >= 0.9 else "FAIL")
    assert code == 1 and report["passed"] is False


def test_every_target_lost_is_listed_worst_first_with_its_loss(pair, capsys):
    _, report = compare_json(capsys, pair.baseline, pair.results)
    expected = {}
    for config in ("facts", "tool_calls"):
        for item_id, targets in raw(pair.degraded, config).items():
            for index, (a, b) in enumerate(zip(targets, raw(pair.reference, config)[item_id])):
                if scored(a) and scored(b):
                    expected[f"{config}/2k/{item_id}#{index}"] = mean(b["logprobs"]) - mean(a["logprobs"])
    for config in ("rules_en", "rules_cs", "rules_de"):
        for item_id, targets in raw(pair.degraded, config).items():
            for index, (a, b) in enumerate(zip(targets, raw(pair.reference, config)[item_id])):
                eff, ref = a["score_with"] - a["score_without"], b["score_with"] - b["score_without"]
                if abs(ref) >= 1.0:
                    expected[f"{config}/2k/{item_id}#{index}"] = (ref - eff) if ref > 0 else (eff - ref)
    listed = {t["where"]: t["loss"] for t in report["targets"]}
    assert listed == pytest.approx(expected)
    losses = [t["loss"] for t in report["targets"]]
    assert losses == sorted(losses, reverse=True)
    assert report["counts"]["targets"] == len(expected)
    # an item's loss is the mean over its scored tokens, as the gate's item check measures it
    f0 = [(a, b) for a, b in zip(raw(pair.degraded, "facts")["f0"], raw(pair.reference, "facts")["f0"]) if scored(a)]
    item = next(i for i in report["items"] if i["key"] == "facts-2k-f0")
    assert item["loss"] == pytest.approx(mean([lb - la for a, b in f0 for la, lb in zip(a["logprobs"], b["logprobs"])]))
    assert item["passed"] == (item["loss"] <= 1.0)


def test_a_results_json_and_a_scores_file_compare_the_same(pair, capsys):
    _, from_json = compare_json(capsys, pair.baseline, pair.results)
    _, from_scores = compare_json(capsys, pair.baseline, pair.scores)
    assert from_json == from_scores


def test_thresholds_are_overridden_as_in_the_plugin(pair, capsys):
    _, report = compare_json(capsys, pair.baseline, pair.results, "--max-drop", "1", "--item-max-drop", "100")
    verdicts = {v["label"]: v for v in report["verdicts"]}
    # a drop of 1 puts the threshold at or below 0, where no accuracy can fall: the checks cannot fail, so n/a
    assert verdicts[FACTS_ROW]["verdict"] == "n/a" and verdicts[TOOLS_ROW]["verdict"] == "n/a"
    assert not any(not i["passed"] for i in report["items"])
    _, report = compare_json(capsys, pair.baseline, pair.results, "--max-drop", "1", "--threshold", "facts-2k:drop=0")
    verdicts = {v["label"]: v for v in report["verdicts"]}
    assert verdicts[FACTS_ROW]["threshold"] == pytest.approx(report["baseline_rows"][FACTS_ROW])
    assert verdicts[TOOLS_ROW]["verdict"] == "n/a"
    code, _, err = compare(capsys, pair.baseline, pair.results, "--threshold", "facts-2k:speed=1")
    assert code == 2 and err.count("\n") == 1 and "--threshold: 'facts-2k:speed=1'" in err


# ------------------------------------------------------------------ what people read


def test_the_text_report_shows_each_lost_target_in_its_text(pair, rows, capsys):
    code, out, _ = compare(capsys, pair.baseline, pair.results, "--top", "40")
    assert code == 1
    lines = out.splitlines()
    assert lines[0].startswith("longctx compare: degraded, float32 on cpu against baseline ") and lines[0].endswith(": FAIL")
    facts_line = next(line for line in lines if line.startswith(FACTS_ROW))
    assert facts_line.endswith("FAIL (accuracy)")
    # the worst facts target: its fact, and its answer marked in the text after its question
    _, report = compare_json(capsys, pair.baseline, pair.results)
    worst = next(t for t in report["targets"] if t["config"] == "facts")
    target = next(r for r in rows[("facts", "2k")] if r["id"] == worst["item_id"])["targets"][worst["index"]]
    at = next(i for i, line in enumerate(lines) if line.startswith(worst["where"] + ","))
    assert f"lost {worst['loss']:.3f} nats" in lines[at]
    assert lines[at + 1].strip() == f"fact: {target['fact']}"
    assert f"Flight⟦{target['answer']}⟧" in lines[at + 2]


def test_the_markdown_report_has_a_table_per_section(pair, capsys):
    _, report = compare_json(capsys, pair.baseline, pair.results)
    code, out, _ = compare(capsys, pair.baseline, pair.results, "--format", "markdown")
    assert code == 1 and out.startswith("## longctx: FAIL")
    model, baseline = report["rows"][FACTS_ROW], report["baseline_rows"][FACTS_ROW]
    low, high = next(v["interval"] for v in report["verdicts"] if v["label"] == FACTS_ROW)  # beside the delta
    assert (f"| {FACTS_ROW} | {baseline:.3f} | {model:.3f} | {model - baseline:+.3f} [{low:.2f}, {high:.2f}] "
            f"| >= {baseline - 0.05:.3f} | FAIL (accuracy) |") in out
    assert "### Rules cells" in out and "| rules_en-2k-user-redirect |" in out
    assert "```text\nfact: " in out and "⟦" in out


@needs("matplotlib", install='pip install -e ".[report]"')
def test_the_html_report_is_one_self_contained_file(pair, capsys, tmp_path):
    out = tmp_path / "report.html"
    code, _, err = compare(capsys, pair.baseline, pair.results, "--format", "html", "--out", out)
    assert code == 1 and f"written to {out}" in err
    html = out.read_text()
    assert "<script" not in html and "<link" not in html and " src=" not in html
    assert html.count('<table id="headline-table">') == 1
    assert html.count("<svg") == 1 + 1 + 3  # drift by distance, accuracy by distance, 3 rules configs
    assert html.count('<table id="drift-table">') == 1 and html.count('<figure id="drift-plot">') == 1
    assert html.index('id="drift-plot"') < html.index('id="distance-plot"')
    assert html.count("<mark>") >= 1 and "<details class=\"item\" open>" in html


def test_without_matplotlib_the_html_report_keeps_its_tables(pair, monkeypatch):
    from pytest_longctx.gate.comparison import compare_files
    from pytest_longctx.gate.results_file import read_results
    from pytest_longctx.gate.thresholds import Thresholds
    from pytest_longctx.reports import plots
    from pytest_longctx.reports.html import html_report
    from pytest_longctx.scoring.scores_file import load_scores

    monkeypatch.setattr(plots, "available", lambda: False)
    html = html_report(compare_files(load_scores(pair.baseline), read_results(str(pair.results)), None, Thresholds()))
    assert "<svg" not in html and "matplotlib is not installed" in html
    assert 'id="headline-table"' in html and 'id="distance-table"' in html and 'id="rules-table"' in html
    assert 'id="drift-table"' in html and 'id="drift-distance-table"' in html


# ------------------------------------------------------------------ data and bad input


def _rewrite(path, target, change):
    body = json.loads(path.read_text())
    change(body)
    target.write_text(json.dumps(body))
    return target


def test_without_the_data_the_numbers_stay_and_the_texts_go(pair, data_dir, tmp_path, capsys):
    def move(body):
        body["meta"]["data_source"] = str(tmp_path / "moved")

    moved = _rewrite(pair.results, tmp_path / "moved.json", move)
    baseline = tmp_path / "baseline.json.gz"
    from pytest_longctx.scoring.scores_file import load_scores

    scores = load_scores(pair.baseline)
    scores.meta["data_source"] = str(tmp_path / "moved")
    scores.save(baseline)
    _, full = compare_json(capsys, pair.baseline, pair.results)
    _, bare = compare_json(capsys, baseline, moved)
    assert bare["rows"] == pytest.approx(full["rows"]) and bare["baseline_rows"] == pytest.approx(full["baseline_rows"])
    assert [t["loss"] for t in bare["targets"]] == pytest.approx([t["loss"] for t in full["targets"]])
    assert all(t["snippet"] is None for t in bare["targets"]) and all(t["snippet"] for t in full["targets"])
    assert any("not available" in n and "pass --data DIR" in n for n in bare["notes"])
    _, given = compare_json(capsys, baseline, moved, "--data", data_dir)
    assert given["targets"] == full["targets"] and not given["notes"]


def test_data_that_does_not_match_is_refused_or_noted(pair, rows, tmp_path, capsys):
    from kit.items import write_split

    changed = {key: copy.deepcopy(split) for key, split in rows.items() if key[1] == "2k"}
    changed[("facts", "2k")][0]["targets"][0]["distance_tokens"] += 1
    for (config, split), split_rows in changed.items():
        write_split(tmp_path / "other", config, split, split_rows)
    code, out, err = compare(capsys, pair.baseline, pair.results, "--data", tmp_path / "other")
    assert code == 2 and not out and err.count("\n") == 1
    assert f"--data {tmp_path / 'other'}: item facts/2k/f0 differs from the one scored" in err
    assert "pass the data the results were scored on" in err

    def point(body):
        body["meta"]["data_source"] = str(tmp_path / "other")

    _, report = compare_json(capsys, pair.baseline, _rewrite(pair.results, tmp_path / "r.json", point))
    assert any("item facts/2k/f0 differs" in n for n in report["notes"]) and report["targets"][0]["snippet"] is None


def test_results_without_per_target_scores_compare_their_metrics(pair, capsys, tmp_path):
    old = _rewrite(pair.results, tmp_path / "old.json", lambda body: body.pop("scores"))
    _, full = compare_json(capsys, pair.baseline, pair.results)
    code, report = compare_json(capsys, pair.baseline, old)
    assert code == 1 and report["rows"] == pytest.approx(full["rows"])
    assert report["targets"] == [] and all(i["loss"] is None for i in report["items"])
    assert any("holds no per-target scores" in n for n in report["notes"])


def test_bad_input_is_one_line_naming_the_file(pair, tmp_path, capsys):
    truncated = tmp_path / "truncated.json.gz"
    truncated.write_bytes(pair.scores.read_bytes()[:200])
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"hello": 1}))
    wrong = tmp_path / "wrong.json.gz"
    body = json.loads(gzip.decompress(pair.baseline.read_bytes()))
    body["scores"]["facts"]["2k"]["f0"]["fingerprint"] = "0" * 24
    wrong.write_bytes(gzip.compress(json.dumps(body).encode()))
    cases = [
        ((tmp_path / "none.json.gz", pair.results), f"baseline {tmp_path / 'none.json.gz'}: no such file"),
        ((pair.baseline, tmp_path / "none.json"), f"results {tmp_path / 'none.json'}: no such file"),
        ((pair.baseline, truncated), f"results {truncated}: corrupt or truncated"),
        ((pair.baseline, other), f"results {other}: neither a results JSON nor a scores file"),
        ((truncated, pair.results), f"baseline {truncated}: corrupt or truncated"),
        ((wrong, pair.results), f"baseline {wrong}: facts/2k/f0 was scored on different data"),
    ]
    for args, expected in cases:
        code, out, err = compare(capsys, *args)
        assert code == 2 and not out and err.count("\n") == 1, (expected, err)
        assert err.startswith(f"longctx: error: {expected}"), err


def test_distance_buckets_share_hits_per_bucket():
    from pytest_longctx.gate.distance import buckets
    from pytest_longctx.gate.losses import TargetLoss

    def target(config, distance, hit_baseline, hit_model):
        return TargetLoss(config, "8k", "x", 0, 0.0, 0.0, 0.0, hit_baseline, hit_model, distance_tokens=distance)

    targets = [target("facts", 0, True, True), target("facts", 511, True, False), target("facts", 512, True, True),
               target("facts", 3000, False, False), target("facts", 40000, True, False),
               target("facts", None, True, True), target("tool_calls", 700, True, False), target("rules_en", 5, True, False)]
    assert [(b.label, b.count, b.baseline, b.model) for b in buckets(targets, "facts")] == [
        ("< 512", 2, 1.0, 0.5), ("512-1k", 1, 1.0, 1.0), ("2k-4k", 1, 0.0, 0.0), (">= 32k", 1, 1.0, 0.0)]
    assert [(b.label, b.count, b.model) for b in buckets(targets, "tool_calls")] == [("512-1k", 1, 0.0)]


@pytest.mark.parametrize("meta, said", [
    ({"quantization": "bitsandbytes nf4"}, ["bitsandbytes nf4"]),
    ({"quantization": "none", "kv_cache": "auto"}, []),  # vLLM's cache in the model's own dtype: nothing to say
    ({"kv_cache": "k=f16 v=f16", "backend": "LlamaCppBackend", "dtype": "F32"}, []),  # llama.cpp's default cache, a float file
    ({"kv_cache": "k=f16 v=q4_0", "backend": "LlamaCppBackend", "dtype": "Q4_1"}, ["GGUF Q4_1", "KV cache k=f16 v=q4_0"]),
    ({"kv_cache": "fp8_e4m3"}, ["KV cache fp8_e4m3"]),  # vLLM's name for its cache dtype
    ({"kv_cache": "quantized KV cache fp8"}, ["KV cache fp8"]),  # the transformers backend's
    ({"quantization": "torchao int8 weight-only", "kv_press": "snapkv"}, ["torchao int8 weight-only", "KV-cache press snapkv"]),
])
def test_the_record_of_what_was_judged_names_what_compresses_the_model_and_its_context(meta, said):
    from pytest_longctx.scoring.identity import Judged

    judged = Judged.from_meta({"model": "m", **meta})
    assert judged.compressions() == said
    assert judged.describe() == (f"m ({'; '.join(said)})" if said else "m") + (f", {meta['dtype']}" if "dtype" in meta else "")
    assert Judged.from_meta({"judged": judged.to_json()}) == judged  # as a file keeps it


def test_the_same_weights_under_another_config_are_not_said_to_be_compared_with_themselves(qwen_model, qwen_tokenizer,
                                                                                          tmp_path):
    """A far-blind variant made by editing config.json alone (here rope_theta; benchmarks/variants.py's window512 is
    a sliding window) keeps the weights' bits: the header must not call it the baseline's own model and setup."""
    from kit.models import save_model

    from pytest_longctx.backends import load_backend
    from pytest_longctx.backends.base import close
    from pytest_longctx.scoring.identity import compare_judged

    folder = save_model(tmp_path / "model", qwen_model, qwen_tokenizer)
    edited = save_model(tmp_path / "edited", qwen_model, qwen_tokenizer)
    config = json.loads((edited / "config.json").read_text())
    config["rope_theta"] = 10.0 * float(config.get("rope_theta") or config.get("rope_parameters", {}).get("rope_theta", 1e6))
    config.get("rope_parameters", {}).update(rope_theta=config["rope_theta"])
    (edited / "config.json").write_text(json.dumps(config))
    metas = []
    for path in (folder, folder, edited):
        backend, _ = load_backend(str(path), "hf", "float32", "cpu", ())
        metas.append(backend.describe())
        close(backend)
    original, again, other = metas
    assert original["weights"] == other["weights"] and original["config"] != other["config"]
    assert compare_judged(original, again).note.endswith("it is compared with itself")
    note = compare_judged(original, other).note
    assert "compared with itself" not in note and note.startswith("the baseline's own weights under another config")
    assert f"digest {other['config'][:8]} here, {original['config'][:8]} there" in note
    # and what differs: transformers keeps the rope base under rope_parameters, whichever place the file gave it in
    assert note.endswith("; the keys that differ: rope_parameters)")
