"""Does the gate pass harmless compression and fail harmful compression? One command:

    python benchmarks/gate_validity.py --lengths 2k --limit 8

builds the variants of ``benchmarks/variants.py`` (once, into --variants), runs the real
gate — ``pytest --longctx-model <variant> --longctx-baseline <baseline>`` — for the model
itself, every variant and the model with a 4-bit KV cache (``--longctx-backend
variants:kv_int4``), and prints one table: each headline row's value, the number of
failed generated tests, and the verdict (pytest's exit status).
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

from variants import VARIANTS, build  # noqa: E402

from pytest_longctx.gate.verdicts import verdict_word
from pytest_longctx.numbers import number
from pytest_longctx.parse import comma_list
from pytest_longctx.reports.format import table

HERE = Path(__file__).parent
KV_VARIANT = "kv-int4"


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--baseline", type=Path, default=Path("baselines/smollm2-135m.json.gz"))
    parser.add_argument("--variants", type=Path, default=Path("variants"))
    parser.add_argument("--lengths", default="2k")
    parser.add_argument("--limit", type=int, default=8)
    parser.add_argument("--only", nargs="*", choices=(*VARIANTS, KV_VARIANT), default=[*VARIANTS, KV_VARIANT])
    parser.add_argument("pytest_args", nargs="*", help="passed on to pytest (after --)")
    args = parser.parse_args()
    folders = build(args.model, args.variants, tuple(name for name in args.only if name in VARIANTS))
    candidates = {"the model itself": (args.model, [])}
    candidates.update({name: (str(path.resolve()), []) for name, path in folders.items()})  # pytest runs elsewhere
    if KV_VARIANT in args.only:
        candidates[KV_VARIANT] = (args.model, ["--longctx-backend=variants:kv_int4"])
    results = {}
    for name, (model, extra) in candidates.items():
        print(f"gating {name} ...", file=sys.stderr, flush=True)
        results[name] = gate(model, args.baseline, args.lengths, args.limit, [*extra, *args.pytest_args])
    rows = list(next(iter(results.values()))[1]["rows"])
    body = [[row, *(number(res["rows"].get(row), 2) for _, res, _ in results.values())] for row in rows]
    for label, path in context_lines(args.lengths):  # what the gate does not check, to read the rows by
        body.append([label, *(number(dig(res["sets"], path), 2) for _, res, _ in results.values())])
    body.append(["failed tests", *(str(failed) for _, _, failed in results.values())])
    body.append(["gate", *(verdict_word(code == 0) for code, _, _ in results.values())])
    print(f"model {args.model}; baseline {args.baseline}; lengths {args.lengths}; --longctx-limit {args.limit}")
    print(table(["row", *results], body))


if __name__ == "__main__":
    main()
