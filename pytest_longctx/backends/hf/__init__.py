"""The transformers backend: any causal LM that runs in transformers (folder, hub id, GGUF).

Lean by construction: a sequence is run only up to its last read position, in chunks
that carry the KV cache (activation memory is bounded by the chunk), and the LM head
with its log-softmax is applied only at read positions (``logits_to_keep``), never to
a ``[seq, vocab]`` matrix.

Its parts: ``library`` (torch, imported on first use), ``devices`` (``--device``, ``--dtype``,
where a model runs), ``settings`` (the ``--backend-option`` values as ``from_pretrained``
keywords), ``checkpoint`` (what a model reference names and its files say before loading),
``stored_tensors`` (what its weights files hold, from their headers), ``config_checks`` (its stored
``quantization_config`` checked), ``quantization_libraries`` (the library that runs it, its
version), ``refusals`` (a checkpoint that did not load as it was made, in one line), ``loading``
(``load_pretrained``, a packaged model's folder), ``loaded_quantization`` (the quantization as loaded, in
words), ``fingerprint`` (config and weights digests), ``presses`` (kvpress's presses),
``kv_caches`` (quantized KV caches and a checkpoint's own KV cache scheme), ``read_session`` (the
``ReadSession``), ``backend`` (``TransformersBackend``); here, the ``factory`` that ``--backend hf``
names.
"""
from __future__ import annotations

from typing import Mapping

from pytest_longctx.backends.hf.backend import TransformersBackend
from pytest_longctx.backends.hf.devices import resolve_device
from pytest_longctx.backends.hf.fingerprint import weights_fingerprint
from pytest_longctx.backends.hf.kv_caches import name_of
from pytest_longctx.backends.hf.loading import load_pretrained, packaged_folder
from pytest_longctx.backends.hf.presses import make_press
from pytest_longctx.backends.hf.settings import loading_options
from pytest_longctx.errors import LongctxError
from pytest_longctx.options.backend_keys import TRANSFORMERS

# what the tests, the benchmarks, the alias table and users' conftest.py import from here
__all__ = ["TransformersBackend", "factory", "load_pretrained", "loading_options", "packaged_folder", "resolve_device",
           "weights_fingerprint"]


def factory(model: str, dtype: str = "auto", device: str = "auto", trust_remote_code: bool = False,
            options: Mapping[str, str] | None = None, name: str = "") -> TransformersBackend:
    """The backend ``hf`` names (``--longctx-backend hf``): ``model`` is a hub id, a folder or a .gguf file
    (``load_backend`` resolves an alias first), ``name`` what reports call it (default: ``model``); ``options``:
    the ``--backend-option`` settings (``loading_options``), ``kv-press``, the kvpress press its
    reads compress each context with (``--kv-press``, ``presses``), and ``kv-cache``, the
    quantized KV cache each context is read into (``kv_caches``)."""
    settings = dict(options or {})
    TRANSFORMERS.parse(settings)  # every key and value checked, a blank one refused, before anything is read
    press_spec, cache_spec = settings.pop("kv-press", None), settings.pop("kv-cache", None)
    if press_spec and cache_spec:
        raise LongctxError(f"--kv-press {press_spec} and --backend-option kv-cache={cache_spec}: a press compresses a plain "
                           "cache; give one of them")
    # before loading: a bad name costs no load
    press = make_press(press_spec) if press_spec else None
    if cache_spec:
        name_of(cache_spec)
    backend = TransformersBackend.load(model, dtype=dtype, device=device, name=name or model,
                                       trust_remote_code=trust_remote_code, loading=loading_options(settings))
    if press is not None:
        backend.use_press(press, press_spec)
    if cache_spec:
        backend.use_kv_cache(cache_spec)
    return backend

