"""Blame from the gate: a failing model gate prints the ``longctx blame`` command that blames its
failing rows (and that command, run, blames them), ``--longctx-blame`` runs it after the summary
and adds its report to the markdown summary, and where it cannot run it says so in one line."""
from __future__ import annotations

import json
import re
import shlex

import pytest
import torch
from kit.blame import blame
from kit.gguf import MATRICES, SETTINGS, pins
from kit.items import write_split
from kit.models import damaged, tiny_qwen3
from kit.needs import needs, needs_smollm2

from pytest_longctx.backends.hf import TransformersBackend
from pytest_longctx.backends.llama_cpp.backend import LlamaCppBackend
from pytest_longctx.cli.args import thresholds_of
from pytest_longctx.cli.main import build_parser, main
from pytest_longctx.data.builtin.faithfulness import build_faithfulness
from pytest_longctx.data.load import load_dataset
from pytest_longctx.gate.thresholds import Override, Thresholds
from pytest_longctx.reports.blame import blame_text
from pytest_longctx.reports.format import markdown_text as cell
from pytest_longctx.scoring.cache import ScoreCache
from pytest_longctx.scoring.pipeline import score_sets

ROW = "Distant tool calls at 2k tokens"
PROMPT = "longctx: which parts of the model these rows' far drift comes from: "


@pytest.fixture(scope="module")
def made(qwen_tokenizer, data_dir, tmp_path_factory):
    """The original and its damaged candidate saved, and two baselines of the original: one whose
    meta names the original's folder, one whose meta names a folder that is not there."""
    folder = tmp_path_factory.mktemp("gate-blame")
    original = tiny_qwen3(len(qwen_tokenizer), seed=3, layers=4, init=0.5)
    original.save_pretrained(folder / "original")
    damaged(original).save_pretrained(folder / "candidate")
    dataset = load_dataset(str(data_dir), sets=["tool_calls"], lengths=["2k"], limit=1)
    for name, model in (("named", str(folder / "original")), ("unnamed", "./moved-away")):
        scores = score_sets(TransformersBackend(original, name=model), None, dataset, progress=False)
        scores.as_baseline().save(folder / f"{name}.json.gz")
    return folder


def gate(pytester, made, data_dir, baseline="named", *args, model=None):
    return pytester.runpytest_inprocess(
        "-p", "no:cacheprovider", "-p", "no:xdist", f"--longctx-model={model or made / 'candidate'}", f"--longctx-data={data_dir}",
        "--longctx-sets=tool_calls", "--longctx-lengths=2k", "--longctx-limit=1", f"--longctx-baseline={made / baseline}.json.gz",
        *args)


def printed(result) -> list[str]:
    return [line.removeprefix(PROMPT) for line in result.outlines if line.startswith(PROMPT)]


def test_a_failing_gate_prints_the_blame_command_and_the_command_blames_its_rows(pytester, made, data_dir, tmp_path, capsys):
    result = gate(pytester, made, data_dir)
    assert result.ret == 1
    [command] = printed(result)
    at = result.outlines.index(PROMPT + command)  # its cost under it: the default budget, over the failing row's 1 item
    assert result.outlines[at + 1].startswith("longctx:   it scores at most 40 models (--budget) on these rows' 1 item, about "
                                              "this run's scoring time a model;")
    assert command == shlex.join(["longctx", "blame", "--reference", str(made / "original"), "--model", str(made / "candidate"),
                                  "--baseline", f"{made / 'named'}.json.gz", "--data", str(data_dir), "--sets", "tool_calls",
                                  "--lengths", "2k", "--limit", "1", "--rows", ROW])
    lines = result.outlines
    assert lines.index(PROMPT + command) > next(n for n, line in enumerate(lines) if line.startswith("longctx gate: "))
    args = shlex.split(command)
    assert args[:2] == ["longctx", "blame"]
    out = tmp_path / "blame.json"
    assert main([*args[1:], "--parts", "layer.1,layer.2", "--quiet", "--out", str(out)]) == 0
    body = json.loads(out.read_text())
    assert body["rows"] == [ROW] and [p["part"] for p in body["parts"]] == ["layer.1", "layer.2"]
    assert body["parts"][0]["shares"][ROW]["restore_far"] > 0.05 and abs(body["parts"][1]["shares"][ROW]["restore_far"]) < 1e-9


def untimed(lines: list[str]) -> list[str]:
    """``lines`` with their wall-clock figures (which differ from run to run) blanked: the cost line's and the
    estimate's."""
    return [re.sub(r"one backward pass, [0-9.]+ s", "one backward pass, T s",
                   re.sub(r"\([0-9:]+ in all\), [0-9.]+ s each", "(T in all), T s each", line)) for line in lines]


