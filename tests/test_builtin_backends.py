"""The built-in backends are declared once, in backends/builtin.py: every place that names them is made
from those records or holds every name they declare (the options' help, blame's choices, the docs), and
each record's factory and pair loader take what the loaders hand them. A built-in backend added to the
records and nowhere else fails here, naming the place that lacks it."""
from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from pytest_longctx.backends import aliases, builtin, load_backend
from pytest_longctx.backends.builtin import BUILTIN, PAIRED, ModelKind
from pytest_longctx.backends.registry import Deferred
from pytest_longctx.cli import options_docs
from pytest_longctx.options.table import BLAME, PYTEST, taken_by

ROOT = Path(__file__).resolve().parent.parent
NAMES = [backend.name for backend in BUILTIN]


def option(front: str, name: str):
    return next(o for o in taken_by(front) if o.name == name)


@pytest.mark.parametrize("backend", BUILTIN, ids=NAMES)
def test_each_factory_takes_what_load_backend_hands_it(backend):
    """``model``, ``dtype``, ``device``, ``options``; and a model reference's backend the name as given."""
    factory = backend.factory.load()
    arguments = {"model": "m", "dtype": "auto", "device": "auto", "options": {}}
    if backend.model is ModelKind.REFERENCE:
        arguments["name"] = "an-alias"
    inspect.signature(factory).bind(**arguments)


@pytest.mark.parametrize("backend", [b for b in BUILTIN if b.pair is not None], ids=PAIRED)
def test_each_pair_loader_takes_a_pair_request(backend):
    inspect.signature(backend.pair.load()).bind("the request")


@pytest.mark.parametrize("name", NAMES)
def test_every_name_is_in_every_table_that_names_backends(name):
    made = options_docs.tables()
    assert f"keys:{name}" in made  # docs/options.md's key tables (tests/test_docs.py: the file holds each)
    assert f"<!-- options: keys:{name} -->" in (ROOT / "docs" / "options.md").read_text()
    said = option(PYTEST, "backend")  # --longctx-backend, and --backend of longctx score and compress-bench
    assert f"'{name}'" in said.help and f"`{name}`" in said.doc, (said.help, said.doc)
    section = (ROOT / "docs" / "backends.md").read_text().split("## Backends on the command line")[1].split("\n## ")[0]
    assert f"`{name}`" in section


def test_blame_takes_the_backends_whose_records_load_a_pair():
    """blame's --backend is declared with the options, below the backends: its choices are held to the records."""
    assert option(BLAME, "backend").value.choices == PAIRED


def test_a_model_reference_is_resolved_once_before_the_factory_and_named_as_given(tmp_path, monkeypatch):
    """The factory of a backend whose model is a reference gets the alias resolved, and the alias as its name;
    the alias's resolver runs once. A URL's backend gets the model as given, and no name."""
    calls, made = [], []

    def resolver() -> str:
        calls.append(1)
        return str(tmp_path)

    def factory(model, dtype, device, name=""):
        made.append((model, name))
        return Reads()

    monkeypatch.setattr(aliases, "_ALIASES", {**aliases._ALIASES, "counted": resolver})
    monkeypatch.setitem(builtin.FACTORIES, "hf", Deferred(lambda: factory))
    backend, _ = load_backend("counted", "hf")
    assert isinstance(backend, Reads) and made == [(str(tmp_path), "counted")] and calls == [1]

    served = []
    monkeypatch.setitem(builtin.FACTORIES, "vllm-server", Deferred(lambda: lambda model, dtype, device: served.append(model) or Reads()))
    load_backend("counted", "vllm-server")
    assert served == ["counted"] and calls == [1]


class Reads:
    def read(self, ids, positions, tokens, top_k=0):
        raise AssertionError("not read here")
