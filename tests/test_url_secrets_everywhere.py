"""No secret of a URL, anywhere: secrets drawn by hypothesis (holding the characters that once ended the masking
early: ``|``, ``"``, ``{``, and every separator a URL has) are put where a URL enters (the model, the data, a
server, blame's original, a tokenizer, the reference scores) and fed through every front end: the plugin with
every report asked for and a CI step summary, ``longctx score``, ``blame``, ``compress-bench`` and ``compare``.
Every line printed and every file the run wrote is then searched for the secret. A secret is two distinctive
cores around the drawn characters, so a secret masked only up to one of them still shows its second core. A secret
in a query value has its ``&`` and ``#`` written ``%26`` and ``%23``, as a URL must: unescaped, they end the value by
the URL's own rule (what follows is another parameter, or the fragment).

One run through a stand-in vLLM server goes the whole way (the model scored, every report written with its name);
the others stop where the value is refused, having written what they write then (a gate that did not run writes its
reports too)."""
from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kit.needs import needs

from pytest_longctx.cli import main

CORES = ("Qz7kPvA", "Wm4xTrB")
# what once ended the masking early, and every separator of a URL
NASTY = '|"{}<>\\^`\' &;=?#@/:%[],+!$*()~'
secrets = st.tuples(st.text(alphabet=NASTY, max_size=4), st.text(alphabet=NASTY, min_size=1, max_size=4),
                    st.text(alphabet=NASTY, max_size=4)).map(lambda p: f"{p[0]}{CORES[0]}{p[1]}{CORES[1]}{p[2]}")



def q(secret: str) -> str:
    """``secret`` as a query value holds it."""
    return secret.replace("%", "%25").replace("&", "%26").replace("#", "%23")


# where a secret enters: (front end, how its value is made from the secret)
PLACES = [
    ("plugin", lambda s: ["--longctx-model", f"https://hub.example/org/model?token={q(s)}"]),
    ("plugin", lambda s: ["--longctx-model", f"http://user:{s}@hub.example/org/model"]),
    ("plugin", lambda s: ["--longctx-backend", "vllm-server", "--longctx-model", f"gpu-box:8000/v1?api_key={q(s)}"]),
    ("plugin", lambda s: ["--longctx-backend", "vllm-server", "--longctx-model", "org/tiny",
                          "--longctx-backend-option", f"base-url=http://u:{s}@127.0.0.1:9/v1"]),
    ("plugin", lambda s: ["--longctx-backend", "vllm-server", "--longctx-model", "http://127.0.0.1:9/v1",
                          "--longctx-backend-option", f"tokenizer=https://hub.example/t?token={q(s)}"]),
    ("plugin", lambda s: ["--longctx-data", f"https://u:{s}@hub.example/d?token={q(s)}"]),
    ("plugin", lambda s: ["--longctx-blame", "--longctx-blame-reference", f"https://hub.example/o?sig={q(s)}"]),
    ("score", lambda s: ["--model", f"https://hub.example/org/model?token={q(s)}"]),
    ("score", lambda s: ["--model", "tiny", "--data", f"https://u:{s}@hub.example/d?token={q(s)}"]),
    ("score", lambda s: ["--model", "tiny", "--reference_scores", f"https://hub.example/ref.json.gz?sig={q(s)}"]),
    ("score", lambda s: ["--backend", "vllm-server", "--model", f"gpu-box:8000/v1?api_key={q(s)}"]),
    ("blame", lambda s: ["--reference", f"https://hub.example/o?token={q(s)}", "--model", "tiny"]),
    ("blame", lambda s: ["--reference", "tiny", "--model", f"http://user:{s}@hub.example/c"]),
    ("compress-bench", lambda s: ["--model", f"https://hub.example/org/model?token={q(s)}"]),
    ("compress-bench", lambda s: ["--data", f"https://u:{s}@hub.example/d?token={q(s)}"]),
    ("compare", lambda s: [f"https://hub.example/base.json.gz?sig={q(s)}", "results.json"]),
]


