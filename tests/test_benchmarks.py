"""Every script under benchmarks/ run as a user runs it, on the smallest shape that takes its code
path: the tests' hand-built items (a few hundred tokens each), one item or two, the tiny models
where the script takes any model, SmolLM2 where the study is about SmolLM2. Each run must exit 0,
print no ``error`` cell and no ratio that is not a number (nan, inf); where a script states a
figure that holds on any input (the engine reads exactly the prefix-tree bound, llama.cpp splits
without flash attention give the same bits) that is checked too. The scripts had no CI before, and
bench_engine's counting session printed ``error`` in every engine column while the script exited 0.

Minutes, not seconds: CI runs this module in a step of its own (.ci/run) with
LONGCTX_TEST_BENCHMARKS=1, where a library a script needs that does not import fails instead of
skipping; without it the runs skip, so the default suite stays within its budget (it only checks
that every script has a shape here or a run elsewhere)."""
from __future__ import annotations

import bz2
import gzip
import json
import os
import re
import struct
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pytest
from kit import browser
from kit.models import save_model, tiny_llama
from kit.needs import needs, skip_unless

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "benchmarks"
REQUIRED_BY = "LONGCTX_TEST_BENCHMARKS"
# scripts run elsewhere in CI, so not again here
ELSEWHERE = {
    "bench_gpu.py": "tests/test_bench_gpu.py runs its CPU shape in the default suite and checks its reads",
    "llmcompressor_variants.py": ".ci/run runs it in llm-compressor's own environment; "
                                 "tests/test_llmcompressor_checkpoints.py reads what it makes",
}

RUNS = pytest.mark.skipif(os.environ.get(REQUIRED_BY) != "1", reason=f"minutes of benchmark runs: CI runs them with {REQUIRED_BY}=1")


def hf(*more: str, extras: str = "hf") -> pytest.MarkDecorator:
    return needs("torch", "transformers", *more, install=f'pip install -e ".[{extras}]"', required_by=REQUIRED_BY)


LLAMA = hf("llama_cpp", "gguf", extras="hf,llama")
QUANTIZERS = hf("torchao", "bitsandbytes", "compressed_tensors", "auto_round",
                extras="hf,torchao,bitsandbytes,compressed-tensors,auto-round")


@dataclass(frozen=True)
class Shape:
    """One run of ``script`` with ``args``; ``{name}`` in an argument is the path the fixture
    ``name`` gives (``{tmp}``: the test's own folder). ``check``, when set, is handed the run's
    stdout and the fixtures' paths."""

    script: str
    args: tuple[str, ...]
    check: Callable[[str, dict[str, Path]], None] | None = None
    skip: Callable[[], str | None] = field(default=lambda: None)
    kit: bool = False  # it imports the tests' helpers: run with tests/ on PYTHONPATH, as its docstring says


def cells(out: str, first: str, nth: int = 0) -> list[dict[str, str]]:
    """The rows of the ``nth`` table whose header starts with ``first``, as {column: cell};
    columns are told apart by the dashes under the header (format.table's layout)."""
    lines = out.splitlines()
    at = [n for n, line in enumerate(lines[:-1]) if line.startswith(first) and lines[n + 1].startswith("-")][nth]
    spans = [m.span() for m in re.finditer(r"-+", lines[at + 1])]
    names = [lines[at][a:b + 1].strip() for a, b in spans]
    rows = []
    for n, line in enumerate(lines[at + 2:], at + 2):
        if not line.strip() or lines[n + 1:n + 2] and lines[n + 1].startswith("-"):  # the end, or the next table's header
            break
        rows.append({name: line[a:b + 1].strip() for name, (a, b) in zip(names, spans)})
    return rows


