"""The tool-heavy suite of the builtin sessions: large real-text tool outputs (HTML, JSON,
logs, test runs, file listings) of 2k to 15k tokens, the fact buried in one of them, and
not one earlier item changed."""
from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from pytest_longctx.data.builtin.faithfulness import DEFAULT_ITEMS, SESSION_ITEMS, TOOL_HEAVY_ITEMS, build_faithfulness
from pytest_longctx.data.builtin.text import code_files, wikipedia_articles
from pytest_longctx.data.records import DEPTHS, PROBE_TYPES
from pytest_longctx.data.schema import parse_item
from pytest_longctx.scoring.fingerprint import item_fingerprint
from pytest_longctx.scoring.scores_file import load_scores

BASELINE = Path(__file__).resolve().parent.parent / "baselines" / "smollm2-135m.json.gz"
LARGE = 2000  # tokens: what counts as a large output here


@pytest.fixture(scope="module")
def heavy(qwen_tokenizer):
    rows = build_faithfulness(seed=0)[SESSION_ITEMS:]
    return [parse_item("faithfulness", row, f"row {n}") for n, row in enumerate(rows, SESSION_ITEMS)]


def size(tokenizer, text):
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


def test_the_suite_follows_the_sessions_and_changes_none_of_them():
    assert DEFAULT_ITEMS == SESSION_ITEMS + TOOL_HEAVY_ITEMS and TOOL_HEAVY_ITEMS >= 48
    # the committed baseline was scored on the first items: they are the same items still
    baseline = load_scores(BASELINE)
    stored = baseline.scores["faithfulness"]["train"]
    now = {row["id"]: parse_item("faithfulness", row, "row") for row in build_faithfulness(seed=0, limit=len(stored))}
    assert len(stored) >= 8 and {i: s.fingerprint for i, s in stored.items()} == {i: item_fingerprint(item) for i, item in now.items()}


def test_every_session_has_large_outputs_with_the_fact_buried_in_one(heavy, qwen_tokenizer):
    holders = Counter()
    for item in heavy:
        assert item.suite == "tool_heavy" and item.placement == "buried"
        fact = re.compile(item.required_facts[0], re.IGNORECASE)
        large = [m for m in item.messages if m.role == "tool" and size(qwen_tokenizer, m.content) >= LARGE]
        assert 2 <= len(large) <= 3, item.id
        assert all(size(qwen_tokenizer, m.content) <= 15_000 for m in large), item.id
        holding = [m for m in item.messages if fact.search(m.content)]
        assert len(holding) == 1 and holding[0] in large and len(fact.findall(holding[0].content)) == 1, item.id
        content = holding[0].content
        holders[next(kind for kind, looks in (("html", content.startswith("<!DOCTYPE html>")), ("json", content.startswith("{")),
                                              ("tests", content.startswith("=====")), ("logs", content[:4].isdigit()))
                      if looks)] += 1
    assert set(holders) == {"html", "json", "logs", "tests"} and min(holders.values()) >= TOOL_HEAVY_ITEMS // 8
    sizes = [size(qwen_tokenizer, m.content) for item in heavy for m in item.messages if m.role == "tool"]
    assert min(s for s in sizes if s >= LARGE) < 3000 and max(sizes) > 12_000  # the range is used, both ends


def test_outputs_are_what_they_say_and_show_the_shipped_texts(heavy):
    outputs = [m.content for item in heavy for m in item.messages if m.role == "tool" and len(m.content) > 6000]
    for text in outputs:
        if text.startswith("{"):
            assert json.loads(text)["status"] == "ok"
        if text.startswith("<!DOCTYPE html>"):
            assert text.endswith("</html>") and text.count("<p>") > 10
    names = {f.path for f in code_files()}
    listings = [t for t in outputs if t.startswith("-rw-")]
    for line in listings[0].splitlines():  # the shipped files, where a checkout, a build and an install put them
        path = re.sub(r"^\./(build/lib/|\.venv/lib/python3\.11/site-packages/)?", "", line.split()[-1])
        assert path in names or re.sub(r"__pycache__/(\w+)\.cpython-311\.pyc$", r"\1.py", path) in names, line
    paragraphs = {p for a in wikipedia_articles() for p in a.paragraphs}
    pages = [t for t in outputs if t.startswith("<!DOCTYPE html>")]
    plain = {re.sub(r"<[^>]+>", "", line) for line in pages[0].splitlines() if line.startswith("<p>")}
    assert len(plain & paragraphs) > len(plain) * 0.8  # the page's paragraphs are the articles' own, markup aside
    assert all(d in names for item in heavy for s in item.sources if s["kind"] == "code" for d in s["documents"])


def test_probe_types_and_depths_are_balanced(heavy):
    combos = Counter((item.probe_type, item.depth) for item in heavy)
    assert set(combos) == {(p, d) for p in PROBE_TYPES for d in DEPTHS}
    assert max(combos.values()) == min(combos.values())
