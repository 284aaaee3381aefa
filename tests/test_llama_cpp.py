"""The llama.cpp backend on SmolLM2's GGUF: its reads equal a naive llama.cpp run of the same
file, with and without prefix reuse, its tokenizer is the GGUF's own, and what changes the
numbers changes the cache key.

The naive run is written here on llama-cpp-python's high-level ``Llama`` class: every
sequence whole, one at a time, the logits of every position, a full-vocabulary log-softmax
in numpy; it shares no code with the backend."""
from __future__ import annotations

import hashlib

import numpy as np
import pytest
from kit.needs import needs, needs_smollm2

from pytest_longctx.backends import load_backend
from pytest_longctx.backends.base import describe
from pytest_longctx.data.load import load_dataset
from pytest_longctx.scoring import engine
from pytest_longctx.scoring.cache import IDENTITY
from pytest_longctx.scoring.modes import plan_reads

pytestmark = [
    needs("llama_cpp", install="pip install 'pytest-longctx[llama]'"),
    needs_smollm2,
]

# The same file and batch sizes for both runs; what differs is how the backend cuts sequences
# into decode calls and where it asks for logits. Without flash attention (the default for an
# unquantized V cache) llama.cpp gives the same bits however a sequence is split.
SETTINGS = {"batch-size": "256", "ubatch-size": "128", "threads": "1"}
TOLERANCE = 1e-6  # nats
TOP_K = 5


@pytest.fixture(scope="module")
def gguf_path():
    from pytest_longctx.backends.aliases import smollm2_gguf

    return smollm2_gguf()


@pytest.fixture(scope="module")
def backend():
    made, _ = load_backend("smollm2-135m-gguf", "llama.cpp", options=[f"{k}={v}" for k, v in SETTINGS.items()])
    return made


@pytest.fixture(scope="module")
def plans(backend, data_dir):
    """Real plans in text mode through the backend's tokenizer: facts and tool calls (one
    sequence each, control reads in its first tokens) and rules (with and without the rule:
    long shared prefixes)."""
    dataset = load_dataset(data_dir, sets=["facts", "tool_calls", "rules_en"], lengths=["2k"], limit=1)
    return plan_reads(dataset, "text", backend.tokenizer)


class Naive:
    """Every position's logits of one whole sequence at a time (llama-cpp-python's Llama)."""

    def __init__(self, path: str, type_k: str = "f16", type_v: str = "f16", flash_attn: bool = False):
        import llama_cpp

        self.llm = llama_cpp.Llama(
            model_path=path, n_ctx=2048, n_batch=int(SETTINGS["batch-size"]), n_ubatch=int(SETTINGS["ubatch-size"]),
            n_threads=1, flash_attn=flash_attn, logits_all=True, verbose=False,
            type_k=getattr(llama_cpp, f"GGML_TYPE_{type_k.upper()}"), type_v=getattr(llama_cpp, f"GGML_TYPE_{type_v.upper()}"),
        )
        self.memo: dict[bytes, np.ndarray] = {}

    def logprobs(self, ids: np.ndarray) -> np.ndarray:
        """[len(ids), vocab] natural-log softmax after every position."""
        key = np.asarray(ids, dtype=np.int64).tobytes()
        if key not in self.memo:
            self.llm.reset()
            self.llm.eval([int(t) for t in ids])
            logits = np.array(self.llm.scores[: len(ids)], dtype=np.float64)  # [seq, vocab]
            shifted = logits - logits.max(axis=1, keepdims=True)
            self.memo[key] = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
        return self.memo[key]


@pytest.fixture(scope="module")
def naive(gguf_path):
    return Naive(gguf_path)


def expected(naive: Naive, plans) -> list[tuple[int, float, tuple[int, ...]]]:
    """(top-1, log p(token), top-k ids) of every read, from whole sequences."""
    found = []
    for plan in plans:
        for target in plan.every:
            for read in target.reads:
                row = naive.logprobs(plan.sequences[read.seq])[read.pos - 1]  # causal: what follows changes nothing
                found.append((int(np.argmax(row)), float(row[read.token]), tuple(np.argsort(-row, kind="stable")[:TOP_K])))
    return found


