"""``longctx blame --reference ORIGINAL --model CANDIDATE``: which parts of the candidate make
the gate fail, and which to keep from the original (gate/blame.py, docs/blame.md)."""
from __future__ import annotations

import argparse
import sys

from pytest_longctx.backends.hybrids.pairs import PAIR_BACKENDS, load_models
from pytest_longctx.backends.hybrids.parts import GRANULARITIES, Pair
from pytest_longctx.cli.args import add_context_argument, add_loading_arguments, add_threshold_arguments, names, thresholds_of
from pytest_longctx.data.load import load_dataset
from pytest_longctx.errors import LongctxError
from pytest_longctx.gate.blame import CARRY, FIX_BUDGET, GROUPS_FROM, SEARCHES, blame_pair
from pytest_longctx.gate.verdicts import dataset_keys
from pytest_longctx.paths import check_outputs, check_writable, write_text_atomically
from pytest_longctx.reports.blame import blame_html, blame_markdown, blame_text
from pytest_longctx.reports.format import write_json
from pytest_longctx.scoring.scores_file import load_scores


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("blame", help="which parts of a compressed model make the gate fail, and what to keep",
                       description="Build hybrids of an original and its compressed candidate (transformers "
                                   "checkpoints of one architecture, or two GGUF files of one model) and measure, on the "
                                   "failing rows' items, how much of the far drift each part accounts for; then the "
                                   "parts to keep so that it passes.")
    p.add_argument("--reference", required=True, metavar="ORIGINAL", help="the original model: hub id, folder or alias")
    p.add_argument("--model", required=True, metavar="CANDIDATE", help="the compressed model: hub id, folder or alias")
    p.add_argument("--baseline", metavar="FILE",
                   help="the original's baseline scores (.json.gz, with drift blocks); default: score the original now")
    p.add_argument("--data", default="builtin", help="'builtin' (default), a local folder in the HF layout, or a hub id")
    p.add_argument("--sets", type=names, help="configs to score, comma-separated (default: all present)")
    p.add_argument("--lengths", type=names, help="splits to score, e.g. 2k,8k (default: all present)")
    p.add_argument("--limit", type=int, help="the first N items of each config and length")
    p.add_argument("--granularity", choices=GRANULARITIES, default="layer",
                   help="layer (default): each decoder layer; block: attention, MLP and norms within each; tensor: every "
                        "parameter; the embeddings, the LM head and the final norm are parts at each")
    p.add_argument("--parts", type=names, metavar="NAMES", help="only these parts, comma-separated (e.g. layer.3,lm_head)")
    p.add_argument("--rows", type=lambda text: [r.strip() for r in text.split(";") if r.strip()], metavar="ROWS",
                   help="only these failing rows, ';'-separated, as the gate names them")
    p.add_argument("--search", choices=SEARCHES, default="groups",
                   help=f"groups (default, with {GROUPS_FROM} changed parts or more): restore halves of the changed parts, then "
                        f"halves of the halves that move the far drift by {CARRY:.0%} or more, down to single parts, and measure "
                        "those alone both ways; exhaustive: every changed part both ways")
    p.add_argument("--budget", type=positive, metavar="N",
                   help="the most models scored on the blamed items in all (groups, parts, fix set); where it ends, the "
                        "report says what was left unmeasured (default: no end)")
    p.add_argument("--fix-budget", type=positive, default=FIX_BUDGET, metavar="N",
                   help=f"the hybrids the fix set search may score after the parts' own (default {FIX_BUDGET}): each step "
                        "tries the leading parts with the ones kept so far")
    p.add_argument("--boundary-every", type=lambda text: positive(text, zero=True), default=1, metavar="N",
                   help="transformers: keep each side's residual stream on the blamed items at every N-th layer boundary "
                        "(default 1) and start each hybrid from the one below its first changed part (with 4 changed "
                        "parts or more); 0: none, every hybrid runs from the first layer")
    p.add_argument("--out", metavar="PATH", help="write the results JSON")
    p.add_argument("--markdown", metavar="PATH", help="write the report in markdown (e.g. for a CI step summary)")
    p.add_argument("--html", metavar="PATH", help="write the report as HTML, with a bar chart of the shares")
    p.add_argument("--backend", choices=PAIR_BACKENDS, default="hf",
                   help="hf (default): transformers checkpoints, hybrids made in place; llama.cpp: two .gguf files, hybrids "
                        "written as GGUF files and run by llama.cpp")
    p.add_argument("--backend-option", action="append", default=[], metavar="KEY=VALUE",
                   help="a setting of the backend, as for longctx score (llama.cpp: how the candidate runs, e.g. "
                        "cache-type-k=q8_0, threads=4); repeatable")
    p.add_argument("--reference-option", action="append", default=[], metavar="KEY=VALUE",
                   help="llama.cpp: how the original runs where it differs from --backend-option; its KV cache types are "
                        "llama.cpp's f16 unless given here (a quantized cache of the candidate is then one more part); repeatable")
    p.add_argument("--work-dir", metavar="DIR", help="llama.cpp: the folder the hybrids' GGUF files are written in, one at a "
                   "time, each removed when read (default: the system's temporary folder)")
    add_loading_arguments(p)  # the candidate's and the original's answers are taken from the score cache where it holds them
    add_context_argument(p)
    add_threshold_arguments(p)  # what the failing rows and the fix set's verification are judged with
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    check_outputs([("--out", args.out), ("--markdown", args.markdown), ("--html", args.html)], inputs=[("--baseline", args.baseline)])
    thresholds = thresholds_of(args)
    dataset = load_dataset(args.data, sets=args.sets, lengths=args.lengths, limit=args.limit)
    thresholds.check_patterns(dataset_keys(dataset))  # a pattern naming nothing is refused before any model is loaded
    baseline = load_scores(args.baseline, "baseline") if args.baseline else None
    found = blame_pair(pair_of(args), dataset, baseline, thresholds=thresholds, granularity=args.granularity, parts=args.parts,
                       rows=args.rows, progress=not args.quiet, beyond_context=args.allow_beyond_context,
                       cache_dir=args.cache_dir, fix_budget=args.fix_budget,
                       reuse=False if args.boundary_every == 0 else None, reuse_every=args.boundary_every or 1,
                       search=args.search, budget=args.budget)
    print(blame_text(found))
    if args.out:
        write_json(args.out, found.to_json())
        print(f"longctx: blame written to {args.out}", file=sys.stderr)
    for path, render in ((args.markdown, blame_markdown), (args.html, blame_html)):
        if path:
            write_text_atomically(path, render(found))
            print(f"longctx: blame report written to {path}", file=sys.stderr)
    return 0


