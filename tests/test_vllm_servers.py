"""Several vLLM servers read as one (backends/vllm/fleet.py), against stand-in servers on loopback
(tests/kit/vllm_standin.py), not a fleet of real vLLM servers: what two servers read must be, figure for
figure, what one server reads; one that stops answering mid-run must leave the others to read the
same figures, and say so; none left, a mixed fleet, a server given twice or an empty entry is one line."""
from __future__ import annotations

import json

import pytest
from kit.models import tiny_qwen3
from kit.needs import needs
from kit.vllm_standin import StandIn, serve

from pytest_longctx.backends import load_backend
from pytest_longctx.backends.vllm import endpoint as endpoint_module
from pytest_longctx.cli.main import main
from pytest_longctx.data.load import load_dataset
from pytest_longctx.errors import LongctxError
from pytest_longctx.scoring import engine
from pytest_longctx.scoring.modes import plan_reads

pytestmark = needs("httpx", "torch", "transformers", install="pip install 'pytest-longctx[vllm-server]' torch")


@pytest.fixture(scope="module")
def wide(qwen_tokenizer):
    return tiny_qwen3(len(qwen_tokenizer), seed=3)  # the data's ids are Qwen3.5's


@pytest.fixture
def standins(wide):
    """Stand-in servers of the same model, each on a loopback port of its own, made on demand."""
    made = []

    def make(model=wide, **settings) -> StandIn:
        standin = StandIn(model, **settings)
        standin.url, httpd = serve(standin)
        made.append(httpd)
        return standin

    yield make
    for httpd in made:
        httpd.shutdown()


@pytest.fixture(autouse=True)
def no_waiting(monkeypatch):
    monkeypatch.setattr(endpoint_module, "RETRY_WAIT", 0.0)


def connect(*urls: str, options=()):
    backend, _ = load_backend(",".join(urls), backend="vllm-server", options=["timeout=120", *options])
    return backend


def with_credentials(url: str) -> str:
    return url.replace("http://", "http://user:s3cret@")


def score(capsys, tmp_path, data_dir, model: str, out: str) -> tuple[dict, str]:
    """``longctx score`` over two facts and two tool-call items: its results JSON and what it printed."""
    path = tmp_path / out
    code = main(["score", "--model", model, "--backend", "vllm-server", "--backend-option", "retries=0", "--data",
                 str(data_dir), "--sets", "facts,tool_calls", "--lengths", "2k", "--limit", "2", "--out", str(path),
                 "--quiet"])
    printed = capsys.readouterr()
    assert code == 0, printed.err
    return json.loads(path.read_text()), printed.out + printed.err


FIGURES = ("rows", "row_sources", "sets", "scores")  # every figure of the results JSON


def test_two_servers_give_exactly_the_figures_of_one(standins, data_dir, tmp_path, capsys):
    one, two, three = standins(), standins(), standins()
    alone, _ = score(capsys, tmp_path, data_dir, one.url, "one.json")
    fleet, printed = score(capsys, tmp_path, data_dir, f"{with_credentials(two.url)},{with_credentials(three.url)}",
                           "two.json")
    assert alone["scores"] and {key: fleet[key] for key in FIGURES} == {key: alone[key] for key in FIGURES}
    # both servers read: the requests were spread, not sent to the first alone
    reads = [[p for p in standin.prompts if p != endpoint_module.PROBE] for standin in (two, three)]
    assert all(reads) and sum(map(len, reads)) == len([p for p in one.prompts if p != endpoint_module.PROBE])
    shown = [standin.url.replace("http://", "http://***@") for standin in (two, three)]
    assert fleet["meta"]["model"] == ",".join(shown) and fleet["meta"]["servers"] == shown
    assert "servers_lost" not in fleet["meta"] and "servers" not in alone["meta"]
    assert fleet["meta"]["config"] == alone["meta"]["config"]  # one model's identity: the score cache is shared
    assert "s3cret" not in json.dumps(fleet) + printed and "warning" not in printed


