"""The docs name only options and flags that exist, so they cannot drift from the code: every
`--longctx-*` option README.md, docs/*.md or the example workflow names is one the plugin
registers, and every registered option is in docs/options.md; every flag of a `longctx
SUBCOMMAND` command line or of a subcommand's option table is one that subcommand's parser
takes, and every flag a subcommand takes is in docs/options.md. The options come from the
plugin's own pytest_addoption hook and the `longctx` parser, not from their source; relative
links and their anchors resolve; the README's quickstart command is the one
scripts/quickstart.sh runs. No model is loaded."""
from __future__ import annotations

import argparse
import re
import shlex
from os.path import relpath
from pathlib import Path

import pytest

from pytest_longctx.cli.main import build_parser
from pytest_longctx.plugin import hooks

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
OPTIONS_MD = ROOT / "docs" / "options.md"
WORKFLOW = ROOT / "docs" / "examples" / "longctx-gate.yml"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
README_MAX_LINES = 200  # the front door; the studies live in docs/evidence.md

PLUGIN_OPTION = re.compile(r"(?<![\w-])--longctx-[a-z0-9]+(?:-[a-z0-9]+)*")
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.M | re.S)
SPAN = re.compile(r"`([^`\n]+(?:\n[^`\n]+)*)`")
FLAG = re.compile(r"^\[?(--[A-Za-z][\w-]*)")
TABLE_FLAG = re.compile(r"`(--[A-Za-z][\w-]*)")
HEADING = re.compile(r"^(#{1,6}) (.*)$", re.M)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


class _Recorder:
    """Stands in for pytest's parser and its option group: records the flags registered."""

    def __init__(self) -> None:
        self.flags: set[str] = set()

    def getgroup(self, *args: object, **kwargs: object) -> _Recorder:
        return self

    def addoption(self, *names: str, **kwargs: object) -> None:
        self.flags.update(names)

    def addini(self, *args: object, **kwargs: object) -> None:
        pass


def plugin_flags() -> set[str]:
    """Every option the plugin registers, as pytest's pytest_addoption hook registers them."""
    recorder = _Recorder()
    hooks.pytest_addoption(recorder)  # type: ignore[arg-type]
    return recorder.flags


def subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def flags_of(parser: argparse.ArgumentParser) -> set[str]:
    # argparse lists a parser's option strings nowhere public; this mapping is where it keeps them
    return {flag for flag in parser._option_string_actions if flag.startswith("--")}


def joined(snippet: str) -> str:
    """A shell snippet with its continuation lines (a trailing backslash) joined."""
    return re.sub(r"\\\n\s*", " ", snippet)


def code(text: str) -> list[str]:
    """The fenced blocks and the inline code spans (each on one line) of a markdown text."""
    spans = SPAN.findall(FENCE.sub("", text))
    return [joined(block) for block in FENCE.findall(text)] + [joined(span).replace("\n", " ") for span in spans]


def shell(line: str) -> list[str]:
    try:
        return shlex.split(line, comments=True)
    except ValueError:  # an unbalanced quote: a usage synopsis rather than a command
        return line.split()


def commands(snippet: str) -> list[list[str]]:
    """Each `longctx ...` command in a code snippet, as tokens after `longctx`."""
    found = []
    for line in snippet.splitlines():
        if not re.search(r"(?:^|\s)longctx\s", line):
            continue
        command: list[str] = []
        for token in [*shell(line), ";"]:
            if token in {"&&", "||", ";", "|"}:
                if command and command[0] == "longctx":
                    found.append(command[1:])
                command = []
            else:
                command.append(token)
    return found


def unknown_plugin_options(text: str, known: set[str]) -> list[str]:
    return sorted(set(PLUGIN_OPTION.findall(text)) - known)


def unknown_cli_flags(text: str, parsers: dict[str, argparse.ArgumentParser]) -> list[str]:
    """What a markdown text names of the `longctx` command that its parsers do not take."""
    return unknown_command_flags(text, parsers) + unknown_table_flags(text, parsers)


