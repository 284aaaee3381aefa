"""A baseline (or reference scores, or a results file) that cannot judge is refused with one
line naming the file, item and field, when it would be written and when it is read; and
reading any of them is bounded (issue 21)."""
from __future__ import annotations

import base64
import copy
import gzip
import json
import math
from pathlib import Path

import pytest
from kit.errors import one_line
from kit.items import write_split
from kit.models import tiny_qwen3

from pytest_longctx.cli import main
from pytest_longctx.errors import LongctxError
from pytest_longctx.gate.results_file import read_results
from pytest_longctx.metrics.drift import Block, pack
from pytest_longctx.reports.format import write_json
from pytest_longctx.scoring.scores_file import load_scores

COMMITTED = Path(__file__).parent.parent / "baselines" / "smollm2-135m.json.gz"


@pytest.fixture(scope="module")
def data_dir(rows, tmp_path_factory) -> Path:
    """Two items each of facts and tool calls at 2k."""
    folder = tmp_path_factory.mktemp("data")
    for config in ("facts", "tool_calls"):
        write_split(folder, config, "2k", rows[(config, "2k")][:2])
    return folder


@pytest.fixture(scope="module")
def backend(qwen_tokenizer):
    from pytest_longctx.backends.hf import TransformersBackend

    return TransformersBackend(tiny_qwen3(len(qwen_tokenizer)), qwen_tokenizer, name="tiny")


@pytest.fixture(scope="module")
def scored(backend, qwen_tokenizer, data_dir):
    from pytest_longctx.data.load import load_dataset
    from pytest_longctx.scoring.pipeline import score_sets

    return score_sets(backend, qwen_tokenizer, load_dataset(str(data_dir)), progress=False)


@pytest.fixture(scope="module")
def body(scored) -> dict:
    """A good baseline's JSON, with drift blocks: each test damages a copy."""
    found = json.loads(json.dumps(scored.as_baseline().to_json()))
    assert found["scores"]["facts"]["2k"]["f0"]["drift"]["ids"]
    return found


def written(folder: Path, body: dict, name: str = "baseline.json.gz") -> Path:
    path = folder / name
    path.write_bytes(gzip.compress(json.dumps(body).encode()))
    return path


def refused(path: Path, what: str = "baseline") -> str:
    with pytest.raises(LongctxError) as raised:
        load_scores(path, what)
    message = one_line(raised)
    assert message.startswith(f"{what} {path}: "), message
    return message


def test_the_committed_baseline_and_a_good_one_load(body, tmp_path):
    assert load_scores(COMMITTED, "baseline").has_drift
    assert load_scores(written(tmp_path, body), "baseline").has_drift


# ------------------------------------------------------------------ 1: not written when it cannot judge


# an old file that holds nothing, so that no run is refused for what it would drop of it
OLD = gzip.compress(json.dumps({"format": "pytest-longctx/scores", "version": 2, "mode": "ids", "meta": {}, "scores": {}}).encode())
NAN_BACKEND = "test_cli:make_nan_backend"  # a model with a NaN weight: every log-probability is NaN


def test_save_scores_of_a_nan_model_is_refused_and_the_old_file_stays(data_dir, tmp_path, capsys):
    path = tmp_path / "reference.json.gz"
    path.write_bytes(OLD)
    code = main(["score", "--model", "x", "--backend", NAN_BACKEND, "--data", str(data_dir),
                 "--sets", "facts", "--save_scores", str(path), "--quiet"])
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith(f"longctx: error: --save_scores {path}: NOT written: facts/2k/f0: targets[0] 'logprobs': "
                             "not finite"), err
    assert path.read_bytes() == OLD


def test_update_baseline_of_a_nan_model_is_refused_and_the_old_file_stays(pytester, data_dir):
    path = pytester.path / "baseline.json.gz"
    path.write_bytes(OLD)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--longctx-model=x",
                                          f"--longctx-backend={NAN_BACKEND}", f"--longctx-data={data_dir}",
                                          "--longctx-sets=facts", f"--longctx-baseline={path}", "--longctx-update-baseline")
    assert result.ret != 0
    lines = [line for line in result.outlines if "NOT written" in line]
    assert len(lines) == 1 and f"baseline {path} NOT written: facts/2k/f0: targets[0] 'logprobs': not finite" in lines[0], \
        result.outlines[-20:]
    assert path.read_bytes() == OLD


# ------------------------------------------------------------------ 1, 2: not read when it cannot judge


