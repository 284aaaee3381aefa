"""``longctx blame --backend llama.cpp``: hybrids of two tiny llama GGUF files (random weights,
SmolLM2's tokenizer) read through llama.cpp exactly what the file they copy reads (every part
taken back is the original, bit for bit; none is the candidate), planted damage is found and
fixed by exactly the planted layers, the fix set's llama-quantize arguments and cost are the
tensors' own, a quantized KV cache is one more part, and bad input is one line."""
from __future__ import annotations

import gc
import html
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import weakref
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from kit.gguf import FFN, HIDDEN, LAYERS, MATRICES, PLANTED, SETTINGS, pins, tensors_of, write_gguf
from kit.needs import needs, needs_smollm2

from pytest_longctx.backends.hybrids import gguf as gguf_hybrids
from pytest_longctx.backends.hybrids.gguf import GGUFFile, GGUFPair, gguf_parts, write_hybrid
from pytest_longctx.backends.hybrids.pair import CANDIDATE, ORIGINAL, select_parts
from pytest_longctx.backends.llama_cpp.backend import LlamaCppBackend
from pytest_longctx.backends.llama_cpp.quantize import quantize
from pytest_longctx.backends.llama_cpp.recipe import tensor_pattern
from pytest_longctx.backends.llama_cpp.settings import Settings
from pytest_longctx.cli.main import main
from pytest_longctx.data.load import load_dataset
from pytest_longctx.errors import LongctxError
from pytest_longctx.gate.blame import BlameReport, RowState, blame_pair
from pytest_longctx.reports.blame import RECIPES, blame_html, blame_markdown, blame_text
from pytest_longctx.scoring.pipeline import score_items, score_sets

pytestmark = [needs("llama_cpp", "gguf", install="pip install 'pytest-longctx[llama]'"), needs_smollm2]


def test_the_planted_pair_is_the_same_bytes_in_every_process(planted_gguf, gguf_vocab, tmp_path):
    """What made blame's figures on these files vary from one process to the next (docs/backends.md)."""
    made = [planted_gguf]
    for seed in ("1", "2"):  # another hash seed, as another process has
        folder = tmp_path / seed
        folder.mkdir()
        subprocess.run([sys.executable, "-c", "import sys; from pathlib import Path; from kit.gguf import planted_pair; "
                        "planted_pair(Path(sys.argv[1]), int(sys.argv[2]))", str(folder), str(gguf_vocab)], check=True,
                       env={**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": os.pathsep.join(map(str, (
                           Path(__file__).parent, Path(__file__).parents[1])))})
        made.append((folder / "original.gguf", folder / "candidate.gguf"))
    for original, candidate in made[1:]:
        assert original.read_bytes() == made[0][0].read_bytes()
        assert candidate.read_bytes() == made[0][1].read_bytes()


@pytest.fixture(scope="module")
def pair(planted_gguf):
    return GGUFPair(str(planted_gguf[0]), str(planted_gguf[1]), (SETTINGS, SETTINGS), names=("original.gguf", "candidate.gguf"))


@pytest.fixture(scope="module")
def dataset(data_dir):
    return load_dataset(str(data_dir), sets=["tool_calls"], lengths=["2k"], limit=2)


def reads(backend, dataset):
    scores = score_items(backend, backend.tokenizer, dataset, "text", progress=False)
    return {(c, n, i): (s.targets, s.controls, s.drift) for c, n, i, s in scores.items()}


def test_the_parts_are_named_as_the_transformers_side_names_them(planted_gguf):
    names = list(GGUFFile(planted_gguf[0], "--reference", "o").tensors)
    for granularity in ("layer", "block", "tensor"):
        assert sorted(n for p in gguf_parts(names, granularity) for n in p.parameters) == sorted(names)
    assert [p.name for p in gguf_parts(names, "layer")] == ["embed", "layer.0", "layer.1", "layer.2", "layer.3", "final",
                                                            "lm_head"]
    block = {p.name: p.parameters for p in gguf_parts(names, "block")}
    assert block["layer.2.attn"] == tuple(f"blk.2.{m}.weight" for m in MATRICES[:4])
    assert block["layer.2.mlp"] == tuple(f"blk.2.{m}.weight" for m in MATRICES[4:])
    assert block["layer.2.norms"] == ("blk.2.attn_norm.weight", "blk.2.ffn_norm.weight")
    assert block["final"] == ("output_norm.weight",) and block["embed"] == ("token_embd.weight",)


