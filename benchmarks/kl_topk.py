"""How much of the full KL(P || Q) does the drift figure KL_K hold, for each K? One command:

    python benchmarks/kl_topk.py --lengths 2k --limit 2 --ks 16,32,64,128

SmolLM2 (``smollm2-135m``, transformers, float32) is the baseline; the candidates are its
variants of ``benchmarks/variants.py`` (built once into --variants) and the model with its
keys and values rounded to 4 bits (``variants:kv_int4``). The reads are the gate's own:
``plan_reads`` gives every read of the builtin facts and tool_calls items (each target's
reads, then the control reads), and ``metrics.drift.places`` on the committed baseline's
scores puts each in its group (far / near / control), as the drift rows do. The script
checks that the committed baseline read the same places and stored the same top 16.

At each read both models' next-token distributions are computed the plain way: one forward
pass over the item's text, the full logits, a float64 log-softmax over the whole
vocabulary. Per group and candidate it prints the mean full ``KL(P || Q)`` and, per K, the
mean ``KL_K`` (``metrics.drift.kl_k`` over the baseline's K most likely ids and the rest
bucket, the log-probabilities rounded to float32 as a drift block stores them), the ratio
of the means ``KL_K / KL`` and the mean share of the baseline's probability its K ids hold.
Then, per K, the gzipped bytes a baseline's drift block takes per read.

``--check`` also scores each candidate through the gate's pipeline (``score_sets`` against
the committed baseline) and prints how far its per-read KL_16 is from this script's: within
1e-3 (relative) for the weight variants; kv-int4's differ, as its rounded keys and values
depend on how the engine splits a sequence into calls. About 15 minutes on 2 shared CPU
cores for the defaults, twice that with ``--check``; the measured table is in
docs/metrics.md ("What KL_K is").
"""
from __future__ import annotations

import argparse
import gzip
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from pytest_longctx.data.load import load_dataset
from pytest_longctx.metrics.drift import GROUPS, Block, block, float32, item_reads, kl_k, places
from pytest_longctx.parse import comma_list
from pytest_longctx.reports.format import table
from pytest_longctx.scoring.modes import choose_mode, plan_reads
from pytest_longctx.scoring.scores_file import load_scores

BASELINE = Path("baselines/smollm2-135m.json.gz")
CANDIDATES = ("int8", "int4-g64", "int2-g64", "window512", "kv-int4")
STORED_K = 16  # what the committed baseline keeps per read


def log_probs(model: Any, plan: Any) -> np.ndarray:
    """[reads, vocabulary] float64 log-probabilities at every read of ``plan`` (targets, then
    controls), one plain forward pass per sequence: full logits, log-softmax."""
    import torch

    reads = [read for target in plan.every for read in target.reads]
    found: dict[tuple[int, int], np.ndarray] = {}
    for seq in sorted({read.seq for read in reads}):
        wanted = sorted({read.pos for read in reads if read.seq == seq})
        ids = torch.tensor([plan.sequences[seq][:wanted[-1]].tolist()])
        with torch.no_grad():
            logits = model(ids).logits[0]  # the prediction of token pos is at pos - 1
        rows = torch.log_softmax(logits[[pos - 1 for pos in wanted]].double(), dim=-1).numpy()
        found.update({(seq, pos): row for pos, row in zip(wanted, rows)})
    return np.stack([found[(read.seq, read.pos)] for read in reads])


def full_kl(p: np.ndarray, q: np.ndarray) -> float:
    """KL(P || Q) over the whole vocabulary, from log-probabilities (0 log 0 = 0)."""
    probs = np.exp(p)
    return float(np.sum(np.where(probs > 0, probs * (p - q), 0.0)))


def top(p: np.ndarray, k: int) -> np.ndarray:
    """The ids of the ``k`` most likely tokens of ``p``, most likely first."""
    ids = np.argpartition(-p, k)[:k]
    return ids[np.argsort(-p[ids], kind="stable")]


