"""``TransformersReadSession``: one sequence read piece by piece through a transformers model, its KV
cache saved and rewound at the engine's branch points; a context compressed first by a kvpress press
or read into a quantized KV cache, the questions after it read through that cache."""
from __future__ import annotations

import contextlib
import copy
import inspect
from typing import Any, Callable, NoReturn, Protocol, Sequence

import numpy as np

from pytest_longctx.backends.base import Prediction, ReadResult, advance_in_calls
from pytest_longctx.backends.hf.library import import_torch
from pytest_longctx.backends.hf.presses import rerotates
from pytest_longctx.errors import LongctxError, first_line


class SessionModel(Protocol):
    """What a session reads through: the transformers backend's model, where its token ids go, its
    forward calls' length and cache keyword, and what compresses each context."""

    model: Any
    device: Any
    chunk_size: int
    cache_kwarg: str
    press: Any  # a kvpress press, or None
    press_name: str | None
    context_cache: Callable[[], Any] | None  # makes an empty quantized KV cache, or None


def cache_kwarg(module: Any) -> str:
    """The keyword a model's forward takes its KV cache by: ``cache`` in the transformers that deprecate
    ``past_key_values`` (every read under an fp8 cache warned of it), ``past_key_values`` before."""
    return "cache" if "cache" in inspect.signature(module.forward).parameters else "past_key_values"


