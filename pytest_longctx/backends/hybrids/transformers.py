"""Hybrids of two transformers checkpoints of one architecture (``StateDictPair``, a ``pair.Pair``):
a hybrid is made in place, the parameters of its parts pointed at the other model's tensors (no
copy; both models stay loaded, and nothing more), and put back afterwards.

A hybrid whose first changed part is decoder layer k computes layers 0..k-1 as its base does, so
``StateDictPair`` can keep each side's residual stream at the layer boundaries, recorded once per
forward call while that side scores the blamed items (``recording``), and run a hybrid on the same
items from the boundary at or below k (``Boundaries``): the layers below it are stand-ins that hand
over the recorded stream, the rest run as always, so every logit is the one a whole forward pass
computes. A hybrid whose first k layers (and embeddings) all hold the other side's tensors, taken or
equal on both sides, computes them as the other side does: it starts from the other side's boundary
at or below k where that is higher (restoring layers 0..k-1 of the candidate starts at the original's
boundary k). That holds where both sides compute in one dtype and no layer is swapped whole.

``load_pair`` loads the two checkpoints as ``--backend hf`` loads a model.
"""
from __future__ import annotations

import copy
import hashlib
import re
from contextlib import contextmanager, nullcontext
from typing import Any, Iterable, Iterator, Sequence

from pytest_longctx.backends.base import Backend, context_compression
from pytest_longctx.backends.hf.backend import TransformersBackend
from pytest_longctx.backends.hf.fingerprint import weights_fingerprint
from pytest_longctx.backends.hf.kv_caches import checkpoint_scales
from pytest_longctx.backends.hf.loaded_quantization import model_parameters, quantization_config, recipe_file, rounds_activations
from pytest_longctx.backends.hybrids.boundaries import Boundaries, reusable
from pytest_longctx.backends.hybrids.first_order import first_order
from pytest_longctx.backends.hybrids.pair import (
    CANDIDATE,
    ORIGINAL,
    Cost,
    Estimates,
    PairRequest,
    Part,
    SequenceReads,
    as_reference,
    check_granularity,
    check_tensors,
    grouped,
    non_finite_kind,
    other_side,
    part_name,
)
from pytest_longctx.backends.hybrids.recipes import config_keeping, recipe_keeping
from pytest_longctx.backends.quantization_words import describe
from pytest_longctx.errors import LongctxError

LAYER = re.compile(r"^(?P<stack>.*\.layers?|.*\.h|.*\.blocks)\.(?P<index>\d+)\.(?P<rest>.+)$")
ATTENTION = ("self_attn.", "attention.", "attn.")
PACKED = (".weight_packed", ".qweight")  # compressed-tensors' packed integers; GPTQ-style packing (auto-round's format)
MLP = ("mlp.", "feed_forward.", "block_sparse_moe.")


def stored(parameter: Any) -> bool:
    """Whether a parameter is held as its library runs it rather than as a plain floating-point tensor:
    bitsandbytes' packed nf4 and int8, torchao's quantized tensor subclasses."""
    import torch

    return not parameter.is_floating_point() or type(parameter.data) is not torch.Tensor


def stored_layers(original: Any, candidate: Any) -> set[str]:
    """The modules (by name) either model holds as stored parameters (``stored``) under the same parameter
    names as the other's: a hybrid swaps such a module whole, as its library runs it."""
    found = set()
    for model in (original, candidate):
        for name, parameter in model_parameters(model).items():
            if stored(parameter) and not name.endswith(PACKED):
                found.add(name.rpartition(".")[0])
    return found


def stored_bytes(tensor: Any) -> int:
    """The bytes a parameter takes as stored: a tensor subclass's inner tensors (torchao), bitsandbytes'
    packed data with its scales (nf4's absmax, int8's SCB), else its elements."""
    inner = getattr(tensor, "__tensor_flatten__", None)
    if inner is not None and type(tensor.data).__name__ not in ("Tensor", "Parameter"):
        return sum(stored_bytes(getattr(tensor, name)) for name in inner()[0])
    scales = [getattr(getattr(tensor, "quant_state", None), "absmax", None), getattr(tensor, "SCB", None)]
    return tensor.numel() * tensor.element_size() + sum(s.numel() * s.element_size() for s in scales if s is not None)


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
    return grouped((name, part_name(granularity, name, _where(name, embed, head))) for name in model_parameters(model))


