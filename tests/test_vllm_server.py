"""The vllm-server backend against a stand-in vLLM server (tests/kit/vllm_standin.py): an HTTP server on loopback that
speaks vLLM's completions protocol (token-id prompts, ``logprobs``, ``logprob_token_ids``,
``return_tokens_as_token_ids``, cached-token counts) and answers each request with one full
forward pass of a tiny transformers model. The reads must equal a naive full-logits pass;
the failures of a network dependency (a server that errs, dies, re-tokenizes, serves another
model, wants a key) must each be one line. The real vLLM server is tested in
tests/test_vllm.py, in vLLM's own environment."""
from __future__ import annotations

import json

import numpy as np
import pytest
from kit.models import tiny_qwen3
from kit.needs import needs
from kit.ports import free_port
from kit.vllm_standin import StandIn, serve

from pytest_longctx.backends import load_backend
from pytest_longctx.backends.vllm import endpoint as endpoint_module
from pytest_longctx.backends.vllm import fleet as fleet_module
from pytest_longctx.backends.vllm import server as server_module
from pytest_longctx.data.load import load_dataset
from pytest_longctx.errors import LongctxError
from pytest_longctx.scoring import engine
from pytest_longctx.scoring.cache import ScoreCache
from pytest_longctx.scoring.modes import plan_reads

pytestmark = needs("httpx", "torch", "transformers", install="pip install 'pytest-longctx[vllm-server]' torch")
VOCAB = 1000


@pytest.fixture(scope="module")
def model():
    return tiny_qwen3(VOCAB, seed=3)


@pytest.fixture
def standin(model):
    made = StandIn(model)
    url, httpd = serve(made)
    made.url = url
    yield made
    httpd.shutdown()


@pytest.fixture(autouse=True)
def no_waiting(monkeypatch):
    monkeypatch.setattr(endpoint_module, "RETRY_WAIT", 0.0)


def connect(standin, *options):
    # generous: the stand-in computes every request on CPUs a test run may share with others
    backend, _ = load_backend(standin.url, backend="vllm-server", options=["timeout=120", *options])
    return backend


def naive(model, ids, positions, tokens, top_k):
    """One full forward pass, full-vocabulary log-softmax in float64."""
    import torch

    with torch.no_grad():
        logp = torch.log_softmax(model(torch.tensor([ids])).logits[0].double(), dim=-1)
    top1 = [int(logp[p].argmax()) for p in positions]
    asked = [[float(logp[p, t]) for t in wanted] for p, wanted in zip(positions, tokens)]
    ranked = [sorted(range(VOCAB), key=lambda t, p=p: (-float(logp[p, t]), t))[:top_k] for p in positions]
    return top1, asked, [(r, [float(logp[p, t]) for t in r]) for p, r in zip(positions, ranked)]


def test_reads_through_a_server_equal_one_full_forward_pass(standin, model):
    backend = connect(standin)
    ids = np.random.default_rng(0).integers(0, VOCAB, 300).tolist()
    positions, tokens = [120, 40, 299, 7], [[5, ids[121]], [9], [1, 2, 3], []]
    got = backend.read(ids, positions, tokens, top_k=16)
    top1, asked, top = naive(model, ids, positions, tokens, 16)
    assert got.top1 == top1
    assert np.allclose(np.concatenate(got.logprobs), np.concatenate([a for a in asked if a]), atol=1e-5)
    assert [t[0] for t in got.top] == [t[0] for t in top]
    assert np.allclose(np.concatenate([t[1] for t in got.top]), np.concatenate([t[1] for t in top]), atol=1e-5)
    # the read furthest on goes first, alone (it fills the prefix cache); then the others; then the
    # follow-ups for the ids the top 16 did not hold
    assert standin.prompts[0] == tuple(ids[:300])
    assert sorted(map(len, standin.prompts[1:4])) == [8, 41, 121]
    assert backend.traffic.requests == len(standin.prompts) and backend.traffic.cached_tokens > 0
    assert "requests in flight" in backend.status()


