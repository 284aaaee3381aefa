"""A llama.cpp context: one sequence's KV cache and its decode batch, made for a number of
tokens; decode calls with output flags at the read positions alone, and the cuts of its
cache (``llama_memory_seq_rm``) or the copies of its state by which a session goes back."""
from __future__ import annotations

import ctypes
import time
import weakref
from typing import Any, Protocol

import numpy as np

from pytest_longctx.backends.llama_cpp.library import LOG, said
from pytest_longctx.backends.llama_cpp.settings import FLASH_ATTN, Settings
from pytest_longctx.errors import LongctxError


class LoadedModel(Protocol):
    """What a context runs: the backend's model as llama.cpp loaded it (``LlamaCppBackend``)."""

    llama: Any  # the llama_cpp module
    model: Any  # the llama_model handle
    settings: Settings
    n_vocab: int
    eval_seconds: float  # wall time spent inside llama_decode, added to by every context


class Context:
    """A llama.cpp context of ``size`` tokens (one sequence) and its decode batch; freed with it."""

    def __init__(self, backend: LoadedModel, size: int):
        llama, settings = backend.llama, backend.settings
        self.llama, self.backend, self.size = llama, backend, size
        params = llama.llama_context_default_params()
        params.n_ctx = size
        params.n_batch = settings.batch_size
        params.n_ubatch = settings.ubatch_size
        params.n_seq_max = 1
        params.n_threads = params.n_threads_batch = settings.threads
        params.type_k = getattr(llama, f"GGML_TYPE_{settings.cache_type_k.upper()}")
        params.type_v = getattr(llama, f"GGML_TYPE_{settings.cache_type_v.upper()}")
        params.flash_attn_type = FLASH_ATTN["on" if settings.flash else "off"]
        params.swa_full = True  # sliding-window layers keep every token, so the cache can be cut back anywhere
        params.embeddings = False
        LOG.clear()
        self.ctx = llama.llama_init_from_model(backend.model, params)
        if not self.ctx:
            raise LongctxError(f"llama.cpp cannot make a context of {size} tokens with KV cache {settings.kv_cache}, "
                               f"flash attention {'on' if settings.flash else 'off'} ({said()}); check the --backend-option values")
        self.memory = llama.llama_get_memory(self.ctx)
        self.batch = llama.llama_batch_init(settings.batch_size, 0, 1)
        capacity = settings.batch_size
        self.token = np.ctypeslib.as_array(self.batch.token, shape=(capacity,))  # [batch] int32
        self.pos = np.ctypeslib.as_array(self.batch.pos, shape=(capacity,))  # [batch] int32
        self.output = np.ctypeslib.as_array(self.batch.logits, shape=(capacity,))  # [batch] int8: logits wanted
        np.ctypeslib.as_array(self.batch.n_seq_id, shape=(capacity,))[:] = 1
        for j in range(capacity):
            self.batch.seq_id[j][0] = 0
        self._free = weakref.finalize(self, _free_context, llama, self.ctx, self.batch)

    def close(self) -> None:
        self._free()

    def decode(self, ids: np.ndarray, first: int, outputs: np.ndarray) -> None:
        """Run ``ids`` at positions ``first, first + 1, …``; logits at batch rows ``outputs`` only."""
        n = len(ids)
        self.token[:n] = ids
        self.pos[:n] = np.arange(first, first + n)
        self.output[:n] = 0
        self.output[outputs] = 1
        self.batch.n_tokens = n
        LOG.clear()
        started = time.perf_counter()
        status = self.llama.llama_decode(self.ctx, self.batch)
        self.backend.eval_seconds += time.perf_counter() - started
        if status != 0:
            raise LongctxError(f"llama.cpp could not run {n} tokens at position {first} (llama_decode returned {status}: "
                               f"{said()})")

    def logits(self, row: int) -> np.ndarray:
        """The logits after batch row ``row`` of the last decode (a copy)."""
        pointer = self.llama.llama_get_logits_ith(self.ctx, row)
        return np.ctypeslib.as_array(pointer, shape=(self.backend.n_vocab,)).copy()  # [vocab] float32

    def forget(self, length: int) -> None:
        """Drop every cached token from position ``length`` on."""
        if not self.llama.llama_memory_seq_rm(self.memory, 0, length, -1):
            raise LongctxError(f"llama.cpp cannot cut this model's cache back to {length} tokens")

    def state(self) -> bytes:
        size = self.llama.llama_state_seq_get_size(self.ctx, 0)
        buffer = (ctypes.c_uint8 * size)()
        written = self.llama.llama_state_seq_get_data(self.ctx, buffer, size, 0)
        return bytes(buffer[:written])

    def set_state(self, state: bytes) -> None:
        self.forget(0)
        buffer = (ctypes.c_uint8 * len(state)).from_buffer_copy(state)
        if self.llama.llama_state_seq_set_data(self.ctx, buffer, len(state), 0) != len(state):
            raise LongctxError(f"llama.cpp could not restore a saved sequence state into a context of {self.size} tokens")


def _free_context(llama: Any, ctx: Any, batch: Any) -> None:
    llama.llama_batch_free(batch)
    llama.llama_free(ctx)
