"""A ladder: several candidates (``--longctx-model`` given several times) gated against the one baseline in one pytest
run (a ``GateSession``). The data and the baseline are loaded and checked once (one ``GateInputs``, shared); each
candidate is a rung, a ``GateRun`` of its own over them, so it gets exactly the cases, the sequential reading and the
verdicts a run of it alone gives. Its cases carry its name, which the test ids show (``facts-2k[w8a8]``). The plugin
loads one candidate at a time (plugin/fixtures.py); one that does not load is a rung that says why
(``GateRun.not_loaded``), and the others are judged. Under ``--longctx-ladder-order drift`` a candidate, once loaded
and before it reads, takes the racing order of the drift the candidates before it showed (gate/ladder.py)."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Iterable

from pytest_longctx.backends.aliases import aliases, resolve_model
from pytest_longctx.data.records import ItemKey
from pytest_longctx.errors import LongctxError, without_credentials
from pytest_longctx.gate.gate_session import Case
from pytest_longctx.gate.inputs import GateInputs
from pytest_longctx.gate.ladder import item_drift, racing_order
from pytest_longctx.gate.model_run import GateRun
from pytest_longctx.gate.run_options import GateOptions
from pytest_longctx.options.table import LadderOrder


def candidate_name(model: str) -> str:
    """What the test ids and the reports call a candidate: an alias as given, else the last part of its path or hub id
    (a ``.gguf`` file without its suffix)."""
    if model in aliases():
        return model
    path = Path(model.rstrip("/"))
    return path.stem if path.suffix == ".gguf" else path.name


def _weights(model: str) -> str:
    """What a candidate's weights are, as far as can be known before loading: an alias resolved, a path made absolute."""
    try:
        reference = resolve_model(model)
    except LongctxError:  # an alias whose package is missing: its rung says so when it loads
        return model
    path = Path(reference).expanduser()
    return str(path.resolve()) if path.exists() else reference


class LadderRun:
    """The candidates of one run, each a rung judged as a run of it alone would judge it (see the module docstring)."""

    def __init__(self, options: GateOptions, invocation_dir: Path):
        self.options = options
        names = {model: candidate_name(model) for model in options.candidates}
        self._refuse_ambiguous(names)
        self.inputs = GateInputs(options, invocation_dir)
        self.warnings: list[str] = list(self.inputs.warnings)
        self.rungs: dict[str, GateRun] = {
            names[model]: GateRun(replace(options, model=model, candidates=()), invocation_dir, self.inputs)
            for model in options.candidates}
        self.loading: dict[str, float] = {}  # candidate -> seconds spent loading it
        self.selected: list[str] = []  # the candidates with a selected test, in the order given (every worker's)

    baseline = property(lambda self: self.inputs.baseline)
    baseline_path = property(lambda self: self.inputs.baseline_path)
    missing_baseline = property(lambda self: self.inputs.missing_baseline)

    @staticmethod
    def _refuse_ambiguous(names: dict[str, str]) -> None:
        """Two candidates that are one model, or that the test ids would name alike, before anything is loaded."""
        seen: dict[str, str] = {}
        for model in names:
            weights = _weights(model)
            if weights in seen:
                raise LongctxError(f"--longctx-model {without_credentials(seen[weights])} and {without_credentials(model)}: "
                                   f"both are {without_credentials(weights)}, the same weights; give each candidate once")
            seen[weights] = model
        by_name: dict[str, str] = {}
        for model, name in names.items():
            if name in by_name:
                raise LongctxError(f"--longctx-model {without_credentials(by_name[name])} and {without_credentials(model)}: "
                                   f"both would be named {name!r} in the test ids and the ladder; give one a folder (or a "
                                   "link to it) of another name")
            by_name[name] = model

    def cases(self) -> list[Case]:
        """Every rung's cases, the first candidate's first, each carrying its candidate."""
        return [replace(case, candidate=name) for name, run in self.rungs.items() for case in run.cases()]

    def select(self, cases: Iterable[Case]) -> None:
        chosen: dict[str, list[Case]] = {name: [] for name in self.rungs}
        for case in cases:
            assert case.candidate is not None, f"{case.key}: a ladder's case without its candidate (a bug in pytest-longctx)"
            chosen[case.candidate].append(case)
        for name, run in self.rungs.items():
            run.select(chosen[name])
        self.selected = [name for name, found in chosen.items() if found]

    def loaded(self, candidate: str, seconds: float, failure: str | None) -> None:
        """The plugin loaded a candidate (in ``seconds``), or could not (``failure``: its tests and its rung say why)."""
        self.loading[candidate] = self.loading.get(candidate, 0.0) + seconds
        rung = self.rungs[candidate]
        if failure is not None:
            rung.not_loaded(f"the model did not load: {failure}")
        elif self.options.ladder_order == LadderOrder.DRIFT and rung.reader.within is None:  # fixed before it reads
            rung.reader.within = racing_order(self.drifts_before(candidate))

    def drifts_before(self, candidate: str) -> dict[ItemKey, float]:
        """The largest drift each item showed in the candidates before ``candidate`` (those read in this process)."""
        found: dict[ItemKey, float] = {}
        for name, run in self.rungs.items():
            if name == candidate:
                break
            for config, length, item_id, _ in run.scores.items():
                drift = item_drift(run.reader.figures((config, length, item_id)))
                if drift is not None:
                    key = (config, length, item_id)
                    found[key] = max(drift, found.get(key, drift))
        return found

    # -------------------------------------------------------------- xdist

    def export(self) -> str:
        return json.dumps({"rungs": {name: run.export() for name, run in self.rungs.items()}, "loading": self.loading,
                           "selected": self.selected})

    def absorb(self, exported_text: str) -> None:
        exported = json.loads(exported_text)
        for name, found in exported["rungs"].items():
            self.rungs[name].absorb(found)
        for name, seconds in exported["loading"].items():
            self.loading[name] = self.loading.get(name, 0.0) + seconds
        self.selected = [name for name in self.rungs if name in self.selected or name in exported["selected"]]
