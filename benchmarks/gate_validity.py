"""Does the gate pass harmless compression and fail harmful compression? One command:

    python benchmarks/gate_validity.py --lengths 2k,8k --limit 4
    python benchmarks/gate_validity.py --backend llama.cpp --lengths 2k,8k --limit 4 --sets facts,tool_calls
    python benchmarks/gate_validity.py --model qwen2.5-coder-0.5b --lengths 2k,8k --limit 4

builds the variants (once, into --variants), runs the real gate — ``pytest --longctx-model
<variant> --longctx-baseline <baseline> --longctx-sequential off`` — for the model itself and every
variant, keeps each run's results JSON in --results, and prints (every selected item is read: the
study's figures, failed tests and damage kinds are those of the whole selection, as they were
measured before sequential reading became the gate's default; benchmarks/bench_sequential.py
measures what reading less costs):

* each headline row's value, the number of failed generated tests;
* per facts and tool-call row, the drift at far / near / control reads (mean KL_K), the
  far-specific excess with its interval, and the damage kind;
* the verdict under both rules: the point estimate (pytest's exit status) and
  ``--longctx-alpha 0.05`` (``longctx compare`` on the same results);
* with ``--min-effects 1,0.5,0.25``, the rules rows recomputed with each count threshold
  (``longctx compare --min-effect``), to see which makes them countable.

``--reuse`` reads the results JSON a previous run left in --results instead of gating again
(and gates only the candidates that have none).

``--model qwen2.5-coder-0.5b`` makes the same variants of Qwen2.5-Coder-0.5B-Instruct (its window512 switches
on qwen2's own sliding window in every layer) in ``variants/qwen2.5-coder-0.5b``, gates them against its
committed baseline, and under llama.cpp takes the packaged file itself as the reference and requantizes it
(benchmarks/gguf_variants.py). Beside the rows, every rules check the reference counts a target in is shown
cell by cell: follow per length (system prompt) and retained per placement x family.

* ``--backend hf``: SmolLM2 rounded by torchao to 8 bits per channel and to 4 and 2 bits in
  groups of 64 (``benchmarks/quantized_variants.py``: torchao-int8, torchao-int4-g64,
  torchao-int2-g64, run by torchao), the damage no tool makes here from ``benchmarks/variants.py``
  (window512: attention limited to the last 512 tokens) and the model with a 4-bit KV cache
  (``--longctx-backend variants:kv_int4``), against the committed baseline. ``--only int8
  int4-g64 int2-g64``: this project's own rounding of the weights (``benchmarks/variants.py``,
  planted damage for the blame studies) instead.
* ``--backend llama.cpp``: the GGUF files of ``benchmarks/gguf_variants.py`` (SmolLM2 at F32,
  then Q8_0, Q4_K_M, Q3_K_M and Q2_K from llama.cpp's own quantizer), the packaged Q4_1 file
  the F32 one was dequantized from (the same weights, llama.cpp's quantized kernels), and
  the F32 file with llama.cpp's quantized KV caches (``cache-type-k``/``cache-type-v`` q8_0,
  then q4_0), all run by llama.cpp, against a baseline the F32 file makes first
  (``--longctx-update-baseline``, kept in --variants).
* ``--backend checkpoints``: checkpoints made by the compression tools themselves
  (``benchmarks/llmcompressor_variants.py`` in llm-compressor's environment,
  ``benchmarks/quantized_variants.py`` here), every folder holding a ``config.json`` under each
  of ``--checkpoints DIR ...``, named by its folder, read by transformers through their own
  ``quantization_config``, against the committed baseline; the table ends with what the gate
  says each one is.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import gguf_variants
import quantized_variants
from pytest_longctx.backends.aliases import smollm2_gguf
from pytest_longctx.backends.packaged import gguf_file
from pytest_longctx.data.records import FAMILIES, PLACEMENTS
from pytest_longctx.gate.comparison import compare_files
from pytest_longctx.gate.results_file import read_results
from pytest_longctx.gate.thresholds import Thresholds
from pytest_longctx.numbers import number
from pytest_longctx.parse import comma_list
from pytest_longctx.reports.format import table
from pytest_longctx.scoring.scores_file import load_scores
from variants import VARIANTS, build, gate_environment

KV_VARIANT = "kv-int4"
TOOL_VARIANTS = ("torchao-int8", "torchao-int4-g64", "torchao-int2-g64")  # the weights as torchao rounds them
HAND_ROUNDED = ("int8", "int4-g64", "int2-g64")  # benchmarks/variants.py's own rounding: asked for by name only
ALPHA = 0.05
# llama.cpp's quantized KV caches: (cache-type-k, cache-type-v)
KV_CACHES = {"kv-q8_0": ("q8_0", "q8_0"), "kv-q4_0": ("q4_0", "q4_0")}
REFERENCE = "F32 (reference)"
PACKAGED = "Q4_1"  # the packaged file the F32 reference was dequantized from


def gate(model: str, baseline: Path, lengths: str, limit: int, extra: list[str], out: Path) -> int:
    """The exit status of one pytest run of the gate; its results JSON goes to ``out``, its output to the log
    beside it (``failed_tests`` counts them there)."""
    with tempfile.TemporaryDirectory() as folder:
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--rootdir={folder}",
                   f"--longctx-model={model}", f"--longctx-baseline={baseline.resolve()}", f"--longctx-lengths={lengths}",
                   f"--longctx-limit={limit}", f"--longctx-out={out.resolve()}", "--longctx-sequential=off", *extra]
        done = subprocess.run(command, cwd=folder, capture_output=True, text=True, env=gate_environment())
        errors = [line for line in done.stdout.splitlines() if line.startswith("ERROR")]
        if errors or not out.exists() or done.returncode not in (0, 1):
            raise SystemExit(f"{model}: the gate could not judge (exit {done.returncode}):\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
        (out.parent / f"{out.stem}.log").write_text(done.stdout)
        return done.returncode


def failed_tests(results: Path) -> int | str:
    """The failed tests of the run that wrote ``results``, as the pytest output kept beside it lists them."""
    log = results.parent / f"{results.stem}.log"
    return sum(1 for line in log.read_text().splitlines() if line.startswith("FAILED")) if log.exists() else "n/a"


def compared(baseline: Path, results: Path, **thresholds: float) -> object:
    """``longctx compare BASELINE RESULTS`` in this process: the comparison under other thresholds."""
    return compare_files(load_scores(baseline, "baseline"), read_results(str(results)), None, Thresholds(**thresholds))


def drift_lines(comparisons: dict[str, object]) -> list[list[str]]:
    """Per facts and tool-call row: KL at far / near / control reads, the far excess with its
    interval, and the damage kind of the failing ones, one column per candidate."""
    first = next(iter(comparisons.values())).evaluation
    names = [name for name in first.drift if first.row_sources[name].config in ("facts", "tool_calls")]
    lines = []
    for name in names:
        short = name.replace("Facts recalled", "facts").replace("Distant tool calls", "tool calls").replace(" tokens", "")
        cells: dict[str, list[str]] = {"far / near / control KL": [], "far excess [interval]": [], "damage (failing rows)": []}
        for comparison in comparisons.values():
            found = comparison.evaluation.drift.get(name)
            if found is None:
                for column in cells.values():
                    column.append("n/a")
                continue
            cells["far / near / control KL"].append(" / ".join(number(getattr(found, g).kl, 4) for g in ("far", "near", "control")))
            interval = f" [{found.interval[0]:.2f}, {found.interval[1]:.2f}]" if found.interval else ""
            cells["far excess [interval]"].append(f"{number(found.difference, 4)}{interval} vs {found.against}")
            failing = name in comparison.evaluation.failing_rows()
            cells["damage (failing rows)"].append((comparison.evaluation.damage_kind(name) or "n/a") if failing else "-")
        lines += [[f"*{short}: {label}*", *values] for label, values in cells.items()]
    return lines


def rules_cell_lines(comparisons: dict[str, object]) -> list[list[str]]:
    """What the gate checks of the rules, one line per check the first candidate counts a target in:
    follow per length (system prompt, every family) and retained per placement x family cell, each
    candidate's value with the counted targets (n)."""
    first = next(iter(comparisons.values())).evaluation
    lines = []
    for config, by_length in first.sets.items():
        if not config.startswith("rules"):
            continue
        for length in by_length:
            checks = [("system", "all", "follow"), *((p, f, "retained") for p in PLACEMENTS for f in FAMILIES)]
            for placement, family, metric in checks:
                if not by_length[length]["cells"][placement][family]["counted"]:
                    continue
                values = []
                for comparison in comparisons.values():
                    cell = comparison.evaluation.sets[config][length]["cells"][placement][family]
                    values.append(f"{number(cell[metric], 2)} (n={cell['counted']})")
                where = "system prompt" if family == "all" else f"{placement} {family}"
                lines.append([f"*{config} {length} {where}: {metric}*", *values])
    return lines


