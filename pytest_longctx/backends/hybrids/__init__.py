"""The backend half of ``longctx blame`` (docs/blame.md): parts of two models and the hybrids
between them. pair.py: what blame asks of a backend (``Pair``) and how parts are named;
transformers.py: hybrids of two transformers checkpoints, made in place; gguf.py: hybrids of two
GGUF files, written for llama.cpp; here, ``load_models``: the pair of the backend ``--backend``
names, by the loader its record declares (backends/builtin.py). The search and the shares are the
gate's (gate/blame/)."""
from __future__ import annotations

from typing import Sequence

from pytest_longctx.backends import load_backend
from pytest_longctx.backends.base import Backend
from pytest_longctx.backends.builtin import BY_NAME, PAIRED
from pytest_longctx.backends.hybrids.pair import Pair, PairRequest
from pytest_longctx.errors import LongctxError


def load_models(backend: str, reference: str, model: str, dtype: str = "auto", device: str = "auto",
                options: Sequence[str] = (), reference_options: Sequence[str] = (), trust_remote_code: bool = False,
                work_dir: str | None = None) -> Pair:
    """The original (``reference``) and the candidate (``model``) as ``backend`` loads them: ``hf``, both
    transformers checkpoints with ``dtype``, ``device`` and the ``--backend-option``s ``options`` (an alias
    resolves as for --model); ``llama.cpp``, both GGUF files with their own types (``reference_options`` over
    ``options`` for the original, hybrids written in ``work_dir``)."""
    found = BY_NAME.get(backend)
    if found is None or found.pair is None:
        raise LongctxError(f"--backend {backend}: blame makes hybrids with {' or '.join(PAIRED)}")

    def load(name: str) -> Backend:
        return load_backend(name, backend, dtype, device, options, trust_remote_code)[0]

    return found.pair.load()(PairRequest(reference, model, options, reference_options, work_dir, load))
