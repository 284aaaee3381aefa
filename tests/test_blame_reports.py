"""``longctx blame``'s reports on a real blame of two tiny qwen3 checkpoints (planted damage in
layers 1 and 3): the markdown, rendered as GitHub renders it, and the HTML report hold every part's
figures as computed here from the blame's row states, and the HTML's bars are drawn at its shares."""
from __future__ import annotations

import copy
import json
import re
from html.parser import HTMLParser

import pytest
import torch
from kit.blame import blame
from kit.models import damaged, tiny_qwen3
from kit.needs import needs

from pytest_longctx.cli.main import main
from pytest_longctx.data.load import load_dataset
from pytest_longctx.reports import plots
from pytest_longctx.reports.blame import HEADERS, beside_drift, blame_html, blame_markdown, blame_sections, blame_text
from pytest_longctx.reports.format import markdown_text as cell


@pytest.fixture(scope="module")
def models(qwen_tokenizer):
    original = tiny_qwen3(len(qwen_tokenizer), seed=3, layers=4, init=0.5)
    return original, damaged(original)


@pytest.fixture(scope="module")
def found(models, data_dir):
    dataset = load_dataset(str(data_dir), sets=["tool_calls"], lengths=["2k"], limit=2)
    return blame(*models, None, dataset, None, progress=False)


def expected_cells(found, models, row: str) -> list[list[str]]:
    """The ranked table of ``row``, computed from the row states and the models' own parameters: the parts the
    compression changed, in their rank; the unchanged ones are listed apart."""
    original, candidate = models
    before = found.candidate[row]
    cells = []
    changed = [e for e in found.parts
               if not all(torch.equal(original.get_parameter(n), candidate.get_parameter(n)) for n in e.part.parameters)]
    for rank, entry in enumerate(changed, 1):
        after, hurt = entry.restore[row], entry.damage[row]
        restored = (before.far - after.far) / before.far
        excess = "n/a" if not before.excess or before.excess < 0 else f"{(before.excess - after.excess) / before.excess:.0%}"
        caused = hurt.far / before.far
        count = sum(original.get_parameter(name).numel() for name in entry.part.parameters)
        shown = f"{count / 1e6:.2f}M" if count >= 1e6 else f"{count:,}"
        mark = "differ" if abs(restored - caused) > 0.25 else ""
        cells.append([str(rank), entry.part.name, f"{before.far:.3f} -> {after.far:.3f}", f"{restored:.0%}",
                      f"{entry.estimate:.0%}", excess, f"{hurt.far:.3f}", f"{caused:.0%}", shown, mark])
    return cells


class Page(HTMLParser):
    """The cells of every table (by row) and the text of every list item of an HTML page."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.tables: list[list[list[str]]] = []
        self.items: list[str] = []
        self.open: str | None = None
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self.tables[-1][-1].append("")
        elif tag == "li":
            self.items.append("")
        self.open = tag

    def handle_endtag(self, tag: str) -> None:
        self.open = None

    def handle_data(self, data: str) -> None:
        if self.open in ("td", "th"):
            self.tables[-1][-1][-1] += data
        elif self.open == "li":
            self.items[-1] += data


def check_tables(found, models, tables: list[list[list[str]]]) -> None:
    assert len(tables) == len(found.rows) >= 1
    for row, table in zip(found.rows, tables):
        assert table[0] == HEADERS
        assert table[1:] == expected_cells(found, models, row)
        assert {line[1] for line in table[1:3]} == {"layer.1", "layer.3"}  # the planted layers first


@needs("cmarkgfm", install='pip install -e ".[test]"')
def test_the_markdown_renders_every_parts_figures_and_the_fix_set(found, models):
    import cmarkgfm

    text = blame_markdown(found)
    page = Page(cmarkgfm.github_flavored_markdown_to_html(text))
    check_tables(found, models, page.tables)
    assert text.startswith("## longctx blame: ") and blame_markdown(found, level=3).startswith("### longctx blame: ")
    fix = next(i for i in page.items if i.startswith("fix set"))
    assert f"fix set (2 parts, passes): keep {', '.join(found.fix_set)} from the original" in fix
    assert sorted(found.fix_set) == ["layer.1", "layer.3"]
    kept = sum(models[0].get_parameter(n).numel() for p in found.parts if p.part.name in found.fix_set for n in p.part.parameters)
    size = f"{kept * 4 / 1024:.1f} KiB"  # float32 on both sides
    cost = (f"cost: {kept:,} parameters, held in the hybrids measured at the candidate's dtype (float32); {size} at the "
            f"original's precision, {size} at the candidate's")
    assert any(cost in item for item in page.items), page.items
    assert any(i.startswith("verification, the fix set through the gate on the whole selection: PASS") for i in page.items)


def bars(svg: str) -> dict[str, list[float]]:
    """The x coordinates of each named bar's outline (``restore-R-PART`` / ``damage-R-PART``)."""
    found = {}
    for name, path in re.findall(r'<g id="((?:restore|damage)-\d+-[^"]+)">\s*<path d="([^"]+)"', svg):
        numbers = [float(v) for v in re.findall(r"-?\d+(?:\.\d+)?", path)]
        found[name] = numbers[0::2]
    return found