def sequential_rows(out: str, _: dict[str, Path]) -> None:
    """exact gives every test off's outcome forwarding no more tokens than off; pytest itself agreed."""
    rows = cells(out, "candidate")
    assert [row["candidate"] for row in rows] == ["kv-int4"], out
    for row in rows:
        assert row["exact"] == row["off"] and row["confident"] in ("PASS", "FAIL"), row
        exact = int(row["exact tokens"].split()[0].replace(",", ""))
        assert 0 < exact <= int(row["off tokens"].replace(",", "")), row
        mean, fewest, most = map(int, re.findall(r"(\d+)%", row["exact, 3 random orders: mean (fewest-most)"]))
        assert fewest <= mean <= most <= 100, row  # every order gave off's outcomes: the script asserts it
    assert re.search(r"^pytest itself on kv-int4, no score cache: .* every test's outcome the same$", out, re.M), out


def shard_rows(out: str, _: dict[str, Path]) -> None:
    """Every split gave the whole run's outcomes (the script checks each test, and under off every figure); the
    shards forwarded the whole run's tokens and the shared prefixes again, no fewer."""
    rows = cells(out, "run")
    assert [row["run"] for row in rows] == ["whole", "1 shard", "2 shards"], out
    whole = int(rows[0]["tokens forwarded"].replace(",", ""))
    for row in rows[1:]:
        again = int(row["prefixes read again"].replace(",", ""))
        assert int(row["tokens forwarded"].replace(",", "")) == whole + again and row["outcome"] == "the whole run's", row
    assert rows[1]["prefixes read again"] == "0", rows[1]  # one shard is the whole run


def ladder_rows(out: str, _: dict[str, Path]) -> None:
    """Each rung under either order had its own run's verdict and test outcomes (the script checks each test), and under
    the digest order read exactly the tokens of its own run."""
    rows = cells(out, "candidate")
    assert [row["candidate"] for row in rows] == ["smollm2-135m", "int8"], out
    for row in rows:
        assert row["own run"] == row["rung (digest)"] == row["rung (drift)"] in ("PASS", "FAIL"), row
        assert row["tokens"] == row["tokens (digest)"] and int(row["tokens"].replace(",", "")) > 0, row
    runs = {row["run"]: int(row["tokens"].replace(",", "")) for row in cells(out, "run")}
    assert runs["one ladder (digest)"] == runs["separate runs"] and runs["one ladder (drift)"] > 0, runs
    assert "every rung: its own run's outcome for every test, and its verdicts" in out, out


def engine_rows(out: str, _: dict[str, Path]) -> None:
    """The engine runs each distinct prefix once: exactly the prefix tree's token count."""
    rows = cells(out, "set ")
    assert [row["set"] for row in rows] == ["2k facts", "2k tool_calls", "2k rules (en+cs+de)"], out
    for row in rows:
        assert row["engine tokens"] == row["lower bound"] and float(row["engine/bound"]) == 1.0, row
        assert float(row["tokens ratio"].rstrip("x")) >= 1.0, row  # the naive way runs every sequence whole
        for ratio in ("time ratio", "memory ratio"):  # measured, so only sane here: speed lives in the benchmark
            assert float(row[ratio].rstrip("x")) > 0, row


def backend_rows(out: str, _: dict[str, Path]) -> None:
    speed = cells(out, "set ")
    assert [row["backend"] for row in speed] == ["hf", "llama.cpp"], out
    assert all(int(row["tokens"].replace(",", "")) > 0 and float(row["s"]) > 0 for row in speed), out
    accuracy = cells(out, "set ", nth=1)
    assert len(accuracy) == 1 and int(accuracy[0]["targets"]) > 0, out
    assert 0 <= float(accuracy[0]["hf (engine)"]) <= 1 and 0 <= float(accuracy[0]["llama.cpp (engine)"]) <= 1, out


def kl_topk_rows(out: str, _: dict[str, Path]) -> None:
    """The docstring's claim: the gate's KL_16 of a weight variant is this script's within 1e-3."""
    found = re.search(r"int8: the gate's KL_16 per read within (\S+) \(relative\)", out)
    assert found and float(found.group(1)) < 1e-3, out


def gguf_rows(out: str, _: dict[str, Path]) -> None:
    assert re.search(r"^F32: .* holds F32 100 %$", out, re.M) and re.search(r"^Q8_0: .* holds Q8_0 100 %", out, re.M), out