def test_nan_target_log_probabilities_are_refused_naming_item_target_and_field(body, tmp_path):
    damaged = copy.deepcopy(body)
    damaged["scores"]["facts"]["2k"]["f1"]["targets"][2]["logprobs"][0] = None  # how a NaN is stored
    message = refused(written(tmp_path, damaged))
    assert "facts/2k/f1: targets[2] 'logprobs': not finite" in message and "recreate it" in message


def test_a_nan_literal_is_refused_too(body, tmp_path):
    damaged = copy.deepcopy(body)
    damaged["scores"]["tool_calls"]["2k"]["t0"]["controls"][0]["logprobs"][0] = math.nan
    path = tmp_path / "baseline.json"
    path.write_text(json.dumps(damaged))  # json writes NaN, and reads it back
    assert "tool_calls/2k/t0: controls[0] 'logprobs': not finite" in refused(path)


def test_a_set_with_nothing_scored_is_refused(body, tmp_path):
    damaged = copy.deepcopy(body)
    for item in damaged["scores"]["facts"]["2k"].values():
        item["targets"] = [{"unaligned": "no token starts here"} for _ in item["targets"]]
        item["controls"] = []
        item.pop("drift")
    assert "facts/2k: nothing scored in its 2 item(s)" in refused(written(tmp_path, damaged))


def test_a_candidate_keeps_its_nan_values(body, tmp_path):
    """A results file read by ``longctx compare`` is the candidate: its NaN fails its checks."""
    damaged = copy.deepcopy(body)
    damaged["scores"]["facts"]["2k"]["f1"]["targets"][2]["logprobs"][0] = None
    assert read_results(str(written(tmp_path, damaged))).scores.scores["facts"]["2k"]["f1"].targets[2]["logprobs"][0] is None