def per_read(base: np.ndarray, cand: np.ndarray, ks: list[int]) -> list[dict[str, Any]]:
    """Per read: the full KL and, per K, KL_K and the baseline's mass on its K ids."""
    found = []
    for p, q in zip(base, cand):
        row: dict[str, Any] = {"kl": full_kl(p, q)}
        for k in ks:
            ids = top(p, k)
            row[k] = kl_k([float32(v) for v in p[ids]], [float32(v) for v in q[ids]])
            row[f"mass{k}"] = float(np.exp(p[ids]).sum())
        found.append(row)
    return found


def checked_places(plans: list[Any], base: Any, bases: list[np.ndarray]) -> tuple[list[list[str]], float]:
    """Each plan's read groups, from the committed baseline's records (as the drift rows group
    them), and the largest difference between its stored top-16 log-probabilities and ours."""
    groups, worst = [], 0.0
    for plan, p in zip(plans, bases):
        stored = base.scores.get(plan.config, {}).get(plan.length, {}).get(plan.item.id)
        if stored is None or not stored.drift:
            raise SystemExit(f"{plan.config}/{plan.length}/{plan.item.id}: not in the baseline with a drift block; "
                             "use lengths and a --limit the baseline covers")
        theirs = Block.decode(stored.drift)
        at = [(read.seq, read.pos) for target in plan.every for read in target.reads]
        if theirs.at != at or theirs.ids is None or theirs.lps is None:
            raise SystemExit(f"{plan.config}/{plan.length}/{plan.item.id}: the baseline read other places")
        for row, ids, lps in zip(p, theirs.ids, theirs.lps):
            worst = max(worst, float(np.max(np.abs(row[ids] - np.asarray(lps)))))
        groups.append([group for group, _, _ in places(plan.item, stored)])
    return groups, worst


def block_bytes(plans: list[Any], bases: list[np.ndarray], k: int) -> int:
    """Gzipped bytes of the subset's baseline drift blocks at ``k`` (as a scores file keeps them)."""
    blocks = {}
    for plan, p in zip(plans, bases):
        at = [(read.seq, read.pos) for target in plan.every for read in target.reads]
        tops = [(ids.tolist(), row[ids].tolist()) for row in p for ids in [top(row, k)]]
        blocks[f"{plan.config}/{plan.length}/{plan.item.id}"] = block(at, [int(np.argmax(row)) for row in p], tops, None, k)
    return len(gzip.compress(json.dumps(blocks).encode(), mtime=0))


def candidates(names: list[str], variants: Path) -> dict[str, Any]:
    """name -> a function loading that candidate's model (float32, CPU)."""
    from transformers import AutoModelForCausalLM

    import variants as built

    folders = built.build("smollm2-135m", variants, tuple(n for n in names if n in built.VARIANTS))
    loaders: dict[str, Any] = {}
    for name in names:
        if name == "kv-int4":
            loaders[name] = lambda: built.kv_int4("smollm2-135m", "float32", "cpu").model
        else:
            loaders[name] = lambda folder=folders[name]: AutoModelForCausalLM.from_pretrained(folder, dtype="float32").eval()
    return loaders


def gate_kl16(model: Any, tokenizer: Any, dataset: Any, base: Any) -> list[list[float]]:
    """Per item, per read: KL_16 as the gate's pipeline computes it against the committed baseline."""
    from pytest_longctx.backends.hf import TransformersBackend
    from pytest_longctx.scoring.pipeline import score_sets

    scored = score_sets(TransformersBackend(model, tokenizer), tokenizer, dataset, reference=base, progress=False)
    found = []
    for config, length, item in dataset.items():
        reads = item_reads(item, scored.scores.scores[config][length][item.id], base.scores[config][length][item.id])
        assert reads is not None
        found.append([read.kl for read in reads])
    return found