def baseline_effects(baseline: Path) -> dict[tuple[str, str], list[float]]:
    """(config, length) -> the baseline's own rule effect at each scored rules target, nats."""
    found: dict[tuple[str, str], list[float]] = {}
    for config, length, _, item in load_scores(baseline, "baseline").items():
        if config.startswith("rules"):
            found.setdefault((config, length), []).extend(
                t["score_with"] - t["score_without"] for t in item.targets if t.get("score_with") is not None
                and t.get("score_without") is not None)
    return found


def min_effect_table(baseline: Path, files: dict[str, Path], values: list[float]) -> str:
    """The rules rows of every candidate, recomputed with each count threshold, after the
    number of the baseline's own rules targets that threshold counts."""
    effects = baseline_effects(baseline)
    everything = [e for found in effects.values() for e in found]
    body = []
    for value in values:
        per = max(sum(abs(e) >= value for e in found) for found in effects.values())
        body.append([f"baseline targets counted at {value:g} nats (of {len(everything)}; most per config and length)",
                     f"{sum(abs(e) >= value for e in everything)} ({per})", *[""] * (len(files) - 1)])
        comparisons = {name: compared(baseline, path, min_effect=value) for name, path in files.items()}
        first = next(iter(comparisons.values())).evaluation
        for row in (r for r in first.rows if r.startswith("Rules") or "rules" in r):
            counted = []
            for comparison in comparisons.values():
                source = comparison.evaluation.row_sources[row]
                sets = comparison.evaluation.sets[source.config]
                cell = (sets[source.length]["cells"][source.placement][source.family]
                        if source.cell is not None else None)
                shown = number(comparison.evaluation.rows[row], 2)
                counted.append(f"{shown} (n={cell['counted']})" if cell is not None else shown)
            body.append([f"{row} (min effect {value:g})", *counted])
    return table(["row", *files], body)


