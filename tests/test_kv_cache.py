"""Quantized KV caches of transformers through the transformers backend (``--longctx-backend-option
kv-cache=fp8``; docs/metrics.md#quantized-kv-caches): each read's context read into the cache in one
call, its question then read through it. Checked against transformers' own ``QuantizedCache`` run by
hand in one call per question, on tiny random models; the gate reads its questions in chunks of 8
tokens and as a prefix tree, so neither may change a number."""
from __future__ import annotations

import gzip
import json

import numpy as np
import pytest
from kit.models import save_model, tiny_decoder, tiny_qwen3
from kit.needs import needs

from pytest_longctx.data.records import FactItem
from pytest_longctx.errors import LongctxError
from pytest_longctx.scoring.reads import ItemReads, Read, TargetReads

pytestmark = needs("torch", "transformers", install='pip install -e ".[hf]"')

VOCAB = 97
IDS = np.random.default_rng(7).integers(0, VOCAB, 120)
# (context, read positions): two questions after a context of 70 tokens share one context, one after 90 has its own
QUESTIONS = ((70, (74, 80, 95)), (70, (71, 88)), (90, (91, 119)))


@pytest.fixture(scope="module", params=["llama", "qwen3"])
def model(request):
    return tiny_decoder(request.param, VOCAB)


def _backend(model, spec: str | None = None):
    from pytest_longctx.backends.hf import TransformersBackend

    backend = TransformersBackend(model, chunk_size=8)  # several forward calls per question: chunks must not matter
    if spec is not None:
        backend.use_kv_cache(spec)
    return backend


def _gate(backend) -> list[list[float]]:
    from pytest_longctx.scoring import engine

    item = FactItem(id="tiny", text="", targets=())
    targets = tuple(TargetReads(tuple(Read(0, p, int(IDS[p]), context=context) for p in positions))
                    for context, positions in QUESTIONS)
    (scores,) = engine.run(backend, [ItemReads("facts", "tiny", item, (IDS,), targets)])
    return [[s.logprob for s in target] for target in scores]


def _by_hand(model, context: int, positions, make_cache) -> list[float]:
    """log p(IDS[p]) at each position: the context read into ``make_cache()`` in one call, the question
    then read in one call through it."""
    import torch

    cache = make_cache()
    with torch.inference_mode():
        model.model(input_ids=torch.tensor(IDS[:context])[None], past_key_values=cache)
        out = model(input_ids=torch.tensor(IDS[context:max(positions)])[None], past_key_values=cache)
        logp = torch.log_softmax(out.logits[0].float(), dim=-1)  # [question, vocab]
    return [float(logp[p - 1 - context, IDS[p]]) for p in positions]


def test_the_gate_reads_as_transformers_fp8_cache_run_by_hand(model):
    from transformers import DynamicCache, QuantizedCache

    gate = _gate(_backend(model, "fp8"))
    for (context, positions), got in zip(QUESTIONS, gate):
        expected = _by_hand(model, context, positions, lambda: QuantizedCache("fp8", model.config))
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5)
    plain = _gate(_backend(model))
    for (context, positions), got in zip(QUESTIONS, plain):  # and without it, a plain cache
        np.testing.assert_allclose(got, _by_hand(model, context, positions, DynamicCache), rtol=0, atol=1e-5)
    assert max(abs(a - b) for g, p in zip(gate, plain) for a, b in zip(g, p)) > 1e-4  # fp8 did move the reads


