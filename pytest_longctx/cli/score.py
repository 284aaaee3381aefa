"""``longctx score``: a superset of the benchmark's own score.py."""
from __future__ import annotations

import argparse
import sys
from typing import Callable

from pytest_longctx.backends import load_backend
from pytest_longctx.backends.base import close
from pytest_longctx.data.load import load_dataset
from pytest_longctx.data.records import ItemKey
from pytest_longctx.errors import LongctxError
from pytest_longctx.options.fronts import add_command_arguments
from pytest_longctx.options.table import SCORE
from pytest_longctx.paths import check_outputs
from pytest_longctx.reports.format import write_json
from pytest_longctx.reports.text import rows_table
from pytest_longctx.scoring.cache import ScoreCache
from pytest_longctx.scoring.pipeline import require_finite, score_sets
from pytest_longctx.scoring.scores_file import UNJUDGEABLE, UnknownLoss, check_judgeable, dropped_items, load_scores


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("score", help="score a model teacher-forced on the benchmark",
                       description="Score a causal LM teacher-forced; print the headline rows and write the results JSON.")
    add_command_arguments(p, SCORE)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    check_outputs([("--out", args.out), ("--save_scores", args.save_scores)], inputs=[("--reference_scores", args.reference_scores)])
    dataset = load_dataset(args.data, sets=args.sets, lengths=args.lengths, limit=args.limit)
    selected = {(config, length, item.id) for config, length, item in dataset.items()}
    narrowed = _narrowing(args, selected.__contains__)  # before the model loads: nothing is scored in vain
    reference = load_scores(args.reference_scores) if args.reference_scores else None
    backend, tokenizer = load_backend(args.model, args.backend, args.dtype, args.device, args.backend_option,
                                      args.trust_remote_code, kv_press=args.kv_press)
    try:
        cache = ScoreCache.for_backend(backend, args.cache_dir)
        results = score_sets(backend, tokenizer, dataset, mode=args.mode, reference=reference, progress=not args.quiet,
                             cache=cache, beyond_context=args.allow_beyond_context, min_effect=args.min_effect)
    finally:
        close(backend)
    if results.meta.get("mode_fallback"):
        print(f"longctx: warning: {results.meta['mode_fallback']}", file=sys.stderr)
    for warning in results.warnings:
        print(f"longctx: warning: the reference differs in {warning}", file=sys.stderr)
    print(rows_table(results.rows))
    print(f"mode: {results.mode}; reference: {results.reference or 'none (the model is its own)'}")
    if args.out:
        write_json(args.out, results.to_json())
    if args.save_scores:
        scored = {(config, length, item_id) for config, length, item_id, _ in results.scores.items()}
        narrowed = _narrowing(args, scored.__contains__) or narrowed
        check_judgeable(results.scores, f"--save_scores {args.save_scores}: NOT written", UNJUDGEABLE).save(args.save_scores)
        if narrowed:
            print(f"longctx: wrote {args.save_scores}, narrowed on purpose (--narrow-baseline): it dropped {narrowed}",
                  file=sys.stderr)
    require_finite(results)
    return 0


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