def planted_rows(out: str, _: dict[str, Path]) -> None:
    assert len(re.findall(r"^found ", out, re.M)) == 3 and "MISSED" not in out, out


def blame_rows(out: str, _: dict[str, Path]) -> None:
    """Both searches ran on the planted case, the 8 parts measured both ways by the exhaustive one, and the
    ratios are numbers."""
    rows = {row["search"]: row for row in cells(out, "search")}
    assert set(rows) == {"exhaustive", "default"} and rows["default"]["ran as"] in {"groups", "cumulative"}, out
    assert int(rows["exhaustive"]["models scored"]) >= 2 * 8, out  # every part both ways
    assert float(rows["default"]["scorings"]) > 0, out
    assert re.search(r"^default / exhaustive: models \d+\.\d+, wall time \d+\.\d+$", out, re.M), out


def split_rows(out: str, _: dict[str, Path]) -> None:
    """Without flash attention llama.cpp gives the same bits however the sequence is split."""
    off = [row for row in cells(out, "file") if row["flash attention"] == "off"]
    assert off and all(float(row["largest |delta log p|"]) == 0 for row in off), out


def agreement_rows(out: str, _: dict[str, Path]) -> None:
    """llama.cpp on the F32 file and transformers on the same weights differ by rounding only."""
    against = {row["against hf F32"]: row for row in cells(out, "against hf F32")}
    assert set(against) == {"llama.cpp F32", "llama.cpp Q4_1"}, out
    assert float(against["llama.cpp F32"]["mean |delta log p|"]) < 0.01, out


def written_folders(out: str, paths: dict[str, Path]) -> None:
    folders = {line.split(": ")[0]: Path(line.split(": ")[1]) for line in out.splitlines() if line.strip()}
    assert list(folders) == ["int8", "int4-g64", "int2-g64", "window512"], out
    window = json.loads((folders["window512"] / "config.json").read_text())
    assert (window["model_type"], window["sliding_window"]) == ("mistral", 512)


def quantized_folders(out: str, paths: dict[str, Path]) -> None:
    folders = [Path(line) for line in out.splitlines() if line.strip()]
    assert [f.name for f in folders] == ["torchao-int8", "torchao-int4-g64", "torchao-int8-dynamic", "autoround-g64", "bnb-nf4",
                                         "bnb-int8", "ct-w4a16-g64", "ct-w8a8"], out
    for folder in folders:
        assert "quantization_config" in json.loads((folder / "config.json").read_text()), folder


def said_what_each_is(out: str, paths: dict[str, Path]) -> None:
    """The table ends with what the gate says each candidate is, the model itself first."""
    assert out.splitlines()[-2:] == ["the model itself: none", "torchao-int8: torchao int8 weight-only"], out


def held_out(out: str, paths: dict[str, Path]) -> None:
    """torchao's int8 weights stay close to the float model on prose: the issue's probe measured 0.0031 nats."""
    found = re.fullmatch(r"torchao-int8: KL (\S+) nats, same top-1 (\S+)", out.splitlines()[-1])
    assert found and float(found[1]) < 0.02 and float(found[2]) > 0.9, out


def picture(out: str, paths: dict[str, Path]) -> None:
    head = (paths["tmp"] / "report.png").read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", head[16:24]) == (1200, 1700)


def articles(out: str, paths: dict[str, Path]) -> None:
    """The dump holds the first shipped article in wikitext with markup, a redirect, a talk
    page and a short article: the article's paragraphs come back, nothing else."""
    with gzip.open(paths["tmp"] / "articles.jsonl.gz", "rt", encoding="utf-8") as lines:
        found = [json.loads(line) for line in lines]
    assert found == [first_article()]