def unknown_command_flags(text: str, parsers: dict[str, argparse.ArgumentParser]) -> list[str]:
    """`longctx SUB --flag` in code where SUB, or SUB's --flag, does not exist."""
    wrong = []
    for snippet in code(text):
        for tokens in commands(snippet):
            if not tokens or tokens[0].isupper():  # `longctx COMMAND --help`: a placeholder
                continue
            flags = {m.group(1) for token in tokens[1:] if (m := FLAG.match(token))}
            for sub in tokens[0].split("|"):  # `longctx score|compare --min-effect`: each of them
                if sub not in parsers:
                    wrong.append(f"longctx {sub}: no such subcommand")
                    continue
                wrong += [f"longctx {sub} {flag}" for flag in sorted(flags - flags_of(parsers[sub]))]
    return wrong


def unknown_table_flags(text: str, parsers: dict[str, argparse.ArgumentParser]) -> list[str]:
    """Flags in the first column of an option table under a `longctx SUB` heading that SUB does
    not take (a header "`SUB` option" narrows the table to SUB; a heading that names no
    subcommand: flags no subcommand takes)."""
    wrong = []
    for heading, body in sections(text):
        if "`longctx" not in heading:
            continue
        named = re.findall(r"`longctx ([a-z][\w-]*)`", heading)
        for header, *cells in tables(body):
            only = re.match(r"`([a-z][\w-]*)` option", header)
            subs = {only.group(1)} if only else set(named)
            for flag in (flag for cell in cells for flag in TABLE_FLAG.findall(cell)):
                takers = {sub for sub, parser in parsers.items() if flag in flags_of(parser)}
                if not (subs <= takers if subs else takers):
                    wrong.append(f"{heading}: table row {flag}")
    return wrong


def sections(text: str) -> list[tuple[str, str]]:
    """(heading, body) for every heading of a markdown text, code blocks left out."""
    text = FENCE.sub("", text)
    marks = list(HEADING.finditer(text))
    return [(m.group(2), text[m.end(): marks[i + 1].start() if i + 1 < len(marks) else len(text)])
            for i, m in enumerate(marks)]


def tables(body: str) -> list[list[str]]:
    """Each table's first cells: its header's, then each row's."""
    found: list[list[str]] = []
    previous = ""
    for line in body.splitlines():
        if line.startswith("|"):
            cell = re.split(r"(?<!\\)\|", line)[1].strip()
            if not previous.startswith("|"):
                found.append([cell])
            elif not set(cell) <= set("-: "):
                found[-1].append(cell)
        previous = line
    return found


def slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    found, count = set(), dict[str, int]()
    for _, heading in HEADING.findall(FENCE.sub("", page.read_text())):
        base = slug(heading)
        found.add(f"{base}-{count[base]}" if base in count else base)  # a repeated heading: -1, -2, ...
        count[base] = count.get(base, 0) + 1
    return found


