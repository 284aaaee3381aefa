"""Tokens and wall time to the verdict under each ``--longctx-sequential`` mode, against ``off``. One command:

    python benchmarks/bench_sequential.py --lengths 2k,8k --sets facts,tool_calls --real window512

For SmolLM2 against the committed baseline and the validity study's variants (benchmarks/gate_validity.py: the
model itself, torchao int8, int4-g64 and int2-g64, the 512-token window and the 4-bit KV cache of
benchmarks/variants.py, and W8A8 by round to nearest, int8 weights per channel and int8 activations per token,
saved by compressed-tensors as llm-compressor saves it: benchmarks/quantized_variants.py's ``ct-w8a8``):

1. every selected item is scored once, alone, through the gate's own pipeline against the baseline, with its wall
   time and its tokens (``off`` reads them all);
2. the stopping rules (gate/sequential/, the code the gate runs) are replayed over those per-item figures unit by
   unit, as the gate reads them: ``exact`` and ``confident`` (at ``--alpha``), each with the items, tokens and
   seconds it read before every selected row and cell was settled;
3. each mode's verdicts are compared with ``off``'s, row by row; ``exact`` must give the same on every row; and
   ``exact`` is replayed over ``--orders`` random orders of each set's items (seeded), to show how much the tokens it
   reads in the gate's one fixed order owe to that order;
4. with ``--real NAME``, the gate itself runs once on that candidate (``pytest --longctx-sequential exact``, no score
   cache), and its stopping record must be the replay's, item for item and check for check.

``--limit N`` takes the first N items of each set (default: every item the baseline holds; never more). Each candidate's per-item
scores and seconds are kept in --results; ``--reuse`` replays them without scoring again.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import quantized_variants
from pytest_longctx.backends import load_backend
from pytest_longctx.backends.base import close
from pytest_longctx.data.load import Dataset, load_dataset
from pytest_longctx.data.records import ItemKey
from pytest_longctx.gate.gate_session import unit_of
from pytest_longctx.gate.keys import dataset_keys
from pytest_longctx.gate.sequential.checks import checks_of
from pytest_longctx.gate.sequential.reading import CONFIDENT, EXACT, OFF, annotate, read
from pytest_longctx.gate.thresholds import Thresholds
from pytest_longctx.gate.verdict import FAIL, PASS
from pytest_longctx.gate.verdicts import evaluate
from pytest_longctx.numbers import NA
from pytest_longctx.parse import comma_list
from pytest_longctx.reports.format import table
from pytest_longctx.scoring.modes import choose_mode
from pytest_longctx.scoring.pipeline import compute_sets, item_entry, item_tokens, score_items
from pytest_longctx.scoring.scores_file import ScoresFile, load_scores
from variants import build

HERE = Path(__file__).parent
ITSELF, KV = "the model itself", "kv-int4"
TOOLS = ("torchao-int8", "torchao-int4-g64", "torchao-int2-g64", "ct-w8a8")
PLANTED = ("window512",)
EVERY = (ITSELF, "torchao-int8", "ct-w8a8", "torchao-int4-g64", "torchao-int2-g64", "window512", KV)
MODES = (OFF, EXACT, CONFIDENT)


def candidates(args: argparse.Namespace) -> dict[str, tuple[str, str]]:
    """name -> (model, backend) of every candidate asked for, each built once into --variants."""
    tools = quantized_variants.build(args.model, args.variants, tuple(n for n in TOOLS if n in args.only))
    planted = build(args.model, args.variants, tuple(n for n in PLANTED if n in args.only))
    found = {ITSELF: (args.model, "hf"), KV: (args.model, "variants:kv_int4")}
    found.update({name: (str(path.resolve()), "hf") for name, path in {**tools, **planted}.items()})
    return {name: found[name] for name in dict.fromkeys(args.only)}  # in the order asked for


def measure(model: str, backend_name: str, dataset: Dataset, baseline: ScoresFile, kept: Path,
            reuse: bool) -> tuple[ScoresFile, dict[ItemKey, float], str, Any]:
    """Every item scored alone against the baseline: (its scores, seconds per item, the mode, the tokenizer); kept
    as ``kept``.scores.json.gz and .seconds.json, and read back from there with ``reuse``."""
    scores_path, seconds_path = kept.with_suffix(".scores.json.gz"), kept.with_suffix(".seconds.json")
    if reuse and scores_path.exists() and seconds_path.exists():
        scores = load_scores(scores_path, "scores")
        seconds = {tuple(k.split("/", 2)): v for k, v in json.loads(seconds_path.read_text()).items()}
        from transformers import AutoTokenizer

        from pytest_longctx.backends.aliases import resolve_model

        tokenizer = AutoTokenizer.from_pretrained(model if Path(model).is_dir() else resolve_model(model))
        return scores, seconds, scores.mode, tokenizer
    scores, seconds, mode, tokenizer = _score_each(model, backend_name, dataset, baseline)
    kept.parent.mkdir(parents=True, exist_ok=True)
    scores.save(scores_path)
    seconds_path.write_text(json.dumps({"/".join(k): v for k, v in seconds.items()}))
    return scores, seconds, mode, tokenizer


def _score_each(model: str, backend_name: str, dataset: Dataset, baseline: ScoresFile) -> tuple[ScoresFile, dict[ItemKey, float], str, Any]:
    backend, tokenizer = load_backend(model, backend_name, "float32", "cpu", ())
    try:
        mode = choose_mode("auto", tokenizer, dataset)
        scores, seconds = ScoresFile(mode=mode, meta={}), {}
        for config, length, item in dataset.items():
            key = (config, length, item.id)
            start = time.perf_counter()
            part = score_items(backend, tokenizer, dataset.select({key}), mode, progress=False, reference=baseline)
            seconds[key] = time.perf_counter() - start
            scores.meta = scores.meta or part.meta
            scores.scores.setdefault(config, {}).setdefault(length, {})[item.id] = part.scores[config][length][item.id]
        return scores, seconds, mode, tokenizer
    finally:
        close(backend)


def test_words(verdicts: list[Any]) -> dict[str, str]:
    """Each row's and cell's test outcome: FAIL when a check of it that applies fails, else PASS, or n/a."""
    words: dict[str, str] = {}
    for verdict in verdicts:
        if verdict.applicable:
            words[verdict.key] = FAIL if words.get(verdict.key) == FAIL or not verdict.passed else PASS
        else:
            words.setdefault(verdict.key, NA)
    return words


def replay(mode: str, alpha: float | None, dataset: Dataset, entries: dict[ItemKey, Any], baseline: ScoresFile,
           tokens: dict[ItemKey, int], thresholds: Thresholds,
           within: Callable[[ItemKey], Any] | None = None) -> tuple[set[ItemKey], dict[str, dict]]:
    """The items ``mode`` reads, unit by unit as the gate does, and each unit's stopping record (off: every item);
    ``within``: each set's items in another order than the gate's (``reading_order``)."""
    every = {(c, n, item.id) for c, n, item in dataset.items()}
    if mode == OFF:
        return every, {}
    read_keys: set[ItemKey] = set()
    records = {}
    tests = frozenset(dataset_keys(dataset))
    for unit in sorted({unit_of(c) for c in dataset.configs}):
        unit_data = dataset.select({k for k in every if unit_of(k[0]) == unit})
        checks, order = checks_of(unit_data, baseline, thresholds, tests, within)
        reading = read(mode, alpha, checks, order, tokens, entries.get)
        records[unit] = reading.record()
        read_keys |= set(reading.read) | ({k for k in every if unit_of(k[0]) == unit} - set(order))
    return read_keys, records


def entries_of(dataset: Dataset, scores: ScoresFile, baseline: ScoresFile, thresholds: Thresholds) -> dict[ItemKey, Any]:
    """Each item's entry in its set's ``per_item``, as the gate computes it from the item's scores alone."""
    return {(c, n, item.id): item_entry(dataset, scores, baseline, (c, n, item.id), thresholds.min_effect)
            for c, n, item in dataset.items()}