def test_longctx_blame_runs_it_after_the_summary_and_adds_it_to_the_markdown_and_html(pytester, made, data_dir, qwen_tokenizer):
    markdown, html = pytester.path / "summary.md", pytester.path / "report.html"
    result = gate(pytester, made, data_dir, "named", "--longctx-blame", f"--longctx-markdown={markdown}",
                  f"--longctx-html={html}")
    assert result.ret == 1
    # the same blame, run here on the same items against the same baseline
    from pytest_longctx.backends import load_backend
    from pytest_longctx.scoring.scores_file import load_scores

    original, candidate = (load_backend(str(made / name))[0] for name in ("original", "candidate"))
    found = blame(original.model, candidate.model, None,
                  load_dataset(str(data_dir), sets=["tool_calls"], lengths=["2k"], limit=1),
                  load_scores(made / "named.json.gz"), names=(str(made / "original"), str(made / "candidate")),
                  thresholds=Thresholds(), progress=False)
    expected = untimed(blame_text(found).splitlines())
    lines = untimed(result.outlines)
    start = lines.index(expected[0])
    assert lines[start:start + len(expected)] == expected  # all but the two runs' own clocks
    assert sorted(found.fix_set) == ["layer.1", "layer.3"] and found.verification["passed"]
    assert start > lines.index(PROMPT + printed(result)[0])
    text = markdown.read_text()
    assert text.index("## longctx: FAIL") < text.index("### Which parts to blame") < text.index("### longctx blame: ")
    assert f"keep {', '.join(found.fix_set)} from the original" in text
    report = html.read_text()  # the blame's chart and tables after the drift section, its numbers as here
    assert report.index('<section id="drift">') < report.index('<section id="blame">') < report.index('<section id="distance">')
    assert f"keep {', '.join(found.fix_set)} from the original" in report and report.count("</html>") == 1
    assert f"<td>{found.parts[0].part.name}</td>" in report


def test_a_baseline_that_names_no_loadable_original_leaves_it_to_fill_in(pytester, made, data_dir):
    result = gate(pytester, made, data_dir, "unnamed")
    assert result.ret == 1
    [command] = printed(result)
    assert shlex.split(command)[2:4] == ["--reference", "<the original model>"]
    assert ("longctx:   (the baseline names its model './moved-away', which is no model id or alias and no file or folder "
            "here: put the original (uncompressed) model in --reference)") in result.outlines
    refused = gate(pytester, made, data_dir, "unnamed", "--longctx-blame")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    assert ("ERROR: --longctx-blame: the baseline names its model './moved-away', which is no model id or alias and no file "
            "or folder here; give the original (uncompressed) model with --longctx-blame-reference MODEL") in refused.errlines
    given = gate(pytester, made, data_dir, "unnamed", "--longctx-blame", f"--longctx-blame-reference={made / 'original'}",
                 "--longctx-max-kl=0.04")
    assert given.ret == 1
    [command] = printed(given)
    assert shlex.split(command)[3] == str(made / "original") and shlex.split(command)[-2:] == ["--max-kl", "0.04"]
    assert not [line for line in given.outlines if line.startswith("longctx:   (")]  # nothing left to the reader
    assert any(line.startswith("fix set (2 parts, passes): keep layer.") for line in given.outlines)


def test_the_printed_command_judges_with_the_runs_thresholds(pytester, made, data_dir, capsys):
    result = gate(pytester, made, data_dir, "named", "--longctx-max-kl=0.04", "--longctx-threshold=tool_calls-2k:kl=0.03")
    assert result.ret == 1
    [command] = printed(result)
    args = shlex.split(command)
    assert args[-4:] == ["--max-kl", "0.04", "--threshold", "tool_calls-2k:kl=0.03"]
    assert thresholds_of(build_parser().parse_args(args[1:])) == Thresholds(kl=0.04, overrides=(Override("tool_calls-2k", "kl", 0.03),))
    # looser on the row (the last override that names it wins), the row passes there: nothing to blame
    capsys.readouterr()
    assert main([*args[1:], "--threshold", "tool_calls-2k:kl=1000", "--quiet"]) == 0
    assert capsys.readouterr().out.startswith("nothing to blame:")


def test_the_printed_command_reads_as_the_gate_read_and_takes_the_candidate_from_its_score_cache(
        pytester, made, data_dir, tmp_path, monkeypatch):
    cache = tmp_path / "scores"
    result = gate(pytester, made, data_dir, "named", "--longctx-trust-remote-code", "--longctx-allow-beyond-context",
                  f"--longctx-cache-dir={cache}")
    assert result.ret == 1
    [command] = printed(result)
    args = shlex.split(command)
    assert args[-4:] == ["--trust-remote-code", "--allow-beyond-context", "--cache-dir", str(cache)]
    answered = []  # per forward pass blame asks the cache for: the gate's answer, or None
    get = ScoreCache.get

    def recorded(self, *asked, **options):
        answered.append(get(self, *asked, **options))
        return answered[-1]

    monkeypatch.setattr(ScoreCache, "get", recorded)
    assert main([*args[1:], "--parts", "layer.1", "--quiet"]) == 0
    # the candidate asked, and was answered, for every pass; the hybrids (restore, damage, verification) never ask
    assert answered and all(found is not None for found in answered)


