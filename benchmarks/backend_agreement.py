"""The transformers and llama.cpp backends on the same SmolLM2 weights, side by side.

    python benchmarks/backend_agreement.py --lengths 2k,8k --limit 4 --sets facts,tool_calls

scores one selection three ways, through the score cache (what a gate run already scored is
not scored again):

* ``hf F32``: the transformers backend on ``smollm2-135m``, the packaged Q4_1 GGUF
  dequantized into float32 (transformers' GGUF loader);
* ``llama.cpp F32``: llama.cpp on the same weights written as an F32 GGUF
  (``benchmarks/gguf_variants.py``: the same dequantization, bit for bit);
* ``llama.cpp Q4_1``: llama.cpp on the packaged file itself, its quantized matrix products.

and prints each headline row, then, per llama.cpp run, how its reads differ from the
transformers backend's: the share of scored tokens with the same top-1 hit or miss, and the
mean and largest absolute difference of their log-probabilities.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import gguf_variants
from pytest_longctx.backends import load_backend
from pytest_longctx.data.load import load_dataset
from pytest_longctx.numbers import number
from pytest_longctx.parse import comma_list
from pytest_longctx.reports.format import table
from pytest_longctx.scoring.cache import ScoreCache
from pytest_longctx.scoring.pipeline import score_sets


def token_pairs(reference, other) -> list[tuple[bool, bool, float, float]]:
    """(hit, hit, log p, log p) of every token both scored, facts and tool calls alike."""
    pairs = []
    for config, lengths in reference.scores.items():
        for length, items in lengths.items():
            for item_id, scores in items.items():
                for mine, theirs in zip(scores.targets, other.scores[config][length][item_id].targets):
                    if "hits" in mine and "hits" in theirs:
                        pairs.extend(zip(mine["hits"], theirs["hits"], mine["logprobs"], theirs["logprobs"]))
    return pairs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", default="2k")
    parser.add_argument("--limit", type=int, default=4)
    parser.add_argument("--sets", default="facts,tool_calls")
    parser.add_argument("--variants", type=Path, default=Path("variants"))
    parser.add_argument("--data", default="builtin")
    args = parser.parse_args()
    dataset = load_dataset(args.data, sets=comma_list(args.sets), lengths=comma_list(args.lengths), limit=args.limit)
    f32 = gguf_variants.build(args.variants, ("F32",))["F32"]
    runs = {"hf F32": ("smollm2-135m", "hf"), "llama.cpp F32": (str(f32), "llama.cpp"),
            "llama.cpp Q4_1": ("smollm2-135m-gguf", "llama.cpp")}
    results = {}
    for name, (model, backend_name) in runs.items():
        print(f"scoring {name} ...", file=sys.stderr, flush=True)
        backend, tokenizer = load_backend(model, backend_name)
        results[name] = score_sets(backend, tokenizer, dataset, mode="text", cache=ScoreCache.for_backend(backend))
    rows = list(results["hf F32"].rows)
    print(f"lengths {args.lengths}; --limit {args.limit}; sets {args.sets}")
    print(table(["row", *results], [[row, *(number(r.rows.get(row), 3) for r in results.values())] for row in rows]))
    body = []
    for name in ("llama.cpp F32", "llama.cpp Q4_1"):
        pairs = token_pairs(results["hf F32"].scores, results[name].scores)
        gaps = [abs(a - b) for _, _, a, b in pairs if a is not None and b is not None]
        body.append([name, f"{len(pairs):,}", f"{sum(x == y for x, y, _, _ in pairs) / len(pairs):.4f}",
                     f"{sum(gaps) / len(gaps):.4f}", f"{max(gaps):.3f}"])
    print(table(["against hf F32", "tokens", "same hit or miss", "mean |delta log p|", "largest |delta log p|"], body))


if __name__ == "__main__":
    main()
