"""KV-cache presses of kvpress through the transformers backend (docs/metrics.md#kv-cache-presses).

Run in kvpress's own environment (scripts/setup-venv.sh DIR kvpress): skipped without kvpress, unless
LONGCTX_TEST_KVPRESS=1, when its absence fails. Tiny random models made offline from a config;
every number is checked against a computation done here by hand, not through the engine."""
from __future__ import annotations

import os
import re

import numpy as np
import pytest
from kit.models import tiny_decoder

from pytest_longctx.data.records import FactItem
from pytest_longctx.errors import LongctxError
from pytest_longctx.scoring.questions import message_start, query_start, sentence_start
from pytest_longctx.scoring.reads import ItemReads, Read, TargetReads

REQUIRED = os.environ.get("LONGCTX_TEST_KVPRESS") == "1"


def _needs_kvpress():
    if REQUIRED:
        import kvpress  # noqa: F401 - its absence fails here
        return
    pytest.importorskip("kvpress")


torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

VOCAB = 97
LENGTH = 120


@pytest.fixture(scope="module", params=["llama", "qwen3"])
def model(request):
    _needs_kvpress()
    return tiny_decoder(request.param, VOCAB)


def _backend(model, press=None):
    from pytest_longctx.backends.hf import TransformersBackend

    backend = TransformersBackend(model, chunk_size=32)  # several forward calls per question: chunks must not matter
    if press is not None:
        backend.use_press(press)
    return backend


IDS = np.random.default_rng(7).integers(0, VOCAB, LENGTH)
# (context, read positions): two questions after a context of 70 tokens share one compression, one after 90 has its own
QUESTIONS = ((70, (74, 80, 95)), (70, (71, 88)), (90, (91, 119)))


def _plan(questions=QUESTIONS) -> ItemReads:
    item = FactItem(id="tiny", text="", targets=())
    targets = tuple(TargetReads(tuple(Read(0, p, int(IDS[p]), context=context) for p in positions))
                    for context, positions in questions)
    return ItemReads("facts", "tiny", item, (IDS,), targets)


def _gate(backend, questions=QUESTIONS) -> list[list[float]]:
    from pytest_longctx.scoring import engine

    (scores,) = engine.run(backend, [_plan(questions)])
    return [[s.logprob for s in target] for target in scores]


def _by_hand(model, context: int, positions, prefill) -> list[float]:
    """log p(IDS[p]) at each position, the context prefilled by ``prefill(cache, ids)``, the question
    then read in one call at its true positions (kvpress's pipeline, by hand)."""
    from transformers import DynamicCache

    cache = DynamicCache()
    with torch.inference_mode():
        prefill(cache, torch.tensor(IDS[:context])[None])
        end = max(positions)
        question = torch.tensor(IDS[context:end])[None]
        out = model(input_ids=question, past_key_values=cache, position_ids=torch.arange(context, end)[None])
        logp = torch.log_softmax(out.logits[0].float(), dim=-1)  # [question, vocab]
    return [float(logp[p - 1 - context, IDS[p]]) for p in positions]


def _pressed_prefill(model, press):
    def prefill(cache, ids):
        with press(model):
            model.model(input_ids=ids, past_key_values=cache)
    return prefill


@pytest.mark.parametrize("name", ["SnapKVPress", "KnormPress", "TOVAPress", "StreamingLLMPress", "ExpectedAttentionPress"])
def test_the_gate_reads_as_kvpress_press_run_by_hand(model, name):
    import kvpress

    press = getattr(kvpress, name)(compression_ratio=0.5)
    gate = _gate(_backend(model, press))
    for (context, positions), got in zip(QUESTIONS, gate):
        expected = _by_hand(model, context, positions, _pressed_prefill(model, getattr(kvpress, name)(compression_ratio=0.5)))
        np.testing.assert_allclose(got, expected, rtol=0, atol=2e-5)
    plain = _gate(_backend(model))
    assert max(abs(a - b) for g, p in zip(gate, plain) for a, b in zip(g, p)) > 1e-3  # the press did change the reads


WRAPPED = [  # a press named with the presses it wraps, and the same made by hand with kvpress
    ("block(knorm:compression_ratio=0.5):block_size=16", lambda k: k.BlockPress(k.KnormPress(compression_ratio=0.5), block_size=16)),
    ("composed(knorm:compression_ratio=0.25;tova:compression_ratio=0.25)",
     lambda k: k.ComposedPress([k.KnormPress(compression_ratio=0.25), k.TOVAPress(compression_ratio=0.25)])),
    ("chunk(knorm:compression_ratio=0.5):chunk_length=32", lambda k: k.ChunkPress(k.KnormPress(compression_ratio=0.5), chunk_length=32)),
]


