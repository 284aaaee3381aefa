"""The faithfulness builder: same seed, same bytes; the card's schema; every fact with
both probe types at every depth and placement; probes that mean what their type says."""
from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from pytest_longctx.cli import main
from pytest_longctx.compress.words import content_words
from pytest_longctx.data.builtin.faithfulness import DEFAULT_ITEMS, build_faithfulness, item_plan
from pytest_longctx.data.builtin.faithfulness_facts import LOW_SURPRISAL, STANDARD
from pytest_longctx.data.builtin.text import code_files, wikipedia_articles
from pytest_longctx.data.faithfulness import load_sessions
from pytest_longctx.data.records import DEPTHS, FACT_PLACEMENTS, PROBE_TYPES, session_text


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("faithfulness")
    assert main(["build", "--out", str(out), "--sets", "faithfulness"]) == 0
    return out


@pytest.fixture(scope="module")
def items(built):
    return load_sessions(str(built)).configs["faithfulness"]["train"]


def test_same_seed_same_items_and_a_card(built, items):
    assert build_faithfulness(0, limit=12) == build_faithfulness(0, limit=12) != build_faithfulness(1, limit=12)
    first = build_faithfulness(0, limit=12)
    assert [(i.id, i.probe, [m.content for m in i.messages]) for i in items[:12]] == [
        (r["id"], r["probe"], [m["content"] for m in r["messages"]]) for r in first]
    assert "| faithfulness | train | 348 | 348 facts |" in (built / "README.md").read_text()


def test_every_fact_has_both_probe_types_and_every_suite_every_depth_and_placement(items):
    assert len(items) == DEFAULT_ITEMS
    assert len(STANDARD) >= 10 and len(LOW_SURPRISAL) >= 10
    for suite, facts in (("standard", STANDARD), ("low_surprisal", LOW_SURPRISAL)):
        mine = [i for i in items if i.suite == suite]
        assert {i.concept for i in mine} == {f.concept for f in facts}
        for fact in facts:
            assert {i.probe_type for i in mine if i.concept == fact.concept} == set(PROBE_TYPES), fact.concept
        combos = Counter((i.probe_type, i.depth, i.placement) for i in mine)
        assert set(combos) == {(p, d, pl) for p in PROBE_TYPES for d in DEPTHS for pl in FACT_PLACEMENTS}
        assert max(combos.values()) - min(combos.values()) <= 1  # balanced
    assert Counter(i.suite for i in items) == {"standard": 200, "low_surprisal": 100, "tool_heavy": 48}


def test_any_prefix_covers_depths_and_probe_types_evenly():
    first = [item_plan(n) for n in range(9)]  # 6 standard, 3 low-surprisal
    standard = [(combo[0], combo[1]) for suite, _, combo in first if suite == "standard"]
    assert set(standard) == {(p, d) for p in PROBE_TYPES for d in DEPTHS}


def test_probes_share_content_words_with_the_fact_only_when_verbatim():
    for fact in STANDARD + LOW_SURPRISAL:
        words = content_words(fact.fact)
        for probe in fact.verbatim:
            assert content_words(probe) & words, (fact.concept, probe)
        for probe in fact.paraphrase:
            assert not content_words(probe) & words, (fact.concept, probe, content_words(probe) & words)
        assert re.search(fact.required, fact.fact, re.IGNORECASE)


def test_the_fact_occurs_once_where_its_depth_and_placement_say(items):
    for item in items:
        fact = re.compile(item.required_facts[0], re.IGNORECASE)
        holding = [n for n, m in enumerate(item.messages) if fact.search(m.content)]
        assert len(holding) == 1 and len(fact.findall(session_text(item.messages))) == 1, item.id
        (at,) = holding
        message = item.messages[at].content
        statement = message == next(f.fact for f in STANDARD + LOW_SURPRISAL if f.concept == item.concept)
        assert statement == (item.placement == "statement"), item.id
        position = at / len(item.messages)
        assert {"early": position < 0.35, "mid": 0.25 < position < 0.75, "recent": position > 0.7}[item.depth], item.id
        assert 14 <= len(item.messages) <= 30 and item.messages[0].role == "system"


def test_sessions_show_the_shipped_real_texts(items):
    code = {(f.path) for f in code_files()}
    titles = {a.title for a in wikipedia_articles()}
    shown_code = {d for i in items for s in i.sources if s["kind"] == "code" for d in s["documents"]}
    shown_pages = {d for i in items for s in i.sources if s["kind"] == "text" for d in s["documents"]}
    assert len(shown_code) > 20 and shown_code <= code
    assert len(shown_pages) > 50 and shown_pages <= titles
    reads = [m for i in items for m in i.messages if m.role == "tool" and m.name == "read_file"]
    assert sum(any(m.content in f.text for f in code_files()) for m in reads) > len(reads) * 0.8
    rereads = sum(1 for i in items for m in i.messages if m.content.startswith("Re-reading "))
    assert rereads > 50