def test_the_engine_through_a_server_scores_as_the_transformers_backend(standin, data_dir, qwen_tokenizer):
    from pytest_longctx.backends.hf import TransformersBackend

    wide = tiny_qwen3(len(qwen_tokenizer), seed=3)  # the data's ids are Qwen3.5's
    standin.model = wide
    plans = plan_reads(load_dataset(data_dir, sets=["facts", "tool_calls"], lengths=["2k"], limit=1), "ids")
    served = [s for item in engine.run(connect(standin), plans, top_k=16) for t in item if t for s in t]
    local = [s for item in engine.run(TransformersBackend(wide), plans, top_k=16) for t in item if t for s in t]
    assert len(served) == len(local) > 20
    assert [s.top1 for s in served] == [s.top1 for s in local]
    assert max(abs(a.logprob - b.logprob) for a, b in zip(served, local)) < 1e-4
    assert all(a.top[0] == b.top[0] for a, b in zip(served, local))


def test_a_failing_request_is_tried_again_and_a_server_that_stays_down_is_one_line(standin):
    backend = connect(standin, "retries=2")
    standin.errors = 2
    assert len(backend.read(list(range(40)), [39], [[1]]).top1) == 1
    standin.errors = 3
    with pytest.raises(LongctxError, match=r"did not answer /completions after 3 tries \(HTTP 503"):
        backend.read(list(range(40)), [39], [[1]])


def test_a_server_that_dies_half_way_keeps_what_was_scored_in_the_cache(standin, data_dir, tmp_path, qwen_tokenizer):
    plans = plan_reads(load_dataset(data_dir, sets=["facts"], lengths=["2k"], limit=3), "ids")
    standin.model = tiny_qwen3(len(qwen_tokenizer), seed=3)
    backend = connect(standin, "retries=0", "reuse-scores=tiny@1")  # a served model's answers are kept only so
    whole = engine.run(backend, plans)
    backend.describe()  # the identity probe (a request of its own) is sent once, before
    needed = len(standin.prompts) - 1
    standin.prompts.clear()
    standin.answer_limit = needed // 2 + 1  # the first request's reads, and a few of the next
    with pytest.raises(LongctxError, match="did not answer /completions after 1 tries.*in the score cache"):
        engine.run(backend, plans, cache=ScoreCache.for_backend(backend, tmp_path))
    kept = ScoreCache.for_backend(backend, tmp_path).db.execute("SELECT COUNT(*) FROM answers").fetchone()[0]
    assert kept >= 1
    standin.prompts.clear()
    standin.answer_limit = None
    again = ScoreCache.for_backend(backend, tmp_path)
    assert engine.run(backend, plans, cache=again) == whole
    assert again.hits == kept and 0 < len(standin.prompts) < needed


def test_a_server_that_reads_other_ids_than_were_sent_is_one_line(standin):
    backend = connect(standin)
    standin.retokenize = True
    with pytest.raises(LongctxError, match="read other token ids than were sent"):
        backend.read(list(range(40)), [39], [[1]])


def test_not_a_vllm_server_is_one_line(standin):
    standin.plain_tokens = True
    with pytest.raises(LongctxError, match="not as token_id:N"):
        connect(standin).read(list(range(40)), [39], [[1]])


def test_the_served_model_is_checked(standin):
    with pytest.raises(LongctxError, match=r"does not serve 'org/other'; it serves org/tiny"):
        connect(standin, "served-model=org/other")
    standin.names = ["org/tiny", "org/tiny-int4"]
    with pytest.raises(LongctxError, match="serves org/tiny, org/tiny-int4: name one with --backend-option served-model"):
        connect(standin)
    backend, _ = load_backend("org/tiny-int4", backend="vllm-server", options=[f"base-url={standin.url}"])
    assert backend.describe()["served_model"] == "org/tiny-int4"


@pytest.mark.parametrize("max_model_len", [100, 150])  # beyond it, and exactly it: no room for the generated token
def test_a_prompt_that_leaves_no_room_within_max_model_len_is_one_line_before_any_request(standin, max_model_len):
    standin.max_model_len = max_model_len
    backend = connect(standin)
    with pytest.raises(LongctxError, match="prompt of 150 tokens and the token vLLM generates after it, beyond vLLM's "
                                           f"max_model_len of {max_model_len}"):
        backend.read(list(range(200)), [149], [[1]])
    assert standin.prompts == []
    # max_model_len - 1 prompt tokens and the generated one fit
    assert len(backend.read(list(range(200)), [max_model_len - 2], [[1]]).top1) == 1