def summary_rows(name: str, reads: list[tuple[str, str, dict[str, Any]]], ks: list[int]) -> list[list[str]]:
    """One line per config and group: reads, mean full KL, then per K mean KL_K, ratio, mass."""
    lines = []
    for config in sorted({c for c, _, _ in reads}):
        for group in GROUPS:
            mine = [r for c, g, r in reads if c == config and g == group and math.isfinite(r["kl"])]
            if not mine:
                continue
            kl = sum(r["kl"] for r in mine) / len(mine)
            cells = [f"{name}: {config} {group}", str(len(mine)), f"{kl:.4g}"]
            for k in ks:
                klk = sum(r[k] for r in mine) / len(mine)
                mass = sum(r[f"mass{k}"] for r in mine) / len(mine)
                cells.append(f"{klk:.4g} / {klk / kl:.2f} / {mass:.3f}" if kl > 0 else f"{klk:.4g} / n/a / {mass:.3f}")
            lines.append(cells)
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default="builtin", help="'builtin' or a benchmark folder (then --baseline: one of its items)")
    parser.add_argument("--lengths", default="2k")
    parser.add_argument("--limit", type=int, default=2, help="first N items of each config (the baseline covers 8)")
    parser.add_argument("--sets", default="facts,tool_calls")
    parser.add_argument("--ks", default="16,32,64,128")
    parser.add_argument("--only", nargs="*", choices=CANDIDATES, default=list(CANDIDATES))
    parser.add_argument("--variants", type=Path, default=Path("variants"))
    parser.add_argument("--baseline", type=Path, default=BASELINE)
    parser.add_argument("--check", action="store_true", help="also score each candidate through the gate's pipeline")
    args = parser.parse_args()
    from pytest_longctx.backends.aliases import resolve_model
    from pytest_longctx.backends.hf import load_pretrained

    started = time.monotonic()
    ks = sorted(int(k) for k in comma_list(args.ks))
    model, tokenizer = load_pretrained(resolve_model("smollm2-135m"), dtype="float32", device="cpu")
    dataset = load_dataset(args.data, sets=comma_list(args.sets), lengths=comma_list(args.lengths), limit=args.limit)
    plans = plan_reads(dataset, choose_mode("auto", tokenizer, dataset), tokenizer)
    base = load_scores(args.baseline, "baseline")
    bases = [log_probs(model, plan) for plan in plans]
    groups, stored_gap = checked_places(plans, base, bases)
    total = sum(len(g) for g in groups)
    print(f"{len(plans)} items, {total} reads; the baseline's stored top {STORED_K} within {stored_gap:.1e} nats of ours",
          file=sys.stderr, flush=True)
    body: list[list[str]] = []
    checks = []
    for name, load in candidates(args.only, args.variants).items():
        print(f"{name} ...", file=sys.stderr, flush=True)
        candidate = load()
        reads = []
        for plan, grouped, p in zip(plans, groups, bases):
            reads += [(plan.config, g, r) for g, r in zip(grouped, per_read(p, log_probs(candidate, plan), ks))]
        body += summary_rows(name, reads, ks)
        if args.check and STORED_K in ks:
            ours = [r[STORED_K] for _, _, r in reads]
            theirs = [v for item in gate_kl16(candidate, tokenizer, dataset, base) for v in item]
            gaps = [abs(a - b) / max(abs(b), 1e-3) for a, b in zip(ours, theirs) if math.isfinite(a) and math.isfinite(b)]
            checks.append(f"{name}: the gate's KL_{STORED_K} per read within {max(gaps):.1e} (relative) of this script's")
    print(f"SmolLM2 (smollm2-135m, float32) against its variants; {args.data} {args.sets} at {args.lengths}, first {args.limit} "
          f"items each: {len(plans)} items, {total} reads. Per K: mean KL_K / (KL_K / KL) / baseline mass on the K ids")
    print(table(["candidate: config group", "reads", "full KL", *(f"K = {k}" for k in ks)], body))
    sizes = {k: block_bytes(plans, bases, k) for k in ks}
    print(table(["drift block, gzipped", *(f"K = {k}" for k in ks)],
                [["bytes per read", *(f"{sizes[k] / total:.0f}" for k in ks)],
                 [f"x K = {ks[0]}", *(f"{sizes[k] / sizes[ks[0]]:.2f}" for k in ks)]]))
    for line in checks:
        print(line)
    print(f"({time.monotonic() - started:.0f} s)")


if __name__ == "__main__":
    main()