def source_url() -> str:
    """The repository's address, as pyproject.toml's Project-URLs name it."""
    return re.search(r'^Source = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M).group(1)


def broken_links(page: Path) -> list[str]:
    """The links of ``page`` that lead nowhere: relative ones, and those to the repository's own files (the README's,
    which a package index shows too), are resolved in this checkout, their anchors among the headings."""
    broken = []
    here = f"{source_url()}/blob/main/"
    for target in LINK.findall(FENCE.sub("", page.read_text())):
        if target.startswith(here):
            target = str(Path(relpath(ROOT / target.removeprefix(here), page.parent)))
        elif re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{target}: no such heading")
    return broken


@pytest.fixture(scope="module")
def known() -> set[str]:
    flags = plugin_flags()
    assert "--longctx-model" in flags
    return flags


@pytest.fixture(scope="module")
def parsers() -> dict[str, argparse.ArgumentParser]:
    found = subcommands()
    assert {"score", "compare", "build", "validate", "compress-bench"} <= set(found)
    return found


@pytest.mark.parametrize("page", [*PAGES, WORKFLOW], ids=lambda p: str(p.relative_to(ROOT)))
def test_every_plugin_option_named_exists(page: Path, known: set[str]) -> None:
    assert unknown_plugin_options(page.read_text(), known) == []


def test_the_option_tables_of_options_md_are_the_declared_options() -> None:
    """docs/options.md's tables are made from options/table.py and each built-in backend's keys: each one the
    declarations make is there, as they make it (python -m pytest_longctx.cli.options_docs docs/options.md)."""
    from pytest_longctx.cli import options_docs as docs

    text = OPTIONS_MD.read_text()
    assert docs.missing(text) == []
    assert docs.render(text) == text


def test_every_plugin_option_is_in_options_md(known: set[str]) -> None:
    assert sorted(known - set(PLUGIN_OPTION.findall(OPTIONS_MD.read_text()))) == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_longctx_flag_named_exists(page: Path, parsers: dict[str, argparse.ArgumentParser]) -> None:
    assert unknown_cli_flags(page.read_text(), parsers) == []


def test_every_longctx_flag_is_in_options_md(parsers: dict[str, argparse.ArgumentParser]) -> None:
    command_part = OPTIONS_MD.read_text().split("## The `longctx` command", 1)[1]
    named = set(re.findall(r"(?<![\w-])--[A-Za-z][\w-]*", command_part))
    assert sorted(f"longctx {sub} {flag}" for sub, parser in parsers.items()
                  for flag in flags_of(parser) - named - {"--help"}) == []


def test_the_checker_catches_a_misspelling(known: set[str], parsers: dict[str, argparse.ArgumentParser]) -> None:
    text = README.read_text()
    assert "--longctx-lengths 2k" in text and "compress-bench --methods" in text
    misspelt = text.replace("--longctx-lengths 2k", "--longctx-lenghts 2k", 1)
    assert set(unknown_plugin_options(misspelt, known)) - set(unknown_plugin_options(text, known)) == {"--longctx-lenghts"}
    misspelt = text.replace("compress-bench --methods", "compress-bench --method", 1)
    assert set(unknown_cli_flags(misspelt, parsers)) - set(unknown_cli_flags(text, parsers)) == {
        "longctx compress-bench --method"}
    table = "### `longctx compare`\n\n| option | meaning |\n|---|---|\n| `--top N`, `--alfa A` | x |\n"
    assert unknown_cli_flags(table + "\n`longctx valdate DIR`\n", parsers) == [
        "longctx valdate: no such subcommand", "`longctx compare`: table row --alfa"]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_and_anchors_resolve(page: Path) -> None:
    assert broken_links(page) == []


def test_the_readme_links_work_from_a_package_index() -> None:
    """A package index shows the README away from the repository: its links are absolute, to the repository the
    Project-URLs name (and checked to resolve here, as every page's are)."""
    links = LINK.findall(FENCE.sub("", README.read_text()))
    assert links and [link for link in links if not re.match(r"[a-z]+:|#", link)] == []
    assert sum(link.startswith(f"{source_url()}/blob/main/") for link in links) > 20
    project = (ROOT / "pyproject.toml").read_text()
    assert "[project.urls]" in project and "Documentation = " in project and "Issues = " in project


def test_readme_is_a_front_door() -> None:
    lines = len(README.read_text().splitlines())
    assert lines <= README_MAX_LINES, f"README.md: {lines} lines; studies and tables belong in docs/evidence.md"


def test_readme_indexes_every_docs_page_once() -> None:
    index = dict(sections(README.read_text()))["Documentation"]
    assert len(tables(index)) == 1, "README.md: the docs index is one table"
    listed = re.findall(r"^\| \[docs/([\w-]+\.md)\]", index, re.M)
    assert sorted(listed) == sorted(page.name for page in PAGES[1:])


def test_readme_runs_the_quickstart_command() -> None:
    script = joined((ROOT / "scripts" / "quickstart.sh").read_text())
    ran = shell(next(line for line in script.splitlines() if " -m pytest " in line))
    ran = ran[ran.index("pytest"): ran.index("$@")]
    shown = [shell(line) for block in FENCE.findall(README.read_text()) for line in joined(block).splitlines()]
    assert ran in shown


def test_readme_shows_the_example_workflow_as_committed() -> None:
    workflow = WORKFLOW.read_text().splitlines()
    excerpt = next(block for block in FENCE.findall(README.read_text()) if "--longctx-only" in block and "run: |" in block)
    assert [line for line in excerpt.splitlines() if line.strip() and line not in workflow] == []


def unlisted_modules(architecture: str, package: Path) -> list[str]:
    """The package's modules that docs/architecture.md does not name in their row: a layer's own
    modules in the layer table's row (``| scoring | ...``), a folder's inside a layer in the row
    of that folder (``| `backends/llama_cpp/` | ...``); foundation modules by file name."""
    rows = {line.split("|")[1].strip().strip("`"): line for line in architecture.splitlines() if line.startswith("| ")}
    missing = []
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package).with_suffix("").parts
        if parts[-1] in ("__init__", "__main__"):
            continue
        if len(parts) == 1:
            row, name = rows.get("foundation", ""), f"{parts[0]}.py"
        else:
            layer = {1: parts[0], 2: f"{parts[0]}/{parts[1]}/"}.get(len(parts) - 1, "")
            row, name = rows.get(layer, ""), parts[-1]
        if f"`{name}`" not in row:
            missing.append("/".join(parts))
    return missing