def code_files(out: str, paths: dict[str, Path]) -> None:
    """The shipped files again, for every project installed at the version they were taken from."""
    shipped_folder = ROOT / "pytest_longctx" / "data" / "builtin" / "sources" / "code"

    def records(folder: Path) -> dict[str, list[dict]]:
        with gzip.open(folder / "files.jsonl.gz", "rt", encoding="utf-8") as lines:
            found: dict[str, list[dict]] = {}
            for line in lines:
                record = json.loads(line)
                found.setdefault(record["project"], []).append(record)
        return found

    made, shipped = records(paths["tmp"] / "code"), records(shipped_folder)
    assert set(made) == set(shipped)
    same = [p for p in made if made[p][0]["version"] == shipped[p][0]["version"]]
    assert all(made[p] == shipped[p] for p in same), [p for p in same if made[p] != shipped[p]]
    print(f"collect_code: {len(same)} of {len(made)} projects at the shipped version, their files as shipped")


def distribution_missing() -> str | None:
    from importlib.metadata import PackageNotFoundError, distribution

    from collect_code import PROJECTS

    missing = []
    for name in PROJECTS:
        try:
            distribution(name)
        except PackageNotFoundError:
            missing.append(name)
    return f"not installed: {', '.join(missing)}" if missing else None


DATA = ("--data", "{data}")
TWO_K = ("--lengths", "2k", "--limit", "1")
SHAPES = [
    pytest.param(Shape("bench_engine.py", ("--model", "tiny", *DATA, *TWO_K), engine_rows), marks=hf(), id="bench_engine"),
    pytest.param(Shape("bench_engine.py", ("--single", "2048")), marks=hf(), id="bench_engine-single"),
    pytest.param(Shape("bench_engine.py", ("--backends", "hf,llama.cpp", *DATA, *TWO_K, "--sets", "facts"), backend_rows),
                 marks=LLAMA, id="bench_engine-backends"),
    pytest.param(Shape("gguf_variants.py", ("--out", "{variants}", "--only", "F32", "Q8_0"), gguf_rows), marks=LLAMA,
                 id="gguf_variants"),
    pytest.param(Shape("variants.py", ("--model", "{tiny}", "--out", "{tmp}/variants", "--only", "int8", "int4-g64",
                                       "int2-g64", "window512"), written_folders), marks=hf(), id="variants"),
    pytest.param(Shape("quantized_variants.py", ("--model", "{tiny}", "--out", "{tmp}/quantized"), quantized_folders),
                 marks=QUANTIZERS, id="quantized_variants"),
    pytest.param(Shape("gate_validity.py", ("--baseline", "{baseline}", *TWO_K, "--sets", "tool_calls", "--only",
                                            "kv-int4", "--variants", "{variants}", "--results", "{tmp}/results", "--",
                                            "--longctx-data={data}")), marks=hf(), id="gate_validity"),
    pytest.param(Shape("gate_validity.py", ("--backend", "checkpoints", "--checkpoints", "{tool_made}", "--baseline", "{baseline}",
                                            *TWO_K, "--sets", "tool_calls", "--results", "{tmp}/results", "--",
                                            "--longctx-data={data}"), said_what_each_is), marks=QUANTIZERS,
                 id="gate_validity-checkpoints"),
    pytest.param(Shape("gate_validity.py", ("--backend", "llama.cpp", *TWO_K, "--sets", "facts", "--only",  # the F32 file alone
                                            "--variants", "{variants}", "--results", "{tmp}/results", "--",
                                            "--longctx-data={data}")), marks=LLAMA, id="gate_validity-llama.cpp"),
    pytest.param(Shape("bench_sequential.py", ("--baseline", "{baseline}", *DATA, "--lengths", "2k", "--limit", "2", "--sets",
                                               "facts,tool_calls", "--only", "kv-int4", "--real", "kv-int4", "--variants",
                                               "{variants}", "--orders", "3"), sequential_rows),
                 marks=hf(), id="bench_sequential"),
    pytest.param(Shape("bench_shards.py", ("--baseline", "{baseline}", *DATA, *TWO_K, "--counts", "1,2"), shard_rows),
                 marks=hf(), id="bench_shards"),
    pytest.param(Shape("bench_ladder.py", ("--baseline", "{baseline}", *DATA, *TWO_K, "--sets", "facts", "--only",
                                           "the model itself", "int8", "--variants", "{variants}"), ladder_rows),
                 marks=hf(), id="bench_ladder"),
    pytest.param(Shape("held_out_kl.py", ("--text", "{prose}", "--skip", "64", "--tokens", "256", "--checkpoints", "{tool_made}"),
                       held_out), marks=QUANTIZERS, id="held_out_kl"),
    pytest.param(Shape("kl_topk.py", (*DATA, "--baseline", "{baseline}", *TWO_K, "--sets", "facts", "--ks", "16,32",
                                      "--only", "int8", "kv-int4", "--variants", "{variants}", "--check"), kl_topk_rows),
                 marks=hf(), id="kl_topk"),
    pytest.param(Shape("planted_blame.py", ("--only", "attn-int2-layer-12", "--granularity", "block", "--baseline",
                                            "{baseline}", *DATA, *TWO_K, "--sets", "tool_calls", "--out", "{variants}"),
                       planted_rows), marks=hf(), id="planted_blame"),
    pytest.param(Shape("bench_blame.py", ("--baseline", "{baseline}", *DATA, *TWO_K, "--sets", "tool_calls", "--out", "{variants}",
                                          "--cases", "planted", "--searches", "exhaustive,default", "--parts",
                                          ",".join(f"layer.{k}" for k in (*range(4, 10), 20, 21))), blame_rows),
                 marks=hf(), id="bench_blame"),
    pytest.param(Shape("split_invariance.py", (), split_rows), marks=LLAMA, id="split_invariance"),
    pytest.param(Shape("backend_agreement.py", (*DATA, *TWO_K, "--sets", "facts", "--variants", "{variants}"),
                       agreement_rows), marks=LLAMA, id="backend_agreement"),
    pytest.param(Shape("report_picture.py", ("--tiny", "--out", "{tmp}/report.png"), picture, browser.missing, kit=True),
                 marks=hf("matplotlib", extras="hf,report"), id="report_picture"),
    pytest.param(Shape("extract_wikipedia.py", ("{dump}", "{tmp}/articles.jsonl.gz"), articles), id="extract_wikipedia"),
    pytest.param(Shape("collect_code.py", ("{tmp}/code",), code_files, distribution_missing), id="collect_code"),
]


