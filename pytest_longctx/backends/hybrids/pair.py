"""What ``longctx blame`` asks of a backend (gate/blame/), whatever its models are: the parts of
two models of one architecture, and the hybrids between them, which restore (the candidate with
some parts taken back from the original) or damage (the original with some parts taken from the
candidate).

A part is a set of tensor names: a decoder layer (``layer.N``), within it its attention
(``layer.N.attn``: q/k/v/o and their norms), its MLP (``layer.N.mlp``) and the rest of the
layer (``layer.N.norms``: the norms around them), the input embeddings (``embed``), the LM
head (``lm_head``; tied with the embeddings, it is the one part ``embed``) and what lies
outside the layers (``final``: the final norm); at ``tensor`` granularity every tensor is
its own part. The parts of a granularity cover every tensor exactly once, so a hybrid with
every part taken from the other model computes what the other model computes. Both backends
name parts so (``part_name``), whatever their tensors are called, so their reports read the
same.

``Pair`` is what blame asks of a backend: the parts, their cost, a backend reading a hybrid, and
the fix set as the compression tool's recipe; a pair that can also start hybrids from a side's
recorded residual stream ``RecordsBoundaries``, one that can estimate each part's restore
``EstimatesRestores``. transformers.py makes hybrids of two transformers checkpoints in place,
gguf.py writes GGUF files for llama.cpp; each backend that makes hybrids loads its pair from a
``PairRequest`` (the package's ``load_models``).
"""
from __future__ import annotations

import re
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, ContextManager, Iterable, Iterator, Mapping, Protocol, Sequence, TypeGuard, runtime_checkable

from pytest_longctx.backends.base import Backend
from pytest_longctx.errors import LongctxError
from pytest_longctx.options.table import GRANULARITIES

ORIGINAL, CANDIDATE = "original", "candidate"  # the two sides of a pair, as Pair.hybrid names its base
MODEL_FLAG = re.compile(r"--model\b")


def other_side(base: str) -> str:
    """The side of a pair a hybrid of ``base`` takes its parts from."""
    return CANDIDATE if base == ORIGINAL else ORIGINAL


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
    tokenizers: tuple[Any, Any]  # the original's and the candidate's own, to compare (None: none, or not loaded)

    def parts(self, granularity: str) -> list[Part]:
        """The parts at ``granularity``, in the model's order."""

    def cost(self, parts: Iterable[Part]) -> Cost:
        """What keeping ``parts`` from the original costs."""

    def unchanged(self, part: Part) -> bool:
        """The compression left ``part`` as it was: the same values, stored the same way, on both
        sides (a hybrid taking it computes what its base computes)."""

    def non_finite(self, side: str) -> dict[str, str]:
        """The tensors ``side`` (ORIGINAL or CANDIDATE) holds with values that are not finite, each with what
        it holds: ``NaN``, ``inf`` or ``NaN and inf``."""

    def hybrid(self, base: str, taken: Sequence[Part], label: str, reuse: bool = False) -> ContextManager[Backend]:
        """A backend reading ``base`` (ORIGINAL or CANDIDATE) with ``taken`` from the other side,
        named ``label``; the models are as they were again when the context ends. ``reuse``: it reads
        the items ``base`` was recorded on, in the same calls, and may start from what was recorded."""

    def start(self, base: str, taken: Sequence[Part]) -> int:
        """The decoder layer that hybrid, with ``reuse``, starts computing at (0: the token ids)."""

    recipe_tool: str  # whose terms ``recipe`` is in: "llama.cpp" (a llama-quantize command), "llm-compressor" (a recipe),
    # "transformers" (the Python that quantizes on load with a quantization config)

    def recipe(self, kept: Sequence[Part]) -> list[str]:
        """How to make the candidate with ``kept`` as the hybrids measured hold them (``Cost.precision``),
        in the tools' own terms (none where there is no such tool)."""


@runtime_checkable
class RecordsBoundaries(Protocol):
    """A pair whose hybrids can start from a side's residual stream recorded at its layer boundaries,
    instead of from the token ids (``Pair.hybrid``'s ``reuse``)."""

    def can_reuse(self) -> bool:
        """Both models' layers can be recorded and started from (backends/hybrids/boundaries.py)."""

    def recording(self, base: str, every: int = 1) -> ContextManager[None]:
        """Keep ``base``'s residual stream at every ``every``-th layer boundary while it scores."""

    def reuse_figures(self) -> dict[str, int]:
        """What the recorded boundaries saved: ``scoring``, the token-layers a whole scoring of the items
        runs; ``skipped``, those the hybrids that started from a boundary did not run; ``bytes``, what the
        boundaries hold."""


def can_record(pair: Pair) -> TypeGuard[RecordsBoundaries]:
    """Whether ``pair``'s hybrids can start from its sides' recorded layer boundaries (``RecordsBoundaries``)."""
    return isinstance(pair, RecordsBoundaries) and pair.can_reuse()


@dataclass(frozen=True)
class PairRequest:
    """What blame asks a backend for: the original and the candidate as named, with the run's settings."""

    reference: str  # the original (--reference)
    model: str  # the candidate (--model)
    options: Sequence[str]  # --backend-option
    reference_options: Sequence[str]  # --reference-option: the original's where it differs (llama.cpp)
    work_dir: str | None  # where hybrids written to disk go (--work-dir; None: a temporary folder)
    load: Callable[[str], Backend]  # one model loaded as --backend loads it, with --backend-option, --dtype, --device


@dataclass(frozen=True)
class WeightedRead:
    """A read whose drift counts in blame's objective: the prediction of the token at ``position`` (logits at
    ``position - 1``) against the baseline's most likely ``ids`` there and their ``logprobs``, with the
    ``weight`` its KL_K has in the objective (the gate's: a blamed row's far drift, as a share of the
    candidate's)."""

    position: int
    ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    weight: float


@dataclass(frozen=True)
class SequenceReads:
    """One token sequence and the weighted reads in it."""

    ids: tuple[int, ...]
    reads: tuple[WeightedRead, ...]


@dataclass(frozen=True)
class Estimates:
    """First-order estimates of what restoring each part alone does to blame's objective (``by_part``: the
    estimated mean restore share), or why there are none (``why_not``)."""

    by_part: dict[str, float]
    why_not: str = ""


@runtime_checkable
class EstimatesRestores(Protocol):
    """A pair that can estimate, from one forward and backward pass of the candidate, what restoring each
    part alone would do: the gradient of the objective (the weighted KL_K of ``sequences``' reads) with
    respect to the candidate's weights, times the original's weights minus the candidate's, summed over the
    part's tensors. Costs about three scorings of the reads, for every part at once."""

    def restore_estimates(self, sequences: Sequence[SequenceReads], parts: Sequence[Part]) -> Estimates:
        """The estimate of every part of ``parts``, or why none can be made (a tensor with no gradient)."""


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


@contextmanager
def as_reference() -> Iterator[None]:
    """The backends' loaders name the model they load ``--model``: loading the original, their errors name
    ``--reference``, the flag that gave it."""
    try:
        yield
    except LongctxError as exc:
        raise LongctxError(MODEL_FLAG.sub("--reference", str(exc))) from None


def non_finite_kind(nan: bool, inf: bool) -> str:
    """What a tensor holds that is not finite, as ``Pair.non_finite`` says it ("" where it is finite)."""
    return " and ".join(kind for kind, held in (("NaN", nan), ("inf", inf)) if held)


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