def test_compare_against_a_nan_baseline_is_one_line_not_a_pass(body, scored, data_dir, tmp_path, capsys):
    damaged = copy.deepcopy(body)
    for item in damaged["scores"]["facts"]["2k"].values():
        item["targets"][0]["logprobs"] = [None] * len(item["targets"][0]["logprobs"])
    baseline, results = written(tmp_path, damaged), tmp_path / "results.json"
    write_json(results, scored.to_json())
    assert main(["compare", str(baseline), str(results), "--data", str(data_dir)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"longctx: error: baseline {baseline}: facts/2k/f0: targets[0]"), err


# ------------------------------------------------------------------ 3: damaged drift blocks


def _ids(drift: dict, change) -> None:
    found = Block.decode(drift)
    drift["ids"] = pack([change(r, j, i) for r, row in enumerate(found.ids) for j, i in enumerate(row)], "i")


def _nan_lps(drift: dict) -> None:
    found = Block.decode(drift)
    drift["lps"] = pack([math.nan if (r, j) == (1, 0) else v for r, row in enumerate(found.lps) for j, v in enumerate(row)], "f")


def _short(drift: dict) -> None:
    drift["top1"] = base64.b64encode(base64.b64decode(drift["top1"])[:-4]).decode()


DAMAGE = {
    "nan log-probabilities": (_nan_lps, "its drift block's 'lps' at read 1 is NaN"),
    "a negative id": (lambda d: _ids(d, lambda r, j, i: -5 if (r, j) == (0, 3) else i), "'ids': -5 at read 0 is not a token id"),
    "an id of 2,000,000,000": (lambda d: _ids(d, lambda r, j, i: 2_000_000_000 if (r, j) == (2, 0) else i),
                               "'ids': 2000000000 at read 2 is not a token id"),
    "padding with a log-probability": (lambda d: _ids(d, lambda r, j, i: -1 if (r, j) == (0, 0) else i),
                                       "'ids': padding (-1) with a log-probability at read 0"),
    "arrays of mismatched lengths": (_short, "'top1'"),
    "more reads than the targets have": (lambda d: d.update(reads=d["reads"] + 1, at=pack([0] * (2 * d["reads"] + 2), "i"),
                                                            top1=pack([0] * (d["reads"] + 1), "i")), "values for"),
    "a count that is text": (lambda d: d.update(k="16"), "field 'k' is '16'"),
    "text that is not base64": (lambda d: d.update(at="not base64!"), "drift block is damaged"),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_drift_block_is_refused_naming_the_item(body, tmp_path, damage):
    change, expected = DAMAGE[damage]
    damaged = copy.deepcopy(body)
    change(damaged["scores"]["tool_calls"]["2k"]["t1"]["drift"])
    message = refused(written(tmp_path, damaged))
    assert message.startswith(f"baseline {tmp_path / 'baseline.json.gz'}: tool_calls/2k/t1: ") and expected in message, message


def test_a_drift_block_deleted_for_one_item_is_refused(body, tmp_path):
    damaged = copy.deepcopy(body)
    del damaged["scores"]["facts"]["2k"]["f1"]["drift"]
    assert "facts/2k/f1: has no drift block" in refused(written(tmp_path, damaged))


def test_a_version_1_file_without_drift_blocks_still_loads(body, tmp_path):
    old = copy.deepcopy(body)
    old["version"] = 1
    for by_length in old["scores"].values():
        for item in by_length["2k"].values():
            item.pop("drift"), item.pop("controls", None)
    assert not load_scores(written(tmp_path, old), "baseline").has_drift


def test_ids_beyond_the_model_vocabulary_are_one_line_naming_the_item(body, backend, qwen_tokenizer, data_dir, tmp_path):
    from pytest_longctx.data.load import load_dataset
    from pytest_longctx.scoring.pipeline import score_sets

    damaged = copy.deepcopy(body)
    _ids(damaged["scores"]["facts"]["2k"]["f1"]["drift"], lambda r, j, i: len(qwen_tokenizer) + 7 if (r, j) == (0, 1) else i)
    reference = load_scores(written(tmp_path, damaged), "baseline")  # no vocabulary is known when reading
    with pytest.raises(LongctxError) as raised:
        score_sets(backend, qwen_tokenizer, load_dataset(str(data_dir)), reference=reference, progress=False)
    message = one_line(raised)
    assert message.endswith(f"facts/2k/f1: its drift block's 'ids' hold token id {len(qwen_tokenizer) + 7}, beyond this model's "
                            f"vocabulary of {len(qwen_tokenizer)} tokens: it was made with a model of another vocabulary, or is "
                            "damaged; recreate it from this model's original"), message


# ------------------------------------------------------------------ 4: wrong JSON types


def _set(path: tuple, value):
    def change(body: dict) -> None:
        place = body
        for key in path[:-1]:
            place = place[key]
        place[path[-1]] = value
    return change


ITEM = ("scores", "facts", "2k", "f0")
TYPES = {
    "targets a string": (_set((*ITEM, "targets"), "abc"), "facts/2k/f0 'targets': a string, not a list"),
    "controls an object": (_set((*ITEM, "controls"), {}), "facts/2k/f0 'controls': an object, not a list"),
    "a target a list": (_set((*ITEM, "targets", 1), [1]), "facts/2k/f0 targets[1]: a list, not an object"),
    "logprobs a string": (_set((*ITEM, "targets", 0, "logprobs"), "x"), "facts/2k/f0 targets[0] 'logprobs': a string, not a list"),
    "a hit a number": (_set((*ITEM, "targets", 0, "hits", 0), 1), "facts/2k/f0 targets[0] 'hits'[0]: a number, not true/false"),
    "fingerprint a number": (_set((*ITEM, "fingerprint"), 5), "facts/2k/f0 'fingerprint': a number, not a string"),
    "drift a string": (_set((*ITEM, "drift"), "x"), "facts/2k/f0 'drift': a string, not an object"),
    "meta a string": (_set(("meta",), "abc"), "'meta': a string, not an object"),
    "the tokenizer a list": (_set(("meta", "tokenizer"), []), "'meta' 'tokenizer': a list, not a string"),
    "rows a string": (_set(("rows",), "x"), "'rows': a string, not an object"),
    "a row a string": (_set(("rows", "Facts recalled at 2k tokens"), "high"),
                       "'rows' 'Facts recalled at 2k tokens': a string, not a number"),
    "a set a list": (_set(("sets", "facts", "2k"), []), "'sets' facts/2k: a list, not an object"),
    "a length a list": (_set(("scores", "facts", "2k"), []), "'scores' facts/2k: a list, not an object"),
}


@pytest.mark.parametrize("case", list(TYPES))
def test_a_wrong_json_type_is_refused_naming_the_item_and_field(body, tmp_path, case):
    change, expected = TYPES[case]
    damaged = copy.deepcopy(body)
    change(damaged)
    message = refused(written(tmp_path, damaged))
    assert expected in message and "malformed" in message, message


def test_a_results_json_of_wrong_types_is_refused_too(scored, tmp_path):
    results = json.loads(json.dumps(scored.to_json()))
    results["scores"]["tool_calls"]["2k"]["t1"]["targets"] = "abc"
    path = tmp_path / "results.json"
    write_json(path, results)
    with pytest.raises(LongctxError) as raised:
        read_results(str(path))
    assert one_line(raised).startswith(f"results {path}: malformed: tool_calls/2k/t1 'targets': a string, not a list")


# ------------------------------------------------------------------ 5: bounded reading


def _gzip_of(member: bytes, times: int) -> bytes:
    """``times`` gzip members of ``member`` each: many bytes decompressed from few."""
    one = gzip.compress(member, compresslevel=9)
    return one * times


def test_a_gzip_bomb_is_refused_within_the_default_limit(tmp_path):
    path = tmp_path / "bomb.json.gz"
    path.write_bytes(_gzip_of(b" " * 2**26, 32))  # 2 GiB of JSON whitespace from 2 MB
    assert path.stat().st_size < 3 * 2**20
    message = refused(path)
    assert "holds more than 268,435,456 bytes (decompressed)" in message and "LONGCTX_MAX_FILE_BYTES" in message


def test_the_byte_limit_is_overridable(body, tmp_path, monkeypatch):
    path = written(tmp_path, body)
    monkeypatch.setenv("LONGCTX_MAX_FILE_BYTES", "1000")
    assert "more than 1,000 bytes (decompressed)" in refused(path)
    monkeypatch.setenv("LONGCTX_MAX_FILE_BYTES", "lots")
    with pytest.raises(LongctxError, match="^LONGCTX_MAX_FILE_BYTES lots: expected a whole number$"):
        load_scores(path)


def test_deep_nesting_is_refused_without_a_recursion_error(tmp_path):
    path = tmp_path / "deep.json"
    path.write_bytes(b'{"format": "pytest-longctx/scores", "scores": ' + b"[" * 200_000 + b"]" * 200_000 + b"}")
    assert "nests deeper than 64 levels" in refused(path)


def test_brackets_inside_strings_do_not_count_and_the_limit_is_overridable(body, tmp_path, monkeypatch):
    deep = copy.deepcopy(body)
    deep["meta"]["note"] = "[" * 1000 + '\\"{'
    path = written(tmp_path, deep)
    assert load_scores(path, "baseline").meta["note"] == deep["meta"]["note"]
    monkeypatch.setenv("LONGCTX_MAX_NESTING", "3")
    assert "nests deeper than 3 levels" in refused(path)


def test_compare_reads_a_results_file_within_the_limits(body, tmp_path, capsys, monkeypatch):
    baseline, results = written(tmp_path, body), tmp_path / "results.json.gz"
    results.write_bytes(_gzip_of(b" " * 2**20, 4))
    monkeypatch.setenv("LONGCTX_MAX_FILE_BYTES", str(2**21))
    assert main(["compare", str(baseline), str(results)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"longctx: error: results {results}: holds more than {2**21:,} bytes (decompressed), more than any "
                   "scores file needs; if it is genuine, raise the limit: LONGCTX_MAX_FILE_BYTES=BYTES"]


# ------------------------------------------------------------------ 6, 7: a pointer, a folder


def test_a_git_lfs_pointer_says_git_lfs_pull(tmp_path):
    path = tmp_path / "baseline.json.gz"
    path.write_text("version https://git-lfs.github.com/spec/v1\noid sha256:" + "0" * 64 + "\nsize 269291\n")
    message = refused(path)
    assert "Git LFS pointer" in message and "git lfs pull" in message and "corrupt" not in message


def test_a_folder_is_named_as_one(body, tmp_path):
    written(tmp_path, body, "smollm2.json.gz")
    message = refused(tmp_path)
    assert "is a folder, not a file" in message and "smollm2.json.gz" in message and "no such file" not in message


# ------------------------------------------------------------------ 8: compare --threshold


def test_compare_refuses_a_threshold_pattern_that_matches_nothing(body, scored, data_dir, tmp_path, capsys):
    baseline, results = written(tmp_path, body), tmp_path / "results.json"
    write_json(results, scored.to_json())
    assert main(["compare", str(baseline), str(results), "--data", str(data_dir), "--threshold", "fact-2k-*:item_drop=2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("longctx: error: --threshold 'fact-2k-*:item_drop=2': the pattern 'fact-2k-*' "
                                               "matches no check of this run"), err
    assert main(["compare", str(baseline), str(results), "--data", str(data_dir), "--threshold", "facts-2k-*:item_drop=2",
                 "--threshold", "tool_calls-2k:drop=0.2"]) == 0