def first_article() -> dict:
    with gzip.open(ROOT / "pytest_longctx/data/builtin/sources/wikipedia/articles.jsonl.gz", "rt", encoding="utf-8") as lines:
        return json.loads(next(lines))


@pytest.fixture
def dump(tmp_path) -> Path:
    """A MediaWiki dump of four pages: the first shipped article with markup the extraction drops
    (an infobox, a heading, a list, a table, a file link, references) and its first words linked,
    a redirect, a talk page and an article too short to keep."""
    article = first_article()
    paragraphs = []
    for n, paragraph in enumerate(article["paragraphs"]):
        word, rest = paragraph.split(" ", 1)
        paragraphs.append(f"[[{word}]] {rest}" if n % 2 else f"[[Target page|{word}]] {rest}<ref name=\"r{n}\">{{{{cite|x}}}}</ref>")
    markup = ["{{Infobox|name={{nested|a}}}}", "== History ==", "* a list item", "{| class=wikitable\n| a || b\n|}",
              "[[File:Picture.png|thumb|A [[linked]] caption]]"]
    wikitext = "\n\n".join([*markup[:2], *paragraphs[:3], *markup[2:], *paragraphs[3:]])

    def page(title: str, ns: int, page_id: int, revision: int, text: str, redirect: bool = False) -> str:
        escaped = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
        marker = '<redirect title="X" />' if redirect else ""
        return (f"<page><title>{title}</title><ns>{ns}</ns><id>{page_id}</id>{marker}"
                f"<revision><id>{revision}</id><text>{escaped}</text></revision></page>")

    pages = [page(article["title"], 0, article["page_id"], article["revision"], wikitext),
             page("Anarchy", 0, 3, 30, "#REDIRECT [[Anarchism]]", redirect=True),
             page("Talk:Anarchism", 1, 4, 40, wikitext), page("Short", 0, 5, 50, article["paragraphs"][0])]
    xml = '<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.10/">' + "".join(pages) + "</mediawiki>"
    path = tmp_path / "dump.xml.bz2"
    path.write_bytes(bz2.compress(xml.encode("utf-8")))
    return path


