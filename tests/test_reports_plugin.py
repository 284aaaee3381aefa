"""The gate's reports: the markdown summary (``--longctx-markdown``, ``$GITHUB_STEP_SUMMARY``)
and the HTML report (``--longctx-html``), the latter as a real headless browser renders it."""
from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

import pytest
from kit import browser
from kit.models import degraded_model, save_model
from kit.needs import needs, skip_unless
from kit.reports import score_pair
from kit.runs import run_pytest

EARLIER = "## an earlier step\n\n"
FAILING_CELLS = "rules_en-2k-user-*:retained=1000"  # cells no model can pass: the summary must list them


@dataclass
class Gate:
    result: subprocess.CompletedProcess
    baseline: Path
    markdown: Path
    step_summary: Path
    html: Path
    out: Path


@pytest.fixture(scope="module")
def gate(qwen_model, qwen_tokenizer, data_dir, tmp_path_factory):
    """The degraded model gated against the reference's baseline, every report asked for."""
    folder = tmp_path_factory.mktemp("gate-reports")
    pair = score_pair(qwen_model, qwen_tokenizer, data_dir, folder)
    model = save_model(folder / "degraded", degraded_model(qwen_model), qwen_tokenizer)
    found = Gate(None, pair.baseline, folder / "summary.md", folder / "step.md", folder / "report.html", folder / "out.json")
    found.step_summary.write_text(EARLIER)
    found.result = run_pytest(
        folder, f"--longctx-model={model}", f"--longctx-data={data_dir}", "--longctx-lengths=2k",
        f"--longctx-baseline={pair.baseline}", f"--longctx-threshold={FAILING_CELLS}", f"--longctx-markdown={found.markdown}",
        f"--longctx-html={found.html}", f"--longctx-out={found.out}", environment={"GITHUB_STEP_SUMMARY": str(found.step_summary)},
    )
    return found


def test_the_step_summary_gets_the_headline_table_and_the_failing_cells(gate):
    assert gate.result.returncode == 1, gate.result.stdout[-3000:] + gate.result.stderr[-3000:]
    assert f"markdown summary written to {gate.markdown}" in gate.result.stdout
    summary = gate.markdown.read_text()
    assert gate.step_summary.read_text() == EARLIER + summary  # appended, never overwritten
    results = json.loads(gate.out.read_text())
    headline, rest = summary.split("### Drift at the reads")
    drift, failing = rest.split("### Failing cells")
    failing, blamed = failing.split("### Which parts to blame")  # the failing drift row's blame command, after the summary
    assert f"`longctx blame --reference reference --model {gate.html.parent / 'degraded'} --baseline {gate.baseline} " in blamed
    table = {line.split(" | ")[0][2:]: line.strip("| ").split(" | ") for line in headline.splitlines()
             if line.startswith("| ") and not line.startswith(("| row ", "| :---"))}
    verdicts = {v["label"]: v for v in results["verdicts"]}
    assert set(table) == set(results["rows"])
    for name, value in results["rows"].items():
        _, baseline, model, _, _, word = table[name]
        # a row's word is that of all its checks, naming those that fail: its value's and its drift's
        checks = [verdicts[name], verdicts.get(f"{name}: drift at far reads")]
        failed = ["drift" if v["metric"] == "kl" else v["metric"] for v in checks if v and v["verdict"] == "FAIL"]
        expected = f"FAIL ({', '.join(failed)})" if failed else verdicts[name]["verdict"]
        assert (baseline, model, word) == (f"{results['baseline_rows'][name]:.3f}", f"{value:.3f}", expected)
    # the drift table: one line per row with drift figures, its check's verdict and the damage kind
    drift_table = {line.split(" | ")[0][2:]: line.strip("| ").split(" | ") for line in drift.splitlines()
                   if line.startswith("| ") and not line.startswith(("| row ", "| :---"))}
    assert set(drift_table) == set(results["drift"])
    for name, found in results["drift"].items():
        check = verdicts.get(f"{name}: drift at far reads")
        fails = "FAIL" in (verdicts[name]["verdict"], check["verdict"] if check else "")
        kind = {"none": "not located by drift", "": "n/a", None: "n/a"}.get(found["kind"], found["kind"])
        assert drift_table[name][-2:] == [check["verdict"] if check else "-", kind if fails else "-"]
    failing_cells = {v["key"] for v in results["verdicts"]
                     if v["verdict"] == "FAIL" and v["label"] not in results["rows"] and v["metric"] != "kl"}
    listed = [line for line in failing.splitlines() if line.startswith("- ")]
    assert failing_cells == {"rules_en-2k-user-all", "rules_en-2k-user-substitution", "rules_en-2k-user-redirect"}
    assert len(listed) == len(failing_cells) and all("needs >= 1000.000" in line for line in listed)