def check_compatible(original: Any, candidate: Any, original_name: str, candidate_name: str,
                     swapped: set[str] | None = None) -> None:
    """Two checkpoints of one architecture: the same model class and type, the same parameter
    names, the same shapes outside the layers a library runs as it stores them (``stored_layers``),
    no packed weights (compressed-tensors run compressed, under other names); else one line saying
    where they differ."""
    kinds = [(type(m).__name__, getattr(m.config, "model_type", "?")) for m in (original, candidate)]
    if kinds[0] != kinds[1]:
        raise LongctxError(f"--reference {original_name} is a {kinds[0][0]} ({kinds[0][1]}), --model {candidate_name} a "
                           f"{kinds[1][0]} ({kinds[1][1]}): blame takes two checkpoints of one architecture")
    for model, option, name in ((original, "--reference", original_name), (candidate, "--model", candidate_name)):
        packed = next((n for n in [*model_parameters(model), *(b for b, _ in model.named_buffers())] if n.endswith(PACKED)), None)
        if packed:
            said = describe(quantization_config(model), rounds_activations(model))
            raise LongctxError(f"{option} {name} runs its layers packed ({said}; {packed}): blame makes its hybrids of "
                               "layers held under the float model's names (compressed-tensors de-quantized where it has no "
                               "kernel, torchao and bitsandbytes as they store them) and cannot split these into parts; the "
                               "gate's verdict on it stands without blame")
        if checkpoint_scales(model):
            raise LongctxError(f"{option} {name} rounds its keys and values as its kv_cache_scheme says: blame's hybrids "
                               "take weights from one side to the other and cannot make that rounding a part of its own; "
                               "to blame its weights, copy the checkpoint with kv_cache_scheme removed from its config.json "
                               "(the gate's drift of the two then differs by what the KV cache costs)")
    swapped = stored_layers(original, candidate) if swapped is None else swapped
    shapes = [{n: tuple(p.shape) for n, p in model_parameters(m).items() if n.rpartition(".")[0] not in swapped}
              for m in (original, candidate)]
    check_tensors(*shapes, original_name, candidate_name, "two checkpoints")


def non_finite(model: Any) -> dict[str, str]:
    """The parameters of ``model`` holding NaN or inf, each with what it holds (``parts.non_finite_kind``); a
    parameter held as its library runs it (``stored``: packed integers) or not loaded (on the meta device) is
    not read."""
    import torch

    found = {}
    for name, parameter in model_parameters(model).items():
        if stored(parameter) or parameter.device.type == "meta" or bool(torch.isfinite(parameter.data).all()):
            continue
        found[name] = non_finite_kind(bool(torch.isnan(parameter.data).any()), bool(torch.isinf(parameter.data).any()))
    return found


def _dtypes(tensors: Iterable[Any]) -> str:
    return ", ".join(sorted({str(t.dtype).removeprefix("torch.") for t in tensors}))


def cost(original: Any, candidate: Any, parts: Iterable[Part], sizes: Sequence[dict[str, int]]) -> Cost:
    """What ``parts`` hold in each model: parameters, and bytes as ``sizes`` (the original's, the
    candidate's: ``stored_bytes`` of each parameter, taken as loaded) says."""
    mine, theirs = model_parameters(original), model_parameters(candidate)
    names = [n for part in parts for n in part.parameters]
    return Cost(sum(mine[n].numel() for n in names), sum(sizes[0][n] for n in names), sum(sizes[1][n] for n in names),
                f"the candidate's dtype ({_dtypes(theirs[n] for n in names)})" if names else "the candidate's dtype")


