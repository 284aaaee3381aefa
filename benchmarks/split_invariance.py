"""Does llama.cpp give the same numbers however a sequence is split into decode calls?

    python benchmarks/split_invariance.py

reads the first 600 tokens of the first shipped Wikipedia article (a fixed text; the first
figures read this repository's README, which changes) with the llama.cpp backend once
whole and once as 300 + 300 tokens (the second half on the cached first), with flash
attention off and on, on the packaged Q4_1 file and (when benchmarks/gguf_variants.py has
written it) the F32 one, and prints the largest and mean difference of the
log-probabilities of the next token at 23 positions of the second half.
"""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np

from pytest_longctx.backends import load_backend
from pytest_longctx.reports.format import table

ROOT = Path(__file__).parent.parent
ARTICLES = ROOT / "pytest_longctx" / "data" / "builtin" / "sources" / "wikipedia" / "articles.jsonl.gz"


def first_article() -> str:
    with gzip.open(ARTICLES, "rt", encoding="utf-8") as lines:
        return "\n\n".join(json.loads(next(lines))["paragraphs"])


def differences(model: str, flash: str) -> tuple[float, float]:
    backend, tokenizer = load_backend(model, "llama.cpp", options=["threads=1", "batch-size=256", f"flash-attn={flash}"])
    ids = np.array(tokenizer(first_article(), add_special_tokens=False)["input_ids"][:600])
    positions = list(range(300, 599, 13))
    tokens = [[int(ids[p + 1])] for p in positions]
    whole = backend.read(ids, positions, tokens)
    session = backend.session()
    session.advance(ids[:300], [], [])
    split = session.advance(ids[300:], [p - 300 for p in positions], tokens)
    gaps = [abs(a[0] - b[0]) for a, b in zip(whole.logprobs, split.logprobs)]
    return max(gaps), sum(gaps) / len(gaps)


def main() -> None:
    models = {"Q4_1 (packaged)": "smollm2-135m-gguf"}
    f32 = ROOT / "variants" / "smollm2-135m-f32.gguf"
    if f32.exists():
        models["F32"] = str(f32)
    rows = [[name, flash, *(f"{x:.2g}" for x in differences(model, flash))] for name, model in models.items()
            for flash in ("off", "on")]
    print(table(["file", "flash attention", "largest |delta log p|", "mean |delta log p|"], rows))


if __name__ == "__main__":
    main()
