"""How llama.cpp runs the file: the ``--backend-option KEY=VALUE`` settings, with KEY as
llama.cpp's own command line names it (``cache-type-k=q8_0``), parsed and checked."""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from typing import Mapping

from pytest_longctx.errors import LongctxError
from pytest_longctx.options.backend_keys import LLAMA_CPP

FLASH_ATTN = {"off": 0, "on": 1}  # llama_flash_attn_type
FULL_PRECISION = ("f32", "f16", "bf16")  # KV cache types llama.cpp attends over without flash attention


def default_threads() -> int:
    """Every core this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


@dataclass(frozen=True)
class Settings:
    """How llama.cpp runs the file: ``--backend-option KEY=VALUE`` with KEY as llama.cpp's own
    command line names it (``cache-type-k=q8_0``)."""

    cache_type_k: str = LLAMA_CPP.default("cache-type-k")
    cache_type_v: str = LLAMA_CPP.default("cache-type-v")
    # auto: off, unless the V cache is quantized (llama.cpp quantizes it only with flash attention).
    # With flash attention, llama.cpp's CPU numbers depend on how the tokens are split into decode
    # calls (by up to 0.24 nats on SmolLM2 Q4_1: benchmarks/split_invariance.py), so a read would depend on the prefix
    # tree it was run in; without it they are the same bits however the sequence is split.
    flash_attn: str = LLAMA_CPP.default("flash-attn")
    threads: int = 0  # 0: every core this process may run on
    batch_size: int = LLAMA_CPP.default("batch-size")  # tokens per decode call (llama.cpp's n_batch)
    ubatch_size: int = LLAMA_CPP.default("ubatch-size")  # tokens per physical step inside a call (n_ubatch)
    gpu_layers: int = LLAMA_CPP.default("gpu-layers")

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


def parse_settings(options: Mapping[str, str]) -> Settings:
    """``--backend-option`` values (options/backend_keys.py) as Settings: an unknown key or a bad
    value is one line."""
    values, _ = LLAMA_CPP.parse(options)
    if "batch_size" in values and "ubatch_size" not in values:  # the default physical step never exceeds the call
        values["ubatch_size"] = min(Settings.ubatch_size, values["batch_size"])
    settings = Settings(**values)
    if settings.ubatch_size > settings.batch_size:
        raise LongctxError(f"--backend-option ubatch-size={settings.ubatch_size}: larger than batch-size={settings.batch_size}")
    if settings.cache_type_v not in FULL_PRECISION and settings.flash_attn == "off":
        raise LongctxError(f"--backend-option cache-type-v={settings.cache_type_v}: llama.cpp quantizes the V cache only "
                           "with flash attention; use flash-attn=auto or on")
    return settings