@needs("matplotlib", install='pip install -e ".[report]"')
def test_the_html_bars_are_the_shares_and_its_tables_the_figures(found, models):
    text = blame_html(found)
    check_tables(found, models, Page(text).tables)
    drawn = bars(text)
    shares = {f"{direction}-0-{p.part.name}": share(p, found.rows[0]) for p in found.ranked
              for direction, share in (("restore", found.restore_share), ("damage", found.damage_share))}
    assert set(drawn) == set(shares)
    # every bar starts at the zero line; its length over its share is one scale for all of them
    zero = max({x for xs in drawn.values() for x in xs}, key=lambda x: sum(x in xs for xs in drawn.values()))
    ends = {name: max(xs, key=lambda x: abs(x - zero)) - zero for name, xs in drawn.items()}
    scales = [ends[name] / value for name, value in shares.items() if abs(value) > 0.02]
    assert len(scales) >= 4 and max(scales) - min(scales) < 1e-3 * max(scales)
    assert all(abs(ends[name]) < 0.02 * scales[0] for name, value in shares.items() if abs(value) <= 0.02)


def test_without_matplotlib_the_html_has_its_tables_alone(found, models, monkeypatch):
    monkeypatch.setattr(plots, "available", lambda: False)
    text = blame_html(found)
    assert "<svg" not in text and "No plot: matplotlib is not installed" in text
    check_tables(found, models, Page(text).tables)


