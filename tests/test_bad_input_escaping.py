"""Text from data (item ids, answers) and from options (the model's name) is escaped for the
format it lands in: markdown (the summary and the step summary), HTML, the junit XML and the
terminal show it literally, control characters written out; the results JSON keeps it exactly.
And the results JSON says what the docs say: a passing row names no damage kind, and every
top-level key is in the docs' table."""
from __future__ import annotations

import gzip
import json
import random
import re
import subprocess
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

import pytest
from kit.items import Text, add_qwen_fields, filler, write_split
from kit.models import degraded_model, save_model
from kit.needs import needs
from kit.reports import score_pair
from kit.runs import run_pytest

# markdown syntax, raw HTML, a link, a table cell, a terminal escape sequence, a line break
NASTY = "`<img src=x onerror=alert(1)>[link](http://e.x)|\x1b[31m\nend"
ITEM_ID = "f" + NASTY
ANSWER = " 4" + NASTY
MODEL_DIR = "deg`<b>x<b>|*y*[z](w)"  # a folder name: no slash, no colon (a module:object name)
ROOT = Path(__file__).resolve().parent.parent
# GitHub's own markdown renderer (cmark-gfm): what the step summary becomes
needs_cmarkgfm = needs("cmarkgfm", install='pip install -e ".[test]"')
FAR = 4000  # the facts targets' distance: their reads are far reads, so a failing facts row has a damage kind


def shown(text: str) -> str:
    """How a report shows ``text`` on one line: its control characters written out."""
    return text.replace("\x1b", "\\x1b").replace("\n", "\\n")


def answer_row(tokenizer) -> dict:
    """A facts item whose fact and answer hold ``NASTY``."""
    rng, t = random.Random(7), Text()
    t.add(filler(rng, 40) + " ")
    fact_char = t.add(f"The code word is{ANSWER}.")
    t.add(" " + filler(rng, 120))
    t.add(" What is the code word? It is")
    answer_char = t.add(ANSWER)
    t.add(". " + filler(rng, 10))
    row = {"id": "f-answer", "text": t.text, "source": {"articles": ["Test"]},
           "targets": [{"answer_char": list(answer_char), "answer": ANSWER, "fact_char": list(fact_char),
                        "fact": f"The code word is{ANSWER}.", "distance_tokens": FAR}]}
    return add_qwen_fields("facts", row, tokenizer)


def holding(row: dict) -> dict:
    """A tool-call item whose every target is the text its span holds."""
    return dict(row, targets=[dict(t, target=row["text"][t["char"][0]:t["char"][1]]) for t in row["targets"]])


@dataclass
class Gate:
    result: subprocess.CompletedProcess
    folder: Path
    baseline: Path
    markdown: Path
    step_summary: Path
    html: Path
    out: Path
    junit: Path
    scored: dict  # the degraded model's results JSON as `longctx score --out` writes it


@pytest.fixture(scope="module")
def gate(rows, qwen_model, qwen_tokenizer, tmp_path_factory):
    """The degraded model, in a folder with a nasty name, gated on facts items with a nasty id
    and a nasty answer (and the plain tool-call items, whose row passes), every report asked for."""
    folder = tmp_path_factory.mktemp("nasty")
    data = folder / "data"
    named = dict(rows[("facts", "2k")][0], id=ITEM_ID)
    named["targets"] = [dict(t, distance_tokens=FAR) for t in named["targets"]]
    write_split(data, "facts", "2k", [named, answer_row(qwen_tokenizer)])
    write_split(data, "tool_calls", "2k", [holding(row) for row in rows[("tool_calls", "2k")]])
    pair = score_pair(qwen_model, qwen_tokenizer, data, folder)
    model = save_model(folder / MODEL_DIR, degraded_model(qwen_model), qwen_tokenizer)
    names = ("summary.md", "step.md", "report.html", "out.json", "junit.xml")
    found = Gate(None, folder, pair.baseline, *(folder / name for name in names), pair.degraded.to_json())
    found.result = run_pytest(
        folder, "--color=no", f"--longctx-model={model}", f"--longctx-data={data}", "--longctx-lengths=2k",
        "--longctx-sequential=off",  # every item read: the nasty one is shown whatever settles first
        f"--longctx-baseline={pair.baseline}", "--longctx-item-max-drop=0", "--longctx-threshold=tool_calls-2k:drop=1",
        "--longctx-threshold=tool_calls-2k:kl=100", f"--longctx-markdown={found.markdown}", f"--longctx-html={found.html}",
        f"--longctx-out={found.out}", f"--junitxml={found.junit}", environment={"GITHUB_STEP_SUMMARY": str(found.step_summary)},
    )
    assert found.result.returncode == 1, found.result.stdout[-3000:] + found.result.stderr[-3000:]
    return found