def test_a_hybrid_holds_the_source_s_raw_blocks_and_the_base_s_metadata(planted_gguf, tmp_path):
    original, candidate = (GGUFFile(f, "--model", "x") for f in planted_gguf)
    taken = {"blk.1.attn_q.weight", "blk.1.attn_norm.weight"}
    write_hybrid(candidate, original, taken, tmp_path / "hybrid.gguf")
    hybrid = GGUFFile(tmp_path / "hybrid.gguf", "--model", "hybrid")
    assert list(hybrid.tensors) == list(candidate.tensors)
    for name, tensor in hybrid.tensors.items():
        source = (original if name in taken else candidate).tensors[name]
        assert tensor.tensor_type == source.tensor_type and np.asarray(tensor.data).tobytes() == np.asarray(source.data).tobytes()
    assert hybrid.type_of("blk.1.attn_q.weight") == "F32" and hybrid.type_of("blk.1.attn_k.weight") == "Q8_0"
    fields = {n: f.contents() for n, f in hybrid.reader.fields.items() if not n.startswith("GGUF.")}
    assert fields == {n: f.contents() for n, f in candidate.reader.fields.items() if not n.startswith("GGUF.")}


def test_every_part_taken_back_is_the_original_and_none_the_candidate(pair, planted_gguf, dataset):
    mine = reads(LlamaCppBackend.load(str(planted_gguf[0]), SETTINGS), dataset)
    theirs = reads(LlamaCppBackend.load(str(planted_gguf[1]), SETTINGS), dataset)
    assert mine != theirs
    for granularity in ("layer", "block"):
        every = pair.parts(granularity)
        with pair.hybrid(CANDIDATE, every, "all back") as backend:
            assert reads(backend, dataset) == mine  # bit-identical through llama.cpp, drift blocks included
        with pair.hybrid(ORIGINAL, every, "all damaged") as backend:
            assert reads(backend, dataset) == theirs
    for base, expected in ((CANDIDATE, theirs), (ORIGINAL, mine)):
        with pair.hybrid(base, [], "none") as backend:
            assert reads(backend, dataset) == expected


