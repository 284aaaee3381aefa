"""The vLLM backends: the model as vLLM serves it (its kernels, its quantized formats, its
KV cache dtypes, tensor and pipeline parallelism), in this process (``--backend vllm``) or
through a server the user runs (``--backend vllm-server``). docs/backends.md#vllm says how
each is installed, the CPU build included.

Both read through one request builder (``queries``: a read is a one-token greedy generation
whose prompt ends at the read, so that vLLM's prefix cache serves what was computed before)
and one session (``read_session``) that sends the engine's prefix tree in order; in process, a
piece's reads are first one request for its prompt log-probabilities. ``options``
parses the ``--backend-option`` values, ``traffic`` counts requests and cached tokens,
``in_process`` holds ``VllmBackend`` and ``server`` ``VllmServerBackend``, which reaches each
server it is given (``urls``) as an ``endpoint`` and reads through all of them as one ``fleet``;
here, the two factories the backend names stand for.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Mapping

from pytest_longctx.backends.vllm.in_process import VllmBackend
from pytest_longctx.backends.vllm.options import engine_options, server_options
from pytest_longctx.backends.vllm.server import VllmServerBackend
from pytest_longctx.backends.vllm.urls import is_server_url, server_urls
from pytest_longctx.errors import LongctxError, without_credentials


def factory(model: str, dtype: str = "auto", device: str = "auto", trust_remote_code: bool = False,
            options: Mapping[str, str] | None = None, name: str = "") -> VllmBackend:
    """``--backend vllm``: ``model`` is a hub id or folder as vLLM loads it (``load_backend`` resolves an
    alias first), ``name`` what reports call it (default: ``model``); ``options``:
    vLLM's engine arguments (``tensor-parallel-size=2``, ``kv-cache-dtype=fp8`` …)."""
    try:
        import vllm  # noqa: F401
    except ImportError:
        raise LongctxError("--backend vllm needs vLLM: pip install 'pytest-longctx[vllm]' (on a machine without a GPU, its CPU "
                           "build: docs/backends.md#vllm)") from None
    if device not in ("auto", "cuda", "cpu"):
        raise LongctxError(f"--device {device}: vLLM places the model itself; leave --device auto "
                           "(more devices: --backend-option tensor-parallel-size=N)")
    return VllmBackend.load(model, engine_options(options or {}, dtype), name=name or model,
                            trust_remote_code=trust_remote_code)


def server_factory(model: str, dtype: str = "auto", device: str = "auto",
                   options: Mapping[str, str] | None = None) -> VllmServerBackend:
    """``--backend vllm-server``: ``model`` is the server's URL (``http://host:8000/v1``), or
    the served model's name with ``--backend-option base-url=…``; either URL may be several,
    comma-separated: replicas of one deployment, read as one (fleet.py)."""
    if dtype != "auto" or device != "auto":
        raise LongctxError("--dtype and --device do not apply to a vLLM server: it runs the model as it was started "
                           "(vllm serve --dtype …)")
    settings = server_options(options or {})
    shown = without_credentials(model)
    if settings.base_url:
        server_urls(settings.base_url, "--backend-option base-url=", settings.api_key_env)
    if is_server_url(model):
        server_urls(model, "--model ", settings.api_key_env)
        if settings.base_url and settings.base_url != model:
            raise LongctxError(f"--model {shown} and --backend-option base-url={without_credentials(settings.base_url)}: give "
                               "the server once")
        settings = replace(settings, base_url=model)
    elif not settings.base_url:
        raise LongctxError(f"--model {shown}: the vllm-server backend needs the server: --model http://HOST:PORT/v1, or "
                           "--backend-option base-url=http://HOST:PORT/v1 with the served model's name as --model")
    else:
        settings = replace(settings, served_model=settings.served_model or model)
    try:
        import httpx  # noqa: F401
    except ImportError:
        raise LongctxError("--backend vllm-server needs httpx: pip install 'pytest-longctx[vllm-server]'") from None
    return VllmServerBackend(settings, name=model)
