"""Does the gate pass harmless compression and fail harmful compression? One command:

    python benchmarks/gate_validity.py --lengths 2k --limit 8

builds the variants of ``benchmarks/variants.py`` (once, into --variants), runs the real
gate — ``pytest --longctx-model <variant> --longctx-baseline <baseline>`` — for the model
itself and every variant, and prints one table: each headline row's value, the number of
failed generated tests, and the verdict (pytest's exit status).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from variants import VARIANTS, build  # noqa: E402

from pytest_longctx.report import number, table  # noqa: E402


def gate(model: str, baseline: Path, lengths: str, limit: int, extra: list[str]) -> tuple[int, dict, int]:
    """(exit status, results JSON, failed tests) of one pytest run of the gate."""
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "results.json"
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--rootdir={folder}",
                   f"--longctx-model={model}", f"--longctx-baseline={baseline.resolve()}", f"--longctx-lengths={lengths}",
                   f"--longctx-limit={limit}", f"--longctx-out={out}", *extra]
        done = subprocess.run(command, cwd=folder, capture_output=True, text=True)
        failed = sum(1 for line in done.stdout.splitlines() if line.startswith("FAILED"))
        if not out.exists():
            raise SystemExit(f"{model}: the gate wrote no results (exit {done.returncode}):\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
        return done.returncode, json.loads(out.read_text()), failed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--baseline", type=Path, default=Path("baselines/smollm2-135m.json.gz"))
    parser.add_argument("--variants", type=Path, default=Path("variants"))
    parser.add_argument("--lengths", default="2k")
    parser.add_argument("--limit", type=int, default=8)
    parser.add_argument("--only", nargs="*", choices=VARIANTS, default=list(VARIANTS))
    parser.add_argument("pytest_args", nargs="*", help="passed on to pytest (after --)")
    args = parser.parse_args()
    candidates = {"the model itself": args.model}
    candidates.update({name: str(path) for name, path in build(args.model, args.variants, tuple(args.only)).items()})
    results = {}
    for name, model in candidates.items():
        print(f"gating {name} ...", file=sys.stderr, flush=True)
        results[name] = gate(model, args.baseline, args.lengths, args.limit, args.pytest_args)
    rows = list(next(iter(results.values()))[1]["rows"])
    body = [[row, *(number(res["rows"].get(row), 2) for _, res, _ in results.values())] for row in rows]
    body.append(["failed tests", *(str(failed) for _, _, failed in results.values())])
    body.append(["gate", *("PASS" if code == 0 else "FAIL" for code, _, _ in results.values())])
    print(f"model {args.model}; baseline {args.baseline}; lengths {args.lengths}; --longctx-limit {args.limit}")
    print(table(["row", *results], body))


if __name__ == "__main__":
    main()
