"""What a ladder costs against its candidates run one by one: the candidates gated against one baseline in one pytest
run (``--longctx-model`` given once per candidate), under both reading orders of the rungs after the first, and each
candidate in a pytest run of its own, all in one run of this script, as a user runs them (no score cache):

    python benchmarks/bench_ladder.py --baseline smollm2-135m --lengths 2k --limit 4

The candidates are the README's "What it catches" ones that differ in their weights alone (the model itself, torchao
int8, int4 and int2 in groups of 64, the 512-token window; ``benchmarks/quantized_variants.py`` and
``benchmarks/variants.py`` make them once into --variants). The 4-bit KV cache is not among them: it is the model itself
read by another backend (``--longctx-backend variants:kv_int4``), and a ladder's candidates share one backend.

It prints, per candidate, the verdict, the tokens forwarded and the seconds of its own run and of its rung in each
ladder order, then the wall time and peak memory (the largest resident set of the pytest process) of the separate
runs together and of each ladder. It checks that every rung's tests have the outcomes of its own run, test by test,
and its verdicts the same (in the drift order every figure and word of each check; the point at which the reading
settled it may differ); exit status 1 when one differs.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import quantized_variants
import variants
from pytest_longctx.reports.format import table

ITSELF = "the model itself"
TOOLS = ("torchao-int8", "torchao-int4-g64", "torchao-int2-g64")
ORDERS = ("digest", "drift")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    every = (ITSELF, *TOOLS, *variants.VARIANTS)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m", help="the original the candidates are made from")
    parser.add_argument("--baseline", required=True, help="the baseline every candidate is gated against (a file, or a "
                                                          "shipped baseline's name such as smollm2-135m)")
    parser.add_argument("--data", default="builtin")
    parser.add_argument("--sets", help="configs, comma-separated (default: every one the baseline holds)")
    parser.add_argument("--lengths", default="2k")
    parser.add_argument("--limit", type=int, default=4)
    parser.add_argument("--variants", type=Path, default=Path("variants"), help="where the candidates are made, once")
    parser.add_argument("--only", nargs="+", choices=every, default=[ITSELF, *TOOLS, "window512"],
                        help="the candidates, smallest effort first (default: the README's, the KV cache aside)")
    return parser.parse_args(argv)


def candidates(args: argparse.Namespace) -> dict[str, str]:
    """The ladder's name of each candidate (what the ladder calls it: its folder's name, an alias as given) -> model."""
    tools = quantized_variants.build(args.model, args.variants, tuple(n for n in args.only if n in TOOLS))
    hand = variants.build(args.model, args.variants, tuple(n for n in args.only if n in variants.VARIANTS))
    made = {**tools, **hand}
    found = {}
    for name in args.only:
        model = args.model if name == ITSELF else str(made[name].resolve())  # pytest runs in a folder of its own
        found[Path(model).name] = model
    return found


def run(command: list[str], cwd: Path) -> tuple[subprocess.CompletedProcess, float, int]:
    """(the finished process, its wall seconds, its peak resident memory in bytes): the process is waited for with
    wait4, whose usage record is that process's own."""
    start = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        process = subprocess.Popen(command, cwd=cwd, stdout=out, stderr=err, text=True)
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
        seconds = time.perf_counter() - start
        out.seek(0)
        err.seek(0)
        done = subprocess.CompletedProcess(command, process.returncode, out.read(), err.read())
    return done, seconds, usage.ru_maxrss * 1024  # Linux reports kilobytes


def gate(args: argparse.Namespace, cwd: Path, models: list[str], name: str, *more: str) -> tuple[dict, dict, float, int]:
    """One pytest run of the gate on ``models``: (its results JSON, each test's outcome, wall seconds, peak bytes)."""
    data = str(Path(args.data).resolve()) if Path(args.data).exists() else args.data
    baseline = str(Path(args.baseline).resolve()) if Path(args.baseline).exists() else args.baseline
    selection = [f"--longctx-lengths={args.lengths}", f"--longctx-limit={args.limit}",
                 *([f"--longctx-sets={args.sets}"] if args.sets else [])]
    done, seconds, peak = run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                               "--longctx-only", *(f"--longctx-model={model}" for model in models),
                               f"--longctx-data={data}", f"--longctx-baseline={baseline}", "--longctx-cache-dir=off",
                               f"--longctx-out={name}.json", f"--junitxml={name}.xml", *selection, *more], cwd)
    if done.returncode not in (0, 1) or not (cwd / f"{name}.json").is_file():
        print(done.stdout[-3000:] + done.stderr[-3000:], file=sys.stderr)
        raise SystemExit(f"bench_ladder: {name}: the gate ended with exit status {done.returncode} and no results")
    outcomes = {case.get("name"): next((tag for tag in ("failure", "skipped", "error") if case.find(tag) is not None),
                                       "passed") for case in ET.parse(cwd / f"{name}.xml").iter("testcase")}
    return json.loads((cwd / f"{name}.json").read_text()), outcomes, seconds, peak


