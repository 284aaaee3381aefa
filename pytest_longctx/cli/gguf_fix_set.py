"""``longctx gguf-fix-set --fixed-by BLAME_JSON``: the fix set of a ``longctx blame --backend llama.cpp``
made from its original by llama.cpp's quantizer through llama-cpp-python, as the printed
``llama-quantize`` command would make it, for where that tool is not installed (docs/blame.md)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pytest_longctx.backends.llama_cpp.quantize import quantize
from pytest_longctx.backends.llama_cpp.recipe import QuantizeCommand, parse_command
from pytest_longctx.backends.llama_cpp.settings import default_threads
from pytest_longctx.errors import LongctxError
from pytest_longctx.paths import check_outputs
from pytest_longctx.scoring.scores_file import read_json_file

MAKE_IT = "give the --out file of a longctx blame --backend llama.cpp whose candidate failed"


def fix_set_command(blame_json: str) -> QuantizeCommand:
    """The llama-quantize command of the fix set in the blame results ``blame_json``."""
    body = read_json_file(Path(blame_json), "--fixed-by", MAKE_IT)
    fix_set = (body.get("fix_set") or {}) if isinstance(body, dict) else {}
    if fix_set.get("recipe_tool") not in (None, "", "llama.cpp"):
        raise LongctxError(f"--fixed-by {blame_json}: its fix set is a recipe for {fix_set['recipe_tool']}, not a llama-quantize "
                           f"command: run that tool with it (the recipe's first lines say how)")
    lines = fix_set.get("recipe") or []
    if not lines:
        raise LongctxError(f"--fixed-by {blame_json}: holds no llama-quantize command (fix_set.recipe): a llama.cpp blame "
                           f"writes one when it found a fix set; {MAKE_IT}")
    return parse_command(lines, f"--fixed-by {blame_json}, fix_set.recipe")


def fixed_by(blame_json: str, out: str, threads: int | None = None, original: str | None = None) -> Path:
    """The fix set of the blame results ``blame_json`` written to ``out``, from ``original`` (default:
    the file its command names)."""
    command = fix_set_command(blame_json)
    source = Path(original or command.original)
    if not source.is_file():
        raise LongctxError(f"--fixed-by {blame_json}: its original {source} is not a file here; run where blame ran, or "
                           "give the original GGUF file with --original FILE")
    check_outputs([("--out", out)], inputs=[("--original", source), ("--fixed-by", blame_json)])
    quantize(source, Path(out), command.file_type, threads or default_threads(), command.tensor_types, command.requantize)
    return Path(out)


def run(args: argparse.Namespace) -> int:
    target = fixed_by(args.fixed_by, args.out, args.threads, args.original)
    print(f"longctx: the fix set written to {target} ({target.stat().st_size / 2**20:.1f} MiB)", file=sys.stderr)
    return 0