class TransformersReadSession:
    """A ``ReadSession``: the model's state after the tokens read so far (its KV cache)."""

    def __init__(self, backend: SessionModel):
        self.backend = backend
        self.cache: Any = None
        self.length = 0
        # after ``compress``: the position the next token takes (the tokens read so far, or for a press
        # that re-rotates its kept keys, the compressed length), and each layer's cache length then
        self.next_position: int | None = None
        self.compressed: tuple[int, ...] | None = None

    def compress(self, ids: Sequence[int]) -> str | None:
        """Prefill ``ids``, a context, at the start of the session with the backend's press active:
        its hooks compress every layer's keys and values once the context has been read (kvpress's
        pipeline: the context in one call without the LM head, on a fresh DynamicCache). Later
        ``advance`` calls read on through the compressed cache, uncompressed, at the tokens' true
        positions. With a quantized KV cache instead (``use_kv_cache``): the context read into a
        fresh one in one call, which quantizes it for every later token. Returns why the context was read
        uncompressed instead (kvpress refused it: too short for the press), None when it was compressed."""
        torch = import_torch()
        from transformers import DynamicCache

        backend = self.backend
        if self.cache is not None or self.length:
            raise LongctxError("a press compresses a context at the start of a session only")
        input_ids = torch.tensor(np.asarray(ids, dtype=np.int64), device=backend.device)[None]  # [1, context]
        cache = DynamicCache() if backend.press is not None else backend.context_cache()
        refused: str | None = None
        try:
            with torch.inference_mode(), backend.press(backend.model) if backend.press is not None else contextlib.nullcontext():
                backend.model.model(input_ids=input_ids, use_cache=True, **{cache_kwarg(backend.model.model): cache})
        except AssertionError as exc:  # kvpress asserts a context is long enough for the press (SnapKV's window, the sinks)
            if backend.press is None:
                raise
            refused = first_line(exc) or type(exc).__name__
            cache = DynamicCache()  # read exact, from the start: the press may have compressed some layers already
            with torch.inference_mode():
                backend.model.model(input_ids=input_ids, use_cache=True, **{cache_kwarg(backend.model.model): cache})
        except (ValueError, RuntimeError) as exc:
            _press_failed(backend, exc, f"compress a context of {len(ids)} tokens")
        self.cache = cache
        self.length = len(ids)
        if backend.press is not None:  # a quantized cache keeps every position: the plain path, copied at branch points
            self.next_position = cache.get_seq_length() if rerotates(backend.press) else self.length
            self.compressed = tuple(int(layer.keys.shape[-2]) for layer in cache.layers)
        return refused

    def advance(self, ids: Sequence[int], positions: Sequence[int], tokens: Sequence[Sequence[int]], top_k: int = 0) -> ReadResult:
        """Run ``ids`` after what was read so far; ``positions`` index into ``ids``; ``top_k``: also
        the ``top_k`` most likely next tokens at each position."""
        torch = import_torch()
        input_ids = torch.tensor(np.asarray(ids, dtype=np.int64), device=self.backend.device)[None]  # [1, n]

        def forward(start: int, stop: int, rows: list[int], asked: list[Sequence[int]], top_k: int) -> list[Prediction]:
            backend = self.backend
            keep = torch.as_tensor(rows, dtype=torch.long, device=backend.device)  # [k]
            extra = {}
            if self.next_position is not None:  # through a compressed cache: the true positions, not the cache's length
                first = self.next_position + start
                extra["position_ids"] = torch.arange(first, first + stop - start, device=backend.device)[None]  # [1, n]
            out = backend.model(input_ids=input_ids[:, start:stop], use_cache=True, logits_to_keep=keep,
                                **{backend.cache_kwarg: self.cache}, **extra)
            self.cache = out.cache if hasattr(out, "cache") else out.past_key_values
            logp = torch.log_softmax(out.logits[0].float(), dim=-1)  # [k, vocab]
            best = logp.argmax(dim=-1).tolist()
            if top_k:
                values, indices = logp.topk(min(top_k, logp.shape[-1]), dim=-1)  # [k, top_k], most likely first
            return [(int(best[row]), logp[row, torch.as_tensor(list(wanted), dtype=torch.long, device=logp.device)].tolist(),
                     (indices[row].tolist(), values[row].tolist()) if top_k else None)
                    for row, wanted in enumerate(asked)]

        try:
            with torch.inference_mode():
                result = advance_in_calls(len(ids), positions, tokens, top_k, self.backend.chunk_size, forward)
        except (ValueError, RuntimeError) as exc:
            if self.compressed is None:
                raise
            _press_failed(self.backend, exc, f"read {len(ids)} tokens through the context it compressed")
        self.length += len(ids)
        if self.next_position is not None:
            self.next_position += len(ids)
        return result

    def snapshot(self) -> tuple[int, Any] | tuple[int, Any, int, tuple[int, ...]]:
        """The state here. Plain KV caches are rewound by cutting them back to this length (a
        compressed one: each layer to its own length here); any other (recurrent states of linear
        attention, sliding windows) is copied."""
        if self.compressed is not None:
            lengths = tuple(int(layer.keys.shape[-2]) for layer in self.cache.layers)
            return self.length, None, int(self.next_position or 0), lengths
        if self.cache is None or _plain_kv(self.cache):
            return self.length, None
        return self.length, copy.deepcopy(self.cache)

    def restore(self, snapshot: tuple[Any, ...], last: bool = False) -> None:
        """Back to a snapshot; ``last`` hands over a copied state instead of copying it again."""
        if len(snapshot) == 4:
            self.length, _, self.next_position, lengths = snapshot
            for layer, kept in zip(self.cache.layers, lengths):
                layer.keys = layer.keys[..., :kept, :]  # [batch, heads, kept, head_dim]
                layer.values = layer.values[..., :kept, :]
            return
        length, saved = snapshot
        if saved is not None:
            self.cache = saved if last else copy.deepcopy(saved)
        elif length == 0:
            self.cache = None
        else:
            for layer in self.cache.layers:
                layer.keys = layer.keys[..., :length, :]  # [batch, heads, length, head_dim]
                layer.values = layer.values[..., :length, :]
        self.length = length


def _plain_kv(cache: Any) -> bool:
    from transformers.cache_utils import DynamicLayer

    return all(type(layer) is DynamicLayer for layer in getattr(cache, "layers", [None]))


def _press_failed(backend: SessionModel, exc: Exception, doing: str) -> NoReturn:
    """The press's own failure (AdaKV finding no keys to shut a head's evicted positions out, say) as one
    line naming it; another error as it came, where no press is at work."""
    if backend.press is None:
        raise exc
    raise LongctxError(f"--kv-press {backend.press_name}: kvpress failed to {doing}: {first_line(exc) or type(exc).__name__}") from None

