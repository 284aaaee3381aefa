"""Qwen2.5-Coder-0.5B-Instruct from its six chunk packages, read for real: the joined file is the pinned
one (its SHA-256 computed here over the whole file) and a qwen2 GGUF of 24 layers and 32,768 positions,
and its two aliases read the tests' items as one model: llama.cpp on the joined file
(``qwen2.5-coder-0.5b-gguf``) and transformers on the folder converted from it (``qwen2.5-coder-0.5b``)
tokenize every text alike and agree on the top-1 at nearly every read. Skipped, with the pip command,
when the chunks are not installed (491 MB, no extra installs them); LONGCTX_TEST_QWEN=1 (CI's step that
installs them) makes that a failure. Each test session joins the chunks (seconds) and converts the file
into its private cache (about 80 s on 2 cores, 2.5 GB)."""
from __future__ import annotations

import hashlib

import numpy as np
import pytest
from kit.needs import needs

from pytest_longctx.backends import load_backend
from pytest_longctx.backends.aliases import resolve_model
from pytest_longctx.backends.packaged import QWEN25_CODER_05B
from pytest_longctx.data.load import load_dataset
from pytest_longctx.scoring import engine
from pytest_longctx.scoring.modes import plan_reads

pytestmark = [
    pytest.mark.slow,
    needs(*(chunk.path.split("/")[0] for chunk in QWEN25_CODER_05B.chunks), install=QWEN25_CODER_05B.pip(), load=False,
          required_by="LONGCTX_TEST_QWEN"),
    needs("llama_cpp", "gguf", "torch", "transformers", install="pip install 'pytest-longctx[hf,llama]'"),
]


def test_the_joined_file_is_the_pinned_qwen2_gguf():
    from gguf import GGUFReader

    path = resolve_model("qwen2.5-coder-0.5b-gguf")
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 24), b""):
            digest.update(block)
    assert digest.hexdigest() == QWEN25_CODER_05B.sha256
    reader = GGUFReader(path)
    said = {name: reader.fields[name].contents() for name in
            ("general.architecture", "general.name", "qwen2.block_count", "qwen2.context_length")}
    assert said == {"general.architecture": "qwen2", "general.name": "Qwen2.5 Coder 0.5B Instruct AWQ",
                    "qwen2.block_count": 24, "qwen2.context_length": 32768}
    assert len(reader.tensors) == 291


def test_its_two_aliases_tokenize_alike_and_read_as_one_model(data_dir):
    llama, _ = load_backend("qwen2.5-coder-0.5b-gguf", "llama.cpp", options=["threads=2"])
    hf, _ = load_backend("qwen2.5-coder-0.5b", "hf", "float32", "cpu")
    dataset = load_dataset(data_dir, sets=["facts", "tool_calls"], lengths=["2k"], limit=1)
    plans = {name: plan_reads(dataset, "text", backend.tokenizer) for name, backend in (("llama", llama), ("hf", hf))}
    tokens = {name: [[list(map(int, sequence)) for sequence in plan.sequences] for plan in found] for name, found in plans.items()}
    assert tokens["llama"] == tokens["hf"]  # the converted folder's tokenizer is the GGUF's own
    reads = {name: [(s.top1, s.logprob) for item in engine.run(backend, plans[name]) for target in item if target for s in target]
             for name, backend in (("llama", llama), ("hf", hf))}
    assert len(reads["llama"]) == len(reads["hf"]) > 20
    same = np.mean([a[0] == b[0] for a, b in zip(reads["llama"], reads["hf"])])
    apart = np.abs([a[1] - b[1] for a, b in zip(reads["llama"], reads["hf"])])
    print(f"{len(apart)} reads: top-1 equal at {same:.3f}, |delta log p| mean {apart.mean():.4f}, max {apart.max():.3f}")
    # the same weights; what differs is llama.cpp's arithmetic (its activations rounded to 8 bits for the
    # quantized products, an f16 KV cache) against float32
    assert same >= 0.9 and apart.mean() < 0.1