def test_the_api_key_comes_from_the_environment_and_goes_nowhere(standin, monkeypatch):
    standin.key = "s3cret-key"
    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    with pytest.raises(LongctxError, match="HTTP 401.*environment variable VLLM_API_KEY"):
        connect(standin)
    with pytest.raises(LongctxError, match="never taken from the command line"):
        connect(standin, "api-key=s3cret-key")
    monkeypatch.setenv("MY_KEY", "s3cret-key")
    backend = connect(standin, "api-key-env=MY_KEY")
    assert "s3cret-key" not in json.dumps(backend.describe())
    assert backend.read(list(range(40)), [39], [[1]]).top1


def test_under_a_declared_name_the_identity_probe_still_tells_other_weights(standin):
    first = connect(standin, "reuse-scores=tiny@1").describe()
    assert first == connect(standin, "reuse-scores=tiny@1").describe()
    assert first["weights"] == "declared:tiny@1"
    standin.model = tiny_qwen3(VOCAB, seed=4)
    assert connect(standin, "reuse-scores=tiny@1").describe()["config"] != first["config"]


def test_the_local_tokenizer_is_checked_against_the_servers(standin, qwen_tokenizer, tmp_path):
    folder = tmp_path / "tok"
    qwen_tokenizer.save_pretrained(folder)
    standin.tokenize = lambda text: qwen_tokenizer(text, add_special_tokens=False)["input_ids"]
    assert connect(standin, f"tokenizer={folder}").tokenizer is not None
    assert connect(standin).tokenizer is None  # the server's is the data's: the ids mode
    standin.tokenize = lambda text: qwen_tokenizer(text, add_special_tokens=False)["input_ids"][1:]
    with pytest.raises(LongctxError, match="tokenizes a check text into other ids than the server's tokenizer"):
        connect(standin, f"tokenizer={folder}")


def test_a_server_whose_tokenizer_is_not_the_datas_is_one_line_naming_tokenizer_before_any_read(standin, qwen_tokenizer):
    standin.tokenize = lambda text: list(text.encode())  # another vocabulary, as a SmolLM2 server's is
    with pytest.raises(LongctxError) as raised:
        connect(standin)
    message = str(raised.value)
    assert "serves org/tiny with another tokenizer than the data's" in message and "Qwen3.5" in message
    assert "--backend-option tokenizer=FOLDER_OR_HUB_ID" in message and "\n" not in message
    assert standin.prompts == []


def test_a_read_that_depends_on_the_prefix_cache_is_one_line_naming_the_causes_and_the_options(standin, model, monkeypatch):
    # the first request computes the prompt whole; the follow-up for the ids outside its top 16
    # has its blocks from the cache, and this stand-in then samples another token (as W8A8 did)
    monkeypatch.setattr(standin, "cache_shift", 1)  # the stand-in serves the module's other tests after this one
    ids = np.random.default_rng(1).integers(0, VOCAB, 100).tolist()
    with pytest.raises(LongctxError) as raised:
        connect(standin).read(ids, [99], [list(range(40))], top_k=16)
    message = str(raised.value)
    assert "\n" not in message and [len(p) for p in standin.prompts[-2:]] == [100, 100]
    (top1,), _, _ = naive(model, ids, [99], [[]], 1)
    assert f"different tokens ({', '.join(map(str, sorted({top1, (top1 + 1) % VOCAB})))}) for the same prompt" in message
    for named in ("batch-variant kernel", "prefix cache", "max-num-seqs=1", "max-num-batched-tokens=32", "block-size=32",
                  "--max-num-seqs 1 --max-num-batched-tokens 32 --block-size 32"):
        assert named in message


@pytest.mark.parametrize("options, message", [
    (["retries=-1"], "retries=-1: must be at least 0"),
    (["concurrency=0"], "concurrency=0: must be at least 1"),
    (["max-logprobs=many"], "max-logprobs=many: expected a whole number"),
    (["cache-type-k=q8_0"], "has no option 'cache-type-k'"),
])
def test_bad_options_are_one_line(standin, options, message):
    with pytest.raises(LongctxError, match=message):
        connect(standin, *options)


def test_a_model_name_without_a_server_is_one_line():
    with pytest.raises(LongctxError, match="needs the server: --model http://HOST:PORT/v1"):
        load_backend("org/tiny", backend="vllm-server")