def test_longctx_blame_names_the_non_finite_weights_of_a_candidate_the_gate_failed(pytester, made, data_dir, tmp_path):
    from transformers import AutoModelForCausalLM

    broken = AutoModelForCausalLM.from_pretrained(made / "original")
    with torch.no_grad():
        for tensor in broken.model.layers[3].parameters():
            tensor.fill_(float("nan"))
    broken.save_pretrained(tmp_path / "broken")
    markdown = pytester.path / "summary.md"
    result = gate(pytester, made, data_dir, "named", "--longctx-blame", f"--longctx-markdown={markdown}",
                  model=tmp_path / "broken")
    assert result.ret == 1 and printed(result)  # the gate fails, and prints the command that blames it
    third = [name for name, tensor in broken.named_parameters() if name.startswith("model.layers.3.")]
    assert all(torch.isnan(broken.get_parameter(name)).all() for name in third)
    line = (f"the candidate's layer.3 holds NaN weights ({', '.join(third[:3])}, … ({len(third)} tensors)): a model with "
            "non-finite weights cannot be judged, so no part is blamed for its drift; re-make the candidate (its "
            "compression wrote them) and gate it again")
    assert line in result.outlines and not [text for text in result.outlines if "interact" in text]
    assert f"- {cell(line)}" in markdown.read_text().splitlines()


def test_longctx_blame_takes_the_candidate_from_the_runs_score_cache(pytester, made, data_dir, tmp_path, monkeypatch):
    answered = []  # every answer the score cache gave during the run: the gate's first run finds it empty
    get = ScoreCache.get

    def recorded(self, *asked, **options):
        found = get(self, *asked, **options)
        if found is not None:
            answered.append(found)
        return found

    monkeypatch.setattr(ScoreCache, "get", recorded)
    result = gate(pytester, made, data_dir, "named", "--longctx-blame", "--longctx-max-kl=0.04",
                  f"--longctx-cache-dir={tmp_path / 'scores'}")
    assert result.ret == 1 and any(line.startswith("fix set (") for line in result.outlines)
    assert answered  # the blame read what the gate had just scored


def test_a_share_is_what_two_gate_runs_of_its_hybrid_say(pytester, made, data_dir, tmp_path):
    from transformers import AutoModelForCausalLM

    loaded = {name: AutoModelForCausalLM.from_pretrained(made / name) for name in ("original", "candidate")}
    for base, other in (("candidate", "original"), ("original", "candidate")):  # restore, then damage, layer 1
        hybrid = AutoModelForCausalLM.from_pretrained(made / base)
        with torch.no_grad():
            for name, tensor in hybrid.named_parameters():
                if name.startswith("model.layers.1."):
                    tensor.copy_(loaded[other].get_parameter(name))
        hybrid.save_pretrained(tmp_path / f"{base}-with-layer1")
    far = {}
    for name, model in (("candidate", made / "candidate"), ("restored", tmp_path / "candidate-with-layer1"),
                        ("damaged", tmp_path / "original-with-layer1")):
        gate(pytester, made, data_dir, "named", f"--longctx-out={tmp_path / name}.json", model=model)
        far[name] = json.loads((tmp_path / f"{name}.json").read_text())["drift"][ROW]["far"]["kl"]
    out = tmp_path / "blame.json"
    assert main(["blame", "--reference", str(made / "original"), "--model", str(made / "candidate"), "--baseline",
                 f"{made / 'named'}.json.gz", "--data", str(data_dir), "--sets", "tool_calls", "--lengths", "2k",
                 "--limit", "1", "--parts", "layer.1", "--quiet", "--out", str(out)]) == 0
    shares = json.loads(out.read_text())["parts"][0]["shares"][ROW]
    assert shares["restore_far"] == pytest.approx((far["candidate"] - far["restored"]) / far["candidate"], rel=1e-6)
    assert shares["damage_far"] == pytest.approx(far["damaged"] / far["candidate"], rel=1e-6)
    assert shares["restore_far"] > 0.05 and shares["damage_far"] > 0.05  # shares of a planted layer, not of nothing