def order_spread(orders: int, dataset: Dataset, scores: ScoresFile, entries: dict[ItemKey, Any], baseline: ScoresFile,
                 baseline_sets: Any, tokens: dict[ItemKey, int], thresholds: Thresholds, words: dict[str, str]) -> list[int]:
    """The tokens ``exact`` reads in each of ``orders`` random orders of every set's items (the sets still taken in
    turn), seeded: how much the gate's one fixed order owes to luck. Each order must give ``words``, off's."""
    rng = random.Random(0)
    keys = [(c, n, item.id) for c, n, item in dataset.items()]
    found = []
    for _ in range(orders):
        rank = {key: rng.random() for key in keys}
        read_keys, records = replay(EXACT, None, dataset, entries, baseline, tokens, thresholds, rank.__getitem__)
        assert judged(dataset, read_keys, scores, baseline, baseline_sets, thresholds, records)[0] == words, \
            "exact differs from off"
        found.append(sum(tokens[k] for k in read_keys))
    return found


def judged(dataset: Dataset, read_keys: set[ItemKey], scores: ScoresFile, baseline: ScoresFile, baseline_sets: Any,
           thresholds: Thresholds, records: dict[str, dict]) -> tuple[dict[str, str], dict[tuple[str, str], Any]]:
    """(each test's outcome, each check's settling) of a gate that read ``read_keys``, as gate/model_run.py judges."""
    sets = compute_sets(dataset.select(read_keys), scores, baseline, thresholds.min_effect)
    evaluation = evaluate(sets, baseline_sets, thresholds)
    annotate(evaluation.verdicts, records.values())
    return test_words(evaluation.verdicts), {(v.key, v.metric): v.settling for v in evaluation.verdicts}