def test_the_progress_line_shows_requests_in_flight_and_cache_hits(standin, data_dir, qwen_tokenizer):
    import io

    from pytest_longctx.progress import labelled

    standin.model = tiny_qwen3(len(qwen_tokenizer), seed=3)
    plans = plan_reads(load_dataset(data_dir, sets=["facts"], lengths=["2k"], limit=1), "ids")
    stream = io.StringIO()
    backend = connect(standin)
    engine.run(backend, plans, progress=labelled("longctx", stream))
    last = stream.getvalue().strip().splitlines()[-1]
    assert last.startswith("longctx: 1/1 items") and "tokens/s" in last
    assert f"0 requests in flight, {len(standin.prompts)} answered" in last
    assert f"{backend.traffic.cached_tokens:,} of {backend.traffic.prompt_tokens:,} prompt tokens from vLLM's prefix cache" in last


# ------------------------------------------------------------------ the score cache of a served model


def facts_plans(data_dir):
    return plan_reads(load_dataset(data_dir, sets=["facts"], lengths=["2k"], limit=1), "ids")


def nudge_past_the_probe(model) -> None:
    """A small change in place, where the identity probe does not look: the embeddings of every
    token after the probe's ids (the probe's answer stays the same to the last bit)."""
    import torch

    torch.manual_seed(5)
    with torch.no_grad():
        weights = model.get_input_embeddings().weight
        weights[max(endpoint_module.PROBE) + 1:] += 0.05 * torch.randn_like(weights[max(endpoint_module.PROBE) + 1:])


def test_weights_changed_in_place_behind_the_same_name_are_read_again_not_served_from_the_cache(
        standin, data_dir, qwen_tokenizer, tmp_path):
    standin.model = tiny_qwen3(len(qwen_tokenizer), seed=3)
    plans = facts_plans(data_dir)
    before = connect(standin)
    old = engine.run(before, plans, cache=ScoreCache.for_backend(before, tmp_path))
    nudge_past_the_probe(standin.model)
    standin.prompts.clear()
    after = connect(standin)
    again = engine.run(after, plans, cache=ScoreCache.for_backend(after, tmp_path))
    assert [p for p in standin.prompts if p != endpoint_module.PROBE], "served from the cache, not read"
    assert again != old and again == engine.run(after, plans)


def test_answers_are_reused_for_a_served_model_only_under_the_name_the_user_declares(
        standin, data_dir, qwen_tokenizer, tmp_path):
    standin.model = tiny_qwen3(len(qwen_tokenizer), seed=3)
    plans = facts_plans(data_dir)
    backend = connect(standin, "reuse-scores=tiny@1")
    first = engine.run(backend, plans, cache=ScoreCache.for_backend(backend, tmp_path))
    warnings: list[str] = []
    standin.prompts.clear()
    backend = connect(standin, "reuse-scores=tiny@1")
    cache = ScoreCache.for_backend(backend, tmp_path, warn=warnings.append)
    assert engine.run(backend, plans, cache=cache) == first and cache.misses == 0 and cache.hits > 0
    assert standin.prompts == [endpoint_module.PROBE]  # the probe, checked beside the name; no read
    assert '"weights": "declared:tiny@1"' in cache.identity
    assert len(warnings) == 1 and "on your word" in warnings[0] and "'tiny@1'" in warnings[0]
    standin.prompts.clear()
    renamed = connect(standin, "reuse-scores=tiny@2")
    assert engine.run(renamed, plans, cache=ScoreCache.for_backend(renamed, tmp_path, warn=warnings.append)) == first
    assert len(standin.prompts) > 1  # another name: read again
    with pytest.raises(LongctxError, match="reuse-scores=: the value is empty"):
        connect(standin, "reuse-scores=")


# ------------------------------------------------------------------ credentials in the server's URL


def with_credentials(url: str) -> str:
    return url.replace("http://", "http://user:s3cret@")


def test_credentials_in_the_url_are_in_no_error_line(standin):
    refused = with_credentials(standin.url)
    down = with_credentials(f"http://127.0.0.1:{free_port()}/v1")
    for url, options, expected in [(refused, ["served-model=org/other"], "does not serve 'org/other'"),
                                   (down, ["retries=0"], "did not answer /models")]:
        with pytest.raises(LongctxError) as raised:
            load_backend(url, backend="vllm-server", options=["timeout=5", *options])
        line = str(raised.value)
        assert expected in line and "http://***@127.0.0.1:" in line and "s3cret" not in line, line
    for options, expected in [([f"base_url={refused}"], "has no option 'base_url'"),
                              ([f"base-url={refused}", f"base-url={refused}"], "given twice"),
                              ([refused], "expected KEY=VALUE")]:
        with pytest.raises(LongctxError) as raised:
            load_backend("org/tiny", backend="vllm-server", options=options)
        line = str(raised.value)
        assert expected in line and "http://***@127.0.0.1:" in line and "s3cret" not in line, line


