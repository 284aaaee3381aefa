"""The ``--backend-option KEY=VALUE`` settings of the two vLLM backends, parsed and checked.

In process, a key is one of vLLM's own engine arguments as its command line spells it
(``tensor-parallel-size=2``, ``kv-cache-dtype=fp8``, ``quantization=fp8``, ``max-model-len``,
``enforce-eager=true``, ``block-size``): whatever ``vllm serve`` takes, ``LLM`` takes too; and
``prompt-rows=true`` (``PROMPT_ROWS``), how the gate reads, not vLLM's.
Against a server, the keys are the client's own (``SERVER_OPTIONS``)."""
from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass
from typing import Any, Mapping

from pytest_longctx.errors import LongctxError
from pytest_longctx.options.backend_keys import VLLM, VLLM_SERVER
from pytest_longctx.parse import scalar

# what the gate needs of the engine, unless the user says otherwise: the prefix cache (reads
# reuse their prefix) and room for a read's log-probabilities (a baseline's top 16, a
# candidate's 16 ids plus its own)
ENGINE_DEFAULTS = {"enable_prefix_caching": True, "max_logprobs": 128}
# engine arguments that are the gate's to set, or that would change what a read returns
FIXED = {"model": "--model", "tokenizer_mode": None, "skip_tokenizer_init": None, "logprobs_mode": None}
# the one in-process key that is the gate's: each piece's reads from one request's prompt log-probabilities
PROMPT_ROWS = "prompt_rows"


def engine_options(options: Mapping[str, str], dtype: str) -> dict[str, Any]:
    """The keyword arguments of vLLM's ``LLM`` for these options and ``--dtype``."""
    from vllm.engine.arg_utils import EngineArgs

    known = {field.name for field in dataclasses.fields(EngineArgs)}
    arguments: dict[str, Any] = dict(ENGINE_DEFAULTS)
    own, engine = VLLM.parse(options)  # the gate's own keys (prompt-rows), then vLLM's engine arguments
    arguments.update(own)
    for key, raw in engine.items():
        name = key.replace("-", "_")
        if name in FIXED:
            raise LongctxError(f"--backend-option {key}: the gate sets it itself" +
                               (f" (give the model with {FIXED[name]})" if FIXED[name] else ""))
        if name not in known:
            close = difflib.get_close_matches(name, known, n=3)
            raise LongctxError(f"--backend-option {key}={raw}: not one of vLLM's engine arguments"
                               + (f" (did you mean {', '.join(c.replace('_', '-') for c in close)}?)" if close else
                                  "; they are spelt as vllm serve's flags, without the dashes: tensor-parallel-size=2"))
        arguments[name] = scalar(raw)
    if dtype != "auto":
        if "dtype" in options and options["dtype"] != dtype:
            raise LongctxError(f"--dtype {dtype} and --backend-option dtype={options['dtype']}: give one")
        arguments["dtype"] = dtype
    if arguments.get("enable_prefix_caching") is False:
        raise LongctxError("--backend-option enable-prefix-caching=false: every read would compute its whole prompt again; "
                           "the vLLM backends read through the prefix cache")
    return arguments


@dataclass(frozen=True)
class ServerOptions:
    """How the client talks to a vLLM server (``--backend vllm-server``): the keys of
    options/backend_keys.py's ``VLLM_SERVER``, with its defaults."""

    base_url: str = ""  # the server's OpenAI-compatible root, http://host:port/v1, or several, comma-separated
    served_model: str = ""  # the model's name on the server; "": the one it serves
    tokenizer: str = ""  # a local folder or cached hub id of the model's tokenizer, for the text mode
    timeout: float = VLLM_SERVER.default("timeout")  # seconds a request may take
    retries: int = VLLM_SERVER.default("retries")  # further tries of a read whose request failed on the way (idempotent)
    concurrency: int = VLLM_SERVER.default("concurrency")  # requests in flight at once, on each server
    max_logprobs: int = VLLM_SERVER.default("max-logprobs")  # the server's --max-logprobs: the ids a request may ask for
    api_key_env: str = VLLM_SERVER.default("api-key-env")  # the environment variable that holds the API key, if any
    reuse_scores: str = ""  # the user's name for what the server serves: answers kept under it are reused; "": none are


def server_options(options: Mapping[str, str]) -> ServerOptions:
    if "api-key" in options:
        raise LongctxError("--backend-option api-key: an API key is never taken from the command line (it would land in "
                           "shell histories and CI logs); put it in the environment variable VLLM_API_KEY, or name "
                           "another with api-key-env=NAME")
    values, _ = VLLM_SERVER.parse(options)
    return ServerOptions(**values)
