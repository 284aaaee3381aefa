"""The parts of a split joined into the run of the whole (``longctx merge``): the parts checked to be of one split of
one run (``check_parts``: one baseline, model, selection and set of options, every part once, every item in exactly one
part), then the gate's own session made again from the options they recorded, and handed what they read as
pytest-xdist's workers hand theirs to the controller (``merge_gate``). Under a sequential mode the reading of each unit
is done again in the global order from the parts' figures, so every check is settled where and how the unsharded run
settles it and the evaluation covers the items it reads; the parts read at least those.

A part whose run failed or stopped, a part missing, given twice or of another run, an item in no part or in two, or
data or a baseline here other than the parts': one line (``LongctxError``), never a verdict."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable, Sequence

from pytest_longctx.backends.digests import file_digest
from pytest_longctx.data.records import ItemKey
from pytest_longctx.errors import LongctxError
from pytest_longctx.gate.model_run import GateRun
from pytest_longctx.gate.sequential.driver import read_unit
from pytest_longctx.gate.sequential.reading import Reading
from pytest_longctx.gate.shard_file import Part, options_from_json
from pytest_longctx.gate.shards import UnitPlan
from pytest_longctx.metrics.item_figures import ItemFigures
from pytest_longctx.options.table import Sequential
from pytest_longctx.scoring.fingerprint import data_fingerprint
from pytest_longctx.scoring.pipeline import compute_sets, item_entry
from pytest_longctx.scoring.scores_file import ScoresFile


def _shown(key: ItemKey) -> str:
    return "/".join(key)


THEM = ("in it", "there")  # a part's value, and that of the part it is compared with


def _first_difference(mine: Any, theirs: Any, sides: tuple[str, str], where: str = "") -> str:
    """Where two records first differ, and how, each value named by its side: ``thresholds.kl: 0.5 in it, 0.05
    there``."""
    if isinstance(mine, dict) and isinstance(theirs, dict):
        for key in sorted(set(mine) | set(theirs), key=str):
            if mine.get(key) != theirs.get(key):
                return _first_difference(mine.get(key), theirs.get(key), sides, f"{where}.{key}" if where else str(key))
    if isinstance(mine, list) and isinstance(theirs, list) and len(mine) == len(theirs):
        for n, (a, b) in enumerate(zip(mine, theirs)):
            if a != b:
                return _first_difference(a, b, sides, f"{where}[{n}]")

    def said(value: Any) -> str:
        text = json.dumps(value)
        return text if len(text) <= 80 else f"{text[:77]}..."

    return f"{where or 'the record'}: {said(mine)} {sides[0]}, {said(theirs)} {sides[1]}"


def check_parts(parts: Sequence[Part]) -> list[Part]:
    """The parts in shard order, when they are every part of one split of one run, each once, none failed or stopped,
    every needed item in exactly one; else one line naming the part or the item (``LongctxError``)."""
    if not parts:
        raise LongctxError("no shard files given: give every part of one split (longctx merge part-1.json part-2.json ...)")
    first = min(parts, key=lambda p: p.shard.index)
    seen: dict[int, Part] = {}
    for part in parts:
        if part.shard.count != first.shard.count:
            raise LongctxError(f"{part.name}: a part of a split {part.shard.count} ways, and {first.name} of a split "
                               f"{first.shard.count} ways: give the parts of one split")
        if part.shard.index in seen:
            raise LongctxError(f"shard {part.shard} is given twice: {seen[part.shard.index].path} and {part.path}; give each "
                               "part once")
        seen[part.shard.index] = part
        if part.identity != first.identity:
            differs = _first_difference(part.identity, first.identity, THEM)
            raise LongctxError(f"{part.name}: a part of another run than {first.name} ({differs}): every part must be of "
                               "one baseline, model, selection and set of options")
        for problem, what in ((part.failure, "its reading failed"), (part.stopped, "its run stopped early")):
            if problem:
                raise LongctxError(f"{part.name}: {what} ({problem}); run that shard again, then merge")
    missing = [n for n in range(1, first.shard.count + 1) if n not in seen]
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise LongctxError(f"shard {missing[0]}/{first.shard.count} is missing{more}: give every part of the split, "
                           f"{first.shard.count} files; a verdict on fewer items is none")
    ordered = [seen[n] for n in sorted(seen)]
    _check_models(ordered)
    _check_plans(ordered)
    _check_coverage(ordered)
    return ordered


def _check_models(parts: Sequence[Part]) -> None:
    """The model every part read is one model, read alike (its record less each machine's device)."""
    read = [part for part in parts if part.model is not None]
    for part in read[1:]:
        if part.model != read[0].model:
            raise LongctxError(f"{part.name}: read another model, or the model otherwise, than {read[0].name} "
                               f"({_first_difference(part.model, read[0].model, THEM)}): every part must read one model alike")
        if part.mode != read[0].mode:
            raise LongctxError(f"{part.name}: scored in {part.mode} mode, {read[0].name} in {read[0].mode} mode")


def _check_plans(parts: Sequence[Part]) -> None:
    """Every part planned the whole selection alike (the same groups and costs: the same tokenizer, data and mode)."""
    planned = [part for part in parts if part.units]
    for part in planned[1:]:
        mine = {unit: plan.to_json() for unit, plan in part.units.items()}
        theirs = {unit: plan.to_json() for unit, plan in planned[0].units.items()}
        if mine != theirs:
            raise LongctxError(f"{part.name}: planned the selection otherwise than {planned[0].name} "
                               f"({_first_difference(mine, theirs, THEM)}): another tokenizer, data or mode")


def _check_coverage(parts: Sequence[Part]) -> None:
    """Every needed item in the part of exactly one shard, and every item a part read in its own part."""
    needed = {key for keys in parts[0].needed().values() for key in keys}
    owner: dict[ItemKey, Part] = {}
    for part in parts:
        for key in sorted(part.slice):
            if key not in needed:
                raise LongctxError(f"{part.name}: item {_shown(key)} is in its part and not in the selection: a foreign "
                                   "item; give the parts of one split")
            if key in owner:
                raise LongctxError(f"item {_shown(key)} is in two parts, {owner[key].name} and {part.name}: give the "
                                   "parts of one split")
            owner[key] = part
        for config, length, item_id, _ in part.scores.items():
            if (config, length, item_id) not in part.slice:
                raise LongctxError(f"{part.name}: holds the scores of item {config}/{length}/{item_id}, which is not in "
                                   "its part: the file was changed after it was written")
    lacking = sorted(needed - set(owner))
    if lacking:
        more = f" (and {len(lacking) - 1} more)" if len(lacking) > 1 else ""
        raise LongctxError(f"item {_shown(lacking[0])} is in no part{more}: the parts do not hold the whole selection; a "
                           "verdict on fewer items is none")


def check_baseline(parts: Sequence[Part], invocation_dir: Path) -> None:
    """The baseline the parts were judged against, here and unchanged."""
    found = parts[0].identity["baseline"]
    if found is None:
        return
    path = invocation_dir / found["path"]
    digest = str(found["sha256"])
    if not path.is_file():
        raise LongctxError(f"baseline {path}: the parts were judged against it (sha256 {digest[:12]}...) and it is not "
                           "here: run the merge where it is, at the path the parts were given")
    here = file_digest(path)
    if here != digest:
        raise LongctxError(f"baseline {path}: not the one the parts were judged against (sha256 {digest[:12]}... there, "
                           f"{here[:12]}... here): run the merge with the baseline the parts read")


def merge_gate(parts: Sequence[Part], invocation_dir: Path, out: str | None = None, markdown: str | None = None,
               html: str | None = None, baseline: str | None = None) -> GateRun:
    """The gate's session of the whole selection, from every part of a split (``check_parts``): made from the options
    they recorded (``out``, ``markdown``, ``html``: the merge's reports; ``baseline``: where a baseline update's parts
    are joined), with what they read handed over and each unit's sequential reading done again in the global order."""
    parts = check_parts(parts)
    first = parts[0]
    identity = first.identity
    options = identity["options"]
    updating = bool(options["update_baseline"])
    if updating and not baseline:
        raise LongctxError(f"{first.name}: the parts of a baseline update (--longctx-update-baseline): give the new "
                           "baseline's path, --baseline OUT")
    if baseline and not updating:
        raise LongctxError(f"--baseline {baseline}: these parts judge a model against baseline {options['baseline']}; "
                           "only the parts of a baseline update (--longctx-update-baseline --longctx-shard) make one")
    check_baseline(parts, invocation_dir)
    gate_options = options_from_json(options, out=out, markdown=markdown, html=html,
                                     **({"baseline": baseline} if updating else {}))
    run = GateRun(gate_options, invocation_dir)
    here = data_fingerprint((c, n, i, f) for (c, n, i), f in run.inputs.fingerprints.items())
    if here != identity["data"]:
        raise LongctxError(f"--longctx-data {options['data']}: the data here differs from the data the parts read "
                           f"(fingerprint {identity['data']} there, {here} here): run the merge with the parts' data")
    tests = set(identity["tests"])
    cases = [case for case in run.cases() if case.key in tests]
    if {case.key for case in cases} != tests:
        lacking = sorted(tests - {case.key for case in cases})
        raise LongctxError(f"test {lacking[0]}: selected in the parts, and the data here has no such test")
    run.select(cases)
    needed = first.needed()
    if {unit: set(keys) for unit, keys in run.needed.items()} != {unit: set(keys) for unit, keys in needed.items()}:
        raise LongctxError(f"{first.name}: its selection needs other items than the same tests need here")
    scores = _scores(parts, run)
    exported = _readings(run, parts, needed, scores)
    run.absorb(json.dumps(exported))
    return run


def _scores(parts: Sequence[Part], run: GateRun) -> ScoresFile:
    """Every part's scores, each item checked against the data here and its figures against those its part
    recorded."""
    found = ScoresFile(mode=parts[0].mode, meta={})
    for part in parts:
        found.meta = found.meta or dict(part.meta)
        for config, length, item_id, scores in part.scores.items():
            key = (config, length, item_id)
            if scores.fingerprint != run.inputs.fingerprints.get(key):
                raise LongctxError(f"{part.name}: item {_shown(key)} was read from other data than the data here "
                                   "(its fingerprint differs): run the merge with the parts' data")
            found.scores.setdefault(config, {}).setdefault(length, {})[item_id] = scores
    for part in parts:
        for key, recorded in part.figures.items():
            again = _figures(run, found, key).to_json()
            if json.loads(json.dumps(again)) != recorded:
                differs = _first_difference(again, recorded, ("here", "in the part"))
                raise LongctxError(f"{part.name}: item {_shown(key)}'s figures here differ from those the part recorded "
                                   f"({differs}): the data or the baseline here is not the one it read against")
    return found


def _figures(run: GateRun, scores: ScoresFile, key: ItemKey) -> ItemFigures:
    return item_entry(run.dataset, scores, run.baseline, key, run.thresholds.min_effect)


def _readings(run: GateRun, parts: Sequence[Part], needed: dict[str, list[ItemKey]],
              scores: ScoresFile) -> dict[str, Any]:
    """What the unsharded run would have read and how, as a worker exports it (``GateReader.export``): each unit read
    whole, or its sequential reading done again in the global order from the parts' figures; the scores of the items
    it reads, in the order it reads them; the tokens the parts forwarded and the seconds they read, together."""
    options, baseline = run.options, run.baseline
    plans = next((part.units for part in parts if part.units), {})
    sequential = options.sequential != Sequential.OFF and baseline is not None
    readings: dict[str, Reading] = {}
    order: list[ItemKey] = []
    whole, unread = 0, set()
    for unit, keys in needed.items():
        plan = plans.get(unit)
        if plan is None:
            raise LongctxError(f"unit {unit}: no part planned it (every part read nothing of it), so its reading "
                               "cannot be done again")
        if not sequential:
            _require(keys, scores, unit)
            order.extend(sorted(keys))
            whole += plan.whole(sorted(keys))
            continue
        reading = _replay(run, unit, keys, plan, scores)
        readings[unit] = reading
        whole += reading.whole
        order.extend(key for step in reading.steps for key in sorted(step.items))
        unread |= set(keys) - set(reading.read)
    kept = ScoresFile(mode=scores.mode, meta=scores.meta)
    for config, length, item_id in order:
        kept.scores.setdefault(config, {}).setdefault(length, {})[item_id] = scores.scores[config][length][item_id]
    return {"scores": kept.to_json(), "failure": None, "forwarded": sum(part.forwarded for part in parts),
            "seconds": sum(part.seconds for part in parts), "whole": whole,
            "readings": {unit: reading.to_json() for unit, reading in readings.items()},
            "unread": sorted(unread), "warnings": _warnings(parts), "part": None,
            "tests": [], "needed": {}, "unloaded": None}  # the selection is the merge's own (``run.select``)


def _require(keys: Iterable[ItemKey], scores: ScoresFile, unit: str) -> None:
    for config, length, item_id in sorted(keys):
        if item_id not in scores.scores.get(config, {}).get(length, {}):
            raise LongctxError(f"item {config}/{length}/{item_id}: the unsharded run reads it ({unit}) and no part read "
                               "it: a part of another version, or changed after it was written")


def _replay(run: GateRun, unit: str, keys: list[ItemKey], plan: UnitPlan, scores: ScoresFile) -> Reading:
    """The unit's sequential reading in the global order, as the unsharded run reads it (``GateReader``), each item's
    figures from the parts' scores."""
    selection = run.dataset.select(set(keys))
    baseline_sets = compute_sets(selection, run.baseline, None, run.thresholds.min_effect)

    def read(batch: Sequence[ItemKey]) -> dict[ItemKey, ItemFigures]:
        _require(batch, scores, unit)
        return {key: _figures(run, scores, key) for key in batch}

    return read_unit(Sequential(run.options.sequential), run.thresholds, selection, run.baseline, baseline_sets, run.tests,
                     plan, read)


def _warnings(parts: Sequence[Part]) -> list[str]:
    """The parts' warnings, each once, and the devices they read on where they differ."""
    found: list[str] = []
    for part in parts:
        found.extend(w for w in part.warnings if w not in found)
    devices = {str(part.meta.get("device")): part for part in parts if part.meta}
    if len(devices) > 1:
        found.append("the parts read the model on different devices: " + ", ".join(
            f"{device} ({part.name})" for device, part in devices.items()) + "; the results name the first's")
    return found