def real_gate(model: str, backend_name: str, args: argparse.Namespace, limit: int, out: Path) -> tuple[float, dict]:
    """``pytest --longctx-sequential exact`` on one candidate, the first ``limit`` items of each set, without the score
    cache: (its wall time, its results)."""
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))}
    with tempfile.TemporaryDirectory() as folder:
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--rootdir={folder}",
                   f"--longctx-model={model}", f"--longctx-backend={backend_name}", f"--longctx-baseline={args.baseline.resolve()}",
                   f"--longctx-data={args.data}", f"--longctx-lengths={args.lengths}", f"--longctx-sets={args.sets}",
                   "--longctx-sequential=exact", "--longctx-cache-dir=off", f"--longctx-out={out.resolve()}", "--longctx-dtype=float32",
                   "--longctx-device=cpu", f"--longctx-limit={limit}"]
        start = time.perf_counter()
        done = subprocess.run(command, cwd=folder, capture_output=True, text=True, env=environment)
        seconds = time.perf_counter() - start
    if done.returncode not in (0, 1) or not out.exists():
        raise SystemExit(f"the real gate could not judge (exit {done.returncode}):\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    return seconds, json.loads(out.read_text())


def same_stops(real: dict, records: dict[str, dict]) -> bool:
    """The real gate read the items the replay reads, in its order, and settled every check as the replay did."""
    units = (real.get("sequential") or {}).get("units", {})
    if set(units) != set(records):
        return False
    for unit, record in records.items():
        mine = units[unit]
        if mine["read"] != record["read"]:
            return False
        settled = [(c["key"], c["metric"], c["settled"]) for c in record["checks"]]
        if settled != [(c["key"], c["metric"], c["settled"]) for c in mine["checks"]]:
            return False
    return True


def share(part: float, whole: float) -> str:
    return f"{part / whole:.0%}" if whole else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--baseline", type=Path, default=HERE.parent / "baselines" / "smollm2-135m.json.gz")
    parser.add_argument("--data", default="builtin")
    parser.add_argument("--sets", default="facts,tool_calls")
    parser.add_argument("--lengths", default="2k,8k")
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--alpha", type=float, default=0.05, help="confident's level (--longctx-alpha)")
    parser.add_argument("--only", nargs="*", choices=EVERY, default=list(EVERY))
    parser.add_argument("--variants", type=Path, default=Path("variants"))
    parser.add_argument("--real", choices=EVERY, help="also run the gate itself, exact, on this candidate")
    parser.add_argument("--results", type=Path, default=Path("variants/sequential"), help="each candidate's per-item figures")
    parser.add_argument("--reuse", action="store_true", help="replay the per-item figures kept in --results")
    parser.add_argument("--orders", type=int, default=100,
                        help="also replay exact over this many random orders of each set's items (seeded)")
    parser.add_argument("--out", type=Path, help="write every figure as JSON here")
    args = parser.parse_args()
    baseline = load_scores(args.baseline, "baseline")
    dataset = load_dataset(args.data, comma_list(args.sets), comma_list(args.lengths), args.limit)
    held = {(c, n, i) for c, n, i, _ in baseline.items()}  # every item the baseline holds, no more
    dataset = dataset.select({(c, n, item.id) for c, n, item in dataset.items() if (c, n, item.id) in held})
    thresholds = Thresholds()
    baseline_sets = compute_sets(dataset, baseline, None, thresholds.min_effect)  # the one every judging compares with
    found: dict[str, Any] = {}
    rows_by_test: dict[str, dict[str, str]] = {}
    body = []
    for name, (model, backend_name) in candidates(args).items():
        print(f"scoring {name} ...", file=sys.stderr, flush=True)
        scores, seconds, mode, tokenizer = measure(model, backend_name, dataset, baseline,
                                                   args.results / name.replace(" ", "-"), args.reuse)
        tokens = item_tokens(dataset, mode, tokenizer)
        entries = entries_of(dataset, scores, baseline, thresholds)
        outcomes: dict[str, Any] = {}
        for sequential in MODES:
            alpha = args.alpha if sequential == CONFIDENT else None
            read_keys, records = replay(sequential, alpha, dataset, entries, baseline, tokens, thresholds)
            words, settled = judged(dataset, read_keys, scores, baseline, baseline_sets, thresholds, records)
            outcomes[sequential] = {"read": len(read_keys), "tokens": sum(tokens[k] for k in read_keys),
                                    "seconds": sum(seconds[k] for k in read_keys), "words": words, "records": records,
                                    "gate": FAIL if FAIL in words.values() else PASS, "settled": settled}
        off, exact, confident = (outcomes[m] for m in MODES)
        assert exact["words"] == off["words"], f"{name}: exact's verdicts differ from off's"
        spread = order_spread(args.orders, dataset, scores, entries, baseline, baseline_sets, tokens, thresholds, off["words"])
        exact["orders"] = spread
        open_checks = sum(1 for s in confident["settled"].values() if s is not None and s.how == "not settled")
        body.append([name, off["gate"], f"{off['read']}", f"{off['tokens']:,}", f"{off['seconds']:.1f}",
                     exact["gate"], f"{exact['read']}", f"{exact['tokens']:,} ({share(exact['tokens'], off['tokens'])})",
                     f"{exact['seconds']:.1f} ({share(exact['seconds'], off['seconds'])})",
                     (f"{share(sum(spread) / len(spread), off['tokens'])} ({share(min(spread), off['tokens'])}-"
                      f"{share(max(spread), off['tokens'])})") if spread else "-",
                     confident["gate"], f"{confident['read']}",
                     f"{confident['tokens']:,} ({share(confident['tokens'], off['tokens'])})",
                     f"{confident['seconds']:.1f} ({share(confident['seconds'], off['seconds'])})", str(open_checks)])
        for key, word in off["words"].items():
            counts = {m: _settled_items(outcomes[m]["settled"], key) for m in (EXACT, CONFIDENT)}
            rows_by_test.setdefault(key, {})[name] = (f"{word} / {exact['words'][key]}{counts[EXACT]} / "
                                                      f"{confident['words'][key]}{counts[CONFIDENT]}")
        found[name] = {m: {k: v for k, v in o.items() if k != "settled"} for m, o in outcomes.items()}
        if args.real == name:
            limit = max(len(items) for by_length in dataset.configs.values() for items in by_length.values())
            wall, real = real_gate(model, backend_name, args, limit, Path(tempfile.mkdtemp()) / "results.json")
            agrees = same_stops(real, exact["records"])
            found[name]["real"] = {"seconds": wall, "same_stops": agrees}
            print(f"real gate on {name} (pytest --longctx-sequential exact, no score cache): {wall:.1f} s wall in all; "
                  f"{real['sequential']['totals']['items']} items read; stopping record "
                  f"{'the same as the replay' if agrees else 'DIFFERS from the replay'}")
            assert agrees, f"{name}: the real gate's stops differ from the replay's"
    said = f"; --limit {args.limit}" if args.limit else "; every item"
    print(f"baseline {args.baseline}; sets {args.sets}; lengths {args.lengths}{said}; confident at alpha {args.alpha:g}")
    print(table(["candidate", "off", "off items", "off tokens", "off s", "exact", "exact items", "exact tokens", "exact s",
                 f"exact, {args.orders} random orders: tokens mean (fewest-most)", "confident", "confident items",
                 "confident tokens", "confident s", "not settled"], body))
    print("\nper row: off / exact / confident (@ items read of the row's checks when settled)")
    names = list(found)
    print(table(["row", *names], [[key, *(cells.get(n, "") for n in names)] for key, cells in rows_by_test.items()]))
    if args.out:
        args.out.write_text(json.dumps(found, indent=1, default=str))


def _settled_items(settled: dict[tuple[str, str], Any], key: str) -> str:
    """``@3``: the items the row's checks had read when the last of them was settled (nothing for off)."""
    counts = [s.items for (k, _), s in settled.items() if k == key and s is not None and s.how != "moot"]
    return f"@{max(counts)}" if counts else ""


if __name__ == "__main__":
    main()
