"""The ``llama-quantize`` command that makes a fix set from the original: the candidate's file
type, with ``--tensor-type PATTERN=TYPE`` keeping the parts' tensors at the original's ggml
types.

llama.cpp's quantizer lower-cases each pattern and searches it in every tensor's name (a
regular expression; the first that matches wins), so each pattern here is anchored and its
dots escaped: ``^blk\\.13\\.(attn_q|attn_k)\\.weight$=f32``. One pattern per part and type.
One-dimensional tensors (the norms) are left out: the quantizer never quantizes them, it
copies them as the original holds them. The command makes the fix set exactly when the
candidate is what the quantizer makes of the original at that file type (no importance
matrix, no other overrides)."""
from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass
from typing import Mapping, Sequence

from pytest_longctx.errors import LongctxError

FULL_PRECISION = ("F32", "F16", "BF16")  # ggml types the quantizer reads without --allow-requantize


def tensor_pattern(names: Sequence[str]) -> str:
    """An anchored pattern that matches exactly ``names``: their shared leading and trailing
    dotted pieces written once, the rest as alternatives."""
    if len(names) == 1:
        return f"^{re.escape(names[0])}$"
    lead = os.path.commonprefix(list(names))
    lead = lead[: lead.rfind(".") + 1]
    trail = os.path.commonprefix([n[len(lead):][::-1] for n in names])[::-1]
    trail = trail[trail.find("."):] if "." in trail else ""
    middles = [n[len(lead): len(n) - len(trail)] for n in names]
    if not all(middles):
        lead, trail, middles = "", "", list(names)
    return f"^{re.escape(lead)}({'|'.join(re.escape(m) for m in middles)}){re.escape(trail)}$"


def quantize_arguments(kept: Mapping[str, Sequence[tuple[str, str]]], file_type: str, original: str,
                       requantize: bool) -> list[str]:
    """The command's lines (one shell command continued with backslashes): ``kept`` is each kept
    part's (tensor, the original's ggml type) pairs, matrices only; ``file_type`` the
    candidate's (``Q4_K_M``); ``original`` the original file as the command names it;
    ``requantize``: the original holds quantized tensors (the quantizer then needs
    ``--allow-requantize``)."""
    lines = ["llama-quantize" + (" --allow-requantize" if requantize else "")]
    for tensors in kept.values():
        by_type: dict[str, list[str]] = {}
        for name, kind in tensors:
            by_type.setdefault(kind, []).append(name)
        lines += [f"  --tensor-type '{tensor_pattern(names)}={kind.lower()}'" for kind, names in by_type.items()]
    lines.append(f"  {shlex.quote(original)} fixed.gguf {file_type}")
    return [line + " \\" for line in lines[:-1]] + lines[-1:]


@dataclass(frozen=True)
class QuantizeCommand:
    """A fix set's ``llama-quantize`` command, read back: what the quantizer is asked to do."""

    original: str
    target: str
    file_type: str
    tensor_types: tuple[tuple[str, str], ...]  # (pattern, ggml type), in the command's order: the first match wins
    requantize: bool


def parse_command(lines: Sequence[str], where: str) -> QuantizeCommand:
    """The command of ``quantize_arguments``'s lines (a shell comment after it is not part of it);
    ``where``: what holds them, as an error names it."""
    command: list[str] = []
    for line in lines:
        command.append(line.rstrip().removesuffix("\\"))
        if not line.rstrip().endswith("\\"):
            break
    try:
        words = shlex.split(" ".join(command))
    except ValueError as exc:
        raise LongctxError(f"{where}: not a shell command ({exc}); give the fix_set.recipe of a longctx blame --out file") from None
    if words[:1] != ["llama-quantize"] or len(words) < 4:
        raise LongctxError(f"{where}: not a llama-quantize command: {' '.join(command)!r}")
    *flags, original, target, file_type = words[1:]
    tensor_types, requantize = [], False
    while flags:
        flag = flags.pop(0)
        if flag == "--allow-requantize":
            requantize = True
        elif flag == "--tensor-type" and flags:
            pattern, _, kind = flags.pop(0).rpartition("=")
            tensor_types.append((pattern, kind))
        else:
            raise LongctxError(f"{where}: llama-quantize flag {flag!r} is not one a fix set's command holds")
    return QuantizeCommand(original, target, file_type, tuple(tensor_types), requantize)
