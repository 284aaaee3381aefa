"""First-order estimates of what restoring each part of a transformers candidate alone would do to
blame's objective (backends/hybrids/pair.py's ``EstimatesRestores``), from one forward and backward
pass of the de-quantized candidate: the gradient ``g`` of the objective with respect to the
candidate's weights, and, for each part, ``g . (original - candidate)`` summed over its tensors (the
first-order Taylor term that pruning and mixed-precision tools use for layer sensitivity). The
objective is the weighted KL_K of the reads (metrics/drift.py's ``kl_k``, here differentiable), so
a negative term means that restoring the part takes drift away: the estimated restore share is its
negation."""
from __future__ import annotations

from typing import Any, Sequence

from pytest_longctx.backends.hf.loaded_quantization import model_parameters
from pytest_longctx.backends.hybrids.pair import Estimates, Part, SequenceReads
from pytest_longctx.numbers import REST_FLOOR


def float_weights(model: Any, names: Sequence[str]) -> tuple[dict[str, Any], str]:
    """The model's tensors ``names`` as plain tensors of the values it computes with (a torchao tensor
    de-quantized), detached; and why not where one cannot be (an integer or packed tensor with no
    de-quantization here)."""
    import torch

    found, params = {}, model_parameters(model)
    for name in names:
        if name not in params:
            return {}, f"it holds no tensor {name}"
        tensor = params[name].detach()
        if type(tensor) is not torch.Tensor:  # a quantized tensor subclass: its values as it computes with them
            if not callable(getattr(tensor, "dequantize", None)):
                return {}, f"{name} is a {type(tensor).__name__}, which has no de-quantization here"
            tensor = tensor.dequantize()
        if not tensor.is_floating_point():
            return {}, f"{name} is stored as {tensor.dtype}, not as the values the model computes with"
        found[name] = tensor
    return found, ""


def read_kl(logprobs: Any, ids: Sequence[int], base: Sequence[float]) -> Any:
    """KL_K of one read as metrics/drift.py's ``kl_k`` computes it, differentiable in ``logprobs`` (the
    candidate's log-softmax over the vocabulary at the read)."""
    import torch

    kept = [(i, lp) for i, lp in zip(ids, base) if lp != float("-inf") and 0 <= i < logprobs.shape[-1]]
    if not kept:
        return logprobs.new_zeros(())
    index = torch.tensor([i for i, _ in kept], device=logprobs.device)
    base_lp = torch.tensor([lp for _, lp in kept], dtype=logprobs.dtype, device=logprobs.device)  # [k]
    model_lp = logprobs[index]  # [k]
    p = base_lp.exp()
    total = (p * (base_lp - model_lp)).sum()
    p_rest = (1.0 - p.sum()).clamp(min=0.0)
    q_rest = (1.0 - model_lp.exp().sum()).clamp(min=REST_FLOOR)
    if float(p_rest) > 0.0:
        total = total + p_rest * (p_rest.log() - q_rest.log())
    return total


def first_order(original: Any, candidate: Any, sequences: Sequence[SequenceReads], parts: Sequence[Part]) -> Estimates:
    """Each part's estimated restore share (see the module docstring); one forward and backward pass per
    sequence, through the candidate's own modules with the parts' weights replaced by copies that keep a
    gradient and every other tensor detached (``torch.func.functional_call``: the models are not changed,
    and no gradient lands on them). Where the candidate's modules cannot run on plain weights (a
    bitsandbytes layer reads its own packed type), there is no estimate, and the error says why."""
    import torch
    from torch.func import functional_call

    names = [name for part in parts for name in part.parameters]
    mine, why_not = float_weights(candidate, names)
    if why_not:
        return Estimates({}, f"no gradient through the candidate: {why_not}")
    leaves = {name: tensor.clone().requires_grad_(True) for name, tensor in mine.items()}
    given = {name: tensor.detach() for name, tensor in model_parameters(candidate).items()} | leaves
    device = next(iter(leaves.values())).device
    try:
        with torch.enable_grad():
            for sequence in sequences:
                keep = torch.tensor([read.position - 1 for read in sequence.reads], device=device)  # [reads]
                ids = torch.tensor([list(sequence.ids)], device=device)  # [1, tokens]
                out = functional_call(candidate, given, args=(), kwargs={"input_ids": ids, "logits_to_keep": keep})
                logprobs = torch.log_softmax(out.logits[0].float(), dim=-1)  # [reads, vocab]
                loss = sum(read.weight * read_kl(logprobs[n], read.ids, read.logprobs) for n, read in enumerate(sequence.reads))
                loss.backward()
    except (RuntimeError, TypeError, ValueError, AttributeError) as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        return Estimates({}, f"the candidate's modules do not run on its weights de-quantized ({first})")
    estimates = {}
    for part in parts:
        theirs, why_not = float_weights(original, part.parameters)
        if why_not:
            return Estimates({}, f"no gradient through the original: {why_not}")
        term = sum(float((leaves[n].grad.float() * (theirs[n].to(mine[n].device).float() - mine[n].float())).sum())
                   for n in part.parameters if leaves[n].grad is not None)
        estimates[part.name] = -term  # restoring takes the objective down by -term: that is the share it restores
    return Estimates(estimates)