@pytest.mark.parametrize("spec, made", WRAPPED, ids=[spec.partition("(")[0] for spec, _ in WRAPPED])
def test_a_press_named_with_the_presses_it_wraps_reads_as_kvpress_made_by_hand(model, spec, made):
    import kvpress

    from pytest_longctx.backends.hf.presses import describe_press, make_press

    press = make_press(spec)
    assert describe_press(press) == describe_press(made(kvpress))
    gate = _gate(_backend(model, press))
    for (context, positions), got in zip(QUESTIONS, gate):
        expected = _by_hand(model, context, positions, _pressed_prefill(model, made(kvpress)))
        np.testing.assert_allclose(got, expected, rtol=0, atol=2e-5)
    plain = _gate(_backend(model))
    assert max(abs(a - b) for g, p in zip(gate, plain) for a, b in zip(g, p)) > 1e-3  # the press did change the reads


def test_a_press_that_fails_on_a_context_is_one_line(model):
    """AdaKV needs keys that shut a head's evicted positions out of its attention, and finds none on this tiny
    random model once the question is read: kvpress's own error, named with the press."""
    from pytest_longctx.backends.hf.presses import make_press

    backend = _backend(model, make_press("adakv(snapkv:compression_ratio=0.5)"))
    with pytest.raises(LongctxError) as raised:
        _gate(backend)
    said = str(raised.value)
    assert re.match(r"--kv-press AdaKVPress\(press=SnapKVPress\(compression_ratio=0\.5, .*\): kvpress failed to read \d+ "
                    r"tokens through the context it compressed: Could not find fake keys", said) and "\n" not in said


def test_ratio_zero_equals_no_press(model):
    import kvpress

    plain = _gate(_backend(model))
    for name in ("SnapKVPress", "KnormPress", "StreamingLLMPress"):
        pressed = _gate(_backend(model, getattr(kvpress, name)(compression_ratio=0.0)))
        gap = max(abs(a - b) for g, p in zip(pressed, plain) for a, b in zip(g, p))
        assert gap <= 2e-5, (name, gap)  # float noise of another split of the same computation, no more


def _streaming_by_hand(model, context: int, positions, sinks: int, ratio: float) -> list[float]:
    kept = int(context * (1 - ratio))

    def prefill(cache, ids):
        model(input_ids=ids, past_key_values=cache)  # a plain cache, then every layer cut by hand
        for layer in cache.layers:
            keep = torch.cat([torch.arange(sinks), torch.arange(context - (kept - sinks), context)])
            layer.keys = layer.keys[:, :, keep]  # [batch, kv heads, kept, head_dim]
            layer.values = layer.values[:, :, keep]
    return _by_hand(model, context, positions, prefill)


def test_streaming_llm_equals_sinks_and_window_cut_by_hand(model):
    import kvpress

    gate = _gate(_backend(model, kvpress.StreamingLLMPress(compression_ratio=0.75, n_sink=4)))
    for (context, positions), got in zip(QUESTIONS, gate):
        np.testing.assert_allclose(got, _streaming_by_hand(model, context, positions, 4, 0.75), rtol=0, atol=2e-5)


def test_streaming_llm_loses_evidence_it_evicted(model):
    """Tokens between the sinks and the recent window are gone. With one layer, what the cache keeps
    of a token is that token alone, so changing the evicted ones changes nothing a question reads,
    where without the press every read moves. (With more layers the kept entries still carry some
    of the evicted tokens, mixed in by the lower layers' attention while the context was read.)"""
    import kvpress

    global IDS
    one_layer = tiny_decoder(model.config.model_type, VOCAB, layers=1)
    original = IDS.copy()
    press = kvpress.StreamingLLMPress(compression_ratio=0.75, n_sink=4)
    try:
        before, plain_before = _gate(_backend(one_layer, press)), _gate(_backend(one_layer))
        IDS = original.copy()
        IDS[10:40] = (IDS[10:40] + 1) % VOCAB  # evicted in every context: of 70, 17 kept, 4 sinks and the last 13
        after, plain_after = _gate(_backend(one_layer, press)), _gate(_backend(one_layer))
    finally:
        IDS = original
    assert after == before
    assert min(abs(a - b) for g, p in zip(plain_before, plain_after) for a, b in zip(g, p)) > 0