def test_the_command_writes_markdown_and_html(models, data_dir, tmp_path, capsys):
    for name, model in zip(("original", "candidate"), models):
        model.save_pretrained(tmp_path / name)
    markdown, html = tmp_path / "blame.md", tmp_path / "blame.html"
    code = main(["blame", "--reference", str(tmp_path / "original"), "--model", str(tmp_path / "candidate"), "--data",
                 str(data_dir), "--sets", "tool_calls", "--lengths", "2k", "--limit", "1", "--parts", "layer.1,layer.2",
                 "--markdown", str(markdown), "--html", str(html), "--quiet"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert f"blame report written to {markdown}" in captured.err and f"blame report written to {html}" in captured.err
    table = [line for line in markdown.read_text().splitlines() if line.startswith("| ")]
    # ranked: the planted layer alone; layer 2, which the compression left as it was, is listed apart
    assert [line.split(" | ")[1] for line in table[2:]] == ["layer.1"]
    assert [cells[1] for cells in Page(html.read_text()).tables[0][1:]] == ["layer.1"]
    for text in (markdown.read_text(), html.read_text()):
        assert "unchanged by the compression, not ranked (restoring one is the candidate, damaging with it the original): " \
               "layer.2" in text


def test_in_the_gates_report_blame_sits_after_the_drift_section(found):
    sections = "".join(blame_sections(found))
    gate = '<html><body><section id="headline">h</section><section id="drift">d</section><section id="items">i</section></body></html>'
    assert beside_drift(gate, found) == gate.replace('d</section>', 'd</section>' + sections)
    without = "<html><body><section id=\"headline\">h</section></body></html>"
    assert beside_drift(without, found) == without.replace("</body>", sections + "</body>")


def test_a_recipe_is_in_every_report(found):
    made = copy.copy(found)
    made.recipe = ["llama-quantize \\", "  --tensor-type '^blk\\.1\\.(attn_q)\\.weight$=f32' \\", "  a.gguf fixed.gguf Q4_K_M"]
    made.recipe_tool = "llama.cpp"
    shown = "\n".join(["the fix set, made from the original by llama.cpp's quantizer:", *made.recipe])
    assert blame_text(made).endswith("\n\n" + shown) and shown not in blame_text(found)
    assert "```sh\n" + "\n".join(made.recipe) + "\n```" in blame_markdown(made)  # a shell block
    assert "<pre>" + "\n".join(made.recipe).replace("'", "&#x27;") + "</pre>" in blame_html(made)
    made.recipe, made.recipe_tool = ["# oneshot(...)", "stage:", "  ignore: [lm_head, model.layers.1.mlp.up_proj]"], "llm-compressor"
    assert blame_text(made).endswith("\n".join(["", "the fix set, made from the original by llm-compressor with this recipe:",
                                                 *made.recipe]))
    assert "```yaml\n" + "\n".join(made.recipe) + "\n```" in blame_markdown(made)


def test_a_candidate_with_non_finite_weights_is_named_in_every_report_and_nothing_is_blamed(models, data_dir, tmp_path,
                                                                                             capsys):
    """Layer 3 all NaN and one weight of layer 1 inf, as a broken conversion writes them: no hybrid of such a model
    reads anything but NaN, so blame names the parts and blames none (no interaction, no fix set)."""
    original, _ = models
    broken = copy.deepcopy(original)
    with torch.no_grad():
        for tensor in broken.model.layers[3].parameters():
            tensor.fill_(float("nan"))
        broken.model.layers[1].mlp.up_proj.weight[2, 5] = float("inf")
    original.save_pretrained(tmp_path / "original")
    broken.save_pretrained(tmp_path / "candidate")
    paths = {kind: tmp_path / f"blame.{kind}" for kind in ("json", "md", "html")}
    code = main(["blame", "--reference", str(tmp_path / "original"), "--model", str(tmp_path / "candidate"), "--data",
                 str(data_dir), "--sets", "tool_calls", "--lengths", "2k", "--limit", "1", "--out", str(paths["json"]),
                 "--markdown", str(paths["md"]), "--html", str(paths["html"]), "--quiet"])
    shown = capsys.readouterr().out
    assert code == 0, shown
    # what the model holds, read from it here
    held = {name: "NaN" if torch.isnan(t).any() else "inf" for name, t in broken.named_parameters() if not torch.isfinite(t).all()}
    third = [name for name, _ in broken.named_parameters() if name.startswith("model.layers.3.")]
    assert held == {"model.layers.1.mlp.up_proj.weight": "inf", **{name: "NaN" for name in third}}
    body = json.loads(paths["json"].read_text())
    assert body["non_finite"] == [{"side": "candidate", "part": "layer.1", "tensors": {"model.layers.1.mlp.up_proj.weight": "inf"}},
                                  {"side": "candidate", "part": "layer.3", "tensors": {name: "NaN" for name in third}}]
    assert not body["passed"] and body["rows"] == [] and body["parts"] == [] and body["fix_set"]["parts"] == []
    assert body["hybrids"] == 0 and body["notes"] == []  # nothing was scored, nothing is concluded
    line = (f"the candidate's layer.1 (inf) and layer.3 (NaN) hold non-finite weights (model.layers.1.mlp.up_proj.weight, "
            f"{third[0]}, {third[1]}, … ({len(held)} tensors)): a model with non-finite weights cannot be judged, so no part "
            "is blamed for its drift; re-make the candidate (its compression wrote them) and gate it again")
    assert shown.splitlines() == [f"blame: {tmp_path / 'candidate'} against {tmp_path / 'original'}: not judged, its "
                                  "weights are not all finite", "", line]
    markdown = paths["md"].read_text()
    assert f"- {cell(line)}" in markdown.splitlines() and "### Not judged: non-finite weights" in markdown
    page = Page(paths["html"].read_text())
    assert page.items == [line]
    for text in (shown, markdown, paths["html"].read_text(), paths["json"].read_text()):
        assert "interact" not in text and "fix set" not in text.lower()
