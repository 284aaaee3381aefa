"""``longctx score``: a superset of the benchmark's own score.py."""
from __future__ import annotations

import argparse
import sys
from typing import Callable, Sequence

from pytest_longctx.backends import load_backend
from pytest_longctx.backends.base import Backend, close, tokenizer_missing
from pytest_longctx.cli.args import loaded
from pytest_longctx.data.load import Dataset, load_dataset
from pytest_longctx.data.records import ItemKey
from pytest_longctx.errors import LongctxError
from pytest_longctx.gate.evaluation import evaluate
from pytest_longctx.gate.gate_session import unit_of
from pytest_longctx.gate.keys import dataset_keys
from pytest_longctx.gate.sequential.driver import read_unit
from pytest_longctx.gate.sequential.reading import Reading, totals
from pytest_longctx.gate.specs import ITEM
from pytest_longctx.gate.thresholds import Thresholds
from pytest_longctx.metrics.item_figures import ItemFigures
from pytest_longctx.metrics.rows import headline
from pytest_longctx.options.table import Sequential
from pytest_longctx.paths import check_outputs, local_files
from pytest_longctx.reports.format import table, write_json
from pytest_longctx.reports.text import SETTLED_HEADERS, rows_table, settled_rows
from pytest_longctx.scoring.cache import ScoreCache
from pytest_longctx.scoring.engine import how_read
from pytest_longctx.scoring.fingerprint import data_fingerprint, tokenizer_fingerprint
from pytest_longctx.scoring.groups import Groups
from pytest_longctx.scoring.identity import compare_judged
from pytest_longctx.scoring.modes import choose_mode
from pytest_longctx.scoring.pipeline import (
    Results,
    compute_sets,
    item_entry,
    needed_fingerprints,
    planned_reads,
    read_plans,
    require_finite,
    score_sets,
)
from pytest_longctx.scoring.scores_file import (
    UNJUDGEABLE,
    ScoresFile,
    UnknownLoss,
    check_fits,
    check_judgeable,
    dropped_items,
    load_scores,
)


def run(args: argparse.Namespace) -> int:
    check_outputs([("--out", args.out), ("--save_scores", args.save_scores)],
                  [("--reference_scores", args.reference_scores), *local_files(loaded(args))])
    _check_sequential(args)
    dataset = load_dataset(args.data, sets=args.sets, lengths=args.lengths, limit=args.limit)
    selected = {(config, length, item.id) for config, length, item in dataset.items()}
    narrowed = _narrowing(args, selected.__contains__)  # before the model loads: nothing is scored in vain
    reference = load_scores(args.reference_scores) if args.reference_scores else None
    backend, tokenizer = load_backend(args.model, args.backend, args.dtype, args.device, args.backend_option,
                                      args.trust_remote_code, kv_press=args.kv_press)
    readings: dict[str, Reading] = {}
    try:
        cache = ScoreCache.for_backend(backend, args.cache_dir)
        if args.sequential != Sequential.OFF and reference is not None:
            results, readings = _read_sequentially(args, backend, tokenizer, dataset, reference, cache)
        else:
            results = score_sets(backend, tokenizer, dataset, mode=args.mode, reference=reference, progress=not args.quiet,
                                 cache=cache, beyond_context=args.allow_beyond_context, min_effect=args.min_effect)
    finally:
        close(backend)
    if results.meta.get("mode_fallback"):
        print(f"longctx: warning: {results.meta['mode_fallback']}", file=sys.stderr)
    for warning in results.warnings:
        print(f"longctx: warning: {warning}", file=sys.stderr)
    print(rows_table(results.rows))
    print(f"mode: {results.mode}; reference: {results.reference or 'none (the model is its own)'}")
    if readings:
        print(_settled_table(results, dataset, reference, readings, args.min_effect))
    if args.out:
        found = results.to_json()
        if readings:
            found["sequential"] = {"totals": totals(readings.values()).to_json(),
                                   "units": {unit: reading.to_json() for unit, reading in readings.items()}}
        write_json(args.out, found)
    if args.save_scores:
        scored = {(config, length, item_id) for config, length, item_id, _ in results.scores.items()}
        narrowed = _narrowing(args, scored.__contains__) or narrowed
        check_judgeable(results.scores, f"--save_scores {args.save_scores}: NOT written", UNJUDGEABLE).save(args.save_scores)
        if narrowed:
            print(f"longctx: wrote {args.save_scores}, narrowed on purpose (--narrow-baseline): it dropped {narrowed}",
                  file=sys.stderr)
    require_finite(results)
    return 0


def _check_sequential(args: argparse.Namespace) -> None:
    """--sequential exact or confident judges against --reference_scores and reads only part of the selection."""
    if args.sequential == Sequential.OFF:
        return
    if not args.reference_scores:
        raise LongctxError(f"--sequential {args.sequential}: it stops once the checks against a reference are settled; "
                           "give the reference with --reference_scores, or leave it out")
    if args.save_scores:
        raise LongctxError(f"--sequential {args.sequential}: --save_scores keeps scores to serve as a reference, which "
                           "must hold every item; leave --sequential out (off) to write it")


