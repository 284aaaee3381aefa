"""Does the gate pass harmless compression and fail harmful compression? One command:

    python benchmarks/gate_validity.py --lengths 2k --limit 8
    python benchmarks/gate_validity.py --backend llama.cpp --lengths 2k,8k --limit 4 --sets facts,tool_calls

builds the variants (once, into --variants), runs the real gate — ``pytest --longctx-model
<variant> --longctx-baseline <baseline>`` — for the model itself and every variant, and
prints one table: each headline row's value, the number of failed generated tests, and the
verdict (pytest's exit status).

* ``--backend hf``: the transformers variants of ``benchmarks/variants.py`` and the model
  with a 4-bit KV cache (``--longctx-backend variants:kv_int4``), against the committed
  baseline.
* ``--backend llama.cpp``: the GGUF files of ``benchmarks/gguf_variants.py`` (SmolLM2 at F32,
  then Q8_0, Q4_K_M, Q3_K_M and Q2_K from llama.cpp's own quantizer), the packaged Q4_1 file
  the F32 one was dequantized from (the same weights, llama.cpp's quantized kernels), and
  the F32 file with llama.cpp's quantized KV caches (``cache-type-k``/``cache-type-v`` q8_0,
  then q4_0), all run by llama.cpp, against a baseline the F32 file makes first
  (``--longctx-update-baseline``, kept in --variants).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import gguf_variants  # noqa: E402
from variants import VARIANTS, build  # noqa: E402

from pytest_longctx.backends.aliases import smollm2_gguf
from pytest_longctx.gate.verdicts import verdict_word
from pytest_longctx.numbers import number
from pytest_longctx.parse import comma_list
from pytest_longctx.reports.format import table

HERE = Path(__file__).parent
KV_VARIANT = "kv-int4"
# llama.cpp's quantized KV caches: (cache-type-k, cache-type-v)
KV_CACHES = {"kv-q8_0": ("q8_0", "q8_0"), "kv-q4_0": ("q4_0", "q4_0")}
LLAMA_REFERENCE = "F32"
PACKAGED = "Q4_1"  # the packaged file the F32 reference was dequantized from


def gate(model: str, baseline: Path, lengths: str, limit: int, extra: list[str]) -> tuple[int, dict, int]:
    """(exit status, results JSON, failed tests) of one pytest run of the gate."""
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))}
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "results.json"
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--rootdir={folder}",
                   f"--longctx-model={model}", f"--longctx-baseline={baseline.resolve()}", f"--longctx-lengths={lengths}",
                   f"--longctx-limit={limit}", f"--longctx-out={out}", *extra]
        done = subprocess.run(command, cwd=folder, capture_output=True, text=True, env=environment)
        failed = sum(1 for line in done.stdout.splitlines() if line.startswith("FAILED"))
        errors = [line for line in done.stdout.splitlines() if line.startswith("ERROR")]
        if errors or not out.exists() or done.returncode not in (0, 1):
            raise SystemExit(f"{model}: the gate could not judge (exit {done.returncode}):\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
        return done.returncode, json.loads(out.read_text()), failed


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
    candidates = {"the model itself": (args.model, [])}
    candidates.update({name: (str(path.resolve()), []) for name, path in folders.items()})  # pytest runs elsewhere
    if KV_VARIANT in args.only:
        candidates[KV_VARIANT] = (args.model, ["--longctx-backend=variants:kv_int4"])
    return candidates


def llama_candidates(args: argparse.Namespace) -> dict[str, tuple[str, list[str]]]:
    """name -> (model, extra pytest options) of the llama.cpp study, the F32 reference first."""
    files = gguf_variants.build(args.variants, (LLAMA_REFERENCE, *(n for n in args.only if n in gguf_variants.QUANTS)))
    llama = ["--longctx-backend=llama.cpp"]
    candidates = {f"{name}{' (reference)' if name == LLAMA_REFERENCE else ''}": (str(path.resolve()), llama)
                  for name, path in files.items()}
    if PACKAGED in args.only:
        candidates[f"{PACKAGED} (packaged)"] = (smollm2_gguf(), llama)
    reference = str(files[LLAMA_REFERENCE].resolve())
    for name, (k, v) in KV_CACHES.items():
        if name in args.only:
            candidates[name] = (reference, [*llama, f"--longctx-backend-option=cache-type-k={k}",
                                            f"--longctx-backend-option=cache-type-v={v}"])
    return candidates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=("hf", "llama.cpp"), default="hf")
    parser.add_argument("--model", default="smollm2-135m", help="--backend hf: the model the variants are made from")
    parser.add_argument("--baseline", type=Path, help="default: the committed SmolLM2 baseline (hf); for llama.cpp, "
                        "one the F32 file makes in --variants first")
    parser.add_argument("--variants", type=Path, default=Path("variants"))
    parser.add_argument("--lengths", default="2k")
    parser.add_argument("--limit", type=int, default=8)
    parser.add_argument("--sets", help="configs to gate, comma-separated (default: all)")
    names = (*VARIANTS, KV_VARIANT, *gguf_variants.QUANTS, PACKAGED, *KV_CACHES)
    parser.add_argument("--only", nargs="*", choices=names, default=list(names))
    parser.add_argument("pytest_args", nargs="*", help="passed on to pytest (after --)")
    args = parser.parse_args()
    selection = [f"--longctx-sets={args.sets}"] if args.sets else []
    if args.backend == "llama.cpp":
        candidates = llama_candidates(args)
        reference, extra = next(iter(candidates.values()))
        baseline = args.baseline or args.variants / f"{gguf_variants.STEM}-f32.llama-cpp.json.gz"
        if not baseline.exists():
            print(f"making the baseline {baseline} from {reference} ...", file=sys.stderr, flush=True)
            gate(reference, baseline, args.lengths, args.limit, [*extra, *selection, *args.pytest_args, "--longctx-update-baseline"])
    else:
        candidates = hf_candidates(args)
        baseline = args.baseline or Path("baselines/smollm2-135m.json.gz")
    results = {}
    for name, (model, extra) in candidates.items():
        print(f"gating {name} ...", file=sys.stderr, flush=True)
        results[name] = code, found, failed = gate(model, baseline, args.lengths, args.limit, [*extra, *selection, *args.pytest_args])
        print(f"{name}: {verdict_word(code == 0)}, {failed} failed tests; "  # kept even if a later candidate never ends
              + "; ".join(f"{row} {number(value, 2)}" for row, value in found["rows"].items()), file=sys.stderr, flush=True)
    rows = list(next(iter(results.values()))[1]["rows"])
    body = [[row, *(number(res["rows"].get(row), 2) for _, res, _ in results.values())] for row in rows]
    for label, path in context_lines(args.lengths):  # what the gate does not check, to read the rows by
        body.append([label, *(number(dig(res["sets"], path), 2) for _, res, _ in results.values())])
    body.append(["failed tests", *(str(failed) for _, _, failed in results.values())])
    body.append(["gate", *(verdict_word(code == 0) for code, _, _ in results.values())])
    print(f"backend {args.backend}; baseline {baseline}; lengths {args.lengths}; --longctx-limit {args.limit}"
          + (f"; sets {args.sets}" if args.sets else ""))
    print(table(["row", *results], body))


if __name__ == "__main__":
    main()
