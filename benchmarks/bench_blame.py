"""Blame's cost, its searches against each other, in one run: SmolLM2 with planted and with dense damage.

    python benchmarks/bench_blame.py --out variants --limit 1

builds two candidates of SmolLM2-135M and blames each against the committed baseline by layer:

* ``planted``: ``benchmarks/planted_blame.py``'s ``int2-layers-7-21`` (layers 7 and 21 rounded to
  2 bits, every other linear layer to 8 bits: all 30 layers changed, two carry the damage);
* ``dense``: ``benchmarks/variants.py``'s ``int4-g64`` (every linear layer rounded to 4 bits,
  groups of 64: this project's round-to-nearest, damage planted in every layer alike, not
  torchao's kernels).

Each case is scored once as the candidate alone (``score_sets`` on the selection: the naive
cost a blame run is measured against), then blamed with each search in turn: ``exhaustive``
(every changed part restored and damaging), ``groups-no-switch`` (the group search with the
spread-damage check turned off: halves first, split where they move the far drift, as before
the cumulative search existed) and ``default`` (what ``longctx blame`` does: the first-order
estimate, the first split, and the cumulative search where the damage is spread). Per search it
prints the search that ran, the models scored on the blamed items, the token-layers they ran (a
token through one decoder layer) and what they would have run whole, the wall time and that
time in candidate scorings, the leading parts, the keep (fix) set with its verification, and
the estimate's rank correlation with the measured restores; then the default's models and
wall time against the exhaustive run's. ``--cases``, ``--searches`` and ``--parts`` narrow the
run, ``--json`` writes every figure.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path
from typing import Any, Iterator

from planted_blame import BASELINE, PLANTED
from planted_blame import build as build_planted
from pytest_longctx.reports.format import table
from variants import build as build_variant

CASES = ("planted", "dense")
SEARCHES = ("exhaustive", "groups-no-switch", "default")


@contextlib.contextmanager
def no_spread_switch(search: str) -> Iterator[None]:
    """For ``groups-no-switch``: the run's spread check answers 'concentrated', so the group search goes on."""
    from pytest_longctx.gate.blame import run as blame_run

    if search != "groups-no-switch":
        yield
        return
    kept = blame_run.spread
    blame_run.spread = lambda *args: None  # type: ignore[assignment]
    try:
        yield
    finally:
        blame_run.spread = kept


def candidate_seconds(pair: Any, dataset: Any) -> float:
    """The candidate scored once on the whole selection, as a gate run reads it."""
    from pytest_longctx.backends.hybrids.pair import CANDIDATE
    from pytest_longctx.scoring.pipeline import score_sets

    started = time.monotonic()
    with pair.hybrid(CANDIDATE, [], pair.names[1]) as backend:
        score_sets(backend, pair.tokenizer, dataset, progress=False)
    return time.monotonic() - started


def blamed(pair: Any, dataset: Any, baseline: Any, search: str, parts: list[str] | None) -> dict[str, Any]:
    from pytest_longctx.gate.blame import blame_pair

    started = time.monotonic()
    with no_spread_switch(search):
        found = blame_pair(pair, dataset, baseline, search="exhaustive" if search == "exhaustive" else "groups",
                           parts=parts, reuse=True, progress=False, budget=None)
    seconds = time.monotonic() - started
    reuse = found.reuse or {}
    whole = reuse.get("items", 0)
    correlation = found.correlation()
    return {"search": search, "ran as": found.search, "hybrids": found.hybrids, "whole": whole,
            "ran": whole - reuse.get("skipped", 0), "seconds": seconds,
            "leading": [p.part.name for p in found.ranked[:2]], "fix_set": found.fix_set, "fixed": found.fixed,
            "verified": bool(found.verification and found.verification["passed"]),
            "rho": correlation.rho, "rho_over": correlation.hybrids,
            "spread": None if found.spread is None else {"needed": found.spread.needed, "parts": found.spread.parts},
            "notes": found.notes}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--out", type=Path, default=Path("variants"), help="where the variants are built (kept)")
    parser.add_argument("--baseline", default=BASELINE, help=f"the original's baseline (default {BASELINE})")
    parser.add_argument("--data", default="builtin", help="'builtin' or a benchmark folder the baseline was scored on")
    parser.add_argument("--sets", default="facts")
    parser.add_argument("--lengths", default="2k")
    parser.add_argument("--limit", type=int, default=1)
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, of {', '.join(CASES)}")
    parser.add_argument("--searches", default=",".join(SEARCHES), help=f"comma-separated, of {', '.join(SEARCHES)}")
    parser.add_argument("--parts", help="only these parts, comma-separated (default: every part; a quick run)")
    parser.add_argument("--json", type=Path, help="write every figure here")
    args = parser.parse_args()
    from pytest_longctx.backends.aliases import resolve_model
    from pytest_longctx.backends.hybrids import load_models
    from pytest_longctx.data.load import load_dataset
    from pytest_longctx.scoring.scores_file import load_scores

    cases, searches = args.cases.split(","), args.searches.split(",")
    for name, choices in (("--cases", (cases, CASES)), ("--searches", (searches, SEARCHES))):
        unknown = sorted(set(choices[0]) - set(choices[1]))
        if unknown:
            parser.error(f"{name}: unknown {', '.join(unknown)} (known: {', '.join(choices[1])})")
    args.out.mkdir(parents=True, exist_ok=True)
    dataset = load_dataset(args.data, sets=args.sets.split(","), lengths=args.lengths.split(","), limit=args.limit)
    baseline = load_scores(args.baseline, "baseline")
    figures: dict[str, Any] = {}
    for case in cases:
        if case == "planted":
            folder = build_planted(next(p for p in PLANTED if p.name == "int2-layers-7-21"), resolve_model(args.model), args.out)
        else:
            folder = build_variant(args.model, args.out, ("int4-g64",))["int4-g64"]
        pair = load_models("hf", args.model, str(folder))
        alone = candidate_seconds(pair, dataset)
        parts = args.parts.split(",") if args.parts else None
        found = {search: blamed(pair, dataset, baseline, search, parts) for search in searches}
        figures[case] = {"candidate_seconds": alone, "searches": found}
        print(f"\n{case}: {folder}, the candidate scored alone in {alone:.1f} s")
        print(table(["search", "ran as", "models scored", "token-layers run", "whole", "wall s", "scorings",
                     "leading parts", "keep set", "verification", "estimate rho"],
                    [[f["search"], f["ran as"], str(f["hybrids"]), f"{f['ran']:,}", f"{f['whole']:,}", f"{f['seconds']:.0f}",
                      f"{f['seconds'] / alone:.1f}", ", ".join(f["leading"]), ", ".join(f["fix_set"]) or "(none)",
                      "PASS" if f["verified"] else "FAIL" if f["fix_set"] else "-",
                      "-" if f["rho"] is None else f"{f['rho']:.2f} over {f['rho_over']}"]
                     for f in found.values()]))
        print()
        if "exhaustive" in found and "default" in found:
            every, default = found["exhaustive"], found["default"]
            print(f"default / exhaustive: models {default['hybrids'] / every['hybrids']:.3f}, "
                  f"wall time {default['seconds'] / every['seconds']:.3f}")
        for search, result in found.items():
            for note in result["notes"]:
                print(f"note ({search}): {note}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
