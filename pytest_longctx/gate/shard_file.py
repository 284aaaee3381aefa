"""A shard's file: the results JSON a ``--longctx-shard K/N`` run writes, with a ``shard`` record of its own
(``shard_record``), and that record read back and checked (``read_part``).

The record says which part this is (``index`` of ``count``), what the whole selection is, which every part must
share (``identity``: the options that choose and judge it, the data's fingerprint, the baseline's path and digest,
the selected tests and every needed item), what this part read and how (``slice``: its items; the plan of every
unit, from which a merge replays a sequential reading; the figures of every item it read; the tokens it forwarded),
the model as it was read (``meta``), and whether its run failed or stopped. Its raw
scores are the results JSON's own ``scores``."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from pytest_longctx.backends.digests import file_digest
from pytest_longctx.data.records import ItemKey, config_kind
from pytest_longctx.errors import without_credentials
from pytest_longctx.gate.model_run import GateRun
from pytest_longctx.gate.run_options import GateOptions
from pytest_longctx.gate.shards import UnitPlan
from pytest_longctx.gate.thresholds import Override, Thresholds
from pytest_longctx.metrics.item_figures import ItemFigures
from pytest_longctx.options.table import Metric, Sequential
from pytest_longctx.parse import Shard
from pytest_longctx.scoring.fingerprint import data_fingerprint
from pytest_longctx.scoring.scores_file import FileProblem, ScoresFile, checked_body, read_json_file, scores_from_json

FORMAT = "pytest-longctx/shard"
VERSION = 1
FIX = "give the files --longctx-shard K/N wrote (--longctx-out), whole"
# the options of a gate run that choose its selection and judge it: every part must have them alike
JUDGING = ("model", "data", "sets", "lengths", "limit", "mode", "baseline", "update_baseline", "dtype", "backend",
           "backend_options", "kv_press", "trust_remote_code", "allow_beyond_context", "sequential")
# what may differ between the parts' records of the model as read: each machine names its own device, and a part read
# by several vLLM servers the ones that stopped answering on the way (the others read the same figures)
PER_MACHINE = ("device", "servers_lost")


def options_json(options: GateOptions) -> dict[str, Any]:
    """The options of a gate run that choose and judge its selection, as a part records them (URLs without their
    credentials)."""
    found: dict[str, Any] = {name: getattr(options, name) for name in JUDGING}
    found["model"] = without_credentials(str(options.model))
    found["backend_options"] = [without_credentials(str(o)) for o in options.backend_options]
    found["sequential"] = str(options.sequential)
    thresholds = options.thresholds
    found["thresholds"] = {"drop": thresholds.drop, "retained": thresholds.retained, "follow": thresholds.follow,
                           "item_drop": thresholds.item_drop, "kl": thresholds.kl, "alpha": thresholds.alpha,
                           "min_effect": thresholds.min_effect,
                           "overrides": [[o.pattern, str(o.metric), o.value, o.strict] for o in thresholds.overrides]}
    return found


def options_from_json(found: Mapping[str, Any], **outputs: Any) -> GateOptions:
    """The gate options a part recorded, with ``outputs`` (out, markdown, html, baseline) of the merge's own."""
    chosen = dict(found["thresholds"])
    overrides = tuple(Override(pattern, Metric(metric), float(value), "a shard's --longctx-threshold", bool(strict))
                      for pattern, metric, value, strict in chosen.pop("overrides"))
    values = {name: found[name] for name in JUDGING}
    values["backend_options"] = tuple(values["backend_options"])
    values["sequential"] = Sequential(values["sequential"])
    return GateOptions(**{**values, "out": None, "only": True, "device": "auto", "cache_dir": "off",
                          "thresholds": Thresholds(**chosen, overrides=overrides), **outputs})


def selection_identity(run: GateRun) -> dict[str, Any]:
    """What every part of one split shares: the options, the data, the baseline, the selected tests and every item
    they need (each unit's, in the order the run reads the units)."""
    baseline = run.baseline_path
    return {
        "options": options_json(run.options),
        "data": data_fingerprint((c, n, i, f) for (c, n, i), f in run.inputs.fingerprints.items()),
        "baseline": ({"path": str(run.options.baseline), "sha256": file_digest(baseline)}
                     if baseline is not None and not run.options.update_baseline and baseline.is_file() else None),
        "tests": sorted(run.tests),
        "needed": {unit: sorted([list(k) for k in keys]) for unit, keys in run.needed.items()},
    }


def model_identity(meta: Mapping[str, Any]) -> dict[str, Any] | None:
    """The record of the model as a part read it, less what each machine names its own (its device); None when the
    part read nothing."""
    if not meta:
        return None
    found = {key: value for key, value in meta.items() if key not in PER_MACHINE}
    if isinstance(found.get("judged"), dict):
        found["judged"] = {key: value for key, value in found["judged"].items() if key not in PER_MACHINE}
    return found