def leaked(texts: list[str]) -> list[str]:
    return [core for core in CORES if any(core in text for text in texts)]


def written(folder: Path) -> list[str]:
    """Every file under ``folder``, as text (a gzipped one too: it is searched as bytes decoded leniently)."""
    import gzip

    found = []
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            raw = path.read_bytes()
            if raw[:2] == b"\x1f\x8b":
                raw = gzip.decompress(raw)
            found.append(raw.decode("utf-8", errors="replace"))
    return found


@settings(max_examples=48, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(secret=secrets, place=st.sampled_from(range(len(PLACES))))
def test_no_secret_in_any_line_or_file_of_any_front_end(secret, place, pytester, tiny_data, tiny_baseline,
                                                         tmp_path_factory, capsys):
    front, made = PLACES[place]
    folder = tmp_path_factory.mktemp("run")
    if front == "plugin":
        pytester._monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(folder / "step.md"))
        args = ["-p", "no:cacheprovider", "-p", "no:xdist", "--longctx-model=tiny", f"--longctx-data={tiny_data}",
                f"--longctx-baseline={tiny_baseline}", f"--longctx-out={folder / 'results.json'}",
                f"--junitxml={folder / 'junit.xml'}", f"--longctx-markdown={folder / 'summary.md'}",
                f"--longctx-html={folder / 'report.html'}", *made(secret)]
        result = pytester.runpytest_inprocess(*args)
        printed = [result.stdout.str(), result.stderr.str()]
    else:
        outputs = {"score": ["--out", str(folder / "out.json")], "blame": ["--out", str(folder / "blame.json")],
                   "compress-bench": ["--out", str(folder / "bench.json")], "compare": ["--out", str(folder / "report.txt")]}
        common = {"score": ["--data", str(tiny_data), "--quiet"], "blame": ["--data", str(tiny_data), "--quiet"],
                  "compress-bench": ["--limit", "1", "--quiet"], "compare": []}
        main([front, *common[front], *made(secret), *outputs[front]])
        captured = capsys.readouterr()
        printed = [captured.out, captured.err]
    assert leaked(printed + written(folder)) == [], (front, made(secret))


@needs("httpx", "torch", install="pip install 'pytest-longctx[vllm-server]' torch")
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(password=secrets)
def test_a_server_gated_the_whole_way_shows_its_password_nowhere(password, pytester, tiny_data, tiny_baseline,
                                                                  tiny_loaded, tmp_path_factory):
    """The model scored through a stand-in vLLM server whose URL carries the password: every report is written, each
    naming the model, and none shows the password."""
    from kit.vllm_standin import StandIn, serve

    standin = StandIn(tiny_loaded[0].model)
    url, httpd = serve(standin)
    folder = tmp_path_factory.mktemp("served")
    pytester._monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(folder / "step.md"))
    try:
        result = pytester.runpytest_inprocess(
            "-p", "no:cacheprovider", "-p", "no:xdist", "--longctx-backend=vllm-server",
            f"--longctx-model={url.replace('http://', f'http://user:{password}@')}", f"--longctx-data={tiny_data}",
            f"--longctx-baseline={tiny_baseline}", "--longctx-mode=ids", f"--longctx-out={folder / 'results.json'}",
            f"--junitxml={folder / 'junit.xml'}", f"--longctx-markdown={folder / 'summary.md'}",
            f"--longctx-html={folder / 'report.html'}")
    finally:
        httpd.shutdown()
    texts = [result.stdout.str(), result.stderr.str(), *written(folder)]
    assert leaked(texts) == []
    if standin.prompts:  # the URL was one httpx connects with: the model was read, and every report names its server
        reports = [folder / name for name in ("results.json", "junit.xml", "summary.md", "report.html", "step.md")]
        assert all("127.0.0.1" in path.read_text() for path in reports), texts[0][-2000:]