def test_a_server_stopped_mid_run_leaves_the_other_to_read_the_same_figures_and_says_so(standins, data_dir, tmp_path,
                                                                                        capsys):
    one, two, three = standins(), standins(), standins()
    alone, _ = score(capsys, tmp_path, data_dir, one.url, "one.json")
    three.answer_limit = 6  # its probe and a few reads, then it drops every connection (as a server that went down)
    fleet, printed = score(capsys, tmp_path, data_dir, f"{two.url},{three.url}", "two.json")
    assert {key: fleet[key] for key in FIGURES} == {key: alone[key] for key in FIGURES}
    warnings = [line for line in printed.splitlines() if line.startswith("longctx: warning:")]
    assert len(warnings) == 1, printed
    assert warnings[0].startswith(f"longctx: warning: the vLLM server at {three.url} stopped answering ({three.url} did "
                                  "not answer /completions after 1 tries (RemoteProtocolError")
    assert f"{two.url} read its requests and every later one, so the run was read on 1 of 2 servers" in warnings[0]
    assert fleet["meta"]["servers"] == [two.url, three.url]
    assert [lost.split(" did not answer")[0] for lost in fleet["meta"]["servers_lost"]] == [three.url]


def test_every_server_stopped_is_one_line_naming_each_and_what_was_not_read(standins, data_dir):
    two, three = standins(), standins()
    backend = connect(two.url, three.url, options=["retries=0"])
    two.answer_limit, three.answer_limit = 3, 4  # past the probe each answered
    plans = plan_reads(load_dataset(data_dir, sets=["facts"], lengths=["2k"], limit=1), "ids")
    with pytest.raises(LongctxError) as raised:
        engine.run(backend, plans)
    line = str(raised.value)
    assert "\n" not in line and line.startswith("every vLLM server stopped answering (")
    assert f"{two.url} did not answer /completions after 1 tries" in line and f"{three.url} did not answer" in line
    assert "requests of the read in progress were not answered (prompts of " in line and "start the servers again" in line
    assert backend.traffic.in_flight == 0


def test_a_mixed_fleet_is_refused_before_any_read_naming_the_odd_server(standins, qwen_tokenizer):
    usual, other, odd = standins(), standins(), standins(model=tiny_qwen3(len(qwen_tokenizer), seed=4))
    with pytest.raises(LongctxError) as raised:
        connect(usual.url, odd.url, other.url)
    line = str(raised.value)
    assert "the vLLM servers are not alike" in line and f"{odd.url} differs in identity probe's answer" in line
    assert f"from {usual.url}, as the others" in line and "\n" not in line
    renamed = standins(names=("org/tiny-int4",), max_model_len=2048)
    with pytest.raises(LongctxError, match=rf"{renamed.url} differs in served model \(org/tiny-int4 against org/tiny\), root "
                                           r"\(/models/org/tiny-int4 against /models/org/tiny\), max_model_len \(2048 against "
                                           r"4096\)"):
        connect(usual.url, other.url, renamed.url)
    for standin in (usual, other, odd, renamed):
        assert [p for p in standin.prompts if p != endpoint_module.PROBE] == []


@pytest.mark.parametrize(("given", "expected"), [
    ("{a},{a}/", "{a}/ is given twice; give each server once"),
    ("{a},,{b}", "an entry is empty; give the servers' URLs separated by single commas"),
    ("{a},", "an entry is empty"),
    ("{a},org/tiny", "org/tiny is not a server's URL; with several servers each is one"),
])
@pytest.mark.parametrize("option", ["--model ", "--backend-option base-url="])
def test_a_bad_list_of_servers_is_one_line_before_any_request(standins, given, expected, option):
    a, b = standins(), standins()
    urls = given.format(a=with_credentials(a.url), b=with_credentials(b.url))
    model, options = (urls, []) if option == "--model " else ("org/tiny", [f"base-url={urls}"])
    with pytest.raises(LongctxError) as raised:
        load_backend(model, backend="vllm-server", options=options)
    line = str(raised.value)
    shown = urls.replace("user:s3cret@", "***@")
    assert line.startswith(f"{option}{shown}: ") and expected.format(a=a.url.replace("http://", "http://***@")) in line
    assert "s3cret" not in line and a.paths == b.paths == []


def test_several_servers_by_base_url_with_the_served_name(standins):
    two, three = standins(names=("org/tiny", "org/draft")), standins(names=("org/tiny", "org/draft"))
    backend, _ = load_backend("org/tiny", backend="vllm-server", options=[f"base-url={two.url},{three.url}"])
    assert backend.describe()["servers"] == [two.url, three.url] and backend.describe()["served_model"] == "org/tiny"
    assert backend.read(list(range(300)), [299, 120, 40], [[1], [2], [3]]).top1
    assert backend.status().endswith(", 2 of 2 servers")