def test_a_context_too_short_for_the_press_is_read_uncompressed_and_said(model):
    """SnapKV scores a context by its last window_size (64) tokens and asserts the context is longer: a context
    of 20 tokens (a control read near an item's start) is read exact, as without the press, and the engine
    hands back why and how long, which the pipeline turns into a note; the long context beside it is compressed."""
    import kvpress

    questions = ((20, (22, 30)), (90, (91, 119)))
    backend = _backend(model, kvpress.SnapKVPress(compression_ratio=0.5))
    gate, plain = _gate(backend, questions), _gate(_backend(model), questions)
    np.testing.assert_allclose(gate[0], plain[0], rtol=0, atol=2e-5)
    assert max(abs(a - b) for a, b in zip(gate[1], plain[1])) > 1e-3
    from pytest_longctx.scoring import engine

    assert engine.run_reads(backend, [_plan(questions)]).uncompressed == {
        "Query length 20 should be greater than the window size 64": [20]}


def test_describe_names_the_press_and_keeps_its_answers_apart(model):
    import kvpress

    plain = _backend(model).describe()
    snap = _backend(model, kvpress.SnapKVPress(compression_ratio=0.5)).describe()
    snap_more = _backend(model, kvpress.SnapKVPress(compression_ratio=0.75)).describe()
    assert snap["kv_press"] == "SnapKVPress(compression_ratio=0.5, window_size=64, kernel_size=5)"
    assert "kv_press" not in plain and "kvpress" in snap["versions"]
    assert len({plain["config"], snap["config"], snap_more["config"]}) == 3
    assert plain["weights"] == snap["weights"]


# ------------------------------------------------------------------ naming a press


def test_press_names_and_arguments():
    _needs_kvpress()
    from pytest_longctx.backends.hf.presses import describe_press, make_press

    assert describe_press(make_press("snapkv:compression_ratio=0.5")) == describe_press(make_press("SnapKVPress:compression_ratio=0.5"))
    streaming = make_press("streaming_llm:compression_ratio=0.75,n_sink=4")
    assert (type(streaming).__name__, streaming.compression_ratio, streaming.n_sink) == ("StreamingLLMPress", 0.75, 4)
    assert type(make_press("knorm")).__name__ == "KnormPress"
    assert type(make_press("tova")).__name__ == "TOVAPress"
    assert type(make_press("expected_attention")).__name__ == "ExpectedAttentionPress"
    assert type(make_press("kvpress:KnormPress:compression_ratio=0.25")).__name__ == "KnormPress"


@pytest.mark.parametrize("spec, said", [
    ("nosuch", "no press 'nosuch' in kvpress; known: "),
    ("snapkv:ratio=0.5", "SnapKVPress takes no argument 'ratio'; it takes compression_ratio, window_size, kernel_size"),
    ("snapkv:compression_ratio", "is not key=value"),
    ("snapkv:compression_ratio=1.5", "SnapKVPress refuses its arguments"),
    ("nosuch_module_x:Press", "cannot import nosuch_module_x:Press"),
    ("decoding", "compresses while an answer is generated"),
    ("adakv", "AdaKVPress wraps another press: name it in parentheses, e.g. ada_kv(snapkv:compression_ratio=0.5)"),
    ("composed", "ComposedPress wraps other presses: name them in parentheses"),
    ("adakv(knorm;tova)", "AdaKVPress wraps one press, not 2"),
    ("snapkv(knorm)", "SnapKVPress wraps no press, not 1"),
    ("adakv(nosuch)", "no press 'nosuch' in kvpress"),
    ("chunk(knorm):chunk=3", "ChunkPress takes no argument 'chunk'; it takes press, chunk_length"),
])
def test_bad_press_is_one_line(spec, said):
    _needs_kvpress()
    from pytest_longctx.backends.hf.presses import make_press

    with pytest.raises(LongctxError) as raised:
        make_press(spec)
    assert said in str(raised.value) and "\n" not in str(raised.value)


def test_a_press_on_another_backend_is_one_line():
    from pytest_longctx.backends import load_backend

    with pytest.raises(LongctxError, match="run in the transformers backend"):
        load_backend("x.gguf", "llama.cpp", kv_press="knorm")


# ------------------------------------------------------------------ where questions start (no kvpress needed)


def test_questions_start_at_the_query_the_message_or_the_sentence():
    text = "Ada took ticket 48213. Rain fell. Which ticket did Ada take? Ada took ticket 48213. More."
    answer = text.index(" 48213.", 30)
    assert text[query_start(text, answer):answer] == "Which ticket did Ada take? Ada took ticket"
    assert text[sentence_start(text, text.index("fell")):].startswith("Rain fell.")
    chat = "<|im_start|>system\nrules<|im_end|>\n<|im_start|>assistant\nrun grep"
    assert chat[message_start(chat, chat.index("grep")):].startswith("<|im_start|>assistant")
    assert message_start(text, 40) is None