def test_planted_damage_is_ranked_first_is_the_fix_set_and_its_recipe(pair, planted_gguf, dataset):
    found = blame_pair(pair, dataset, None, progress=False)
    assert not found.passed and found.rows
    planted = [f"layer.{n}" for n in PLANTED]
    # both planted layers first, layer 1 (73 % of the far drift) before layer 3 (5 %), in every process: the files are
    # the same bytes in each (test_the_planted_pair_is_the_same_bytes_in_every_process) and llama.cpp reads a file
    # the same bits whatever the process or thread count (docs/backends.md)
    assert [p.part.name for p in found.parts[:2]] == planted
    first, second = found.parts[:2]
    for row in found.rows:
        assert found.restore_share(first, row) > found.restore_share(second, row) > 0.0
        # with two damaged layers, restoring one is damaging the original with the other: the same file, read the same
        assert first.restore[row] == second.damage[row] and second.restore[row] == first.damage[row]
        assert all(found.restore_share(p, row) == 0.0 for p in found.parts[2:])  # clean parts restore nothing
        assert all(found.damage_share(p, row) == 0.0 for p in found.parts[2:])
    assert found.fix_set == planted and found.fixed
    assert [p.part.name for p in found.parts if not p.unchanged] == planted  # the rest: the same blocks in both files
    assert found.verification["passed"], found.verification["failing"]
    # the cost from the tensors themselves: F32 in the original, Q8_0 matrices (34 bytes a block of 32) in the candidate
    matrices = sum(HIDDEN * HIDDEN * 2 + HIDDEN // 2 * HIDDEN * 2 + FFN * HIDDEN * 3 for _ in PLANTED)
    norms = 2 * HIDDEN * len(PLANTED)
    assert (found.fix_cost.parameters, found.fix_cost.original_bytes, found.fix_cost.candidate_bytes) == (
        matrices + norms, 4 * (matrices + norms), matrices // 32 * 34 + 4 * norms)
    stems = "|".join(MATRICES)
    assert found.recipe == ["llama-quantize \\", *(f"  --tensor-type '^blk\\.{n}\\.({stems})\\.weight$=f32' \\"
                                                    for n in (int(name[-1]) for name in found.fix_set)),
                            *pins(found.fix_set), f"  {planted_gguf[0]} fixed.gguf Q8_0"]  # the file, not its name here
    pattern = found.recipe[1].split("'")[1].rsplit("=", 1)[0]
    every = list(GGUFFile(planted_gguf[0], "--model", "x").tensors)
    layer = found.fix_set[0][-1]
    assert [n for n in every if re.search(pattern, n)] == [f"blk.{layer}.{m}.weight" for m in MATRICES]


@pytest.mark.parametrize("file_type, granularity, kept_parts, pinned", [
    ("Q8_0", "block", ["layer.1.attn", "layer.2.mlp", "lm_head"], 0),
    # a mix: the quantizer gives attn_v and ffn_down more bits in layers 0 and 2 of 4, counting as it goes;
    # keeping layer 1 would move the extra bits to layer 3 unless the recipe pins those tensors
    ("Q4_K_M", "layer", ["layer.1"], 4)])
def test_longctx_quantize_makes_from_the_original_what_the_recipe_says(planted_gguf, tmp_path, file_type, granularity, kept_parts,
                                                                       pinned):
    quantize(planted_gguf[0], tmp_path / "candidate.gguf", file_type, 2)  # the original as llama.cpp's quantizer makes it
    pair = GGUFPair(str(planted_gguf[0]), str(tmp_path / "candidate.gguf"), (SETTINGS, SETTINGS), names=(str(planted_gguf[0]), "c.gguf"))
    candidate = GGUFFile(tmp_path / "candidate.gguf", "--model", "c")
    assert (len({candidate.type_of(f"blk.{n}.attn_v.weight") for n in range(LAYERS)}) > 1) == (pinned > 0)
    kept = select_parts(pair.parts(granularity), kept_parts, granularity)
    recipe = pair.recipe(kept)
    overrides = [line for line in recipe if "--tensor-type" in line]
    assert len(overrides) == len(kept) + pinned and recipe[-1].endswith(f"fixed.gguf {file_type}")
    for line in overrides[len(kept):]:  # the pins: the kinds chosen by position, outside the kept layer
        matched = [n for n in candidate.tensors if re.search(line.split("'")[1].rsplit("=", 1)[0], n)]
        assert matched and all(re.fullmatch(r"blk\.[023]\.(attn_v|ffn_down)\.weight", n) for n in matched), line
    (tmp_path / "blame.json").write_text(json.dumps({"fix_set": {"recipe": recipe}}))  # as longctx blame --out writes it
    assert main(["gguf-fix-set", "--fixed-by", str(tmp_path / "blame.json"), "--out", str(tmp_path / "fixed.gguf"),
                 "--threads", "2"]) == 0
    original = GGUFFile(planted_gguf[0], "--reference", "o")
    write_hybrid(candidate, original, {n for p in kept for n in p.parameters}, tmp_path / "hybrid.gguf")
    fixed, hybrid = (GGUFFile(tmp_path / f, "--model", f) for f in ("fixed.gguf", "hybrid.gguf"))
    assert list(fixed.tensors) == list(hybrid.tensors)
    for name, tensor in fixed.tensors.items():  # the quantizer's file holds the hybrid's tensors, bit for bit
        theirs = hybrid.tensors[name]
        assert tensor.tensor_type == theirs.tensor_type, name
        assert np.asarray(tensor.data).tobytes() == np.asarray(theirs.data).tobytes(), name
    assert fixed.type_of("blk.1.attn_q.weight") == "F32" and fixed.type_of("blk.3.attn_q.weight") != "F32"


def test_a_tensor_pattern_matches_exactly_its_names():
    names = ["blk.1.attn_q.weight", "blk.1.ffn_up.weight"]
    assert tensor_pattern(names) == r"^blk\.1\.(attn_q|ffn_up)\.weight$"
    assert tensor_pattern(["output.weight", "token_embd.weight"]) == r"^(output|token_embd)\.weight$"
    assert tensor_pattern(["output.weight"]) == r"^output\.weight$"
    others = ["blk.11.attn_q.weight", "blk.1.attn_q.bias", "xblk.1.attn_q.weight", "blk.1.attn_k.weight"]
    assert not any(re.search(tensor_pattern(names), n) for n in others)


def test_a_quantized_kv_cache_is_one_more_part(planted_gguf, dataset):
    quantized = Settings(threads=2, cache_type_k="q8_0")
    pair = GGUFPair(str(planted_gguf[0]), str(planted_gguf[0]), (SETTINGS, quantized), names=("original.gguf", "same.gguf"))
    assert [p.name for p in pair.parts("layer")][-2:] == ["lm_head", "kv_cache"]
    kv = pair.parts("layer")[-1:]
    assert pair.cost(kv).parameters == 0
    assert not pair.unchanged(kv[0]) and all(pair.unchanged(p) for p in pair.parts("layer")[:-1])
    plain = reads(LlamaCppBackend.load(str(planted_gguf[0]), SETTINGS), dataset)
    rounded = reads(LlamaCppBackend.load(str(planted_gguf[0]), quantized), dataset)
    assert plain != rounded
    for base, taken, expected in ((CANDIDATE, kv, plain), (CANDIDATE, [], rounded), (ORIGINAL, kv, rounded), (ORIGINAL, [], plain)):
        with pair.hybrid(base, taken, "kv") as backend:
            assert reads(backend, dataset) == expected
    assert pair.recipe(kv)[-1] == "# run fixed.gguf with the original's KV cache: --cache-type-k f16 --cache-type-v f16"
    assert [p.name for p in GGUFPair(str(planted_gguf[0]), str(planted_gguf[0]), (SETTINGS, SETTINGS)).parts("layer")][-1] == "lm_head"


def test_bad_input_is_one_line(planted_gguf, gguf_vocab, tmp_path):
    cases = [
        (write_gguf(tmp_path / "qwen.gguf", tensors_of(gguf_vocab), architecture="qwen2"),
         "--reference o.gguf is a GGUF of a llama model, --model b.gguf of a qwen2 one: blame takes two GGUF files of one model"),
        (write_gguf(tmp_path / "tied.gguf", tensors_of(gguf_vocab, head=False)),
         "their tensor names do not match (1 differ; output.weight is only in --reference): blame takes two GGUF files"),
        (write_gguf(tmp_path / "wide.gguf", tensors_of(gguf_vocab, ffn=2 * FFN)),
         "blk.0.ffn_gate.weight is [64, 128] in one and [64, 256] in the other: blame takes two GGUF files of one shape"),
    ]
    for other, message in cases:
        with pytest.raises(LongctxError) as raised:
            GGUFPair(str(planted_gguf[0]), str(other), (SETTINGS, SETTINGS), names=("o.gguf", "b.gguf"))
        assert message in str(raised.value) and "\n" not in str(raised.value)
    names = list(GGUFFile(planted_gguf[0], "--model", "x").tensors)
    with pytest.raises(LongctxError, match=r"^--parts layer\.9: no such part at --granularity layer; the parts are "
                                           r"embed, layer\.0, layer\.1, layer\.2, layer\.3, final, lm_head$"):
        select_parts(gguf_parts(names, "layer"), ["layer.1", "layer.9"], "layer")
    with pytest.raises(LongctxError, match=r"^--model nothing\.gguf: no such \.gguf file$"):
        GGUFPair(str(planted_gguf[0]), "nothing.gguf", (SETTINGS, SETTINGS))


def test_the_command_blames_two_gguf_files_and_prints_the_quantizer_arguments(planted_gguf, pair, data_dir, tmp_path, capsys,
                                                                             monkeypatch):
    written: list[Path] = []
    monkeypatch.setattr(gguf_hybrids, "write_hybrid", lambda *args: written.append(args[-1]) or write_hybrid(*args))
    original = LlamaCppBackend.load(str(planted_gguf[0]), SETTINGS)
    baseline = score_sets(original, original.tokenizer, load_dataset(str(data_dir), sets=["tool_calls"], lengths=["2k"], limit=1),
                          progress=False)
    baseline.as_baseline().save(tmp_path / "baseline.json.gz")
    out = tmp_path / "blame.json"
    code = main(["blame", "--backend", "llama.cpp", "--reference", str(planted_gguf[0]), "--model", str(planted_gguf[1]), "--baseline",
                 str(tmp_path / "baseline.json.gz"), "--data", str(data_dir), "--sets", "tool_calls", "--lengths", "2k",
                 "--limit", "1", "--granularity", "block", "--parts", "layer.0.attn,layer.1.mlp,layer.3.attn",
                 "--backend-option", "threads=2", "--work-dir", str(tmp_path / "work"), "--out", str(out), "--quiet"])
    shown = capsys.readouterr().out
    assert code == 0, shown
    assert written and all(p.parent.parent == tmp_path / "work" for p in written)  # each in a folder of its own there
    assert list((tmp_path / "work").iterdir()) == []  # and each removed once read
    body = json.loads(out.read_text())
    clean = next(p for p in body["parts"] if p["part"] == "layer.0.attn")
    # the same blocks in both files: not scored, the candidate's and the original's own figures (exactly 0), not
    # ranked but listed after the changed parts: layer 1's MLP, which restores 69 % of the far drift, and layer 3's
    # attention, which alone, with layer 1's heavy damage left, makes it 2 % worse; with layer 1's MLP kept it helps
    # (far drift 0.62 -> 0.52), so the fix set search keeps both, and says the rest lies elsewhere (layer 1's
    # attention is not measured). llama.cpp runs forward only: no estimate, and the report says why
    assert clean["unchanged"] and all(s["restore_far"] == 0 and s["damage_far"] == 0 for s in clean["shares"].values())
    assert [p["part"] for p in body["parts"]] == ["layer.1.mlp", "layer.3.attn", "layer.0.attn"]
    assert [p["rank"] for p in body["parts"]] == [1, 2, None]
    assert body["parts"][0]["score"] > 0 > body["parts"][1]["score"]
    assert "llama.cpp" in body["estimate"]["why_not"] and all(p["estimate"] is None for p in body["parts"])
    assert body["fix_set"]["parts"] == ["layer.1.mlp", "layer.3.attn"] and not body["fix_set"]["fixed"]
    [row] = body["rows"]
    first, both = (step[row]["far"] for step in body["fix_set"]["steps"])
    assert first == body["parts"][0]["restore"][row]["far"] and both < first
    assert "lies in parts not measured (--parts)" in body["notes"][0]
    recipe = body["fix_set"]["recipe"]
    assert recipe[0] == "llama-quantize \\" and recipe[-1] == f"  {planted_gguf[0]} fixed.gguf Q8_0"
    assert "\n".join(["the fix set, made from the original by llama.cpp's quantizer:", *recipe]) in shown


def quantizer_words(block: str) -> list[str]:
    """The words bash passes to llama-quantize when it runs ``block`` as pasted (a function stands in for the tool)."""
    ran = subprocess.run(["bash", "-c", 'llama-quantize() { printf "%s\\n" "$@"; }\n' + block], capture_output=True, text=True)
    assert ran.returncode == 0 and ran.stderr == "", ran.stderr
    return ran.stdout.splitlines()


def test_the_printed_recipe_is_one_shell_command_in_every_report(planted_gguf):
    quantized = Settings(threads=2, cache_type_k="q8_0")
    pair = GGUFPair(str(planted_gguf[0]), str(planted_gguf[1]), (SETTINGS, quantized), names=("the-original", "candidate.gguf"))
    kept = select_parts(pair.parts("layer"), ["layer.1", "kv_cache"], "layer")
    before = RowState(0.1, 0.05, 0.05, passed=False)
    found = BlameReport("the-original", "candidate.gguf", "layer", passed=False, rows=["r"], candidate={"r": before},
                  fix_set=["layer.1", "kv_cache"], fix_steps=[{"r": replace(before, far=0.01, passed=True)}], fixed=True,
                  fix_cost=pair.cost(kept), recipe=pair.recipe(kept), recipe_tool=pair.recipe_tool)
    blocks = {"terminal": blame_text(found).split(RECIPES["llama.cpp"][0] + "\n", 1)[1],
              "markdown": re.search(r"\n```sh\n(.*?)\n```", blame_markdown(found), re.S).group(1),
              "html": html.unescape(re.search(r"<pre>(.*?)</pre>", blame_html(found), re.S).group(1))}
    stems = "|".join(MATRICES)
    overrides = [rf"^blk\.1\.({stems})\.weight$=f32", *(line.split("'")[1] for line in pins(["layer.1"]))]
    # the original's file, not the name it was given (an alias is no file to llama-quantize)
    expected = [*(w for o in overrides for w in ("--tensor-type", o)), str(planted_gguf[0]), "fixed.gguf", "Q8_0"]
    for where, block in blocks.items():
        assert quantizer_words(block) == expected, where
        assert block.splitlines()[-1] == ("# run fixed.gguf with the original's KV cache: --cache-type-k f16 "
                                          "--cache-type-v f16"), where


def read_a_hybrid(pair: GGUFPair) -> tuple[Path, weakref.ref]:
    """A restore hybrid read once (a context and a session, which point back at the backend), then let go of."""
    with pair.hybrid(CANDIDATE, select_parts(pair.parts("layer"), ["layer.1"], "layer"), "hybrid") as backend:
        backend.read([1, 2, 3, 4], [3], [[5]])
        assert str(backend.path) in Path("/proc/self/maps").read_text()  # llama.cpp maps the file it reads
        return backend.path, weakref.ref(backend)


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads the process's memory maps (Linux)")
def test_a_hybrid_is_freed_and_unmapped_when_read_without_the_garbage_collector(pair):
    gc.disable()  # the cyclic collector would free a hybrid whenever it runs; each must go as soon as it is read
    try:
        path, backend = read_a_hybrid(pair)
        assert backend() is None
        assert str(path) not in Path("/proc/self/maps").read_text()  # the disk has the deleted file's blocks back
        assert not path.parent.exists()
    finally:
        gc.enable()
    closed = LlamaCppBackend.load(str(pair.files[ORIGINAL].path), SETTINGS, name="closed.gguf")
    closed.close()
    with pytest.raises(LongctxError, match=r"^closed\.gguf: this llama\.cpp backend was closed; load the file again to read it$"):
        closed.read([1, 2], [1], [[3]])


SIGTERM_WHILE_READING = """
import sys, time
from pytest_longctx.backends.hybrids.gguf import GGUFPair
from pytest_longctx.backends.llama_cpp.settings import Settings
from pytest_longctx.backends.hybrids.pair import CANDIDATE

original, candidate, work = sys.argv[1:]
pair = GGUFPair(original, candidate, (Settings(threads=1), Settings(threads=1)), work_dir=work)
with pair.hybrid(CANDIDATE, pair.parts("layer")[2:3], "hybrid") as backend:
    print(backend.path, flush=True)
    time.sleep(60)
"""


def test_hybrids_are_written_in_the_work_folder_which_sigterm_leaves_empty(planted_gguf, tmp_path):
    work = tmp_path / "work"
    script = tmp_path / "reading.py"
    script.write_text(textwrap.dedent(SIGTERM_WHILE_READING))
    reader = subprocess.Popen([sys.executable, str(script), str(planted_gguf[0]), str(planted_gguf[1]), str(work)], stdout=subprocess.PIPE,
                              text=True, env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])})
    written = Path(reader.stdout.readline().strip())
    assert written.parent.parent == work and written.name == "hybrid.gguf"
    reader.send_signal(signal.SIGTERM)
    assert reader.wait(timeout=60) == -signal.SIGTERM  # ended as SIGTERM ends a process
    assert list(work.iterdir()) == []


