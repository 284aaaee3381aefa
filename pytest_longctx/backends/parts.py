"""Parts of two models of one architecture and the hybrids between them: what ``longctx blame``
restores (the candidate with some parts taken back from the original) and damages (the
original with some parts taken from the candidate).

A part is a set of tensor names: a decoder layer (``layer.N``), within it its attention
(``layer.N.attn``: q/k/v/o and their norms), its MLP (``layer.N.mlp``) and the rest of the
layer (``layer.N.norms``: the norms around them), the input embeddings (``embed``), the LM
head (``lm_head``; tied with the embeddings, it is the one part ``embed``) and what lies
outside the layers (``final``: the final norm); at ``tensor`` granularity every tensor is
its own part. The parts of a granularity cover every tensor exactly once, so a hybrid with
every part taken from the other model computes what the other model computes. Both backends
name parts so (``part_name``), whatever their tensors are called, so their reports read the
same.

``Pair`` is what blame asks of a backend: the parts, their cost, and a backend reading a
hybrid. Here, the transformers one (``StateDictPair``): a hybrid is made in place, the
parameters of the parts pointed at the other model's tensors (no copy; both models stay
loaded, and nothing more), and put back afterwards. The llama.cpp one writes GGUF files
(``llama_cpp/hybrids.py``).
"""
from __future__ import annotations

import re
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, ContextManager, Iterable, Iterator, Mapping, Protocol, Sequence

from pytest_longctx.backends.base import Backend
from pytest_longctx.backends.hf import TransformersBackend
from pytest_longctx.errors import LongctxError

GRANULARITIES = ("layer", "block", "tensor")
ORIGINAL, CANDIDATE = "original", "candidate"  # the two sides of a pair, as Pair.hybrid names its base
LAYER = re.compile(r"^(?P<stack>.*\.layers?|.*\.h|.*\.blocks)\.(?P<index>\d+)\.(?P<rest>.+)$")
ATTENTION = ("self_attn.", "attention.", "attn.")
MLP = ("mlp.", "feed_forward.", "block_sparse_moe.")


@dataclass(frozen=True)
class Part:
    """A named set of tensors of both models."""

    name: str
    parameters: tuple[str, ...]


@dataclass(frozen=True)
class Cost:
    """What keeping parts from the original costs: parameters, and bytes at each side's types; and the
    precision the hybrids measured held them at."""

    parameters: int
    original_bytes: int
    candidate_bytes: int
    precision: str = "the original's types"  # a GGUF hybrid copies the original's blocks as its file stores them


class Pair(Protocol):
    """Two models of one architecture, as blame needs them from a backend."""

    names: tuple[str, str]  # how the original and the candidate are named (--reference, --model)
    tokenizer: Any  # the candidate's (None: ids mode only)

    def parts(self, granularity: str) -> list[Part]:
        """The parts at ``granularity``, in the model's order."""

    def cost(self, parts: Iterable[Part]) -> Cost:
        """What keeping ``parts`` from the original costs."""

    def unchanged(self, part: Part) -> bool:
        """The compression left ``part`` as it was: the same values, stored the same way, on both
        sides (a hybrid taking it computes what its base computes)."""

    def hybrid(self, base: str, taken: Sequence[Part], label: str) -> ContextManager[Backend]:
        """A backend reading ``base`` (ORIGINAL or CANDIDATE) with ``taken`` from the other side,
        named ``label``; the models are as they were again when the context ends."""

    def recipe(self, kept: Sequence[Part]) -> list[str]:
        """How to make the candidate with ``kept`` as the hybrids measured hold them (``Cost.precision``),
        in the tools' own terms (none where there is no such tool)."""


def part_name(granularity: str, tensor: str, where: str | tuple[int, str]) -> str:
    """The part ``tensor`` belongs to at ``granularity``: ``where`` is ``embed``, ``lm_head`` or
    ``final``, or inside a layer ``(N, block)`` with block ``attn``, ``mlp`` or ``norms``."""
    if granularity == "tensor":
        return tensor
    if isinstance(where, str):
        return where
    layer, block = where
    return f"layer.{layer}" if granularity == "layer" else f"layer.{layer}.{block}"