def test_credentials_in_the_url_are_in_neither_the_results_json_nor_the_scores_file(standin, data_dir, qwen_tokenizer,
                                                                                     tmp_path, capsys):
    import gzip

    from pytest_longctx.cli.main import main

    standin.model = tiny_qwen3(len(qwen_tokenizer), seed=3)
    out, saved = tmp_path / "results.json", tmp_path / "scores.json.gz"
    code = main(["score", "--model", with_credentials(standin.url), "--backend", "vllm-server", "--data", str(data_dir),
                 "--sets", "facts", "--lengths", "2k", "--limit", "1", "--out", str(out), "--save_scores", str(saved),
                 "--quiet"])
    printed = capsys.readouterr()
    assert code == 0, printed.err
    shown = standin.url.replace("http://", "http://***@")
    for text in (out.read_text(), gzip.decompress(saved.read_bytes()).decode(), printed.out + printed.err):
        assert "s3cret" not in text and "user:" not in text
    assert json.loads(out.read_text())["meta"]["model"] == shown
    assert json.loads(gzip.decompress(saved.read_bytes()))["meta"]["model"] == shown


# ------------------------------------------------------------------ a key in the server's URL

REFUSED_QUERY = ("a vLLM server's URL takes no query string or fragment (?…, #…): give it as http://HOST:PORT/v1; an API "
                 "key goes in the environment variable {}, never on the command line (it would land in shell histories "
                 "and CI logs)")
DEFAULT_VARIABLE = "VLLM_API_KEY (or another, named with --backend-option api-key-env=NAME)"


@pytest.mark.parametrize(("query", "shown"), [("?api_key=sk-s3cret", "?api_key=***"), ("?x=1&sig=s3cret", "?x=***&sig=***"),
                                              ("#token=s3cret", "#token=***"), ("?s3cret", "?***")])
@pytest.mark.parametrize("given", ["--model ", "--backend-option base-url="])
def test_a_key_in_the_servers_url_is_refused_before_any_request_and_shown_nowhere(standin, given, query, shown):
    """Was: the key was sent as part of the path (``/v1?api_key=…/models``) and the 404 line showed it."""
    url = with_credentials(standin.url) + query
    model, options = (url, []) if given == "--model " else ("org/tiny", [f"base-url={url}"])
    with pytest.raises(LongctxError) as raised:
        load_backend(model, backend="vllm-server", options=["timeout=5", *options])
    assert str(raised.value) == (f"{given}{standin.url.replace('http://', 'http://***@')}{shown}: "
                                 + REFUSED_QUERY.format(DEFAULT_VARIABLE))
    assert standin.paths == []


def test_the_refusal_names_the_variable_the_options_name_and_the_backend_refuses_too(standin):
    with pytest.raises(LongctxError) as raised:
        load_backend(f"{standin.url}?api_key=s3cret", backend="vllm-server", options=["api-key-env=MY_KEY"])
    assert str(raised.value) == f"--model {standin.url}?api_key=***: " + REFUSED_QUERY.format("MY_KEY")
    with pytest.raises(LongctxError, match=r"^the server's URL .*/v1\?api_key=\*\*\*: a vLLM server's URL takes no query"):
        server_module.VllmServerBackend(server_module.ServerOptions(base_url=f"{standin.url}?api_key=s3cret"), name="x")
    assert standin.paths == []