def test_reads_under_the_fp8_cache_use_no_deprecated_argument(model):
    """Every read under the fp8 cache warned that past_key_values is deprecated (removed in transformers
    5.40, inside the range the package allows): the backend passes the cache by the keyword the model's
    forward takes."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _gate(_backend(model, "fp8"))
    assert [str(w.message) for w in caught if "past_key_values" in str(w.message)] == []


def test_describe_names_the_cache_and_keeps_its_answers_apart(model):
    plain, fp8 = _backend(model).describe(), _backend(model, "fp8").describe()
    assert fp8["kv_cache"] == "quantized KV cache fp8" and "kv_cache" not in plain
    assert fp8["config"] != plain["config"] and fp8["weights"] == plain["weights"]


@pytest.mark.parametrize(("spec", "said"), [
    ("int4", "--backend-option kv-cache=int4: expected fp8 (float8 e4m3 keys and values, one scale per layer taken from "
             "the context); it takes no arguments"),
    ("fp8:nbits=4", "--backend-option kv-cache=fp8:nbits=4: expected fp8"),
    ("quanto:nbits=4", "--backend-option kv-cache=quanto:nbits=4: not gated: transformers' quanto cache keeps the last "
                       "residual_length tokens exact"),
])
def test_bad_specs_and_the_windowed_caches_are_one_line(model, spec, said):
    with pytest.raises(LongctxError, match="^" + said.replace("(", r"\(").replace(")", r"\)")):
        _backend(model, spec)


def test_a_press_beside_it_and_blame_under_it_are_one_line(model, tmp_path):
    from pytest_longctx.backends import load_backend
    from pytest_longctx.backends.hybrids import load_models

    model.save_pretrained(tmp_path / "tiny")
    with pytest.raises(LongctxError, match=r"^--kv-press snapkv and --backend-option kv-cache=fp8: a press compresses a plain "
                                           r"cache; give one of them$"):
        load_backend(str(tmp_path / "tiny"), options=["kv-cache=fp8"], kv_press="snapkv")
    with pytest.raises(LongctxError, match=r"^--backend-option kv-cache: blame compares the parts of two models' weights, and "
                                           r"quantized KV cache fp8 changes how a model keeps its context"):
        load_models("hf", str(tmp_path / "tiny"), str(tmp_path / "tiny"), options=["kv-cache=fp8"])


def test_the_gate_under_an_fp8_cache_against_the_plain_baseline(qwen_tokenizer, data_dir, tmp_path, pytester):
    """The plugin end to end: a baseline of the plain model, then the same model under the fp8 cache against
    it; the summary's first line and the results' meta name the cache, and every group of reads drifts where the plain model against its own
    baseline drifts exactly 0 (the test data's first two facts items have near and control reads at 2k, no far ones)."""
    folder = save_model(tmp_path / "tiny", tiny_qwen3(len(qwen_tokenizer)), qwen_tokenizer)
    common = ["-p", "no:cacheprovider", "--longctx-only", f"--longctx-model={folder}", f"--longctx-data={data_dir}",
              "--longctx-sets=facts", "--longctx-lengths=2k", "--longctx-limit=2", f"--longctx-baseline={tmp_path / 'b.json.gz'}",
              "--longctx-cache-dir=off"]
    assert pytester.runpytest_inprocess(*common, "--longctx-update-baseline").ret == 0
    out = tmp_path / "fp8.json"
    result = pytester.runpytest_inprocess(*common, "--longctx-backend-option=kv-cache=fp8", f"--longctx-out={out}")
    assert result.ret in (0, 1), result.stdout.str()[-2000:]  # a verdict, PASS or FAIL, not an error
    assert f"longctx gate: {folder} (KV cache fp8), float32 on cpu against baseline" in result.stdout.str()
    body = json.loads(out.read_text())
    assert body["meta"]["kv_cache"] == "quantized KV cache fp8"
    plain = tmp_path / "plain.json"
    pytester.runpytest_inprocess(*common, f"--longctx-out={plain}")
    def kl(results: dict) -> list[float]:  # each group's mean KL_K of each row, where it has reads
        return [d[g]["kl"] for d in results["drift"].values() for g in ("far", "near", "control") if d[g]["reads"]]

    assert kl(json.loads(plain.read_text())) and set(kl(json.loads(plain.read_text()))) == {0.0}  # itself: exactly none
    assert kl(body) and min(kl(body)) > 0, body["drift"]  # under the cache every group drifts


def test_a_baseline_made_under_the_fp8_cache_is_named_as_compressed_in_every_report(qwen_tokenizer, data_dir, tmp_path, pytester):
    """A baseline made under kv-cache=fp8 passed the same setup with drift 0.000 and no word, and a plain model
    gated on it was compared with a compressed reference silently. Now the record of what was judged goes into
    the baseline, and the one comparison of the two records names the compressed baseline in the terminal, the
    markdown, the HTML, the junit properties and the results JSON; the same setup is said to be compared with itself."""
    import xml.etree.ElementTree as ET

    folder = save_model(tmp_path / "tiny", tiny_qwen3(len(qwen_tokenizer)), qwen_tokenizer)
    baseline = tmp_path / "b.json.gz"
    common = ["-p", "no:cacheprovider", "--longctx-only", f"--longctx-model={folder}", f"--longctx-data={data_dir}",
              "--longctx-sets=facts", "--longctx-lengths=2k", "--longctx-limit=2", f"--longctx-baseline={baseline}",
              "--longctx-cache-dir=off"]
    assert pytester.runpytest_inprocess(*common, "--longctx-update-baseline", "--longctx-backend-option=kv-cache=fp8").ret == 0
    stored = json.loads(gzip.decompress(baseline.read_bytes()))["meta"]["judged"]
    assert stored["kv_cache"] == "quantized KV cache fp8" and stored["compressed"] == ["KV cache fp8"]
    compressed = "the baseline was itself made under compression (KV cache fp8)"
    for setting, candidate, itself in ((["--longctx-backend-option=kv-cache=fp8"], "KV cache fp8", True), ([], "", False)):
        reports = {name: tmp_path / f"{candidate or 'plain'}.{name}" for name in ("md", "html", "xml", "json")}
        result = pytester.runpytest_inprocess(*common, *setting, f"--longctx-markdown={reports['md']}",
                                              f"--longctx-html={reports['html']}", f"--junitxml={reports['xml']}",
                                              f"--longctx-out={reports['json']}")
        assert result.ret == 0, result.stdout.str()[-3000:]  # the same numbers, or a plain model next to an fp8 cache: a verdict
        head = next(line for line in result.stdout.lines if line.startswith("longctx gate: "))
        shown = f" ({candidate})" if candidate else ""
        assert head.startswith(f"longctx gate: {folder}{shown}, float32 on cpu against baseline {baseline}: "
                               f"{folder} (KV cache fp8), float32 on cpu")
        assert ("(the baseline's own model and setup" in head) is itself
        warned = f"longctx: warning: {compressed}: the candidate ({candidate or 'uncompressed'}) is judged against a compressed reference"
        assert warned in result.stdout.str()
        for name in ("md", "html"):
            text = reports[name].read_text()
            assert "(KV cache fp8)" in text and compressed in text, name
        properties = {p.get("name"): p.get("value") for p in ET.parse(reports["xml"]).iter("property")}
        assert properties["longctx.baseline_compressed"] == "KV cache fp8"
        assert properties["longctx.kv_cache"] == ("quantized KV cache fp8" if itself else "")
        assert json.loads(reports["json"].read_text())["meta"]["judged"]["compressed"] == ([candidate] if itself else [])
