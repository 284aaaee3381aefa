"""What splitting a gate into shards costs: the gate run whole, then split N ways (each N of ``--counts``, the shards run
one after another, as N CI jobs would run them side by side) and joined by ``longctx merge``, all in one run of this
script, as a user runs them (pytest and the ``longctx`` command in processes of their own, no score cache):

    python benchmarks/bench_shards.py --baseline baselines/smollm2-135m.json.gz --lengths 2k --limit 4

For each split it prints the tokens the shards forwarded together against the whole run's, the prefixes read again
(every shard that reads a unit forwards the prefix all of the unit's items share, which the whole run forwards once),
the seconds of the shards (together, and the slowest: the wall time of a matrix of N jobs) and of the merge; and it
checks that the merge gave the whole run's outcome for every test and its exit status, and under ``off`` every figure
of its results JSON and exactly the whole run's tokens plus the prefixes read again. Exit status 1 when a check fails.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from pytest_longctx.reports.format import table


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m", help="the candidate (default: smollm2-135m, against its baseline)")
    parser.add_argument("--baseline", required=True, help="the baseline the candidate is gated against")
    parser.add_argument("--data", default="builtin")
    parser.add_argument("--lengths", default="2k")
    parser.add_argument("--sets", default="facts,tool_calls")
    parser.add_argument("--limit", type=int, default=None, help="the first N items of each set and length")
    parser.add_argument("--counts", default="1,2,4", help="the splits, comma-separated (default: 1,2,4)")
    parser.add_argument("--sequential", default="off", choices=("off", "exact", "confident"))
    return parser.parse_args(argv)


def timed(command: list[str], cwd: Path) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=cwd)
    return time.perf_counter() - start, done


def gate(args: argparse.Namespace, cwd: Path, *more: str) -> tuple[float, subprocess.CompletedProcess]:
    data = str(Path(args.data).resolve()) if Path(args.data).exists() else args.data
    selection = [f"--longctx-lengths={args.lengths}", f"--longctx-sets={args.sets}"]
    if args.limit:
        selection.append(f"--longctx-limit={args.limit}")
    return timed([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "-q", "--longctx-only",
                  f"--longctx-model={args.model}", f"--longctx-data={data}", f"--longctx-baseline={Path(args.baseline).resolve()}",
                  "--longctx-cache-dir=off", f"--longctx-sequential={args.sequential}", *selection, *more], cwd)


def outcomes(path: Path) -> dict[str, str]:
    """Each test of a junit file and its outcome."""
    return {case.get("name"): next((tag for tag in ("failure", "skipped", "error") if case.find(tag) is not None), "passed")
            for case in ET.parse(path).iter("testcase")}


def prefixes_again(parts: list[dict[str, Any]]) -> int:
    """The prefix tokens the parts forward beyond the whole run: each unit's shared prefix once more for every further
    part that reads any of its items."""
    units = parts[0]["units"]
    unit_of = {(c, n, i): unit for unit, plan in units.items() for c, n, i, _ in plan["groups"]}
    readers: dict[str, int] = {}
    for part in parts:
        for unit in {unit_of[tuple(key)] for key in part["slice"] if tuple(key) in unit_of}:
            readers[unit] = readers.get(unit, 0) + 1
    return sum((count - 1) * units[unit]["shared"] for unit, count in readers.items())


def fail(message: str, done: subprocess.CompletedProcess | None = None) -> None:
    print(f"bench_shards: {message}", file=sys.stderr)
    if done is not None:
        print(done.stdout[-3000:] + done.stderr[-3000:], file=sys.stderr)
    sys.exit(1)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    counts = [int(c) for c in args.counts.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        cwd = Path(tmp)
        seconds, whole = gate(args, cwd, "--longctx-out=whole.json", "--junitxml=whole.xml")
        if whole.returncode not in (0, 1):
            fail(f"the whole run ended with exit status {whole.returncode}", whole)
        expected = json.loads((cwd / "whole.json").read_text())
        tokens = expected.pop("tokens_forwarded")
        rows = [["whole", f"{tokens:,}", "1.000", "", f"{seconds:.1f}", f"{seconds:.1f}", "", f"exit {whole.returncode}"]]
        for count in counts:
            folder = cwd / f"split-{count}"
            folder.mkdir()
            times, paths = [], []
            for index in range(1, count + 1):
                path = folder / f"part-{index}.json"
                took, done = gate(args, folder, f"--longctx-shard={index}/{count}", f"--longctx-out={path}")
                if done.returncode not in (0, 1) or not path.is_file():
                    fail(f"shard {index}/{count} ended with exit status {done.returncode} and no part", done)
                times.append(took)
                paths.append(str(path))
            merging, merged = timed([sys.executable, "-m", "pytest_longctx.cli", "merge", *paths, f"--out={folder}/merged.json",
                                     f"--junitxml={folder}/merged.xml"], cwd)
            if merged.returncode != whole.returncode:
                fail(f"{count} shards merged: exit status {merged.returncode}, the whole run's {whole.returncode}", merged)
            if outcomes(folder / "merged.xml") != outcomes(cwd / "whole.xml"):
                fail(f"{count} shards merged: another outcome than the whole run's for some test")
            found = json.loads((folder / "merged.json").read_text())
            sharded = found.pop("tokens_forwarded")
            again = prefixes_again([json.loads(Path(p).read_text())["shard"] for p in paths])
            if args.sequential == "off" and found != expected:
                fail(f"{count} shards merged: figures other than the whole run's")
            if args.sequential == "off" and sharded != tokens + again:
                fail(f"{count} shards forwarded {sharded:,} tokens, not the whole run's {tokens:,} and the {again:,} of the "
                     "prefixes read again")
            ratio = f"{sharded / tokens:.3f}" if tokens else "n/a"
            rows.append([f"{count} shard{'s' if count > 1 else ''}", f"{sharded:,}", ratio, f"{again:,}", f"{sum(times):.1f}",
                         f"{max(times):.1f}", f"{merging:.1f}", "the whole run's"])
    print(f"{args.model} against {args.baseline}, {args.sets} at {args.lengths}"
          f"{f', limit {args.limit}' if args.limit else ''}, --longctx-sequential {args.sequential}, no score cache (each "
          "shard is a pytest run of its own: its seconds include starting Python and loading the model):")
    print(table(["run", "tokens forwarded", "x whole", "prefixes read again", "shards s (together)", "slowest shard s",
                 "merge s", "outcome"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