def check_not_recast(original: Any, candidate: Any, original_name: str, candidate_name: str, swapped: set[str]) -> None:
    """A candidate that is the original at another dtype and nothing else is one line: a part taken back
    is cast to the candidate's dtype (``Hybrid``), where it reads exactly as the candidate's own, so every
    restore share would be 0; its drift is the rounding of all parts at once."""
    import torch

    mine, theirs = model_parameters(original), model_parameters(candidate)
    if swapped or all(mine[n].dtype == theirs[n].dtype for n in mine) or not all(
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
    candidate's dtype), ``reset()`` puts the target's own back. A compressed-tensors layer may round
    as it runs: its weight to its scheme (loaded de-quantized, the weight is on that grid already) and,
    where the scheme says so (W8A8), its input. Given the weight of a layer that does not
    round, it stops rounding; a plain layer given the weight of one that rounds its input rounds
    its input so too, through compressed-tensors' own function. A layer either side holds as its
    library runs it (``swapped``: bitsandbytes, torchao) is swapped whole, the other model's module
    put in its place (a plain one cast to the target's dtype)."""

    def __init__(self, target: Any, source: Any, swapped: set[str] = frozenset()):
        self.models = target, source
        self.target, self.source = model_parameters(target), model_parameters(source)
        self.swapped = swapped
        self.saved: dict[str, Any] = {}
        self.modules: dict[str, Any] = {}  # a swapped layer's name -> the target's own module
        self.rounding: dict[Any, Any] = {}  # module -> its quantization_enabled before take
        self.hooks: list[Any] = []  # the input rounding of layers given a rounding layer's weight

    def _put(self, name: str, module: Any) -> None:
        parent, _, child = name.rpartition(".")
        setattr(self.models[0].get_submodule(parent), child, module)

    def _swap(self, name: str) -> None:
        if name in self.modules:
            return
        mine, theirs = (model.get_submodule(name) for model in self.models)
        self.modules[name] = mine
        dtype = self.models[0].dtype  # the floating-point dtype the target computes in
        if not any(stored(p) for p in theirs.parameters()) and next(theirs.parameters()).dtype != dtype:
            theirs = copy.deepcopy(theirs).to(dtype)
        self._put(name, theirs)

    def take(self, parts: Iterable[Part]) -> None:
        for part in parts:
            for name in part.parameters:
                if name.rpartition(".")[0] in self.swapped:
                    self._swap(name.rpartition(".")[0])
                    continue
                mine, theirs = self.target[name], self.source[name]
                self.saved.setdefault(name, mine.data)
                mine.data = theirs.data.to(device=mine.device, dtype=self.saved[name].dtype)
                module, _, kind = name.rpartition(".")
                here, there = (model.get_submodule(module) for model in self.models)
                if kind != "weight" or hasattr(here, "quantization_scheme") == hasattr(there, "quantization_scheme"):
                    continue
                if hasattr(here, "quantization_scheme"):
                    self.rounding.setdefault(here, getattr(here, "quantization_enabled", True))
                    here.quantization_enabled = False
                elif getattr(there.quantization_scheme, "input_activations", None) is not None:
                    self.hooks.append(here.register_forward_pre_hook(_rounds_input_as(there)))

    def reset(self) -> None:
        for name, data in self.saved.items():
            self.target[name].data = data
        for name, module in self.modules.items():
            self._put(name, module)
        self.modules.clear()
        for module, enabled in self.rounding.items():
            module.quantization_enabled = enabled
        for hook in self.hooks:
            hook.remove()
        self.saved.clear()
        self.rounding.clear()
        self.hooks.clear()


def _rounds_input_as(layer: Any) -> Any:
    """A forward pre-hook rounding a layer's input as compressed-tensors rounds ``layer``'s (its scheme's
    input activations)."""
    from compressed_tensors.quantization.lifecycle.forward import forward_quantize

    def hook(module: Any, args: tuple) -> tuple:
        return (forward_quantize(layer, args[0], "input", layer.quantization_scheme.input_activations), *args[1:])

    return hook


def first_layer(model: Any, parts: Iterable[Part]) -> int:
    """The decoder layer of ``model`` the first of ``parts``' tensors is in: 0 for the embeddings, the
    number of layers for what comes after them (the final norm, the LM head)."""
    embed = _names_of(model, model.get_input_embeddings())
    head = _names_of(model, model.get_output_embeddings()) - embed
    layers = len(model.get_decoder().layers)
    found = [_where(name, embed, head) for part in parts for name in part.parameters]
    return min((0 if w == "embed" else layers if isinstance(w, str) else w[0] for w in found), default=layers)


class StateDictPair:
    """Two loaded transformers models of one architecture (checked) as a ``Pair``: hybrids in place."""

    def __init__(self, original: Any, candidate: Any, tokenizer: Any, names: tuple[str, str] = ("original", "candidate"),
                 fingerprints: tuple[str, str] | None = None, tokenizers: tuple[Any, Any] | None = None):
        """``fingerprints``: each model's weights fingerprint as loaded, where known (else computed here, before
        any hybrid reads): a hybrid's is made of them, never from its state_dict (``hybrid``). ``tokenizers``: the
        original's and the candidate's own, as loaded (None: ``tokenizer`` is both's)."""
        self.swapped = stored_layers(original, candidate)
        check_compatible(original, candidate, *names, swapped=self.swapped)
        check_not_recast(original, candidate, *names, self.swapped)
        self.models = {ORIGINAL: original, CANDIDATE: candidate}
        found = fingerprints or (weights_fingerprint(original), weights_fingerprint(candidate))
        self.fingerprints = {ORIGINAL: found[0], CANDIDATE: found[1]}
        # bytes as loaded, before a forward pass (bitsandbytes may repack its scales on the first one)
        self.sizes = [{n: stored_bytes(p) for n, p in model_parameters(model).items()} for model in (original, candidate)]
        self.recipe_tool = "transformers" if self.swapped else "llm-compressor"
        self.tokenizer, self.names = tokenizer, names
        self.tokenizers = tokenizers or (tokenizer, tokenizer)
        self.boundaries: dict[str, Boundaries] = {}  # each side's, once recorded
        self.differing: set[str] | None = None  # the tensors that differ between the sides (``changed``), once compared

    def can_reuse(self) -> bool:
        return all(reusable(model) for model in self.models.values())

    @contextmanager
    def recording(self, base: str, every: int = 1) -> Iterator[None]:
        """Keep ``base``'s residual stream at every ``every``-th layer boundary while it scores (``Boundaries``)."""
        found = Boundaries(self.models[base], every)
        with found.recording():
            yield
        self.boundaries[base] = found

    def parts(self, granularity: str) -> list[Part]:
        return model_parts(self.models[CANDIDATE], granularity)

    def cost(self, parts: Iterable[Part]) -> Cost:
        return cost(self.models[ORIGINAL], self.models[CANDIDATE], parts, self.sizes)

    def unchanged(self, part: Part) -> bool:
        return not self.changed().intersection(part.parameters)

    def non_finite(self, side: str) -> dict[str, str]:
        return non_finite(self.models[side])

    def restore_estimates(self, sequences: Sequence[SequenceReads], parts: Sequence[Part]) -> Estimates:
        """First-order estimates of each part's restore (backends/hybrids/first_order.py), through the
        candidate de-quantized; the models are not changed."""
        return first_order(self.models[ORIGINAL], self.models[CANDIDATE], sequences, parts)

    def changed(self) -> set[str]:
        """The candidate's tensors that are not the original's: other values or dtype, or in a layer swapped whole;
        compared once, outside any hybrid (a hybrid points tensors at the other side's while it runs)."""
        if self.differing is None:
            import torch

            mine, theirs = model_parameters(self.models[ORIGINAL]), model_parameters(self.models[CANDIDATE])
            self.differing = {n for n in theirs if n.rpartition(".")[0] in self.swapped or mine[n].dtype != theirs[n].dtype
                              or not torch.equal(mine[n].data, theirs[n].data.to(mine[n].device))}
        return self.differing

    @contextmanager
    def hybrid(self, base: str, taken: Sequence[Part], label: str, reuse: bool = False) -> Iterator[Backend]:
        target = self.models[base]
        made = Hybrid(target, self.models[other_side(base)], self.swapped)
        recorded, start = self._boundary(base, taken) if reuse and taken else (None, 0)
        made.take(taken)
        try:
            with recorded.starting(start, target) if recorded else nullcontext():
                # a fresh one (the weights changed), fingerprinted by what it is made of
                yield TransformersBackend(target, self.tokenizer, name=label, fingerprint=self.fingerprint(base, taken))
        finally:
            made.reset()

    def start(self, base: str, taken: Sequence[Part]) -> int:
        return self._boundary(base, taken)[1] if taken else 0

    def _boundary(self, base: str, taken: Sequence[Part]) -> tuple[Boundaries | None, int]:
        """The recorded boundaries a hybrid starts from and the layer: ``base``'s below its first layer taken, or,
        where higher, the other side's below the first layer it does not compute as that side does."""
        recorded = self.boundaries.get(base)
        start = recorded.start(first_layer(self.models[base], taken)) if recorded else 0
        theirs = self.boundaries.get(other_side(base))
        held = theirs.start(self.held_as_other(base, taken)) if theirs is not None else 0
        return (theirs, held) if held > start else (recorded, start)

    def held_as_other(self, base: str, taken: Sequence[Part]) -> int:
        """How many leading decoder layers ``base`` holding ``taken`` computes exactly as the other side does: up
        to the first layer (0: the embeddings) with a tensor not taken that differs between the sides; 0
        where the sides compute in different dtypes or a layer is swapped whole (its module runs otherwise)."""
        target, other = self.models[base], self.models[other_side(base)]
        if self.swapped or target.dtype != other.dtype:
            return 0
        # equal weights compute otherwise where only one side's layer rounds its input (compressed-tensors)
        rounding = {n for n in model_parameters(target) if len({hasattr(m.get_submodule(n.rpartition(".")[0]),
                                                                                  "quantization_scheme") for m in (target, other)}) > 1}
        names = {n for part in taken for n in part.parameters}
        return first_layer(target, [Part(n, (n,)) for n in (self.changed() | rounding) - names])

    def fingerprint(self, base: str, taken: Sequence[Part]) -> str:
        """The weights fingerprint of ``base`` holding ``taken`` from the other side: ``base``'s as loaded when
        nothing is taken, else a digest of both sides' and the taken tensors' names."""
        mine = self.fingerprints[base]
        if not taken:
            return mine
        other = self.fingerprints[other_side(base)]
        names = sorted(n for part in taken for n in part.parameters)
        return hashlib.sha256("|".join([mine, other, *names]).encode()).hexdigest()[:len(mine)]

    def reuse_figures(self) -> dict[str, int]:
        """What the recorded boundaries saved: the token-layers a whole scoring of the items runs, those the
        hybrids started from a boundary skipped, and the bytes the boundaries hold."""
        found = list(self.boundaries.values())
        whole = max((sum(call[max(b.kept)].shape[1] for call in b.calls) * len(b.layers) for b in found), default=0)
        return {"scoring": whole, "skipped": sum(b.skipped for b in found), "bytes": sum(b.bytes() for b in found)}


    def recipe(self, kept: Sequence[Part]) -> list[str]:
        """The tool's own way to make the candidate with the kept parts' linear layers left in float: for a
        candidate llm-compressor made (its ``recipe.yaml`` beside the weights), that recipe with them in each
        quantizing modifier's ``ignore`` list (``recipes.recipe_keeping``); for one transformers quantized
        on load (bitsandbytes, torchao), its quantization config with them in the modules it skips
        (``recipes.config_keeping``); and as a comment the kept tensors outside them that the candidate
        changed, which neither keeps. For any other candidate none: no one tool makes it with some parts kept."""
        import torch

        original, candidate = self.models[ORIGINAL], self.models[CANDIDATE]
        linear = {name for name, module in original.named_modules() if isinstance(module, torch.nn.Linear)}
        modules = list(dict.fromkeys(n.rpartition(".")[0] for p in kept for n in p.parameters if n.rpartition(".")[0] in linear))
        where = str(getattr(original.config, "_name_or_path", "") or self.names[0])  # a folder or hub id the tool takes
        if not modules:
            return []
        if self.swapped:
            left = [n for n, m in candidate.named_modules() if n in linear and not any(stored(p) for p in m.parameters())]
            lines = config_keeping(quantization_config(candidate), left, modules, where,
                                   str(candidate.dtype).removeprefix("torch."), str(candidate.device))
        else:
            made_by = recipe_file(candidate)
            lines = recipe_keeping(made_by, modules, where) if made_by is not None else []
        outside = [n for p in kept for n in p.parameters if n.rpartition(".")[0] not in linear
                   and not self.unchanged(Part(n, (n,)))]
        if lines and outside:
            comments = next(i for i, line in enumerate(lines) if not line.startswith("#"))
            lines.insert(comments, f"# not kept by it: {', '.join(outside)}, which the candidate changed outside its linear layers")
        return lines


def load_pair(request: PairRequest) -> StateDictPair:
    """The original and the candidate, two transformers checkpoints each loaded as ``request.load`` loads a
    model (an alias resolves as for --model), as a ``StateDictPair``."""
    with as_reference():
        original = request.load(request.reference)
    candidate = request.load(request.model)
    assert isinstance(original, TransformersBackend) and isinstance(candidate, TransformersBackend), "--backend hf loads these"
    compression = context_compression(candidate)
    if compression:
        raise LongctxError(f"--backend-option kv-cache: blame compares the parts of two models' weights, and "
                           f"{compression} changes how a model keeps its context, not its weights; leave it out")
    return StateDictPair(original.model, candidate.model, candidate.tokenizer or original.tokenizer, (request.reference, request.model),
                         (original.weights_fingerprint(), candidate.weights_fingerprint()),
                         (original.tokenizer, candidate.tokenizer))