def test_compare_on_the_gates_results_judges_as_the_gate(gate, capsys):
    from pytest_longctx.cli import main

    results = json.loads(gate.out.read_text())
    assert results["scores"]["facts"]["2k"]["f0"]["targets"]
    code = main(["compare", str(gate.baseline), str(gate.out), "--format", "json", f"--threshold={FAILING_CELLS}"])
    report = json.loads(capsys.readouterr().out)
    assert code == 1 and report["rows"] == pytest.approx(results["rows"])
    assert {v["key"]: v["verdict"] for v in report["verdicts"]} == {v["key"]: v["verdict"] for v in results["verdicts"]}


class Page(HTMLParser):
    """Tables (cell texts by row) and figures (whether they hold an SVG) of a DOM, by id."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self.figures: dict[str, bool] = {}
        self.open: list[tuple[str, str]] = []  # (kind, id) of the table or figure being read
        self.cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list) -> None:
        ident = dict(attrs).get("id", "")
        if tag == "table":
            self.open.append(("table", ident))
            self.tables[ident] = []
        elif tag == "figure":
            self.open.append(("figure", ident))
            self.figures[ident] = False
        elif tag == "svg" and self.open and self.open[-1][0] == "figure":
            self.figures[self.open[-1][1]] = True
        elif tag == "tr" and self.open and self.open[-1][0] == "table":
            self.tables[self.open[-1][1]].append([])
        elif tag in ("td", "th"):
            self.cell = []

    def handle_data(self, data: str) -> None:
        if self.cell is not None:
            self.cell.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self.cell is not None:
            self.tables[self.open[-1][1]][-1].append("".join(self.cell).strip())
            self.cell = None
        elif tag in ("table", "figure"):
            self.open.pop()


def chromium(tmp_path: Path, *args: str) -> str:
    skip_unless(browser.missing(), install="Debian: apt-get install chromium; .ci/run installs it")
    return browser.chromium(tmp_path / "profile", *args)


@needs("matplotlib", install='pip install -e ".[report]"')
def test_a_browser_renders_the_html_report_tables_and_plots(gate, tmp_path):
    results = json.loads(gate.out.read_text())
    url = gate.html.as_uri()
    page = Page()
    page.feed(chromium(tmp_path, "--dump-dom", url))
    headline = page.tables["headline-table"]
    assert headline[0] == ["row", "baseline", "model", "delta", "threshold", "verdict"]
    assert {row[0]: row[2] for row in headline[1:]} == {name: f"{v:.3f}" for name, v in results["rows"].items()}
    assert page.figures == {"drift-plot": True, "distance-plot": True, "effects-plot-rules_en": True, "effects-plot-rules_cs": True,
                            "effects-plot-rules_de": True}
    assert len(page.tables["rules-table"]) == 1 + 3 * 2 * 4  # configs x placements x (all + 3 families)

    from matplotlib.image import imread

    from pytest_longctx.reports.plots import BASELINE_COLOUR

    shot = tmp_path / "report.png"
    chromium(tmp_path, "--window-size=1200,2000", f"--screenshot={shot}", url)
    pixels = imread(shot)[..., :3] * 255  # the baseline's bars, drawn by the browser from the inline SVG
    colour = [int(BASELINE_COLOUR[i:i + 2], 16) for i in (1, 3, 5)]
    assert (abs(pixels - colour).max(axis=-1) <= 3).sum() > 1000


def test_a_gate_that_cannot_judge_says_so_in_its_summary(pytester, data_dir, tmp_path, monkeypatch):
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    summary, model = tmp_path / "summary.md", tmp_path / "never-loaded"
    model.mkdir()  # a folder: the gate checks the model is there before anything, and never loads it without a baseline
    result = pytester.runpytest_inprocess(
        "-p", "no:cacheprovider", f"--longctx-model={model}", f"--longctx-data={data_dir}", "--longctx-lengths=2k",
        f"--longctx-baseline={tmp_path / 'none.json.gz'}", f"--longctx-markdown={summary}")
    assert result.ret == 1
    lines = summary.read_text().splitlines()
    assert lines[0] == "## longctx: FAIL"
    assert any(line.startswith("> **error**: baseline ") and "does not exist" in line for line in lines)
