"""Tokens forwarded to the verdicts under each ``--longctx-sequential`` mode, against ``off``, and every test's
outcome. One command per selection:

    python benchmarks/bench_sequential.py --lengths 2k --limit 4                   # the README's "Gate your own model"
    python benchmarks/bench_sequential.py --sets facts,tool_calls --limit 8 --tests rows  # rows and cells alone (-k 'not test_item')

For SmolLM2 against the committed baseline and the validity study's variants (benchmarks/gate_validity.py: the model
itself, torchao int8, int4-g64 and int2-g64, the 512-token window and the 4-bit KV cache of benchmarks/variants.py;
``ct-w8a8``: W8A8 by round to nearest, saved by compressed-tensors, from benchmarks/quantized_variants.py), the gate
itself runs over the selection once per mode, as pytest drives it (gate/model_run.py's ``GateRun``, every test of the
selection selected, or with ``--tests rows`` its rows and cells alone):

1. ``off`` reads every needed item, filling a score cache of this script's own (its wall time is the scoring's);
2. ``exact`` and ``confident`` read through the same driver (gate/sequential/driver.py), answered from that cache: the
   tokens each forwards are those its steps forward without a cache (scoring/groups.py, which tests/test_engine.py
   holds the engine to), and each test's outcome (PASS, FAIL, n/a) is set beside off's; ``exact`` must give off's for
   every test and forward no more tokens, or the script fails;
3. ``exact`` again over ``--orders`` random orders of each set's items (seeded), each of which must give off's outcomes;
4. with ``--real NAME``, pytest itself on that candidate, ``off`` and ``exact``, without a score cache: their exit
   statuses, every test's outcome and the tokens forwarded (the results JSON's ``tokens_forwarded``) must agree with
   the replay's, and ``exact``'s may not exceed ``off``'s.

``--limit N`` takes the first N items of each set (default: every item of the data, which the baseline must hold;
the committed baseline holds 8 a set at 2k and 8k).
"""
from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import quantized_variants
from pytest_longctx.backends import load_backend
from pytest_longctx.backends.base import Backend, close
from pytest_longctx.gate.model_run import GateRun
from pytest_longctx.gate.run_options import GateOptions
from pytest_longctx.gate.sequential.reading import Totals, totals
from pytest_longctx.gate.thresholds import Thresholds
from pytest_longctx.gate.verdict import FAIL, PASS
from pytest_longctx.options.table import Sequential
from pytest_longctx.reports.format import table
from variants import build, gate_environment

HERE = Path(__file__).parent
ITSELF, KV = "the model itself", "kv-int4"
TOOLS = ("torchao-int8", "torchao-int4-g64", "torchao-int2-g64", "ct-w8a8")
PLANTED = ("window512",)
EVERY = (ITSELF, "torchao-int8", "ct-w8a8", "torchao-int4-g64", "torchao-int2-g64", "window512", KV)
README = (ITSELF, "torchao-int8", "torchao-int4-g64", "window512")  # issue 52's four
MODES = (Sequential.OFF, Sequential.EXACT, Sequential.CONFIDENT)


def candidates(args: argparse.Namespace) -> dict[str, tuple[str, str]]:
    """name -> (model, backend) of every candidate asked for, each built once into --variants."""
    tools = quantized_variants.build(args.model, args.variants, tuple(n for n in TOOLS if n in args.only))
    planted = build(args.model, args.variants, tuple(n for n in PLANTED if n in args.only))
    found = {ITSELF: (args.model, "hf"), KV: (args.model, "variants:kv_int4")}
    found.update({name: (str(path.resolve()), "hf") for name, path in {**tools, **planted}.items()})
    return {name: found[name] for name in dict.fromkeys(args.only)}  # in the order asked for


def gate_options(model: str, backend: str, args: argparse.Namespace, mode: Sequential, cache: Path) -> GateOptions:
    return GateOptions(model=model, data=args.data, sets=args.sets.split(","), lengths=args.lengths.split(","),
                       limit=args.limit, mode="auto", baseline=str(args.baseline.resolve()), update_baseline=False, out=None,
                       only=True, dtype="float32", device="cpu", backend=backend, cache_dir=str(cache), thresholds=Thresholds(),
                       sequential=mode)