def context_lines(lengths: str) -> list[tuple[str, tuple[str, ...]]]:
    """(label, path into the results' sets) of figures shown beside the rows, not gated."""
    lines = [(f"(near tool calls at {length} tokens, not gated)", ("tool_calls", length, "near_accuracy"))
             for length in comma_list(lengths)]
    lines.append(("(answer log-probability in agent sessions, not gated)", ("faithfulness", "train", "mean_logprob")))
    return lines


def dig(sets: dict, path: tuple[str, ...]) -> float | None:
    for key in path:
        sets = sets.get(key) if isinstance(sets, dict) else None
    return sets


def hf_candidates(args: argparse.Namespace) -> dict[str, tuple[str, list[str]]]:
    """name -> (model, extra pytest options) of the transformers study."""
    folders = build(args.model, args.variants, tuple(name for name in args.only if name in VARIANTS))
    tools = quantized_variants.build(args.model, args.variants, tuple(name for name in args.only if name in TOOL_VARIANTS))
    candidates = {"the model itself": (args.model, [])}
    candidates.update({name: (str(path.resolve()), []) for name, path in {**tools, **folders}.items()})  # pytest runs elsewhere
    if KV_VARIANT in args.only:
        candidates[KV_VARIANT] = (args.model, ["--longctx-backend=variants:kv_int4"])
    return candidates