def mib(value: int) -> str:
    return f"{value / 2**20:,.0f}"


def judged(verdicts: list[dict], order: str) -> list[dict]:
    """A run's verdicts as the rung of a ladder in ``order`` must give them: whole in the digest order (a run's
    own), without each check's stopping record in the drift order."""
    return verdicts if order == "digest" else [{k: v for k, v in verdict.items() if k != "settled"} for verdict in verdicts]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    models = candidates(args)
    problems = []
    with tempfile.TemporaryDirectory() as tmp:
        cwd = Path(tmp)
        alone = {name: gate(args, cwd, [model], f"alone-{name}") for name, model in models.items()}
        ladders = {order: gate(args, cwd, list(models.values()), f"ladder-{order}", f"--longctx-ladder-order={order}")
                   for order in ORDERS}
    rows = []
    for name in models:
        own, own_outcomes, own_seconds, _ = alone[name]
        verdict = own["outcome"]
        row = [name, verdict, f"{own['tokens_forwarded']:,}", f"{own_seconds:.1f}"]
        for order in ORDERS:
            results, outcomes, _, _ = ladders[order]
            rung = next(r for r in results["ladder"] if r["candidate"] == name)
            mine = {test.replace(f"[{name}]]", "]"): outcome for test, outcome in outcomes.items()
                    if test.endswith(f"[{name}]]")}
            if mine != own_outcomes:
                problems.append(f"{order} ladder, {name}: outcomes other than its own run's: "
                                f"{sorted(t for t in own_outcomes if mine.get(t) != own_outcomes[t])[:5]}")
            # the drift order reads the items in another order, so its checks may settle after other items: each
            # verdict's stopping record ("settled") is the reading's; every figure and word must be its own run's
            pairs = zip(judged(own["verdicts"], order), judged(results["candidates"][name]["verdicts"], order))
            differ = {key for theirs, mine_ in pairs for key in theirs if theirs[key] != mine_.get(key)}
            if len(own["verdicts"]) != len(results["candidates"][name]["verdicts"]) or differ or rung["verdict"] != verdict:
                problems.append(f"{order} ladder, {name}: verdicts other than its own run's ({', '.join(sorted(differ))})")
            row += [rung["verdict"], f"{rung['tokens_forwarded']:,}", f"{rung['seconds']:.1f}"]
        rows.append(row)
    selection = f"{args.sets or 'every set'} at {args.lengths}, limit {args.limit}"
    print(f"{len(models)} candidates of {args.model} against {args.baseline}, {selection}, sequential exact (the default), "
          "no score cache; seconds of a rung: loading it and reading its items:")
    print(table(["candidate", "own run", "tokens", "s", *(f"{h} ({o})" for o in ORDERS for h in ("rung", "tokens", "s"))],
                rows))
    separate = sum(seconds for _, _, seconds, _ in alone.values())
    lines = [["separate runs", f"{sum(r['tokens_forwarded'] for r, _, _, _ in alone.values()):,}", f"{separate:.1f}", "1.00",
              mib(max(peak for _, _, _, peak in alone.values()))]]
    for order in ORDERS:
        results, _, seconds, peak = ladders[order]
        lines.append([f"one ladder ({order})", f"{sum(r['tokens_forwarded'] for r in results['ladder']):,}", f"{seconds:.1f}",
                      f"{seconds / separate:.2f}", mib(peak)])
    print(table(["run", "tokens", "wall s", "x separate", "peak MiB (largest process)"], lines), end="\n\n")
    smallest = {order: ladders[order][0]["smallest_passing"] for order in ORDERS}
    print(f"smallest passing: {smallest['digest']} ({ladders['digest'][0]['smallest_passing_reason']})")
    if smallest["digest"] != smallest["drift"]:
        problems.append(f"the two orders named other candidates: {smallest}")
    for problem in problems:
        print(f"bench_ladder: {problem}", file=sys.stderr)
    if not problems:
        print("every rung: its own run's outcome for every test, and its verdicts")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