def check_granularity(granularity: str) -> None:
    if granularity not in GRANULARITIES:
        raise LongctxError(f"--granularity {granularity}: expected one of {', '.join(GRANULARITIES)}")


def grouped(named: Iterable[tuple[str, str]]) -> list[Part]:
    """(tensor, its part) pairs as parts, in the order their first tensors come."""
    groups: dict[str, list[str]] = {}
    for tensor, part in named:
        groups.setdefault(part, []).append(tensor)
    return [Part(name, tuple(tensors)) for name, tensors in groups.items()]


def parameters(model: Any) -> dict[str, Any]:
    """Name -> parameter, a tied tensor once (under its first name)."""
    return dict(model.named_parameters())


def _names_of(model: Any, module: Any) -> set[str]:
    """The names under which ``module``'s weight is among the model's parameters (none without one)."""
    weight = getattr(module, "weight", None)
    return {n for n, p in model.named_parameters() if weight is not None and p is weight}


def _where(name: str, embed: set[str], head: set[str]) -> str | tuple[int, str]:
    if name in embed:
        return "embed"
    if name in head:
        return "lm_head"
    found = LAYER.match(name)
    if found is None:
        return "final"
    rest = found["rest"]
    block = "attn" if rest.startswith(ATTENTION) else "mlp" if rest.startswith(MLP) else "norms"
    return int(found["index"]), block


def model_parts(model: Any, granularity: str) -> list[Part]:
    """The parts of ``model`` at ``granularity`` (one of ``GRANULARITIES``), in the model's order."""
    check_granularity(granularity)
    embed = _names_of(model, model.get_input_embeddings())
    head = _names_of(model, model.get_output_embeddings()) - embed  # tied with the embeddings, it is the part embed
    return grouped((name, part_name(granularity, name, _where(name, embed, head))) for name in parameters(model))


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


def _shape(shape: Sequence[int]) -> str:
    return "[" + ", ".join(str(n) for n in shape) + "]"


def check_tensors(original: Mapping[str, Sequence[int]], candidate: Mapping[str, Sequence[int]], original_name: str,
                  candidate_name: str, what: str) -> None:
    """The same tensor names and shapes on both sides (name -> shape); else one line saying
    where they differ. ``what``: the kind of model blame takes, as the line names it."""
    only_original = [n for n in original if n not in candidate]
    only_candidate = [n for n in candidate if n not in original]
    if only_original or only_candidate:
        where, name = ("--reference", only_original[0]) if only_original else ("--model", only_candidate[0])
        count = len(only_original) + len(only_candidate)
        raise LongctxError(f"--reference {original_name} and --model {candidate_name}: their tensor names do not match "
                           f"({count} differ; {name} is only in {where}): blame takes {what} of one architecture")
    for name, shape in original.items():
        if tuple(shape) != tuple(candidate[name]):
            raise LongctxError(f"--reference {original_name} and --model {candidate_name}: {name} is {_shape(shape)} in "
                               f"one and {_shape(candidate[name])} in the other: blame takes {what} of one shape")


def check_compatible(original: Any, candidate: Any, original_name: str, candidate_name: str) -> None:
    """Two checkpoints of one architecture: the same model class and type, the same parameter
    names, the same shapes; else one line saying where they differ."""
    kinds = [(type(m).__name__, getattr(m.config, "model_type", "?")) for m in (original, candidate)]
    if kinds[0] != kinds[1]:
        raise LongctxError(f"--reference {original_name} is a {kinds[0][0]} ({kinds[0][1]}), --model {candidate_name} a "
                           f"{kinds[1][0]} ({kinds[1][1]}): blame takes two checkpoints of one architecture")
    shapes = [{n: tuple(p.shape) for n, p in parameters(m).items()} for m in (original, candidate)]
    check_tensors(*shapes, original_name, candidate_name, "two checkpoints")


