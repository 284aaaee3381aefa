"""A pip user's first hour, the parts that need no model: ``longctx --help`` answers without loading the engine
(no scipy, no torch), ``--version`` says the installed version, every subcommand's help says what it does and lists
only what it takes, the baseline shipped in the package answers to its name (and is checked before any data is
built), a baseline given as a relative path stays as given in every report, and junit property names are plain
(no space, comma or parenthesis)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from importlib.metadata import version
from pathlib import Path

import pytest

from pytest_longctx.cli.main import build_parser
from pytest_longctx.options.table import COMMANDS
from pytest_longctx.plugin import fixtures

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("scipy", "torch", "transformers", "numpy", "pyarrow", "pytest_longctx.scoring.engine")


def longctx(*args: str, probe: str = "") -> subprocess.CompletedProcess[str]:
    """``longctx ARGS`` in a process of its own, then ``probe`` (Python run after it, printing what it finds)."""
    code = f"import sys\nfrom pytest_longctx.cli import main\ntry:\n    main({list(args)!r})\nexcept SystemExit:\n    pass\n{probe}"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)


def test_help_loads_none_of_the_engine():
    done = longctx("--help", probe=f"print('loaded:' + ','.join(m for m in {HEAVY!r} if m in sys.modules))")
    assert "usage: longctx" in done.stdout
    assert done.stdout.rpartition("loaded:")[2].strip() == ""


def test_version_is_the_installed_one():
    done = subprocess.run([sys.executable, "-m", "pytest_longctx.cli", "--version"], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert done.returncode == 0 and done.stdout.strip() == f"longctx (pytest-longctx) {version('pytest-longctx')}"


@pytest.mark.parametrize("command", COMMANDS)
def test_every_subcommand_says_what_it_does(command):
    parser = next(a for a in build_parser()._actions if hasattr(a, "choices") and a.choices)
    described = parser.choices[command].description
    assert described and len(described) > 60 and described.endswith(".")


def test_blames_help_lists_only_what_blame_takes(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["blame", "--help"])
    shown = capsys.readouterr().out
    assert "usage: longctx blame" in shown
    assert not re.search(r"vllm|vLLM|xdist|tokenizer=FOLDER|tensor-parallel", shown), shown


@pytest.fixture
def gate(pytester, tiny_data, tiny_loaded, monkeypatch):
    monkeypatch.setattr(fixtures, "load_backend", lambda *args, **kwargs: tiny_loaded)

    def run(*args: str, **kwargs):
        return pytester.runpytest_inprocess("-p", "no:cacheprovider", "-p", "no:xdist", "--longctx-model=tiny",
                                            f"--longctx-data={tiny_data}", *args, **kwargs)

    return run


def test_the_shipped_baseline_answers_to_its_name_before_any_data_is_built(pytester, monkeypatch):
    built = []
    monkeypatch.setattr("pytest_longctx.gate.inputs.load_dataset", lambda *args, **kwargs: built.append(args))
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--longctx-model=smollm2-135m",
                                          "--longctx-baseline=smollm2-13m")  # a typo: no such name, no such file
    assert built == [] and "baseline" in result.stdout.str() and "does not exist" in result.stdout.str()
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    from pytest_longctx.shipped_baselines import SHIPPED, baseline_file

    assert baseline_file("smollm2-135m", pytester.path, "--longctx-baseline") == SHIPPED / "smollm2-135m.json.gz"
    assert (SHIPPED / "smollm2-135m.json.gz").read_bytes() == (ROOT / "baselines" / "smollm2-135m.json.gz").read_bytes()


def test_a_shipped_baseline_is_never_written(pytester):
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--longctx-model=smollm2-135m",
                                          "--longctx-baseline=smollm2-135m", "--longctx-update-baseline")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert ("ERROR: --longctx-baseline smollm2-135m: names the baseline shipped with pytest-longctx, which an update does "
            "not replace; give the file to write, e.g. --longctx-baseline baselines/my-model.json.gz") in result.stderr.lines


def test_a_relative_baseline_stays_as_given_in_every_report(gate, pytester, tiny_baseline):
    (pytester.path / "baselines").mkdir()
    (pytester.path / "baselines" / "b.json.gz").write_bytes(tiny_baseline.read_bytes())
    result = gate("--longctx-baseline=baselines/b.json.gz", "--longctx-markdown=summary.md", "--longctx-html=report.html",
                  "--junitxml=junit.xml", "--longctx-out=results.json")
    assert result.ret == pytest.ExitCode.OK
    properties = {p.get("name"): p.get("value") for p in ET.parse(pytester.path / "junit.xml").iter("property")}
    assert properties["longctx.baseline"] == "baselines/b.json.gz"
    assert "against baseline baselines/b.json.gz" in (pytester.path / "summary.md").read_text()
    assert "against baseline baselines/b.json.gz" in (pytester.path / "report.html").read_text()
    assert '"reference": "baselines/b.json.gz"' in (pytester.path / "results.json").read_text()
    assert any(line.startswith("longctx gate: ") and "against baseline baselines/b.json.gz" in line for line in result.outlines)
    assert str(pytester.path) not in "".join((pytester.path / n).read_text() for n in ("summary.md", "junit.xml"))


def test_junit_property_names_are_plain(gate, pytester, tiny_baseline):
    result = gate(f"--longctx-baseline={tiny_baseline}", "--junitxml=junit.xml", "--longctx-threshold=facts-*:kl=0.04")
    assert result.ret == pytest.ExitCode.OK
    names = [p.get("name") for p in ET.parse(pytester.path / "junit.xml").iter("property")]
    assert any(n.startswith("longctx.row.") for n in names) and any(n.startswith("longctx.threshold.") for n in names)
    assert [n for n in names if not re.fullmatch(r"[A-Za-z0-9_.\-]+", n)] == []


def test_the_first_run_says_what_it_builds(tmp_path):
    """Was: the first run built a tokenizer of tens of MB and the agent sessions without a word."""
    done = subprocess.run([sys.executable, "-c", "from pytest_longctx.data.builtin.cache import builtin_dir; builtin_dir([])"],
                          capture_output=True, text=True, timeout=600, cwd=ROOT, env={**os.environ, "LONGCTX_CACHE": str(tmp_path)})
    assert done.returncode == 0, done.stderr[-2000:]
    said = [line for line in done.stderr.splitlines() if line.startswith("longctx: building")]
    tokenizer = next(tmp_path.glob("tokenizers/qwen3_5-*.json"))
    assert len(said) == 2 and f"longctx: building the Qwen3.5 tokenizer into {tokenizer} (once; later runs reuse it)" in said
    assert any(line.startswith(f"longctx: building the builtin agent sessions (faithfulness) into {tmp_path / 'builtin'}")
               for line in said)
    again = subprocess.run([sys.executable, "-c", "from pytest_longctx.data.builtin.cache import builtin_dir; builtin_dir([])"],
                           capture_output=True, text=True, timeout=600, cwd=ROOT, env={**os.environ, "LONGCTX_CACHE": str(tmp_path)})
    assert "longctx: building" not in again.stderr  # once
