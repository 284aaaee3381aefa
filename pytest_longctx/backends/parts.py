"""Parts of a loaded transformers model and hybrids of two checkpoints of one architecture:
what ``longctx blame`` restores (the candidate with some parts taken back from the original)
and damages (the original with some parts taken from the candidate).

A part is a set of parameter names: a decoder layer (``layer.N``), within it its attention
(``layer.N.attn``: q/k/v/o and their norms), its MLP (``layer.N.mlp``) and the rest of the
layer (``layer.N.norms``: the norms around them), the input embeddings (``embed``), the LM
head (``lm_head``; tied with the embeddings, it is the one part ``embed``) and what lies
outside the layers (``final``: the final norm); at ``tensor`` granularity every parameter
is its own part. The parts of a granularity cover every parameter exactly once, so a hybrid
with every part taken from the other model computes what the other model computes.

A hybrid is made in place: the parameters of the parts are pointed at the other model's
tensors (no copy; both models stay loaded, and nothing more), and put back afterwards.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from pytest_longctx.errors import LongctxError

GRANULARITIES = ("layer", "block", "tensor")
LAYER = re.compile(r"^(?P<stack>.*\.layers?|.*\.h|.*\.blocks)\.(?P<index>\d+)\.(?P<rest>.+)$")
ATTENTION = ("self_attn.", "attention.", "attn.")
MLP = ("mlp.", "feed_forward.", "block_sparse_moe.")


@dataclass(frozen=True)
class Part:
    """A named set of parameters of both models."""

    name: str
    parameters: tuple[str, ...]


def parameters(model: Any) -> dict[str, Any]:
    """Name -> parameter, a tied tensor once (under its first name)."""
    return dict(model.named_parameters())


def _names_of(model: Any, module: Any) -> set[str]:
    """The names under which ``module``'s weight is among the model's parameters (none without one)."""
    weight = getattr(module, "weight", None)
    return {n for n, p in model.named_parameters() if weight is not None and p is weight}


def _part_of(name: str, granularity: str, embed: set[str], head: set[str]) -> str:
    if granularity == "tensor":
        return name
    if name in embed:
        return "embed"
    if name in head:
        return "lm_head"
    found = LAYER.match(name)
    if found is None:
        return "final"
    layer = f"layer.{int(found['index'])}"
    if granularity == "layer":
        return layer
    rest = found["rest"]
    if rest.startswith(ATTENTION):
        return f"{layer}.attn"
    if rest.startswith(MLP):
        return f"{layer}.mlp"
    return f"{layer}.norms"


def model_parts(model: Any, granularity: str) -> list[Part]:
    """The parts of ``model`` at ``granularity`` (one of ``GRANULARITIES``), in the model's order."""
    if granularity not in GRANULARITIES:
        raise LongctxError(f"--granularity {granularity}: expected one of {', '.join(GRANULARITIES)}")
    embed = _names_of(model, model.get_input_embeddings())
    head = _names_of(model, model.get_output_embeddings()) - embed  # tied with the embeddings, it is the part embed
    grouped: dict[str, list[str]] = {}
    for name in parameters(model):
        grouped.setdefault(_part_of(name, granularity, embed, head), []).append(name)
    return [Part(name, tuple(names)) for name, names in grouped.items()]


def select_parts(parts: Sequence[Part], names: Iterable[str] | None, granularity: str) -> list[Part]:
    """The parts ``names`` names (``--parts``), in the model's order; all without names. An
    unknown name is one line listing the parts there are."""
    if names is None:
        return list(parts)
    by_name = {p.name: p for p in parts}
    wanted = list(names)
    unknown = [n for n in wanted if n not in by_name]
    if unknown:
        shown = ", ".join(p.name for p in parts[:8]) + (f", … ({len(parts)} in all)" if len(parts) > 8 else "")
        raise LongctxError(f"--parts {unknown[0]}: no such part at --granularity {granularity}; the parts are {shown}")
    return [p for p in parts if p.name in wanted]


def _shape(tensor: Any) -> str:
    return "[" + ", ".join(str(n) for n in tensor.shape) + "]"


def check_compatible(original: Any, candidate: Any, original_name: str, candidate_name: str) -> None:
    """Two checkpoints of one architecture: the same model class and type, the same parameter
    names, the same shapes; else one line saying where they differ."""
    kinds = [(type(m).__name__, getattr(m.config, "model_type", "?")) for m in (original, candidate)]
    if kinds[0] != kinds[1]:
        raise LongctxError(f"--reference {original_name} is a {kinds[0][0]} ({kinds[0][1]}), --model {candidate_name} a "
                           f"{kinds[1][0]} ({kinds[1][1]}): blame takes two checkpoints of one architecture")
    mine, theirs = parameters(original), parameters(candidate)
    only_original = [n for n in mine if n not in theirs]
    only_candidate = [n for n in theirs if n not in mine]
    if only_original or only_candidate:
        where, name = ("--reference", only_original[0]) if only_original else ("--model", only_candidate[0])
        count = len(only_original) + len(only_candidate)
        raise LongctxError(f"--reference {original_name} and --model {candidate_name}: their tensor names do not match "
                           f"({count} differ; {name} is only in {where}): blame takes two checkpoints of one architecture")
    for name, tensor in mine.items():
        if tuple(tensor.shape) != tuple(theirs[name].shape):
            raise LongctxError(f"--reference {original_name} and --model {candidate_name}: {name} is {_shape(tensor)} in "
                               f"one and {_shape(theirs[name])} in the other: blame takes two checkpoints of one shape")


@dataclass(frozen=True)
class Cost:
    """What keeping parts from the original costs: parameters, and bytes at each side's dtype."""

    parameters: int
    original_bytes: int
    candidate_bytes: int


def cost(original: Any, candidate: Any, parts: Iterable[Part]) -> Cost:
    mine, theirs = parameters(original), parameters(candidate)
    names = [n for part in parts for n in part.parameters]
    return Cost(sum(mine[n].numel() for n in names), sum(mine[n].numel() * mine[n].element_size() for n in names),
                sum(theirs[n].numel() * theirs[n].element_size() for n in names))


class Hybrid:
    """``target`` with the tensors of some parts taken from ``source``, in place: ``take(parts)``
    points them at the source's tensors (cast to the target's dtype and device where they
    differ), ``reset()`` puts the target's own back."""

    def __init__(self, target: Any, source: Any):
        self.target, self.source = parameters(target), parameters(source)
        self.saved: dict[str, Any] = {}

    def take(self, parts: Iterable[Part]) -> None:
        for part in parts:
            for name in part.parameters:
                mine, theirs = self.target[name], self.source[name]
                self.saved.setdefault(name, mine.data)
                mine.data = theirs.data.to(device=mine.device, dtype=self.saved[name].dtype)

    def reset(self) -> None:
        for name, data in self.saved.items():
            self.target[name].data = data
        self.saved.clear()