def compare(gate, capsys, *args) -> str:
    from pytest_longctx.cli import main

    code = main(["compare", str(gate.baseline), str(gate.out), "--top", "0", *map(str, args)])
    captured = capsys.readouterr()
    assert code == 1, captured.err
    return captured.out


# ------------------------------------------------------------------ markdown


class Rendered(HTMLParser):
    """The elements of rendered markdown, its text, and the cells of each table row."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: set[str] = set()
        self.text: list[str] = []
        self.rows: list[list[int]] = []  # per table: the number of cells of each row

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self.tags.add(tag)
        if tag == "table":
            self.rows.append([])
        elif tag == "tr":
            self.rows[-1].append(0)
        elif tag in ("td", "th"):
            self.rows[-1][-1] += 1

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def rendered(markdown: str) -> Rendered:
    """The markdown as GitHub renders it (cmark-gfm with its extensions, raw HTML let through
    as GitHub lets ``<img>`` through)."""
    import cmarkgfm

    page = Rendered()
    page.feed(cmarkgfm.github_flavored_markdown_to_html(markdown, options=cmarkgfm.Options.CMARK_OPT_UNSAFE))
    return page


def assert_literal(markdown: str, *texts: str) -> None:
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f]", markdown), "a control character reached the markdown"
    page = rendered(markdown)
    assert not page.tags & {"img", "a", "b", "em", "strong", "del", "script"}, page.tags
    for cells in page.rows:
        assert len(set(cells)) == 1, f"a table row with its own number of cells: {cells}"
    body = "".join(page.text)
    for text in texts:
        assert shown(text) in body


@needs_cmarkgfm
@pytest.mark.parametrize("text", [
    NASTY, "www.e.x/a", "https://e.x", "<http://e.x>", "mail a@b.co", "mailto:a@b.c", "@someone", "~~gone~~ ~x~",
    "_em_ __b__ *i* **b**", "&lt;img&gt; &#60;", "![i](x.png)", "[r]: http://x", "[a][b]", "x<!-- c -->", "<?php ?>",
    "a\\`b", "a\\|b", "`code`", "$x$", "x\\"])
def test_markdown_text_is_shown_literally_in_a_list_and_a_table(text):
    from pytest_longctx.reports.format import markdown_text

    page = rendered(f"- x {markdown_text(text)}\n\n| a | b |\n| --- | --- |\n| {markdown_text(text)} | y |\n")
    assert page.tags == {"ul", "li", "table", "thead", "tbody", "tr", "th", "td"} and page.rows == [[2, 2]]
    assert "".join(page.text).count(shown(text)) == 2


# what GitHub acts on in rendered text, beyond markdown: references to issues and pull requests
# (#123, owner/repo#7, GH-9), mentions, emoji shortcodes
GITHUB_REFERENCE = re.compile(r"#[0-9]|(?<![A-Za-z0-9])GH-[0-9]|@[A-Za-z0-9]|:[A-Za-z0-9_+-]+:", re.IGNORECASE)


@needs_cmarkgfm
@pytest.mark.parametrize("text", ["see #123", "owner/repo#7", "GH-9 and gh-10", ":rocket: :+1:", "@someone", "a&#35;1",
                                  "f#1:x:", "`#1`"])
def test_markdown_text_makes_no_reference_mention_or_emoji(text):
    from pytest_longctx.reports.format import markdown_text

    page = rendered(f"- x {markdown_text(text)}\n\n| a | b |\n| --- | --- |\n| {markdown_text(text)} | y |\n")
    assert "".join(page.text).count(text) == 2  # shown as it is
    for piece in page.text:  # GitHub links and replaces within each piece of rendered text
        assert not GITHUB_REFERENCE.search(piece), (text, piece)


@needs_cmarkgfm
def test_the_markdown_summary_and_the_step_summary_show_the_id_literally(gate):
    summary = gate.markdown.read_text()
    assert gate.step_summary.read_text() == summary
    assert "lost more than allowed" in summary
    assert_literal(summary, ITEM_ID, MODEL_DIR)


@needs_cmarkgfm
def test_the_markdown_report_shows_ids_and_answers_literally(gate, capsys):
    report = compare(gate, capsys, "--format", "markdown")
    assert "### Targets that lost the most" in report
    assert_literal(report, ITEM_ID)
    # the answer in its text, inside a code block: shown as it is, its line break kept
    assert "⟦" + ANSWER.replace("\x1b", "\\x1b") + "⟧" in "".join(rendered(report).text)


# ------------------------------------------------------------------ HTML


class Elements(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: set[str] = set()
        self.attributes: set[str] = set()
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self.tags.add(tag)
        self.attributes |= {name for name, _ in attrs}

    def handle_data(self, data: str) -> None:
        self.text.append(data)


@pytest.mark.parametrize("source", ["gate", "compare"])
def test_the_html_report_shows_ids_answers_and_the_model_literally(gate, capsys, tmp_path, source):
    if source == "gate":
        html = gate.html.read_text()
    else:
        compare(gate, capsys, "--format", "html", "--out", tmp_path / "report.html")
        html = (tmp_path / "report.html").read_text()
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f]", html), "a control character reached the HTML"
    page = Elements()
    page.feed(html)
    assert "img" not in page.tags and "a" not in page.tags and "onerror" not in page.attributes
    body = "".join(page.text)
    assert shown(ITEM_ID) in body and ANSWER.replace("\x1b", "\\x1b") in body
    if source == "gate":
        assert shown(MODEL_DIR) in body


# ------------------------------------------------------------------ junit, terminal, JSON


def test_the_junit_file_reads_and_shows_control_characters_written_out(gate):
    root = ET.parse(gate.junit).getroot()  # a raw ESC makes the file unreadable
    texts = [value for element in root.iter() for value in [*element.attrib.values(), element.text or ""]]
    assert not any(re.search(r"[\x00-\x08\x0b\x0c\x0e-\x1f]", value) for value in texts)
    failures = [f.get("message", "") for f in root.iter("failure")]
    assert any(shown(ITEM_ID) in message for message in failures), failures


def test_the_terminal_never_gets_a_control_character_raw(gate):
    out = gate.result.stdout
    assert "\x1b" not in out and "\r" not in out
    summary = out[out.index("longctx gate:"):]
    assert shown(ITEM_ID) in summary and shown(MODEL_DIR) in summary
    assert f"lost the most: {shown(ITEM_ID)} " in out  # the row's failure message


def test_the_text_report_writes_control_characters_out(gate, capsys):
    report = compare(gate, capsys)
    assert "\x1b" not in report and "\r" not in report and shown(ITEM_ID) in report
    assert ANSWER.replace("\x1b", "\\x1b").splitlines()[0] in report  # the answer in its text: its line break kept


def test_an_error_line_naming_the_item_stays_one_line(gate, capsys, tmp_path):
    from pytest_longctx.cli import main

    body = json.loads(gzip.decompress(gate.baseline.read_bytes()))
    del body["scores"]["facts"]["2k"][ITEM_ID]
    baseline = tmp_path / "without.json.gz"
    baseline.write_bytes(gzip.compress(json.dumps(body).encode()))
    code = main(["compare", str(baseline), str(gate.out)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "\x1b" not in err
    assert f"has no scores for facts/2k/{shown(ITEM_ID)} (" in err


def test_the_results_json_keeps_the_text_exactly(gate):
    results = json.loads(gate.out.read_text())
    assert ITEM_ID in results["scores"]["facts"]["2k"] and ITEM_ID in results["sets"]["facts"]["2k"]["per_item"]
    assert results["meta"]["model"] == str(gate.folder / MODEL_DIR)


# ------------------------------------------------------------------ what the results JSON says


def test_a_passing_row_names_no_damage_kind_in_the_results_json_or_junit(gate):
    results = json.loads(gate.out.read_text())
    suite = ET.parse(gate.junit).getroot().find("testsuite")
    properties = {p.get("name"): p.get("value") for p in suite.find("properties")}
    verdicts = {v["label"]: v for v in results["verdicts"]}
    failing = {name for name in results["drift"]
               if "FAIL" in (verdicts[name]["verdict"], verdicts.get(f"{name}: drift at far reads", {}).get("verdict"))}
    passing = set(results["drift"]) - failing
    assert failing and passing, (failing, passing)
    key = {name: verdicts[name]["key"] for name in results["drift"]}  # junit names a row by its key
    for name in passing:
        assert results["drift"][name]["kind"] is None and properties[f"longctx.damage.{key[name]}"] == "", name
        assert all(v["damage"] is None for v in results["verdicts"] if v["label"].startswith(name)), name
    for name in failing:
        assert results["drift"][name]["kind"] in ("far-specific", "general", "both", "none"), name
        assert verdicts[name]["damage"] == results["drift"][name]["kind"]
        assert properties[f"longctx.damage.{key[name]}"] == (results["drift"][name]["kind"] or "")


def documented_keys(doc: str) -> tuple[set[str], set[str]]:
    """The keys of the results JSON in the docs' table a run of the whole selection writes (a shard's own key left
    out): (every such key, those of the gate's only)."""
    section = doc[doc.index("**Results JSON**"):]
    rows = re.findall(r"^\| `(\w+)` \| (.*) \|$", section[:section.index("\n\n", section.index("| key |"))], re.M)
    assert rows, "docs/metrics.md: no results JSON table"
    rows = [(key, holds) for key, holds in rows if not holds.startswith("a shard's only")]
    return {key for key, _ in rows}, {key for key, holds in rows if holds.startswith("the gate's only")}


def test_the_docs_name_every_key_of_the_results_json(gate):
    keys, gates = documented_keys((ROOT / "docs" / "metrics.md").read_text())
    results = json.loads(gate.out.read_text())
    assert set(results) == keys  # the gate's
    assert set(gate.scored) == keys - gates  # longctx score --out
    drift = next(line for line in (ROOT / "docs" / "metrics.md").read_text().splitlines() if line.startswith("| `drift` |"))
    for found in results["drift"].values():  # what a row's drift holds
        assert all(f"`{key}`" in drift for key in found), [key for key in found if f"`{key}`" not in drift]


# ------------------------------------------------------------------ the compressor gate


def test_the_compressor_gate_writes_control_characters_out(pytester, tmp_path):
    import scipy.stats  # noqa: F401  # loaded once: a gate run in-process must not load numpy's extensions again

    from pytest_longctx.data.builtin.faithfulness import build_faithfulness

    sessions = build_faithfulness(seed=0, limit=4)
    sessions[0]["id"] = "s" + NASTY
    write_split(tmp_path / "data", "faithfulness", "train", sessions)
    pytester.makepyfile(nasty=f"""
        def compress(messages, probe):
            if probe == {sessions[0]["probe"]!r}:
                raise RuntimeError("state \\x1b[2J\\rlost")
            return messages
    """)
    junit = pytester.path / "junit.xml"
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--color=no", "--longctx-compressor=nasty:compress",
                                          f"--longctx-data={tmp_path / 'data'}", f"--junitxml={junit}")
    out = result.stdout.str()
    assert result.ret == 1 and "could not be compressed" in out
    assert "\x1b" not in out and "\r" not in out
    assert "state \\x1b[2J\\rlost" in out and shown("s" + NASTY) in out
    root = ET.parse(junit).getroot()
    assert any(shown("s" + NASTY) in f.get("message", "") for f in root.iter("failure"))