def run_gate(options: GateOptions, backend: Backend, rows_only: bool, within: Any = None) -> tuple[GateRun, dict[str, str]]:
    """The gate over its selection, every test selected (``rows_only``: its rows and cells): (the run, each test's
    outcome). ``within``: the order within each set, in place of the digests'."""
    run = GateRun(options, Path.cwd())
    cases = [c for c in run.cases() if not (rows_only and c.kind == "item")]
    run.select(cases)
    run.reader.within = within
    run.ensure(sorted({c.unit for c in cases}), backend, progress=False)
    return run, {case.key: run.judge(case).word for case in cases}


def tokens_of(run: GateRun) -> tuple[int, int, int]:
    """(items read, of items, tokens forwarded) of a run: a sequential run's steps, an off run's every item."""
    found: Totals | None = totals(run.readings.values())
    if found is None:
        read = sum(1 for _ in run.scores.items())
        return read, read, run.reader.forwarded
    return found.items, found.of_items, found.tokens


def verdict(outcomes: dict[str, str]) -> str:
    return FAIL if FAIL in outcomes.values() else PASS


def real_gate(model: str, backend: str, args: argparse.Namespace, mode: Sequential, folder: Path) -> tuple[float, int, dict, dict]:
    """``pytest`` itself on one candidate, without the score cache: (wall seconds, exit status, the results JSON, each
    generated test's outcome from its junit file)."""
    out, junit = folder / f"{mode}.json", folder / f"{mode}.xml"
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--rootdir={folder}", "--longctx-only",
               f"--longctx-model={model}", f"--longctx-backend={backend}", f"--longctx-baseline={args.baseline.resolve()}",
               f"--longctx-data={args.data}", f"--longctx-lengths={args.lengths}", f"--longctx-sets={args.sets}",
               f"--longctx-sequential={mode}", "--longctx-cache-dir=off", f"--longctx-out={out}", f"--junitxml={junit}",
               "--longctx-dtype=float32", "--longctx-device=cpu"]
    command += [f"--longctx-limit={args.limit}"] if args.limit else []
    command += ["-k", "not test_item"] if args.tests == "rows" else []
    start = time.perf_counter()
    done = subprocess.run(command, cwd=folder, capture_output=True, text=True, env=gate_environment())
    seconds = time.perf_counter() - start
    if done.returncode not in (0, 1) or not out.exists():
        raise SystemExit(f"the real gate could not judge (exit {done.returncode}):\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    outcomes = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        key = case.get("name", "").partition("[")[2].removesuffix("]")
        outcomes[key] = FAIL if case.find("failure") is not None else "n/a" if case.find("skipped") is not None else PASS
    return seconds, done.returncode, json.loads(out.read_text()), outcomes


def share(part: float, whole: float) -> str:
    return f"{part / whole:.0%}" if whole else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--baseline", type=Path, default=HERE.parent / "baselines" / "smollm2-135m.json.gz")
    parser.add_argument("--data", default="builtin")
    parser.add_argument("--sets", default="facts,tool_calls,rules_en,rules_cs,rules_de,faithfulness")
    parser.add_argument("--lengths", default="2k")
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--tests", choices=("all", "rows"), default="all",
                        help="every generated test (the gate's default), or its rows and cells alone (-k 'not test_item')")
    parser.add_argument("--only", nargs="*", choices=EVERY, default=list(README))
    parser.add_argument("--variants", type=Path, default=Path("variants"))
    parser.add_argument("--real", choices=EVERY, help="also run pytest itself, off and exact, on this candidate")
    parser.add_argument("--orders", type=int, default=20, help="also replay exact over this many random orders of each set")
    parser.add_argument("--out", type=Path, help="write every figure as JSON here")
    args = parser.parse_args()
    rows_only = args.tests == "rows"
    body, found = [], {}
    with tempfile.TemporaryDirectory() as scratch:
        for name, (model, backend_name) in candidates(args).items():
            print(f"gating {name} ...", file=sys.stderr, flush=True)
            cache = Path(scratch) / name.replace(" ", "-")
            backend, _ = load_backend(model, backend_name, "float32", "cpu", ())
            try:
                start = time.perf_counter()
                off, words = run_gate(gate_options(model, backend_name, args, Sequential.OFF, cache), backend, rows_only)
                seconds = time.perf_counter() - start
                modes = {Sequential.OFF: (off, words)}
                for mode in MODES[1:]:
                    modes[mode] = run_gate(gate_options(model, backend_name, args, mode, cache), backend, rows_only)
                keys = list(off.inputs.fingerprints)
                spread = []
                for order in range(args.orders):
                    rank = dict(zip(keys, random.Random(order).sample(range(len(keys)), len(keys))))
                    run, outcomes = run_gate(gate_options(model, backend_name, args, Sequential.EXACT, cache), backend,
                                             rows_only, rank.__getitem__)
                    assert outcomes == words, f"{name}: exact in random order {order} differs from off"
                    spread.append(tokens_of(run)[2])
            finally:
                close(backend)
            figures = {mode: (*tokens_of(run), outcomes) for mode, (run, outcomes) in modes.items()}
            off_tokens = figures[Sequential.OFF][2]
            exact = figures[Sequential.EXACT]
            assert exact[3] == words, f"{name}: exact's outcomes differ from off's"
            assert exact[2] <= off_tokens, f"{name}: exact forwarded {exact[2]} tokens, off {off_tokens}"
            confident = figures[Sequential.CONFIDENT]
            differ = sum(1 for key, word in confident[3].items() if word != words[key])
            failed = sum(1 for word in words.values() if word == FAIL)
            body.append([name, verdict(words), str(failed), f"{figures[Sequential.OFF][0]}", f"{off_tokens:,}", f"{seconds:.0f}",
                         verdict(exact[3]), f"{exact[0]} of {exact[1]}", f"{exact[2]:,} ({share(exact[2], off_tokens)})",
                         (f"{share(sum(spread) / len(spread), off_tokens)} ({share(min(spread), off_tokens)}-"
                          f"{share(max(spread), off_tokens)})") if spread else "-",
                         verdict(confident[3]), f"{confident[0]} of {confident[1]}",
                         f"{confident[2]:,} ({share(confident[2], off_tokens)})", str(differ)])
            found[name] = {str(mode): {"items": f[0], "of_items": f[1], "tokens": f[2], "outcomes": f[3]}
                           for mode, f in figures.items()}
            found[name]["orders"] = spread
            found[name]["off_seconds"] = seconds
            if args.real == name:
                with tempfile.TemporaryDirectory() as folder:
                    real = {mode: real_gate(model, backend_name, args, mode, Path(folder)) for mode in MODES[:2]}
                (off_s, off_rc, off_json, off_words), (exact_s, exact_rc, exact_json, exact_words) = real.values()
                assert off_rc == exact_rc and off_words == exact_words, f"{name}: pytest's exact differs from its off"
                assert exact_json["tokens_forwarded"] <= off_json["tokens_forwarded"]
                assert exact_json["tokens_forwarded"] == exact[2], "the real gate forwarded other tokens than the replay's"
                found[name]["real"] = {"off": [off_s, off_rc, off_json["tokens_forwarded"]],
                                       "exact": [exact_s, exact_rc, exact_json["tokens_forwarded"]]}
                print(f"pytest itself on {name}, no score cache: off exit {off_rc}, {off_json['tokens_forwarded']:,} tokens, "
                      f"{off_s:.0f} s; exact exit {exact_rc}, {exact_json['tokens_forwarded']:,} tokens, {exact_s:.0f} s; "
                      "every test's outcome the same")
    said = f"--limit {args.limit}" if args.limit else "every item of the data"
    print(f"baseline {args.baseline}; sets {args.sets}; lengths {args.lengths}; {said}; tests: {args.tests}")
    print(table(["candidate", "off", "failed tests", "off items", "off tokens", "off s", "exact", "exact items",
                 "exact tokens", f"exact, {args.orders} random orders: mean (fewest-most)", "confident", "confident items",
                 "confident tokens", "confident outcomes unlike off's"], body))
    if args.out:
        args.out.write_text(json.dumps(found, indent=1, default=str))


if __name__ == "__main__":
    main()