def read_figures(run: GateRun) -> dict[str, dict[str, dict[str, Any]]]:
    """Every item a part read, its figures (``ItemFigures.to_json``) against the baseline."""
    found: dict[str, dict[str, dict[str, Any]]] = {}
    for config, length, item_id, _ in run.scores.items():
        found.setdefault(config, {}).setdefault(length, {})[item_id] = run.reader.figures((config, length, item_id)).to_json()
    return found


def shard_record(run: GateRun, stopped: str | None) -> dict[str, Any]:
    """``{"shard": ...}`` for a shard's results JSON (see the module docstring); nothing for a run of the whole."""
    part = run.reader.part
    if part is None:
        return {}
    keys = [key for keys in run.needed.values() for key in keys]
    return {"shard": {
        "format": FORMAT, "version": VERSION, "index": part.shard.index, "count": part.shard.count,
        "identity": selection_identity(run), "mode": run.scores.mode, "meta": run.scores.meta,
        "units": {unit: plan.to_json() for unit, plan in part.units.items()},
        "slice": sorted(list(k) for k in part.slice(keys)), "figures": read_figures(run),
        "forwarded": run.reader.forwarded, "seconds": run.reader.seconds, "failure": run.reader.failure, "stopped": stopped,
        "warnings": run.warnings,
    }}


def shard_note(run: GateRun) -> str:
    """The summary's line about a part: what it read, and where the verdicts come from."""
    part = run.reader.part
    assert part is not None
    mine = part.slice(k for keys in run.needed.values() for k in keys)
    read = sum(1 for key in mine if run.is_read(key))
    return (f"longctx: shard {part.shard}: read {read} of the {len(mine)} items of its part ({run.reader.forwarded:,} "
            f"tokens forwarded) into {run.options.out}; the rows and cells are judged over every part by longctx merge "
            "PART... (docs/scaling.md)")


@dataclass
class Part:
    """One shard's file, read back (``read_part``)."""

    path: str
    shard: Shard
    identity: dict[str, Any]
    mode: str
    meta: dict[str, Any]  # the model as this part read it (empty: it read nothing)
    units: dict[str, UnitPlan]
    slice: set[ItemKey]
    figures: dict[ItemKey, dict[str, Any]]
    forwarded: int
    seconds: float  # spent reading, as the part's run counted it
    failure: str | None
    stopped: str | None
    warnings: list[str]
    scores: ScoresFile

    @property
    def model(self) -> dict[str, Any] | None:
        return model_identity(self.meta)

    @property
    def name(self) -> str:
        """``part-2.json (shard 2/3)``: the file as a line names it."""
        return f"{self.path} (shard {self.shard})"

    def needed(self) -> dict[str, list[ItemKey]]:
        return {unit: [(str(c), str(n), str(i)) for c, n, i in keys] for unit, keys in self.identity["needed"].items()}


def read_part(path: str) -> Part:
    """A shard's file, its format and fields checked: a file that is not one, truncated, from a newer pytest-longctx
    or malformed is one line naming it (``LongctxError``)."""
    name = f"shard {path}"
    body = read_json_file(Path(path), "shard", FIX)
    record = body.get("shard") if isinstance(body, dict) else None
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        raise FileProblem(name, "not a shard's results (no 'shard' record: written without --longctx-shard)", FIX)
    version = record.get("version")
    if not isinstance(version, int) or version > VERSION:
        raise FileProblem(name, f"written by a newer pytest-longctx (shard format version {version}; this one reads "
                                f"{VERSION})", "merge it with the pytest-longctx that wrote it, or upgrade this one")
    if version < 1:
        raise FileProblem(name, f"shard format version {version}, which no pytest-longctx wrote", FIX)
    checked_body(body, name, FIX)
    try:
        shard = Shard(int(record["index"]), int(record["count"]))
        figures = {(str(c), str(n), str(i)): dict(entry) for c, by_length in record["figures"].items()
                   for n, by_item in by_length.items() for i, entry in by_item.items()}
        for (config, _, _), entry in figures.items():
            ItemFigures.from_json(config_kind(config), entry)
        part = Part(
            path=str(path), shard=shard, identity=dict(record["identity"]),
            mode=str(record["mode"]), meta=dict(record["meta"]),
            units={str(unit): UnitPlan.from_json(plan) for unit, plan in record["units"].items()},
            slice={(str(c), str(n), str(i)) for c, n, i in record["slice"]}, figures=figures,
            forwarded=int(record["forwarded"]), seconds=float(record["seconds"]), failure=record["failure"],
            stopped=record["stopped"],
            warnings=[str(w) for w in record["warnings"]], scores=scores_from_json(body, str(path)))
        part.needed()
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise FileProblem(name, f"malformed shard record ({type(exc).__name__}: {exc})", FIX) from None
    if not 1 <= shard.index <= shard.count:
        raise FileProblem(name, f"claims to be shard {shard}, which no split has", FIX)
    return part