@pytest.fixture(scope="module")
def variants(tmp_path_factory) -> Path:
    """SmolLM2's variants, shared by the runs: each script builds what is missing, as in a real study."""
    return tmp_path_factory.mktemp("variants")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    """A tiny random llama with SmolLM2's tokenizer, saved as a transformers folder."""
    from transformers import AutoTokenizer

    from pytest_longctx.backends.aliases import resolve_model

    tokenizer = AutoTokenizer.from_pretrained(resolve_model("smollm2-135m"))
    return save_model(tmp_path_factory.mktemp("tiny-llama"), tiny_llama(len(tokenizer)), tokenizer)


@pytest.fixture
def prose(tmp_path) -> Path:
    """The first shipped Wikipedia article's paragraphs as a plain text file."""
    path = tmp_path / "prose.txt"
    path.write_text("\n\n".join(first_article()["paragraphs"]), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def tool_made(tmp_path_factory) -> Path:
    """SmolLM2 quantized by torchao (int8 weight-only), saved as benchmarks/quantized_variants.py saves it."""
    out = tmp_path_factory.mktemp("tool-made")
    done = subprocess.run([sys.executable, str(BENCHMARKS / "quantized_variants.py"), "--out", str(out), "--only", "torchao-int8"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def baseline(data_dir, tmp_path_factory) -> Path:
    """SmolLM2's baseline on the tests' items at 2k (facts, tool calls), as longctx score writes it."""
    from pytest_longctx.cli import main

    path = tmp_path_factory.mktemp("baseline") / "smollm2-135m.json.gz"
    assert main(["score", "--model", "smollm2-135m", "--data", str(data_dir), "--lengths", "2k", "--sets", "facts,tool_calls",
                 "--save_scores", str(path), "--quiet"]) == 0
    return path


def test_every_script_has_a_shape_here_or_a_run_elsewhere():
    here = {param.values[0].script for param in SHAPES}
    scripts = {path.name for path in BENCHMARKS.glob("*.py")}
    assert scripts - here - set(ELSEWHERE) == set(), "a benchmark without a smoke run: add its smallest shape to SHAPES"
    assert not here & set(ELSEWHERE) and set(ELSEWHERE) <= scripts


@RUNS
@pytest.mark.slow
@pytest.mark.parametrize("shape", SHAPES)
def test_the_benchmark_runs_on_its_smallest_shape(shape: Shape, request, tmp_path):
    skip_unless(shape.skip(), install="see the script's docstring", required_by=REQUIRED_BY)
    names = {name for arg in shape.args for name in re.findall(r"\{(\w+)\}", arg)}
    paths = {"tmp": tmp_path, **{name: request.getfixturevalue("data_dir" if name == "data" else name)
                                 for name in names - {"tmp"}}}
    args = [arg.format(**paths) for arg in shape.args]
    path = {"PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "tests"), os.environ.get("PYTHONPATH")]))} if shape.kit else {}
    done = subprocess.run([sys.executable, str(BENCHMARKS / shape.script), *args], cwd=tmp_path, capture_output=True,
                          text=True, timeout=600, env={**os.environ, **path})
    print(f"$ {'PYTHONPATH=tests ' if shape.kit else ''}python benchmarks/{shape.script} {' '.join(args)}\n{done.stdout}")
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert not re.search(r"\berror\b", done.stdout), done.stdout  # a cell that could not be measured
    assert not re.search(r"\b(nan|inf)\b", done.stdout, re.I), done.stdout  # a ratio that is no number
    if shape.check:
        shape.check(done.stdout, paths)
