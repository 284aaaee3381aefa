"""LLMLingua's ``PromptCompressor`` (``pip install "pytest-longctx[llmlingua]"``), named
``llmlingua``.

The session's non-system messages are LLMLingua's contexts, one per message, compressed
with ``compress_prompt(context, rate=...)``; LLMLingua returns one text, which comes back
as one user message after the system messages (so it merges the session: the gate's
content-token savings and structural changes show what that earns). ``rank_method=
"longllmlingua"`` ranks the contexts by the probe (LongLLMLingua) instead of by their
perplexity alone. Knobs: ``rate``, ``model``, ``rank_method``, ``iterative_size``,
``device``.

Four things differ from LLMLingua's own defaults:

* ``model``: LLMLingua loads a causal language model with transformers; its default
  (NousResearch/Llama-2-7b-hf) comes from the hub. A model alias (``smollm2-135m``) or a
  local model folder works offline.
* tiktoken: LLMLingua fetches tiktoken's gpt-3.5-turbo encoding when it is built, only to
  report token counts; here it is given the gate's tokenizer instead, so nothing is
  fetched and its counts are in the gate's tokens.
* ``trust_remote_code``: LLMLingua runs a model's own Python code (``auto_map`` in its
  config) unless told not to; here it is told not to, and such a model is refused.
* ``iterative_size``: with transformers 5 its key/value cache cannot be cut (it expects
  the old tuples), so the default here compresses a session in one window of up to
  100,000 tokens instead of LLMLingua's 200.

Its outputs are cached between runs (it is slow: a forward pass per window).
"""
from __future__ import annotations

from typing import Any
from unittest import mock

from pytest_longctx.backends.aliases import resolve_model
from pytest_longctx.compress.conventions import conventions

DEFAULT_MODEL = "NousResearch/Llama-2-7b-hf"  # LLMLingua's own default


# (model, device) -> its PromptCompressor, or why it cannot be loaded (not tried again: a
# hub that cannot be reached takes half a minute of retries to say so)
LOADED: dict[tuple[str, str], Any] = {}


def _load(model: str, device: str) -> Any:
    import tiktoken
    from llmlingua import PromptCompressor

    reference = resolve_model(model)
    try:
        with mock.patch.object(tiktoken, "encoding_for_model", lambda name: None):  # set per call: the gate's encoding
            # LLMLingua's own default is trust_remote_code=True: a model folder's Python would run unasked
            return PromptCompressor(model_name=reference, device_map=device, model_config={"trust_remote_code": False})
    except ValueError as exc:
        if "trust_remote_code" not in str(exc):
            raise
        return RuntimeError(f"model {model!r} needs its own Python code (auto_map in its config), which the llmlingua "
                            "adapter does not run; give a model that transformers loads without it")
    except OSError as exc:  # transformers' way of saying the model cannot be had
        return RuntimeError(f"model {model!r} cannot be loaded ({str(exc).splitlines()[0]}); offline, give a local "
                            "model folder or a model alias as the knob model, e.g. model='smollm2-135m'")


def _compressor(model: str, device: str) -> Any:
    if (model, device) not in LOADED:
        LOADED[model, device] = _load(model, device)
    found = LOADED[model, device]
    if isinstance(found, Exception):
        raise found
    return found


@conventions(requires="llmlingua", extra="llmlingua", cache=("llmlingua", "transformers", "torch"),
             ranges={"rate": (0.0, 1.0), "iterative_size": (1, None)})
def compress(messages: list[dict], probe: str, *, rate: float = 0.5, model: str = DEFAULT_MODEL, rank_method: str = "llmlingua",
             iterative_size: int = 100_000, device: str = "cpu", encoding: Any) -> list[dict]:
    if rank_method not in ("llmlingua", "longllmlingua"):
        raise ValueError(f"rank_method={rank_method!r}: expected 'llmlingua' or 'longllmlingua'")
    lingua = _compressor(model, device)
    lingua.oai_tokenizer = encoding
    system = [m for m in messages if m["role"] == "system"]
    contexts = [m["content"] for m in messages if m["role"] != "system"]
    query_aware = rank_method == "longllmlingua"
    result = lingua.compress_prompt(contexts, rate=rate, iterative_size=iterative_size, rank_method=rank_method,
                                    question=probe if query_aware else "", concate_question=False)
    return system + [{"role": "user", "content": result["compressed_prompt"], "name": None}]
