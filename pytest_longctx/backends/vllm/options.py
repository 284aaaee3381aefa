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
from typing import Any, Callable, Mapping

from pytest_longctx.backends import option_values
from pytest_longctx.errors import LongctxError
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
    for key, raw in options.items():
        name = key.replace("-", "_")
        if name in FIXED:
            raise LongctxError(f"--backend-option {key}: the gate sets it itself" +
                               (f" (give the model with {FIXED[name]})" if FIXED[name] else ""))
        if name == PROMPT_ROWS:
            if not isinstance(scalar(raw), bool):
                raise LongctxError(f"--backend-option {key}={raw}: expected true or false")
        elif name not in known:
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
    """How the client talks to a vLLM server (``--backend vllm-server``)."""

    base_url: str = ""  # the server's OpenAI-compatible root, http://host:port/v1
    served_model: str = ""  # the model's name on the server; "": the one it serves
    tokenizer: str = ""  # a local folder or cached hub id of the model's tokenizer, for the text mode
    timeout: float = 600.0  # seconds a request may take
    retries: int = 2  # further tries of a read whose request failed on the way (a read is idempotent)
    concurrency: int = 16  # requests in flight at once
    max_logprobs: int = 20  # the server's --max-logprobs: the ids a request may ask for
    api_key_env: str = "VLLM_API_KEY"  # the environment variable that holds the API key, if the server wants one
    reuse_scores: str = ""  # the user's name for what the server serves: answers kept under it are reused; "": none are


def _number(kind: type) -> Callable[[str], Any]:
    def parse(value: str) -> Any:
        try:
            return kind(value)
        except ValueError:
            raise ValueError(f"expected a {'whole ' if kind is int else ''}number") from None

    return parse


SERVER_OPTIONS = {"base-url": ("base_url", str), "served-model": ("served_model", str), "tokenizer": ("tokenizer", str),
                  "timeout": ("timeout", _number(float)), "retries": ("retries", _number(int)),
                  "concurrency": ("concurrency", _number(int)), "max-logprobs": ("max_logprobs", _number(int)),
                  "api-key-env": ("api_key_env", str), "reuse-scores": ("reuse_scores", str)}


def server_options(options: Mapping[str, str]) -> ServerOptions:
    if "api-key" in options:
        raise LongctxError("--backend-option api-key: an API key is never taken from the command line (it would land in "
                           "shell histories and CI logs); put it in the environment variable VLLM_API_KEY, or name "
                           "another with api-key-env=NAME")
    values = option_values(options, SERVER_OPTIONS, "vllm-server")
    settings = ServerOptions(**values)
    for field in ("timeout", "concurrency", "max_logprobs"):
        if getattr(settings, field) <= 0:
            raise LongctxError(f"--backend-option {field.replace('_', '-')}: must be above 0")
    if settings.retries < 0:
        raise LongctxError("--backend-option retries: must be 0 or more")
    if "reuse-scores" in options and not settings.reuse_scores:
        raise LongctxError("--backend-option reuse-scores: give the deployment a name that changes whenever what it serves "
                           "changes (reuse-scores=my-model-fp8@rev3); leave the option out to reuse no answers")
    return settings