def _read_sequentially(args: argparse.Namespace, backend: Backend, tokenizer: object, dataset: Dataset,
                       reference: ScoresFile, cache: ScoreCache | None) -> tuple[Results, dict[str, Reading]]:
    """Read the items unit by unit, a group at a time, until every row and cell against ``reference`` is settled, at
    the gate's default thresholds (gate/sequential/driver.py, as the gate reads); the results hold what was read."""
    fallback: list[str] = []
    mode = choose_mode(args.mode, tokenizer, dataset, fallback, missing=tokenizer_missing(backend))
    check_fits(reference, mode, tokenizer_fingerprint(tokenizer, mode), needed_fingerprints(dataset))
    thresholds = Thresholds(min_effect=args.min_effect)
    notes: list[str] = []
    plans = planned_reads(backend, tokenizer, dataset, mode, reference, notes, args.allow_beyond_context)
    scores, forwarded = ScoresFile(mode=mode, meta={}), [0]
    # the rows and cells, as the gate has them: an item's own check is a test of the gate's
    tests = frozenset(key for key, metrics in dataset_keys(dataset).items() if ITEM.threshold not in metrics)
    readings = {}
    for unit in dict.fromkeys(unit_of(config) for config in dataset.configs):  # read unit by unit, as the gate reads
        groups = Groups.of([p for p in plans if unit_of(p.config) == unit], how_read(backend))

        def read(batch: Sequence[ItemKey], groups: Groups = groups) -> dict[ItemKey, ItemFigures]:
            scored = read_plans(backend, tokenizer, dataset.select(set(batch)), mode, [groups.plans[k] for k in batch],
                                not args.quiet, cache=cache, notes=notes, shared=groups.shared)
            scores.meta = scored.scores.meta  # the latest: what the backend says of itself once read (a server that left)
            forwarded[0] += scored.forwarded
            for config, length, item_id, found in scored.scores.items():
                scores.scores.setdefault(config, {}).setdefault(length, {})[item_id] = found
            return {key: item_entry(dataset, scores, reference, key, args.min_effect) for key in batch}

        selection = dataset.select(set(groups.plans))
        readings[unit] = read_unit(Sequential(args.sequential), thresholds, selection, reference,
                                   compute_sets(selection, reference, None, args.min_effect), tests, groups, read)
    scored = [(c, n, i, s.fingerprint) for c, n, i, s in scores.items()]
    scores.meta = {**scores.meta, "data": data_fingerprint(scored), **({"mode_fallback": fallback[0]} if fallback else {})}
    sets = compute_sets(dataset.select({(c, n, i) for c, n, i, _ in scored}), scores, reference, args.min_effect)
    rows, sources = headline(sets)
    warnings = compare_judged(reference.meta, scores.meta, "reference").warnings + notes
    return Results(rows, sources, sets, mode, scores.meta, scores, reference.path, warnings, args.min_effect,
                   forwarded[0], sum(r.whole for r in readings.values())), readings


def _settled_table(results: Results, dataset: Dataset, reference: ScoresFile, readings: dict[str, Reading],
                   min_effect: float) -> str:
    """What was read, and how each check was settled (its verdict against the reference, paired over the items
    read; the thresholds from the reference over the whole selection)."""
    read = dataset.select({(c, n, i) for c, n, i, _ in results.scores.items()})
    evaluation = evaluate(results.sets, compute_sets(read, reference, None, min_effect), Thresholds(min_effect=min_effect),
                          compute_sets(dataset, reference, None, min_effect))
    settled = {found: how for reading in readings.values() for found, how in reading.settlings().items()}
    for verdict in evaluation.verdicts:
        verdict.settling = settled.get((verdict.key, verdict.metric), verdict.settling)
    found = totals(readings.values())
    assert found is not None
    said = found.text().replace("--longctx-sequential", "--sequential")
    return f"{said}:\n{table(SETTLED_HEADERS, settled_rows(evaluation))}"


def _narrowing(args: argparse.Namespace, kept: Callable[[ItemKey], bool]) -> str | None:
    """What writing ``--save_scores`` would drop of the file there (None: nothing); refused
    unless ``--narrow-baseline``, as the plugin refuses an update that narrows its baseline."""
    if not args.save_scores:
        if args.narrow_baseline:
            raise LongctxError("--narrow-baseline: it lets --save_scores drop items of the file it replaces; give it "
                               "with --save_scores, or leave it out")
        return None
    try:
        dropped = dropped_items(args.save_scores, kept)
    except UnknownLoss as exc:
        raise LongctxError(f"--save_scores {args.save_scores}: NOT written: {exc.reason}") from None
    if dropped and not args.narrow_baseline:
        raise LongctxError(f"--save_scores {args.save_scores}: NOT written: this run would drop {dropped}; give "
                           "--narrow-baseline to narrow it on purpose, or score the selection it was made with (the same "
                           "--sets, --lengths and --limit)")
    return dropped
