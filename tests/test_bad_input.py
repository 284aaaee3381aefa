"""Bad input gets one clear line that names the file, item and field, and what to do."""
from __future__ import annotations

import gzip
import json

import pytest
from kit.errors import one_line
from kit.items import write_split

from pytest_longctx.data.load import load_dataset
from pytest_longctx.errors import LongctxError
from pytest_longctx.scoring.scores_file import load_scores


def test_missing_column_names_the_file_and_column(rows, tmp_path):
    broken = [{k: v for k, v in r.items() if k != "targets"} for r in rows[("facts", "2k")]]
    path = write_split(tmp_path, "facts", "2k", broken)
    with pytest.raises(LongctxError) as exc:
        load_dataset(tmp_path)
    message = one_line(exc)
    assert str(path) in message and "targets" in message


def test_offset_outside_the_text_names_row_and_field(rows, tmp_path):
    broken = json.loads(json.dumps(rows[("tool_calls", "2k")]))
    broken[1]["targets"][2]["char"] = [10**6, 10**6 + 3]
    path = write_split(tmp_path, "tool_calls", "2k", broken, fmt="jsonl")
    with pytest.raises(LongctxError) as exc:
        load_dataset(tmp_path)
    message = one_line(exc)
    assert str(path) in message and "row 1" in message and "targets[2]" in message and "'char'" in message
    assert broken[1]["id"] in message


def test_wrong_type_and_unknown_enum(rows, tmp_path):
    broken = json.loads(json.dumps(rows[("rules_en", "2k")]))
    broken[0]["family"] = "sometimes"
    write_split(tmp_path, "rules_en", "2k", broken)
    with pytest.raises(LongctxError, match="'family': 'sometimes' is not one of substitution, redirect, required"):
        load_dataset(tmp_path)


def test_a_damaged_parquet_file(tmp_path):
    (tmp_path / "facts").mkdir()
    (tmp_path / "facts" / "8k-00000-of-00001.parquet").write_bytes(b"PAR1 not really")
    with pytest.raises(LongctxError, match="not a readable Parquet file"):
        load_dataset(tmp_path)


def test_unknown_sets_lengths_and_folders(data_dir, tmp_path):
    with pytest.raises(LongctxError, match="unknown config facs"):
        load_dataset(data_dir, sets=["facs"])
    with pytest.raises(LongctxError, match="no split 64k"):
        load_dataset(data_dir, lengths=["64k"])
    with pytest.raises(LongctxError, match="no such folder"):
        load_dataset(tmp_path / "nowhere")
    with pytest.raises(LongctxError, match="no benchmark files"):
        load_dataset(tmp_path)


def test_a_hub_id_offline_names_the_local_form(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(LongctxError) as exc:
        load_dataset("thinletter/longctx-agent-bench")
    assert "--data ./longctx-agent-bench" in one_line(exc)


@pytest.mark.parametrize("content", [b"\x1f\x8b\x08\x00garbage", b"{not json", b'{"format": "something else"}'])
def test_a_corrupt_scores_file(tmp_path, content):
    path = tmp_path / "ref.json.gz"
    path.write_bytes(content)
    with pytest.raises(LongctxError) as exc:
        load_scores(path)
    message = one_line(exc)
    assert str(path) in message and "recreate it" in message


def test_a_truncated_scores_file(tmp_path):
    path = tmp_path / "ref.json.gz"
    path.write_bytes(gzip.compress(json.dumps({"format": "pytest-longctx/scores", "version": 1}).encode())[:-9])
    with pytest.raises(LongctxError, match="corrupt or truncated"):
        load_scores(path)


def test_limit_and_selection(data_dir):
    dataset = load_dataset(data_dir, sets=["facts", "rules_cs"], lengths=["8k"], limit=1)
    assert {c: {n: len(i) for n, i in by.items()} for c, by in dataset.configs.items()} == {"facts": {"8k": 1}, "rules_cs": {"8k": 1}}
    whole = load_dataset(data_dir)
    assert len(list(whole.items())) == 2 * (2 + 2 + 3 * 12)
