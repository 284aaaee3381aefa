"""The llama.cpp backend: a ``.gguf`` file as llama.cpp runs it (its quantized matrix
products, its KV cache types, its attention), through llama-cpp-python
(``pip install "pytest-longctx[llama]"``).

Lean as the transformers backend is: a sequence runs only up to its last read, in decode
calls of at most ``batch-size`` tokens whose output flags are set at the read positions
alone (llama.cpp computes no logits anywhere else), the log-softmax runs on those rows
only, and the context is sized to the longest sequence read, not to the model's window.
Shared prefixes run once: a session cuts its KV cache back to a branch point
(``llama_memory_seq_rm``) or, for models whose state cannot be cut (recurrent layers),
copies the sequence's state there and restores it.

Text mode tokenizes with the GGUF's own tokenizer, as llama.cpp does (``GGUFTokenizer``).

Its parts: ``settings`` (the ``--backend-option`` values), ``library`` (llama-cpp-python, its
log and versions), ``context`` (a llama.cpp context and its cache cuts), ``read_session`` (the
``ReadSession``), ``tokenizer`` (the GGUF's tokenizer), ``backend`` (``LlamaCppBackend``);
here, the ``factory`` that ``--backend llama.cpp`` names.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Mapping

from pytest_longctx.backends.llama_cpp.backend import LlamaCppBackend
from pytest_longctx.backends.llama_cpp.settings import parse_settings
from pytest_longctx.errors import LongctxError


def factory(model: str, dtype: str = "auto", device: str = "auto", options: Mapping[str, str] | None = None,
            name: str = "") -> LlamaCppBackend:
    """The backend ``llama.cpp`` names (``--longctx-backend llama.cpp``): ``model`` is a .gguf file
    (``load_backend`` resolves an alias first), ``name`` what reports call it (default: ``model``);
    ``options``: the ``--backend-option`` settings."""
    if dtype != "auto":
        raise LongctxError(f"--dtype {dtype}: the llama.cpp backend computes in the .gguf file's own types; leave --dtype auto "
                           "(the KV cache's types: --backend-option cache-type-k=… cache-type-v=…)")
    settings = parse_settings(options or {})
    if device not in ("auto", "cpu", "cuda"):
        raise LongctxError(f"--device {device}: the llama.cpp backend takes auto, cpu or cuda "
                           "(how many layers run on the GPU: --backend-option gpu-layers=N)")
    if device == "cuda" and "gpu-layers" not in (options or {}):
        settings = replace(settings, gpu_layers=1 << 20)  # every layer
    if device == "cpu" and settings.gpu_layers:
        raise LongctxError(f"--device cpu with --backend-option gpu-layers={settings.gpu_layers}: choose one")
    return LlamaCppBackend.load(model, settings, name=name or model)
