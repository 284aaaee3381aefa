"""benchmarks/bench_gpu.py's CPU smoke run: a tiny shape in float32 on the test data, its
figures sane and its engine reads the same as a direct ``score_sets`` call's."""
from __future__ import annotations

import json
import math

from kit.needs import needs

pytestmark = needs("torch", "transformers", install='pip install -e ".[hf]"')


def test_the_gpu_bench_runs_a_tiny_shape_on_the_cpu(data_dir, qwen_tokenizer, tmp_path, capsys):
    from bench_gpu import QWEN35_VOCAB, build_model, main, read_values
    from pytest_longctx.backends.hf import TransformersBackend
    from pytest_longctx.data.load import load_dataset
    from pytest_longctx.scoring import score_sets

    assert QWEN35_VOCAB >= len(qwen_tokenizer)  # every id the data stores fits the model
    out = tmp_path / "figures.json"
    main(["--shape", "tiny", "--device", "cpu", "--dtype", "float32", "--data", str(data_dir), "--lengths", "2k",
          "--sets", "facts,rules_en", "--limit", "1", "--out", str(out)])
    printed = capsys.readouterr().out
    report = json.loads(out.read_text())
    figures = report["lengths"]["2k"]
    engine, plain = figures["engine"], figures["plain"]
    assert figures["items"] == 2  # one item per config
    for run in (engine, plain):
        assert run["tokens"] > 0 and run["seconds"] > 0 and run["tokens_per_s"] > 0
        assert run["peak_memory_gb"] > 0 and run["reads"] > 0
        assert run["mfu"] is None  # no bf16 peak on the CPU
    assert engine["tokens"] < plain["tokens"]  # a prefix shared: the rules item's texts without and with the rule
    assert engine["reads"] == plain["reads"]
    assert math.isfinite(figures["time_ratio"]) and figures["time_ratio"] > 0
    assert math.isfinite(figures["memory_ratio"])
    assert figures["max_abs_diff"] < 1e-3 and figures["top1_agree"] == 1.0  # float32: the same numbers
    assert "n/a" in printed and "plain forward / engine" in printed and "peak RSS" in report["memory"]

    dataset = load_dataset(data_dir, sets=["facts", "rules_en"], lengths=["2k"], limit=1)
    direct = score_sets(TransformersBackend(build_model("tiny", "float32", "cpu"), None), None, dataset, mode="ids",
                        progress=False)
    values, _ = read_values(direct)
    assert len(values) == engine["reads"]
    assert math.fsum(values) == engine["logprob_sum"]