def _dtypes(tensors: Iterable[Any]) -> str:
    return ", ".join(sorted({str(t.dtype).removeprefix("torch.") for t in tensors}))


def cost(original: Any, candidate: Any, parts: Iterable[Part]) -> Cost:
    mine, theirs = parameters(original), parameters(candidate)
    names = [n for part in parts for n in part.parameters]
    return Cost(sum(mine[n].numel() for n in names), sum(mine[n].numel() * mine[n].element_size() for n in names),
                sum(theirs[n].numel() * theirs[n].element_size() for n in names),
                f"the candidate's dtype ({_dtypes(theirs[n] for n in names)})" if names else "the candidate's dtype")


def check_not_recast(original: Any, candidate: Any, original_name: str, candidate_name: str) -> None:
    """A candidate that is the original at another dtype and nothing else is one line: a part taken back
    is cast to the candidate's dtype (``Hybrid``), where it reads exactly as the candidate's own, so every
    restore share would be 0; its drift is the rounding of all parts at once."""
    import torch

    mine, theirs = parameters(original), parameters(candidate)
    if all(mine[n].dtype == theirs[n].dtype for n in mine) or not all(
            torch.equal(mine[n].data.to(device=theirs[n].device, dtype=theirs[n].dtype), theirs[n].data) for n in mine):
        return
    ours, other = _dtypes(mine.values()), _dtypes(theirs.values())
    raise LongctxError(f"--model {candidate_name} is --reference {original_name} at another dtype ({other}; the original "
                       f"holds {ours}), nothing else changed: no part restores its drift, the rounding of every part at "
                       f"once (a part taken back is held at the candidate's dtype); load both at one dtype (--dtype), or "
                       f"gate it against a baseline made at {other} (docs/performance.md#dtypes)")


class Hybrid:
    """``target`` with the tensors of some parts taken from ``source``, in place: ``take(parts)``
    points them at the source's tensors (cast to the target's dtype and device where they
    differ: a model runs at one dtype, so a restore hybrid holds the original's values at the
    candidate's dtype), ``reset()`` puts the target's own back."""

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


class StateDictPair:
    """Two loaded transformers models of one architecture (checked) as a ``Pair``: hybrids in place."""

    def __init__(self, original: Any, candidate: Any, tokenizer: Any, names: tuple[str, str] = ("original", "candidate")):
        check_compatible(original, candidate, *names)
        check_not_recast(original, candidate, *names)
        self.models = {ORIGINAL: original, CANDIDATE: candidate}
        self.tokenizer, self.names = tokenizer, names

    def parts(self, granularity: str) -> list[Part]:
        return model_parts(self.models[CANDIDATE], granularity)

    def cost(self, parts: Iterable[Part]) -> Cost:
        return cost(self.models[ORIGINAL], self.models[CANDIDATE], parts)

    def unchanged(self, part: Part) -> bool:
        import torch

        mine, theirs = parameters(self.models[ORIGINAL]), parameters(self.models[CANDIDATE])
        return all(mine[n].dtype == theirs[n].dtype and torch.equal(mine[n].data, theirs[n].data.to(mine[n].device))
                   for n in part.parameters)

    @contextmanager
    def hybrid(self, base: str, taken: Sequence[Part], label: str) -> Iterator[Backend]:
        target = self.models[base]
        made = Hybrid(target, self.models[CANDIDATE if base == ORIGINAL else ORIGINAL])
        made.take(taken)
        try:
            yield TransformersBackend(target, self.tokenizer, name=label)  # a fresh one: the weights changed
        finally:
            made.reset()

    def recipe(self, kept: Sequence[Part]) -> list[str]:
        return []  # no one tool makes a transformers checkpoint with some parts kept: the parts are the recipe
