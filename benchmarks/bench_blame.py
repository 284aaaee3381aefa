"""Blame's cost, searched against exhaustive, in one run: SmolLM2 with damage planted beforehand.

    python benchmarks/bench_blame.py --out variants --limit 2

builds the ``int2-layers-7-21`` variant of ``benchmarks/planted_blame.py`` (layers 7 and 21 of
SmolLM2-135M rounded to 2 bits, every other linear layer to 8 bits: all 30 layers changed), loads
it and the original once, and blames it against the committed baseline by layer with each
``--search`` in turn (``exhaustive``: every changed part restored and damaging; ``groups``: halves
of the changed parts first, split where they move the far drift). Per search it prints the
models scored on the blamed items, the token-layers they ran (a token through one decoder layer)
and what they would have run whole, the wall time, the leading parts and the fix set with its
verification; then the ratios: the group search's token-layers and wall time against the
exhaustive run's, and the reuse of the layer boundaries alone (the exhaustive run's token-layers
whole against those it ran). ``--parts`` narrows the parts (a quick run), ``--json`` writes every
figure.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from planted_blame import BASELINE, PLANTED, build
from pytest_longctx.reports.format import table

SEARCHES = ("exhaustive", "groups")


def run(pair: Any, dataset: Any, baseline: Any, search: str, parts: list[str] | None) -> dict[str, Any]:
    from pytest_longctx.gate.blame import blame_pair

    started = time.monotonic()
    found = blame_pair(pair, dataset, baseline, search=search, parts=parts, reuse=True, progress=False)
    seconds = time.monotonic() - started
    reuse = found.reuse or {}
    whole = reuse.get("items", 0)
    return {"search": found.search, "hybrids": found.hybrids, "groups": len(found.groups), "whole": whole,
            "ran": whole - reuse.get("skipped", 0), "seconds": seconds, "leading": [p.part.name for p in found.parts[:2]],
            "fix_set": found.fix_set, "fixed": found.fixed,
            "verified": bool(found.verification and found.verification["passed"]), "notes": found.notes}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--out", type=Path, default=Path("variants"), help="where the planted variant is built (kept)")
    parser.add_argument("--baseline", default=BASELINE, help=f"the original's baseline (default {BASELINE})")
    parser.add_argument("--data", default="builtin", help="'builtin' or a benchmark folder the baseline was scored on")
    parser.add_argument("--sets", default="facts")
    parser.add_argument("--lengths", default="2k")
    parser.add_argument("--limit", type=int, default=2)
    parser.add_argument("--parts", help="only these parts, comma-separated (default: every part)")
    parser.add_argument("--json", type=Path, help="write every figure here")
    args = parser.parse_args()
    from pytest_longctx.backends.aliases import resolve_model
    from pytest_longctx.backends.hybrids.pairs import load_models
    from pytest_longctx.data.load import load_dataset
    from pytest_longctx.scoring.scores_file import load_scores

    args.out.mkdir(parents=True, exist_ok=True)
    planted = next(p for p in PLANTED if p.name == "int2-layers-7-21")
    folder = build(planted, resolve_model(args.model), args.out)
    pair = load_models("hf", args.model, str(folder))
    dataset = load_dataset(args.data, sets=args.sets.split(","), lengths=args.lengths.split(","), limit=args.limit)
    baseline = load_scores(args.baseline, "baseline")
    parts = args.parts.split(",") if args.parts else None
    found = {search: run(pair, dataset, baseline, search, parts) for search in SEARCHES}
    print(table(["search", "models scored", "groups", "token-layers run", "whole", "wall s", "leading parts", "fix set", "verification"],
                [[f["search"], str(f["hybrids"]), str(f["groups"]), f"{f['ran']:,}", f"{f['whole']:,}", f"{f['seconds']:.0f}",
                  ", ".join(f["leading"]), ", ".join(f["fix_set"]) or "(none)", "PASS" if f["verified"] else "FAIL"]
                 for f in found.values()]))
    print()
    every, groups = found["exhaustive"], found["groups"]
    print(f"group search / exhaustive: token-layers {groups['ran'] / every['ran']:.3f}, "
          f"models {groups['hybrids'] / every['hybrids']:.3f}, wall time {groups['seconds'] / every['seconds']:.3f}")
    print(f"reuse alone (exhaustive, whole / run): {every['whole'] / every['ran']:.2f}x fewer token-layers")
    same = set(groups["leading"]) == set(every["leading"]) and groups["fix_set"] == every["fix_set"]
    print(f"the same leading parts and fix set: {'yes' if same else 'NO'}")
    for search, figures in found.items():
        for note in figures["notes"]:
            print(f"note ({search}): {note}")
    if args.json:
        args.json.write_text(json.dumps(found, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
