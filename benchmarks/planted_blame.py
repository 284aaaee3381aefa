"""Planted damage, found: does ``longctx blame`` point at the parts where the damage was put?

    python benchmarks/planted_blame.py --out variants --limit 2

builds variants of SmolLM2 (transformers folders, as ``benchmarks/variants.py`` builds its
own) whose damage sits in parts chosen beforehand, runs ``longctx blame`` on each against
the committed baseline, and checks the answer:

* ``int2-layers-7-21``: layers 7 and 21 rounded to 2 bits (groups of 64 input channels),
  every other linear layer to 8 bits (one scale per output channel). Blame by layer over
  every part: the two planted layers must rank first in the restore direction and in the
  damage direction, and the fix set must be exactly them.
* ``attn-int2-layer-12``: only layer 12's attention projections (q, k, v, o) rounded to 2 bits
  (groups of 64), everything else untouched. Blame by layer must rank layer 12 first and fix
  with it alone; then blame by block must rank its attention first and fix with it alone (the
  drill-down a user would run next). Every other part is the original's own, so blame scores
  only the changed ones and both runs are short.

Each check prints ``found`` or ``MISSED`` with the ranks; the script exits 1 when any check
misses. The blame runs go through the ``longctx`` command, so each prints its command and
its report, and writes its results JSON beside the variant (``<variant>.blame-<stage>.json``).
"""
from __future__ import annotations

import argparse
import json
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from variants import round_to_nearest_, rounded

BASELINE = "baselines/smollm2-135m.json.gz"
ATTENTION = tuple(f"model.layers.12.self_attn.{t}_proj.weight" for t in "qkvo")


@dataclass(frozen=True)
class Stage:
    """One blame run over a variant and the parts it must name."""

    granularity: str
    planted: frozenset[str]


@dataclass(frozen=True)
class Planted:
    name: str
    stages: tuple[Stage, ...]

    def damage(self, model: Any) -> None:
        """Put the damage into ``model`` (a loaded SmolLM2)."""
        import torch

        with torch.no_grad():
            if self.name == "int2-layers-7-21":
                hard = [m for n in (7, 21) for m in model.model.layers[n].modules() if isinstance(m, torch.nn.Linear)]
                kept = [m.weight.detach().clone() for m in hard]  # the int2 layers are rounded from these, not from int8
                round_to_nearest_(model, 8, None)
                for module, weight in zip(hard, kept):
                    module.weight.copy_(rounded(weight, 2, 64))
            else:
                for name in ATTENTION:
                    weight = model.get_parameter(name)
                    weight.copy_(rounded(weight, 2, 64))


PLANTED = (
    Planted("int2-layers-7-21", (Stage("layer", frozenset({"layer.7", "layer.21"})),)),
    Planted("attn-int2-layer-12", (Stage("layer", frozenset({"layer.12"})),
                                   Stage("block", frozenset({"layer.12.attn"})))),
)


def build(planted: Planted, source: str, out: Path) -> Path:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = out / planted.name
    if (folder / "config.json").exists():
        return folder
    model = AutoModelForCausalLM.from_pretrained(source, dtype="float32").eval()
    planted.damage(model)
    partial = out / f".{planted.name}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    model.save_pretrained(partial)
    AutoTokenizer.from_pretrained(source).save_pretrained(partial)
    partial.rename(folder)
    return folder


def ranks(found: dict[str, Any], direction: str) -> list[str]:
    """The parts from most to least blamed in ``direction``, by the mean share of far drift over the blamed rows."""
    def share(part: dict[str, Any]) -> float:
        shares = [s[f"{direction}_far"] for s in part["shares"].values() if s[f"{direction}_far"] is not None]
        return sum(shares) / len(shares) if shares else 0.0

    return [p["part"] for p in sorted(found["parts"], key=lambda p: -share(p))]


def check(found: dict[str, Any], planted: frozenset[str]) -> list[tuple[str, bool, str]]:
    """Each claim about one blame run: (what, holds, the figures behind it)."""
    if found["passed"]:
        return [("the variant fails the gate", False, "it passes: nothing to blame")]
    claims = []
    for direction in ("restore", "damage"):
        order = ranks(found, direction)
        top = set(order[:len(planted)])
        where = ", ".join(f"{p} #{order.index(p) + 1}" for p in sorted(planted))
        claims.append((f"the planted parts rank first by {direction}", top == planted, where))
    fix = found["fix_set"]
    verified = (found["verification"] or {}).get("passed")
    claims.append(("the fix set is exactly the planted parts", set(fix["parts"]) == planted and fix["fixed"],
                   f"fix set {', '.join(fix['parts']) or '(none)'}; verification {'PASS' if verified else 'FAIL'}"))
    return claims


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--out", type=Path, default=Path("variants"))
    parser.add_argument("--baseline", default=BASELINE, help=f"the original's baseline (default {BASELINE})")
    parser.add_argument("--data", default="builtin", help="'builtin' or a benchmark folder the baseline was scored on")
    parser.add_argument("--sets", default="facts")
    parser.add_argument("--lengths", default="2k")
    parser.add_argument("--limit", type=int, default=2)
    parser.add_argument("--only", nargs="*", choices=[p.name for p in PLANTED], default=[p.name for p in PLANTED])
    parser.add_argument("--granularity", choices=("layer", "block"), help="only the blame runs at this granularity")
    args = parser.parse_args()
    from pytest_longctx.backends.aliases import resolve_model

    args.out.mkdir(parents=True, exist_ok=True)
    missed = 0
    for planted in (next(p for p in PLANTED if p.name == name) for name in args.only):
        folder = build(planted, resolve_model(args.model), args.out)
        for stage in (s for s in planted.stages if args.granularity in (None, s.granularity)):
            result = args.out / f"{planted.name}.blame-{stage.granularity}.json"
            command = ["longctx", "blame", "--reference", args.model, "--model", str(folder), "--baseline", args.baseline,
                       "--data", args.data, "--sets", args.sets, "--lengths", args.lengths, "--limit", str(args.limit),
                       "--granularity", stage.granularity, "--out", str(result)]
            print(f"$ {shlex.join(command)}", flush=True)
            started = time.monotonic()
            # the longctx command of this interpreter: a virtual environment run without activating it has no
            # longctx on PATH
            subprocess.run([sys.executable, "-m", "pytest_longctx.cli", *command[1:]], check=True)
            print(f"{planted.name} by {stage.granularity}: {time.monotonic() - started:.0f} s", flush=True)
            for what, holds, figures in check(json.loads(result.read_text()), stage.planted):
                missed += not holds
                print(f"{'found ' if holds else 'MISSED'} {planted.name} by {stage.granularity}: {what} ({figures})", flush=True)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