def positive(text: str, zero: bool = False) -> int:
    try:
        number = int(text)
    except ValueError:
        number = -1
    if number < (0 if zero else 1):
        raise argparse.ArgumentTypeError(f"expected a whole number of layers, 0 or more: {text!r}" if zero
                                         else f"expected a whole number of hybrids, 1 or more: {text!r}")
    return number


def pair_of(args: argparse.Namespace) -> Pair:
    """The original and the candidate as ``--backend`` loads them, once the flags are known to fit it."""
    if args.backend == "llama.cpp" and (args.dtype != "auto" or args.device not in ("auto", "cpu")):
        raise LongctxError(f"--dtype {args.dtype} --device {args.device}: blame --backend llama.cpp runs the files' own "
                           "types on the CPU; leave both auto (layers on a GPU: --backend-option gpu-layers=N)")
    if args.backend == "llama.cpp" and args.trust_remote_code:
        raise LongctxError("--trust-remote-code: llama.cpp runs no model code of its own, so it does not apply; leave it out")
    if args.backend != "llama.cpp" and args.reference_option:
        raise LongctxError(f"--reference-option {args.reference_option[0]}: for --backend llama.cpp only; transformers loads "
                           "both checkpoints with the same --backend-option values")
    if args.backend != "llama.cpp" and args.work_dir:
        raise LongctxError(f"--work-dir {args.work_dir}: for --backend llama.cpp only; transformers makes hybrids in memory")
    if args.work_dir:
        check_writable(args.work_dir, "--work-dir", folder=True)
    return load_models(args.backend, args.reference, args.model, args.dtype, args.device, args.backend_option,
                       args.reference_option, args.trust_remote_code, work_dir=args.work_dir)
