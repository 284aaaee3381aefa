"""How llama.cpp runs the file: the ``--backend-option KEY=VALUE`` settings, with KEY as
llama.cpp's own command line names it (``cache-type-k=q8_0``), parsed and checked."""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from typing import Any, Callable, Mapping, Sequence

from pytest_longctx.backends import option_values
from pytest_longctx.errors import LongctxError

# The KV cache types llama.cpp accepts (its --cache-type-k / --cache-type-v), by ggml type name.
KV_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")
FLASH_ATTN = {"off": 0, "on": 1}  # llama_flash_attn_type
FULL_PRECISION = ("f32", "f16", "bf16")  # KV cache types llama.cpp attends over without flash attention


def default_threads() -> int:
    """Every core this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


@dataclass(frozen=True)
class Settings:
    """How llama.cpp runs the file: ``--backend-option KEY=VALUE`` with KEY as llama.cpp's own
    command line names it (``cache-type-k=q8_0``)."""

    cache_type_k: str = "f16"
    cache_type_v: str = "f16"
    # auto: off, unless the V cache is quantized (llama.cpp quantizes it only with flash attention).
    # With flash attention, llama.cpp's CPU numbers depend on how the tokens are split into decode
    # calls (by up to 0.24 nats on SmolLM2 Q4_1: benchmarks/split_invariance.py), so a read would depend on the prefix
    # tree it was run in; without it they are the same bits however the sequence is split.
    flash_attn: str = "auto"
    threads: int = 0  # 0: every core this process may run on
    batch_size: int = 2048  # tokens per decode call (llama.cpp's n_batch)
    ubatch_size: int = 512  # tokens per physical step inside a call (n_ubatch)
    gpu_layers: int = 0

    @property
    def flash(self) -> bool:
        """Whether llama.cpp runs flash attention (``flash_attn`` resolved)."""
        return self.flash_attn == "on" or (self.flash_attn == "auto" and self.cache_type_v not in FULL_PRECISION)

    @property
    def kv_cache(self) -> str:
        return f"k={self.cache_type_k} v={self.cache_type_v}"

    def numbers_key(self, library: Mapping[str, str]) -> str:
        """A digest of what changes the numbers: the KV cache types, the attention kernel, the
        physical batch, the layers on a GPU and llama.cpp's version (not the thread count,
        which splits the same sums across cores; the logical batch is the cache key's
        chunk_size)."""
        changing = {k: v for k, v in asdict(self).items() if k not in ("threads", "batch_size", "flash_attn")}
        changing["flash_attn"] = self.flash
        return hashlib.sha256(json.dumps({**changing, "versions": dict(library)}, sort_keys=True).encode()).hexdigest()[:24]


DEFAULTS = Settings()  # no --backend-option given


def _choice(choices: Sequence[str]) -> Callable[[str], str]:
    def parse(value: str) -> str:
        if value.lower() not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}")
        return value.lower()

    return parse


def _count(least: int) -> Callable[[str], int]:
    def parse(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            raise ValueError("expected a whole number") from None
        if number < least:
            raise ValueError(f"must be at least {least}")
        return number

    return parse


OPTIONS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "cache-type-k": ("cache_type_k", _choice(KV_TYPES)),
    "cache-type-v": ("cache_type_v", _choice(KV_TYPES)),
    "flash-attn": ("flash_attn", _choice(("auto", *FLASH_ATTN))),
    "threads": ("threads", _count(1)),
    "batch-size": ("batch_size", _count(1)),
    "ubatch-size": ("ubatch_size", _count(1)),
    "gpu-layers": ("gpu_layers", _count(0)),
}


def parse_settings(options: Mapping[str, str]) -> Settings:
    """``--backend-option`` values as Settings: an unknown key or a bad value is one line."""
    values = option_values(options, OPTIONS, "llama.cpp")
    if "batch_size" in values and "ubatch_size" not in values:  # the default physical step never exceeds the call
        values["ubatch_size"] = min(Settings.ubatch_size, values["batch_size"])
    settings = Settings(**values)
    if settings.ubatch_size > settings.batch_size:
        raise LongctxError(f"--backend-option ubatch-size={settings.ubatch_size}: larger than batch-size={settings.batch_size}")
    if settings.cache_type_v not in FULL_PRECISION and settings.flash_attn == "off":
        raise LongctxError(f"--backend-option cache-type-v={settings.cache_type_v}: llama.cpp quantizes the V cache only "
                           "with flash attention; use flash-attn=auto or on")
    return settings