def test_architecture_names_every_module() -> None:
    architecture = (ROOT / "docs" / "architecture.md").read_text()
    assert unlisted_modules(architecture, ROOT / "pytest_longctx") == []
    # and it would notice one more
    assert unlisted_modules(architecture.replace("`modes`", "`nodes`"), ROOT / "pytest_longctx") == ["scoring/modes"]


def test_the_table_of_checks_in_metrics_md_is_the_declared_specs() -> None:
    """docs/metrics.md's table of checks is made from gate/specs.py: a check added, renamed or given another
    default there and not here fails."""
    from pytest_longctx.gate.specs import SPECS, checks_table

    page = (ROOT / "docs" / "metrics.md").read_text()
    block = page.split("<!-- checks -->\n", 1)[1].split("<!-- /checks -->", 1)[0]
    assert block == checks_table()
    assert all(f"| `{spec.name}` |" in block for spec in SPECS)


# ------------------------------------------------------------------ a pip user's first hour, as the docs tell it


def test_every_first_command_a_page_shows_starts_small() -> None:
    """The first pytest command of docs/baselines.md and of the README: a limited selection (the whole builtin 8k set
    is hours on a CPU), not every item at 8k."""
    for page in (ROOT / "docs" / "baselines.md", README):
        first = next(shell(line) for block in FENCE.findall(page.read_text()) for line in joined(block).splitlines()
                     if line.startswith("pytest "))
        assert any(word.startswith("--longctx-limit") for word in first), (page.name, first)


def test_the_install_block_and_the_workflow_say_how_to_get_torchs_cpu_build() -> None:
    install = dict(sections(README.read_text()))  # the sections' text without code; the block is in the source
    block = next(b for b in FENCE.findall(README.read_text()) if "pip install torch" in b)
    torch_line = next(line for line in block.splitlines() if line.startswith("pip install torch"))
    assert "CPU build" in torch_line and "install selector" in torch_line, install.keys()
    workflow = WORKFLOW.read_text()
    assert re.search(r"pip install torch --index-url \"\$TORCH_INDEX\"", workflow) and "TORCH_INDEX:" in workflow


def test_the_workflow_installs_the_quantization_its_candidate_needs() -> None:
    """Its candidate is an int4 checkpoint: the extra of the library that quantized it is installed with the plugin."""
    workflow = WORKFLOW.read_text()
    model = re.search(r"MODEL: (\S+)", workflow).group(1)
    extra = re.search(r"QUANTIZATION: (\S+)", workflow).group(1)
    assert "int4" in model and extra in ("torchao", "compressed-tensors", "bitsandbytes", "auto-round", "gptqmodel")
    assert re.search(r'pip install "pytest-longctx\[[\w,-]*\$QUANTIZATION[\w,-]*\]"', workflow)


def test_the_model_aliases_say_what_the_uncompressed_model_is() -> None:
    aliases = dict(sections((ROOT / "docs" / "backends.md").read_text()))["Model aliases"]
    assert "Q4_1" in aliases and "de-quantized" in aliases and '"uncompressed model"' in aliases