def checkpoint_candidates(args: argparse.Namespace) -> dict[str, tuple[str, list[str]]]:
    """name -> (model, extra pytest options) of the study of tool-made checkpoints: the float model,
    then each folder with a config.json under each --checkpoints folder (the tiny ``float`` a
    benchmark keeps beside its kinds excepted)."""
    candidates = {"the model itself": (args.model, [])}
    for root in args.checkpoints:
        for folder in sorted(p.parent for p in root.glob("*/config.json") if p.parent.name != "float"):
            candidates[folder.name] = (str(folder.resolve()), [])
    return candidates


def llama_reference(model: str) -> str:
    """The llama.cpp study's reference: SmolLM2's F32 file, or the packaged file itself of a model whose
    variants are requantized from it (benchmarks/gguf_variants.py)."""
    return "packaged GGUF (reference)" if model in gguf_variants.REQUANTIZED else REFERENCE


def llama_names(model: str, only: list[str]) -> list[str]:
    packaged = [f"{PACKAGED} (packaged)"] if PACKAGED in only and model not in gguf_variants.REQUANTIZED else []
    return [llama_reference(model), *(q for q in gguf_variants.QUANTS if q in only), *packaged, *(k for k in KV_CACHES if k in only)]


def llama_candidates(args: argparse.Namespace) -> dict[str, tuple[str, list[str]]]:
    """name -> (model, extra pytest options) of the llama.cpp study, the reference first."""
    requantized = args.model in gguf_variants.REQUANTIZED
    quants = tuple(n for n in args.only if n in gguf_variants.QUANTS)
    files = gguf_variants.build(args.variants, quants if requantized else ("F32", *quants), model=args.model)
    llama = ["--longctx-backend=llama.cpp"]
    reference = gguf_file(gguf_variants.MODELS[args.model]) if requantized else str(files.pop("F32").resolve())
    candidates = {llama_reference(args.model): (reference, llama),
                  **{name: (str(path.resolve()), llama) for name, path in files.items()}}
    if PACKAGED in args.only and not requantized:
        candidates[f"{PACKAGED} (packaged)"] = (smollm2_gguf(), llama)
    for name, (k, v) in KV_CACHES.items():
        if name in args.only:
            candidates[name] = (reference, [*llama, f"--longctx-backend-option=cache-type-k={k}",
                                            f"--longctx-backend-option=cache-type-v={v}"])
    return candidates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=("hf", "llama.cpp", "checkpoints"), default="hf")
    parser.add_argument("--checkpoints", type=Path, nargs="+", default=[], help="--backend checkpoints: folders of checkpoints")
    parser.add_argument("--model", default="smollm2-135m", help="the model the variants are made from: smollm2-135m or "
                        "qwen2.5-coder-0.5b (under llama.cpp a packaged model's alias)")
    parser.add_argument("--baseline", type=Path, help="default: the model's committed baseline, baselines/MODEL.json.gz "
                        "(hf, checkpoints); for llama.cpp, one its reference file makes in --variants first")
    parser.add_argument("--sets", help="configs to gate, comma-separated (default: all)")
    parser.add_argument("--variants", type=Path, help="where the variants are made (default: variants for SmolLM2, "
                        "variants/MODEL for another model)")
    parser.add_argument("--lengths", default="2k")
    parser.add_argument("--limit", type=int, default=8)
    every = (*TOOL_VARIANTS, *VARIANTS, KV_VARIANT, *gguf_variants.QUANTS, PACKAGED, *KV_CACHES)
    parser.add_argument("--only", nargs="*", choices=every, default=[n for n in every if n not in HAND_ROUNDED])
    parser.add_argument("--results", type=Path, help="where each run's results JSON is kept (default: VARIANTS/results)")
    parser.add_argument("--reuse", action="store_true", help="read the results a previous run left in --results")
    parser.add_argument("--min-effects", default="", help="rules count thresholds to recompute the rules rows with, e.g. 1,0.5,0.25")
    parser.add_argument("pytest_args", nargs="*", help="passed on to pytest (after --)")
    args = parser.parse_args()
    args.variants = args.variants or Path("variants" if args.model == gguf_variants.STEM else f"variants/{args.model}")
    args.results = args.results or args.variants / "results"
    llama = args.backend == "llama.cpp"
    if args.backend == "checkpoints" and not args.checkpoints:
        parser.error("--backend checkpoints needs --checkpoints DIR ...")
    if llama:
        names = llama_names(args.model, args.only)
        reference = "packaged" if args.model in gguf_variants.REQUANTIZED else "f32"
        baseline = args.baseline or args.variants / f"{args.model}-{reference}.llama-cpp.json.gz"
    elif args.backend == "checkpoints":
        names = list(checkpoint_candidates(args))
        baseline = args.baseline or Path(f"baselines/{args.model}.json.gz")
    else:
        names = ["the model itself", *(name for name in (*TOOL_VARIANTS, *VARIANTS) if name in args.only),
                 *([KV_VARIANT] if KV_VARIANT in args.only else [])]
        baseline = args.baseline or Path(f"baselines/{args.model}.json.gz")
    args.baseline = baseline
    selection = [f"--longctx-sets={args.sets}"] if args.sets else []
    prefix = "llama.cpp-" if llama else ""
    files = {name: args.results / f"{prefix}{name.replace(' ', '-')}.json" for name in names}
    outcomes: dict[str, int] = {}  # the exit status of each candidate gated in this run
    if not (args.reuse and all(path.exists() for path in files.values())):
        candidates = {"llama.cpp": llama_candidates, "checkpoints": checkpoint_candidates}.get(args.backend, hf_candidates)(args)
        args.results.mkdir(parents=True, exist_ok=True)
        if llama and not baseline.exists():
            model, extra = candidates[llama_reference(args.model)]
            print(f"making the baseline {baseline} from {model} ...", file=sys.stderr, flush=True)
            gate(model, baseline, args.lengths, args.limit, [*extra, *selection, *args.pytest_args, "--longctx-update-baseline"],
                 args.results / "llama.cpp-baseline-run.json")
        for name, (model, extra) in candidates.items():
            if args.reuse and files[name].exists():
                continue
            print(f"gating {name} ...", file=sys.stderr, flush=True)
            outcomes[name] = gate(model, baseline, args.lengths, args.limit, [*extra, *selection, *args.pytest_args], files[name])
    results = {name: json.loads(path.read_text()) for name, path in files.items()}
    point = {name: compared(args.baseline, path) for name, path in files.items()}
    alpha = {name: compared(args.baseline, path, alpha=ALPHA) for name, path in files.items()}
    rows = list(next(iter(results.values()))["rows"])
    body = [[row, *(number(res["rows"].get(row), 2) for res in results.values())] for row in rows]
    for label, path in context_lines(args.lengths):  # what the gate does not check, to read the rows by
        body.append([label, *(number(dig(res["sets"], path), 2) for res in results.values())])
    body += drift_lines(point)
    body += rules_cell_lines(point)
    body.append(["failed tests", *(str(failed_tests(files[name])) for name in names)])
    assert all((code == 0) == point[name].passed for name, code in outcomes.items())  # compare judges as the gate
    body.append(["gate (point estimate)", *(point[name].verdict for name in names)])
    body.append([f"gate (--longctx-alpha {ALPHA:g})", *(alpha[name].verdict for name in names)])
    print(f"backend {args.backend}; baseline {args.baseline}; lengths {args.lengths}; --longctx-limit {args.limit}"
          + (f"; sets {args.sets}" if args.sets else ""))
    print(table(["row", *results], body))
    if args.backend == "checkpoints":
        for name, res in results.items():
            print(f"{name}: {res['meta'].get('quantization') or 'none'}")
    if args.min_effects:
        print(min_effect_table(args.baseline, files, [float(v) for v in comma_list(args.min_effects)]))


if __name__ == "__main__":
    main()
