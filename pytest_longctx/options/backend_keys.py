"""The ``--backend-option KEY=VALUE`` keys each built-in backend takes (``--longctx-backend-option``
in the plugin), declared once: the backends parse their settings with these tables, and each built-in
backend's record (backends/builtin.py) names its own, which the front ends check a run's settings with
before any model is loaded and docs/options.md lists. ``backend_options`` splits the settings."""
from __future__ import annotations

from typing import Sequence

from pytest_longctx.options.keys import Key, KeyTable, split_settings
from pytest_longctx.options.values import BOOLEAN, COUNT, FOLDER, POSITIVE, choice, text, whole

OPTION = "--backend-option"

# accelerate's big-model loading strategies, by name
DEVICE_MAPS = ("auto", "balanced", "balanced_low_0", "sequential")
# the quantized KV caches the transformers backend reads contexts into (backends/hf/kv_caches.py)
KV_CACHES = ("fp8",)

TRANSFORMERS = KeyTable(OPTION, "the transformers backend", (
    Key("device-map", choice(*DEVICE_MAPS), "spread the model over the visible GPUs, then the CPU (accelerate)"),
    Key("max-memory", text("DEVICE:SIZE,..."), "with device-map: what each device may hold, e.g. 0:10GiB,1:20GiB,cpu:30GiB"),
    Key("offload-folder", FOLDER, "with device-map: where weights that fit on no device go"),
    Key("kv-cache", choice(*KV_CACHES, metavar="fp8"), "read each context into transformers' quantized KV cache "
        "(fp8: float8 e4m3 keys and values, one scale per layer)"),
    Key("kv-press", text("NAME[:KEY=VALUE,...]"), "a kvpress press, as --kv-press takes it"),
))

# The KV cache types llama.cpp accepts (its --cache-type-k / --cache-type-v), by ggml type name.
LLAMA_KV_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")
FLASH_ATTN_MODES = ("auto", "off", "on")

LLAMA_CPP = KeyTable(OPTION, "the llama.cpp backend", (
    Key("cache-type-k", choice(*LLAMA_KV_TYPES, metavar="TYPE"), "the K cache's type", "f16"),
    Key("cache-type-v", choice(*LLAMA_KV_TYPES, metavar="TYPE"), "the V cache's type (quantized only with flash attention)",
        "f16"),
    Key("flash-attn", choice(*FLASH_ATTN_MODES), "flash attention; auto: on only where the V cache is quantized", "auto"),
    Key("threads", COUNT, "CPU threads (default: every core this process may run on)"),
    Key("batch-size", COUNT, "tokens per decode call (n_batch)", 2048),
    Key("ubatch-size", COUNT, "tokens per physical step inside a call (n_ubatch), at most batch-size", 512),
    Key("gpu-layers", whole(0), "layers run on a GPU", 0),
))

# vLLM in process: vLLM's own engine arguments, checked against vLLM's EngineArgs where it is installed
VLLM = KeyTable(OPTION, "the vllm backend", (
    Key("prompt-rows", BOOLEAN, "read each piece of the prefix tree from one request's prompt log-probabilities", False),
), others="vLLM's engine arguments, spelt as vllm serve's flags without the dashes (tensor-parallel-size=2, "
          "kv-cache-dtype=fp8, quantization=fp8, max-model-len=N, enforce-eager=true, block-size=N)")

VLLM_SERVER = KeyTable(OPTION, "the vllm-server backend", (
    Key("base-url", text("URL[,URL...]"), "the server's OpenAI-compatible root, http://host:port/v1, or several "
        "replicas' comma-separated, with the served model's name as the model"),
    Key("served-model", text("NAME"), "the model's name on the server (default: the one it serves)"),
    Key("tokenizer", text("FOLDER_OR_ID"), "a local folder or cached hub id of the model's tokenizer, for the text mode"),
    Key("timeout", POSITIVE, "seconds a request may take", 600.0),
    Key("retries", whole(0), "further tries of a read whose request failed on the way", 2),
    Key("concurrency", COUNT, "requests in flight at once, on each server", 16),
    Key("max-logprobs", COUNT, "the server's --max-logprobs: the ids a request may ask for", 20),
    Key("api-key-env", text("NAME"), "the environment variable that holds the API key, if the server wants one",
        "VLLM_API_KEY"),
    Key("reuse-scores", text("NAME"), "the user's name for what the server serves (my-model-fp8@rev3): answers kept "
        "under it are reused"),
))


def backend_options(pairs: Sequence[str]) -> dict[str, str]:
    """``--backend-option KEY=VALUE`` (repeatable) as a dict; each key once, neither blank. The
    backend's factory checks the keys and values it takes."""
    return split_settings(OPTION, pairs, "cache-type-k=q8_0")