def scored(results, with_top: bool = False) -> list[tuple]:
    return [(s.top1, s.logprob, tuple(s.top[0]) if with_top else ()) for item in results for target in item if target
            for s in target]


@pytest.mark.parametrize("reuse", [True, False], ids=["prefix-reuse", "each-sequence-whole"])
def test_reads_equal_a_naive_llama_cpp_run_of_the_same_file(reuse, backend, naive, plans):
    want = expected(naive, plans)
    got = scored(engine.run(backend, plans, reuse_prefixes=reuse, top_k=TOP_K), with_top=True)
    assert len(got) == len(want) > 50
    assert [g[0] for g in got] == [w[0] for w in want]  # identical top-1
    assert max(abs(g[1] - w[1]) for g, w in zip(got, want)) < TOLERANCE
    assert [g[2] for g in got] == [w[2] for w in want]  # identical top-k ids, most likely first


def test_top_k_log_probabilities_are_the_naive_ones(backend, naive, plans):
    plan = plans[0]
    ids = plan.sequences[0]
    positions = [read.pos - 1 for target in plan.every for read in target.reads][:20]
    result = backend.read(ids, positions, [[0] for _ in positions], top_k=TOP_K)
    rows = naive.logprobs(ids)
    for position, (top_ids, top_logprobs) in zip(positions, result.top):
        assert len(top_ids) == TOP_K and top_logprobs == sorted(top_logprobs, reverse=True)
        np.testing.assert_allclose(top_logprobs, rows[position][top_ids], atol=TOLERANCE)
        assert top_logprobs[-1] >= np.sort(rows[position])[-TOP_K] - TOLERANCE  # nothing more likely was left out


def test_a_state_copied_at_branch_points_gives_the_same_numbers(backend, plans):
    """Models whose cache cannot be cut back (recurrent layers) copy the sequence's state at
    each branch point; forced on SmolLM2, that path must give what cutting gives."""
    cut = scored(engine.run(backend, plans, reuse_prefixes=True))
    backend.cuttable = False
    try:
        copied = scored(engine.run(backend, plans, reuse_prefixes=True))
    finally:
        backend.cuttable = True
    assert [c[0] for c in copied] == [c[0] for c in cut]
    assert max(abs(a[1] - b[1]) for a, b in zip(copied, cut)) < 1e-6


def test_the_context_grows_to_the_longest_read_and_keeps_the_sequence(backend, naive, plans):
    ids = max((s for p in plans for s in p.sequences), key=len)
    backend.current = None  # start small: the first piece needs one step of the context
    session = backend.session()
    first = session.advance(ids[:200], [199], [[int(ids[200])]])
    assert backend.current.size == 256
    rest = session.advance(ids[200:], [len(ids) - 201], [[int(ids[-1])]])
    assert backend.current.size >= len(ids) and backend.current.size % 256 == 0
    rows = naive.logprobs(ids)
    assert abs(first.logprobs[0][0] - rows[199][ids[200]]) < TOLERANCE
    assert abs(rest.logprobs[0][0] - rows[len(ids) - 1][ids[-1]]) < TOLERANCE
    assert rest.top1[0] == int(np.argmax(rows[len(ids) - 1]))