@pytest.mark.parametrize(("args", "message"), [
    (["--longctx-update-baseline"], "--longctx-blame: this run makes the baseline: there is nothing to compare, so nothing "
                                    "to blame; leave it out"),
    (["--longctx-backend=mine:factory"], "--longctx-blame: it blames transformers checkpoints and GGUF files "
                                         "(--longctx-backend hf or llama.cpp), not --longctx-backend mine:factory; leave it out"),
    # the press gate's failing rows come from the cache, not the weights: no hybrid of weights explains them
    (["--longctx-kv-press=knorm:compression_ratio=0.5"], "--longctx-blame: it blames the parts of a model's weights, and "
     "--longctx-kv-press knorm:compression_ratio=0.5 changes its KV cache, not its weights; leave it out"),
])
def test_longctx_blame_where_it_cannot_run_is_one_line(pytester, made, data_dir, args, message):
    result = gate(pytester, made, data_dir, "named", "--longctx-blame", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert f"ERROR: {message}" in result.errlines


def test_longctx_blame_without_a_model_gate_is_one_line(pytester, tmp_path):
    alone = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--longctx-blame")
    assert alone.ret == pytest.ExitCode.USAGE_ERROR
    assert "ERROR: --longctx-blame: blames a failing model gate; name the model with --longctx-model" in alone.errlines
    write_split(tmp_path, "faithfulness", "train", build_faithfulness(seed=0, limit=2))
    compressor = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--longctx-compressor=identity",
                                              f"--longctx-data={tmp_path}", "--longctx-blame")
    assert compressor.ret == pytest.ExitCode.USAGE_ERROR
    assert ("ERROR: --longctx-blame: blames a model gate's failing rows (--longctx-model with a baseline), not a "
            "compressor gate's; leave it out") in compressor.errlines


def test_a_passing_gate_prints_no_blame_command(pytester, made, data_dir):
    result = pytester.runpytest_inprocess(
        "-p", "no:cacheprovider", "-p", "no:xdist", f"--longctx-model={made / 'original'}", f"--longctx-data={data_dir}",
        "--longctx-sets=tool_calls", "--longctx-lengths=2k", "--longctx-limit=1",
        f"--longctx-baseline={made / 'named'}.json.gz", "--longctx-blame")
    assert result.ret == 0
    assert printed(result) == [] and "longctx blame: the gate passes: nothing to blame" in result.outlines


@needs("llama_cpp", "gguf", install="pip install 'pytest-longctx[llama]'")
@needs_smollm2
def test_a_failing_llama_cpp_gate_blames_its_gguf_files(pytester, data_dir, tmp_path, request):
    made = request.getfixturevalue("planted_gguf")  # layers 1 and 3 damaged and stored as Q8_0
    original = LlamaCppBackend.load(str(made[0]), SETTINGS, name=str(made[0]))
    dataset = load_dataset(str(data_dir), sets=["tool_calls"], lengths=["2k"], limit=1)
    score_sets(original, original.tokenizer, dataset, progress=False).as_baseline().save(tmp_path / "gguf.json.gz")
    result = pytester.runpytest_inprocess(
        "-p", "no:cacheprovider", "-p", "no:xdist", f"--longctx-model={made[1]}", "--longctx-backend=llama.cpp",
        "--longctx-backend-option=threads=2", f"--longctx-data={data_dir}", "--longctx-sets=tool_calls",
        "--longctx-lengths=2k", "--longctx-limit=1", f"--longctx-baseline={tmp_path / 'gguf.json.gz'}", "--longctx-blame")
    assert result.ret == 1
    assert printed(result) == [shlex.join([
        "longctx", "blame", "--reference", str(made[0]), "--model", str(made[1]), "--baseline", str(tmp_path / "gguf.json.gz"),
        "--backend", "llama.cpp", "--backend-option", "threads=2", "--data", str(data_dir), "--sets", "tool_calls",
        "--lengths", "2k", "--limit", "1", "--rows", ROW])]
    lines = result.outlines
    table = lines.index(next(line for line in lines if line.startswith("rank ")))
    first = lines[table + 2].split()[1]
    assert first in ("layer.1", "layer.3")  # a planted layer first
    # the fix set, however many parts it took on this one item, and its llama-quantize command: one override per part kept
    kept = re.fullmatch(r"fix set \(\d+ parts, .+\): keep (.+) from the original",
                        next(line for line in lines if line.startswith("fix set ("))).group(1).split(", ")
    assert kept[0] == first and set(kept) <= {"layer.1", "layer.3"}
    start = lines.index("the fix set, made from the original by llama.cpp's quantizer:")
    stems = "|".join(MATRICES)
    # the kept parts in the fix set's order, then the layers not kept pinned at the candidate's types
    pinned = pins(kept)
    assert lines[start + 1:start + 3 + len(kept) + len(pinned)] == [
        "llama-quantize \\", *(f"  --tensor-type '^blk\\.{p[-1]}\\.({stems})\\.weight$=f32' \\" for p in kept),
        *pinned, f"  {made[0]} fixed.gguf Q8_0"]