def test_bad_fix_set_input_is_one_line(planted_gguf, tmp_path, capsys):
    def refused(*args: str) -> str:
        assert main(["gguf-fix-set", *args]) == 2
        message = capsys.readouterr().err
        assert message.count("\n") == 1
        return message.removeprefix("longctx: error: ").strip()

    (tmp_path / "passed.json").write_text(json.dumps({"passed": True, "fix_set": {"parts": [], "recipe": []}}))
    assert refused("--fixed-by", str(tmp_path / "passed.json")) == (
        f"--fixed-by {tmp_path / 'passed.json'}: holds no llama-quantize command (fix_set.recipe): a llama.cpp blame writes "
        "one when it found a fix set; give the --out file of a longctx blame --backend llama.cpp whose candidate failed")
    recipe = ["llama-quantize \\", "  --tensor-type '^output\\.weight$=f32' \\", "  elsewhere/original.gguf fixed.gguf Q8_0"]
    (tmp_path / "blame.json").write_text(json.dumps({"fix_set": {"recipe": recipe}}))
    assert refused("--fixed-by", str(tmp_path / "blame.json")) == (
        f"--fixed-by {tmp_path / 'blame.json'}: its original elsewhere/original.gguf is not a file here; run where blame ran, "
        "or give the original GGUF file with --original FILE")
    assert refused("--fixed-by", str(tmp_path / "blame.json"), "--original", str(planted_gguf[0]), "--out", str(planted_gguf[0])) == (
        f"--out {planted_gguf[0]}: it is the file of --original {planted_gguf[0]}, which writing it would overwrite; give --out a path of "
        "its own")
    (tmp_path / "prose.json").write_text(json.dumps({"fix_set": {"recipe": ["and run it with the original's cache"]}}))
    assert refused("--fixed-by", str(tmp_path / "prose.json")).startswith(
        f"--fixed-by {tmp_path / 'prose.json'}, fix_set.recipe: not a shell command (No closing quotation)")
    assert refused("--fixed-by", str(tmp_path / "blame.json"), "--threads", "0") == "--threads: must be at least 1 (given '0')"
    assert refused("--fixed-by", str(tmp_path / "missing.json")).startswith(f"--fixed-by {tmp_path / 'missing.json'}: no such file")


def test_a_work_folder_that_cannot_be_written_is_one_line(planted_gguf, data_dir, tmp_path, capsys):
    (tmp_path / "taken").write_text("a file")
    assert main(["blame", "--backend", "llama.cpp", "--reference", str(planted_gguf[0]), "--model", str(planted_gguf[1]), "--data",
                 str(data_dir), "--sets", "tool_calls", "--lengths", "2k", "--limit", "1", "--work-dir",
                 str(tmp_path / "taken"), "--quiet"]) == 2
    assert capsys.readouterr().err == (f"longctx: error: --work-dir {tmp_path / 'taken'}: cannot be written (it is a file, not "
                                       "a folder); give a path in a writable folder\n")
