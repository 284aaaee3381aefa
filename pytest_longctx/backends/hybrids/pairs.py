"""The pair ``longctx blame`` compares, as each backend it makes hybrids for loads it: two
transformers checkpoints (``transformers.StateDictPair``) or two GGUF files (``gguf.GGUFPair``)."""
from __future__ import annotations

from typing import Sequence

from pytest_longctx.backends import load_backend
from pytest_longctx.backends.base import context_compression
from pytest_longctx.backends.hybrids.gguf import load_pair
from pytest_longctx.backends.hybrids.pair import Pair, as_reference
from pytest_longctx.backends.hybrids.transformers import StateDictPair
from pytest_longctx.errors import LongctxError


def load_models(backend: str, reference: str, model: str, dtype: str = "auto", device: str = "auto",
                options: Sequence[str] = (), reference_options: Sequence[str] = (), trust_remote_code: bool = False,
                work_dir: str | None = None) -> Pair:
    """The original (``reference``) and the candidate (``model``) as ``backend`` loads them: ``hf``, both
    transformers checkpoints with ``dtype``, ``device`` and the ``--backend-option``s ``options`` (an alias
    resolves as for --model); ``llama.cpp``, both GGUF files with their own types (``load_pair``:
    ``reference_options`` over ``options`` for the original, hybrids written in ``work_dir``)."""
    if backend == "llama.cpp":
        return load_pair(reference, model, options, reference_options, work_dir)
    with as_reference():
        original = load_backend(reference, "hf", dtype, device, options, trust_remote_code)[0]
    candidate = load_backend(model, "hf", dtype, device, options, trust_remote_code)[0]
    compression = context_compression(candidate)
    if compression:
        raise LongctxError(f"--backend-option kv-cache: blame compares the parts of two models' weights, and "
                           f"{compression} changes how a model keeps its context, not its weights; leave it out")
    return StateDictPair(original.model, candidate.model, candidate.tokenizer or original.tokenizer, (reference, model),
                         (original.weights_fingerprint(), candidate.weights_fingerprint()),
                         (original.tokenizer, candidate.tokenizer))