def test_quantized_kv_caches_are_what_llama_cpp_computes_with_them(gguf_path, plans):
    """cache-type-k / cache-type-v reach llama.cpp. A q8_0 K cache (no flash attention) gives
    what a naive run with it gives; a q4_0 V cache turns flash attention on (llama.cpp needs it),
    whose numbers depend on how tokens are split into decode calls: its reads lie nearer a
    naive run with the same caches than the f16 cache's reads."""
    few = plans[:1]
    plain = expected(Naive(gguf_path), few)
    k8, _ = load_backend("smollm2-135m-gguf", "llama.cpp", options=[*(f"{k}={v}" for k, v in SETTINGS.items()), "cache-type-k=q8_0"])
    got = scored(engine.run(k8, few))
    want = expected(Naive(gguf_path, "q8_0"), few)
    assert [g[0] for g in got] == [w[0] for w in want]
    assert max(abs(g[1] - w[1]) for g, w in zip(got, want)) < TOLERANCE
    assert max(abs(g[1] - p[1]) for g, p in zip(got, plain)) > 1e-3
    v4, _ = load_backend("smollm2-135m-gguf", "llama.cpp", options=[*(f"{k}={v}" for k, v in SETTINGS.items()), "cache-type-v=q4_0"])
    assert v4.describe()["kv_cache"] == "k=f16 v=q4_0" and v4.describe()["flash_attn"] == "on"
    got = scored(engine.run(v4, few))
    same_caches = expected(Naive(gguf_path, "f16", "q4_0", flash_attn=True), few)
    near = sum(abs(g[1] - w[1]) for g, w in zip(got, same_caches))
    assert near < sum(abs(g[1] - p[1]) for g, p in zip(got, plain))


def test_the_tokenizer_is_the_gguf_s_own_and_agrees_with_transformers(backend, gguf_path, rows):
    """ids are llama.cpp's tokenization of the text; ids and offsets equal those of the same
    GGUF's tokenizer as transformers reads it, on every text of the test items (English,
    Czech, German, chat markup)."""
    import os

    from transformers import AutoTokenizer

    reference = AutoTokenizer.from_pretrained(os.path.dirname(gguf_path), gguf_file=os.path.basename(gguf_path))
    texts = {row[key] for split in rows.values() for row in split
             for key in ("text", "text_without_rule", "text_with_rule") if key in row}
    texts |= {"<|im_start|>user\nPříliš žluťoučký kůň 💡 Größe<|im_end|>\n", "  two  spaces\n\n\ttab"}
    for text in sorted(texts):
        mine = backend.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        theirs = reference(text, add_special_tokens=False, return_offsets_mapping=True)
        assert mine["input_ids"] == backend.tokenizer.ids(text) == list(theirs["input_ids"])
        assert [tuple(o) for o in mine["offset_mapping"]] == [tuple(o) for o in theirs["offset_mapping"]]
    assert backend.tokenizer.get_vocab() == reference.get_vocab()
    turns = [{"role": "user", "content": "Where is flight 48213?"}]
    assert backend.tokenizer.apply_chat_template(turns, add_generation_prompt=True) == \
        reference.apply_chat_template(turns, tokenize=False, add_generation_prompt=True)


def test_describe_names_the_file_its_quantization_and_the_cache_types(backend, gguf_path, plans):
    info = backend.describe()
    with open(gguf_path, "rb") as handle:
        assert info["weights"] == hashlib.sha256(handle.read()).hexdigest()[:32]
    assert info["dtype"] == "Q4_1" and info["kv_cache"] == "k=f16 v=f16" and info["device"] == "cpu"
    assert info["chunk_size"] == 256 and info["ubatch_size"] == 128 and info["threads"] == 1 and info["flash_attn"] == "off"
    assert set(info["versions"]) == {"llama-cpp-python", "llama.cpp"}
    assert backend.context_window == 8192
    identity = {k: describe(backend)[k] for k in IDENTITY}
    other, _ = load_backend("smollm2-135m-gguf", "llama.cpp", options=["cache-type-v=q8_0"])
    assert describe(other)["config"] != identity["config"]  # the cache key moves
    more_threads, _ = load_backend("smollm2-135m-gguf", "llama.cpp",
                                   options=[f"{k}={v}" for k, v in {**SETTINGS, "threads": "2"}.items()])
    assert {k: describe(more_threads)[k] for k in IDENTITY} == identity
    ids = plans[0].sequences[0][:250]
    positions = list(range(0, 249, 7))
    asked = [[int(ids[p + 1])] for p in positions]
    assert more_threads.read(ids, positions, asked) == backend.read(ids, positions, asked)  # threads split the same sums