def test_a_key_in_the_servers_url_is_in_no_line_report_or_file(standin, pytester, data_dir, capsys):
    """``longctx score`` and the plugin, with every report asked for: the key is nowhere."""
    from pytest_longctx.cli.main import main
    from pytest_longctx.reports.format import markdown_text

    url = f"{standin.url}?api_key=sk-s3cret"
    assert main(["score", "--model", url, "--backend", "vllm-server", "--data", str(data_dir), "--quiet"]) == 2
    printed = capsys.readouterr()
    assert printed.err.splitlines() == [f"longctx: error: --model {standin.url}?api_key=***: "
                                        + REFUSED_QUERY.format(DEFAULT_VARIABLE)]
    files = {name: pytester.path / name for name in ("results.json", "junit.xml", "summary.md", "report.html")}
    result = pytester.runpytest_inprocess(
        "-p", "no:cacheprovider", "-p", "no:xdist", f"--longctx-model={url}", "--longctx-backend=vllm-server",
        f"--longctx-data={data_dir}", "--longctx-sets=facts", "--longctx-lengths=2k", "--longctx-limit=1",
        f"--longctx-baseline={pytester.path / 'baseline.json.gz'}", "--longctx-update-baseline",
        f"--longctx-out={files['results.json']}", f"--junitxml={files['junit.xml']}",
        f"--longctx-markdown={files['summary.md']}", f"--longctx-html={files['report.html']}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR  # the model does not load: one line, the run ends
    out = result.stdout.str() + result.stderr.str()
    assert f"--model {standin.url}?api_key=***: a vLLM server's URL takes no query string" in out
    written = {name: path.read_text() for name, path in files.items()}  # each is written, the run failing or not
    assert all(f"{standin.url}?api_key=***" in written[name] for name in ("junit.xml", "report.html"))
    assert markdown_text(f"{standin.url}?api_key=***") in written["summary.md"]  # with markdown's escapes, read as the same text
    assert "s3cret" not in out + "".join(written.values()) and standin.paths == []


# ------------------------------------------------------------------ answers of another shape


@pytest.mark.parametrize("path, body, expected", [
    ("/v1/models", "ready", "/v1/models answered a JSON string where vLLM answers a JSON object"),
    ("/v1/models", {"data": ["org/tiny"]}, "/v1/models answered without a list of models under 'data', each with an 'id'"),
    ("/version", [], "/version answered a JSON array where vLLM answers a JSON object"),
])
def test_an_answer_of_another_shape_at_the_start_is_one_line_naming_the_endpoint(standin, path, body, expected):
    standin.shapes[path] = body
    with pytest.raises(LongctxError) as raised:
        connect(standin)
    assert str(raised.value).startswith(standin.url.removesuffix("/v1") + expected), str(raised.value)
    assert "factory failed" not in str(raised.value)


def test_a_completion_of_another_shape_is_one_line_and_leaves_nothing_in_flight(standin):
    backend = connect(standin)
    standin.shapes["/v1/completions"] = {"choices": [{"logprobs": {"tokens": ["token_id:1"], "token_logprobs": [-0.5],
                                                                   "top_logprobs": [["token_id:1"]]}}]}
    with pytest.raises(LongctxError) as raised:
        backend.read(list(range(40)), [39], [[1]])
    assert str(raised.value).startswith(f"{standin.url}/completions answered a completion in another shape than vLLM's "
                                        "(expected choices[0].logprobs with tokens, token_logprobs and top_logprobs")
    assert backend.traffic.in_flight == 0
    assert backend.status().startswith("0 requests in flight")


def test_a_tokenize_answer_of_another_shape_is_one_line(standin):
    standin.tokenize = lambda text: text
    with pytest.raises(LongctxError, match="/tokenize answered without a list of token ids under 'tokens'"):
        connect(standin)


# ------------------------------------------------------------------ closing


@pytest.fixture
def made(monkeypatch):
    """Every HTTP client and thread pool the backend makes."""
    import httpx

    made: dict[str, list] = {"clients": [], "pools": []}

    class Client(httpx.Client):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made["clients"].append(self)

    class Pool(fleet_module.ThreadPoolExecutor):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made["pools"].append(self)

    monkeypatch.setattr(httpx, "Client", Client)
    monkeypatch.setattr(fleet_module, "ThreadPoolExecutor", Pool)
    return made


def closed(made) -> bool:
    def shut(pool) -> bool:
        try:
            pool.submit(int).result()
        except RuntimeError:  # cannot schedule new futures after shutdown
            return True
        return False

    return bool(made["clients"]) and all(c.is_closed for c in made["clients"]) and all(map(shut, made["pools"]))


@pytest.mark.parametrize("refusal", ["served-model=org/other", "tokenizer"])
def test_a_refused_server_closes_its_client_and_its_pool(standin, made, qwen_tokenizer, refusal):
    if refusal == "tokenizer":
        standin.tokenize = lambda text: list(text.encode())
    with pytest.raises(LongctxError):
        connect(standin, *([refusal] if "=" in refusal else []))
    assert closed(made)


def test_longctx_score_closes_the_backend(standin, made, data_dir, qwen_tokenizer, tmp_path):
    from pytest_longctx.cli.main import main

    standin.model = tiny_qwen3(len(qwen_tokenizer), seed=3)
    assert main(["score", "--model", standin.url, "--backend", "vllm-server", "--data", str(data_dir), "--sets", "facts",
                 "--lengths", "2k", "--limit", "1", "--quiet"]) == 0
    assert len(made["clients"]) == 1 and closed(made)


def test_the_plugin_closes_the_backend_it_loaded_and_shows_no_credentials(standin, made, pytester, data_dir,
                                                                          qwen_tokenizer):
    standin.model = tiny_qwen3(len(qwen_tokenizer), seed=3)
    import gzip

    baseline, out = pytester.path / "baseline.json.gz", pytester.path / "results.json"
    junit, markdown = pytester.path / "junit.xml", pytester.path / "summary.md"
    result = pytester.runpytest_inprocess(
        "-p", "no:cacheprovider", "-p", "no:xdist", f"--longctx-model={with_credentials(standin.url)}",
        "--longctx-backend=vllm-server", f"--longctx-data={data_dir}", "--longctx-sets=facts", "--longctx-lengths=2k",
        "--longctx-limit=1", f"--longctx-baseline={baseline}", "--longctx-update-baseline", f"--longctx-out={out}",
        f"--junitxml={junit}", f"--longctx-markdown={markdown}")
    assert result.ret == 0, result.outlines[-20:]
    assert len(made["clients"]) == 1 and closed(made)
    shown = standin.url.replace("http://", "http://***@")
    assert f"longctx gate: {shown} against itself" in result.stdout.str()
    written = (result.stdout.str() + result.stderr.str() + out.read_text() + gzip.decompress(baseline.read_bytes()).decode()
               + junit.read_text() + markdown.read_text())
    assert "s3cret" not in written and "user:" not in written
    assert json.loads(out.read_text())["meta"]["model"] == shown


@pytest.fixture
def sessions_folder(tmp_path):
    """Two agent sessions of the builtin faithfulness builder, without their long tool outputs."""
    from kit.items import write_split

    from pytest_longctx.data.builtin.faithfulness import build_faithfulness

    rows = [{**row, "messages": [m for m in row["messages"] if len(m["content"]) < 120]}
            for row in build_faithfulness(seed=0, limit=2)]
    write_split(tmp_path / "sessions", "faithfulness", "train", rows)
    return tmp_path / "sessions"


def test_credentials_in_the_url_are_in_neither_the_compressor_reports_nor_their_files(
        standin, sessions_folder, qwen_tokenizer, pytester, capsys):
    from pytest_longctx.cli.main import main

    standin.model = tiny_qwen3(len(qwen_tokenizer), seed=3)
    standin.tokenize = lambda text: qwen_tokenizer(text, add_special_tokens=False)["input_ids"]
    qwen_tokenizer.save_pretrained(pytester.path / "tokenizer")
    model, tokenizer = with_credentials(standin.url), f"tokenizer={pytester.path / 'tokenizer'}"
    bench = pytester.path / "bench.json"
    assert main(["compress-bench", "--model", model, "--backend", "vllm-server", "--backend-option", tokenizer, "--data",
                 str(sessions_folder), "--methods", "identity", "--cache-dir", "off", "--quiet", "--out", str(bench)]) == 0
    printed = capsys.readouterr()
    out, junit = pytester.path / "results.json", pytester.path / "junit.xml"
    result = pytester.runpytest_inprocess(
        "-p", "no:cacheprovider", "-p", "no:xdist", "--longctx-compressor=identity", f"--longctx-model={model}",
        "--longctx-backend=vllm-server", f"--longctx-backend-option={tokenizer}", f"--longctx-data={sessions_folder}",
        f"--longctx-out={out}", f"--junitxml={junit}", "--longctx-cache-dir=off")
    assert result.ret == 0, result.outlines[-20:]
    assert f"Layer B read by {standin.url.replace('http://', 'http://***@')}" in result.stdout.str()
    written = (printed.out + printed.err + bench.read_text() + result.stdout.str() + result.stderr.str() + out.read_text()
               + junit.read_text())
    assert "s3cret" not in written and "user:" not in written
