"""The llama.cpp backend: a ``.gguf`` file as llama.cpp runs it (its quantized matrix
products, its KV cache types, its attention), through llama-cpp-python
(``pip install "pytest-longctx[llama]"``).

Lean as the transformers backend is: a sequence runs only up to its last read, in decode
calls of at most ``batch-size`` tokens whose output flags are set at the read positions
alone (llama.cpp computes no logits anywhere else), the log-softmax runs on those rows
only, and the context is sized to the longest sequence read, not to the model's window.
Shared prefixes run once: a session cuts its KV cache back to a branch point
(``llama_memory_seq_rm``) or, for models whose state cannot be cut (recurrent layers),
copies the sequence's state there and restores it.

Text mode tokenizes with the GGUF's own tokenizer, as llama.cpp does (``GGUFTokenizer``).
"""
from __future__ import annotations

import ctypes
import hashlib
import json
import os
import time
import weakref
from collections import deque
from dataclasses import asdict, dataclass, replace
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from pytest_longctx.backends.aliases import resolve_model
from pytest_longctx.backends.base import ReadResult, forward_calls, read_by_session
from pytest_longctx.errors import LongctxError

# The KV cache types llama.cpp accepts (its --cache-type-k / --cache-type-v), by ggml type name.
KV_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")
FLASH_ATTN = {"off": 0, "on": 1}  # llama_flash_attn_type
FULL_PRECISION = ("f32", "f16", "bf16")  # KV cache types llama.cpp attends over without flash attention
CONTEXT_STEP = 256  # contexts are made in whole multiples of this many tokens
# ggml_log_level: what llama.cpp says at these levels is kept for error messages, the rest dropped
LOG_WARN, LOG_ERROR, LOG_CONTINUED = 3, 4, 5


def _default_threads() -> int:
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
    values: dict[str, Any] = {}
    for key, raw in options.items():
        if key not in OPTIONS:
            raise LongctxError(f"--backend-option {key}={raw}: the llama.cpp backend has no option {key!r}; "
                               f"it takes {', '.join(OPTIONS)}")
        field, parse = OPTIONS[key]
        try:
            values[field] = parse(raw)
        except ValueError as exc:
            raise LongctxError(f"--backend-option {key}={raw}: {exc}") from None
    if "batch_size" in values and "ubatch_size" not in values:  # the default physical step never exceeds the call
        values["ubatch_size"] = min(Settings.ubatch_size, values["batch_size"])
    settings = Settings(**values)
    if settings.ubatch_size > settings.batch_size:
        raise LongctxError(f"--backend-option ubatch-size={settings.ubatch_size}: larger than batch-size={settings.batch_size}")
    if settings.cache_type_v not in FULL_PRECISION and settings.flash_attn == "off":
        raise LongctxError(f"--backend-option cache-type-v={settings.cache_type_v}: llama.cpp quantizes the V cache only "
                           "with flash attention; use flash-attn=auto or on")
    return settings


def _llama() -> Any:
    try:
        import llama_cpp
    except ImportError:
        raise LongctxError("the llama.cpp backend needs llama-cpp-python: pip install 'pytest-longctx[llama]' "
                           "(it builds llama.cpp from source, a few minutes)") from None
    _quiet(llama_cpp)
    return llama_cpp


_LOG: deque[str] = deque(maxlen=8)  # llama.cpp's latest warnings and errors
_LOG_SINK: list[Any] = []  # the installed log callback, kept alive


def _quiet(llama: Any) -> None:
    """Route llama.cpp's log away from the terminal, keeping its warnings and errors for the
    one-line messages."""
    state = {"keep": False}

    def sink(level: int, text: bytes, _user: Any) -> None:
        if level in (LOG_WARN, LOG_ERROR) or (level == LOG_CONTINUED and state["keep"]):
            state["keep"] = True
            line = text.decode("utf-8", "replace").strip()
            if line:
                _LOG.append(line)
        elif level != LOG_CONTINUED:
            state["keep"] = False

    _LOG_SINK.append(llama.llama_log_callback(sink))
    llama.llama_log_set(_LOG_SINK[0], ctypes.c_void_p(0))


def _said() -> str:
    """What llama.cpp last logged as a warning or error, for a message; then forgotten."""
    said = "; ".join(_LOG)
    _LOG.clear()
    return said or "no reason given"


def library_versions(llama: Any) -> dict[str, str]:
    """llama-cpp-python's version and that of the llama.cpp library it was built with."""
    try:
        package = version("llama-cpp-python")
    except PackageNotFoundError:
        package = getattr(llama, "__version__", "unknown")
    return {"llama-cpp-python": package, "llama.cpp": llama.llama_version().decode("utf-8", "replace")}


def _checked_file(model: str) -> Path:
    path = Path(model).expanduser()
    if path.is_dir():
        raise LongctxError(f"--model {model}: a folder; the llama.cpp backend reads one .gguf file "
                           "(the packaged SmolLM2 as a GGUF: --model smollm2-135m-gguf)")
    if not path.is_file():
        raise LongctxError(f"--model {model}: no such .gguf file")
    with open(path, "rb") as handle:
        magic = handle.read(4)
    if magic != b"GGUF":
        raise LongctxError(f"--model {model}: {path} is not a GGUF file (it does not begin with 'GGUF'); "
                           "give a .gguf model, or convert the model with llama.cpp's converter")
    return path


def file_digest(path: Path) -> str:
    """sha256 of the file's bytes: its weights, quantization and metadata."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()[:32]


def factory(model: str, dtype: str = "auto", device: str = "auto", options: Mapping[str, str] | None = None) -> LlamaCppBackend:
    """The backend ``llama.cpp`` names (``--longctx-backend llama.cpp``): ``model`` is a .gguf
    file or an alias of one; ``options``: the ``--backend-option`` settings."""
    if dtype != "auto":
        raise LongctxError(f"--dtype {dtype}: the llama.cpp backend computes in the .gguf file's own types; leave --dtype auto "
                           "(the KV cache's types: --backend-option cache-type-k=… cache-type-v=…)")
    settings = parse_settings(options or {})
    if device not in ("auto", "cpu", "cuda"):
        raise LongctxError(f"--device {device}: the llama.cpp backend takes auto, cpu or cuda "
                           "(how many layers run on the GPU: --backend-option gpu-layers=N)")
    if device == "cuda" and "gpu-layers" not in (options or {}):
        settings = replace(settings, gpu_layers=1 << 20)  # every layer
    if device == "cpu" and settings.gpu_layers:
        raise LongctxError(f"--device cpu with --backend-option gpu-layers={settings.gpu_layers}: choose one")
    return LlamaCppBackend.load(resolve_model(model), settings, name=model)


class LlamaCppBackend:
    """Scores a .gguf file with llama.cpp; see the module docstring."""

    def __init__(self, llama: Any, model: Any, path: Path, settings: Settings, name: str):
        self.llama = llama
        self.model = model
        self.path = path
        self.settings = replace(settings, threads=settings.threads or _default_threads())
        self.name = name
        self.vocab = llama.llama_model_get_vocab(model)
        self.n_vocab = int(llama.llama_vocab_n_tokens(self.vocab))
        self.tokenizer = GGUFTokenizer(llama, model, self.vocab)
        # a recurrent state cannot be cut back to a branch point: it is copied there instead
        self.cuttable = not (llama.llama_model_is_recurrent(model) or llama.llama_model_is_hybrid(model))
        self.eval_seconds = 0.0  # wall time spent inside llama_decode: llama.cpp's own share of a run
        self._context: Context | None = None
        self._owner: Session | None = None
        self._digest: str | None = None
        weakref.finalize(self, llama.llama_model_free, model)

    @classmethod
    def load(cls, model: str, settings: Settings = Settings(), name: str | None = None) -> LlamaCppBackend:
        path = _checked_file(model)
        llama = _llama()
        if settings.gpu_layers and not llama.llama_supports_gpu_offload():
            raise LongctxError(f"--backend-option gpu-layers={settings.gpu_layers} (or --device cuda): this llama-cpp-python "
                               "was built for the CPU only; rebuild it with CMAKE_ARGS='-DGGML_CUDA=on', or run on the CPU")
        params = llama.llama_model_default_params()
        params.n_gpu_layers = settings.gpu_layers
        _LOG.clear()
        loaded = llama.llama_model_load_from_file(str(path).encode(), params)
        if not loaded:
            raise LongctxError(f"--model {model}: llama.cpp cannot load it ({_said()}); the file is damaged, truncated or "
                               "of an architecture this llama.cpp does not know: re-download or re-convert it")
        return cls(llama, loaded, path, settings, name or model)

    @property
    def context_window(self) -> int | None:
        """The positions the model was trained for (the GGUF's ``context_length``)."""
        return int(self.llama.llama_model_n_ctx_train(self.model)) or None

    @property
    def vocab_size(self) -> int:
        """The token ids the model takes (the engine refuses larger ones before any forward pass)."""
        return self.n_vocab

    # -------------------------------------------------------------- reading

    def read(self, ids: Sequence[int], positions: Sequence[int], tokens: Sequence[Sequence[int]], top_k: int = 0) -> ReadResult:
        return read_by_session(self.session, ids, positions, tokens, top_k)

    def session(self) -> Session:
        """A sequence read piece by piece whose KV cache can be cut back (or its state saved and
        restored): the engine runs shared prefixes once through it. One session at a time: a
        new one starts over in the same context."""
        return Session(self)

    def context(self, length: int, keep: bool) -> Context:
        """The context, holding at least ``length`` tokens; a larger one is made when needed
        (its size at least doubles), carrying the sequence read so far when ``keep``."""
        old = self._context
        if old is not None and old.size >= length:
            return old
        size = -(-max(length, 2 * old.size if old else 0) // CONTEXT_STEP) * CONTEXT_STEP
        state = old.state() if old is not None and keep else None
        if old is not None:
            old.close()
        self._context = None
        made = Context(self, size)
        if state is not None:
            made.set_state(state)
        self._context = made
        return made

    # -------------------------------------------------------------- identity

    def weights_fingerprint(self) -> str:
        if self._digest is None:
            self._digest = file_digest(self.path)
        return self._digest

    def metadata(self, key: str) -> str | None:
        buffer = ctypes.create_string_buffer(256)
        size = self.llama.llama_model_meta_val_str(self.model, key.encode(), buffer, len(buffer))
        return buffer.value.decode("utf-8", "replace") if size >= 0 else None

    def file_type(self) -> str:
        """The file's quantization as llama.cpp names it (``Q4_K_M``, ``F32``), from its metadata."""
        names = {getattr(self.llama, n): n.removeprefix("LLAMA_FTYPE_").removeprefix("MOSTLY_").removeprefix("ALL_")
                 for n in dir(self.llama) if n.startswith("LLAMA_FTYPE_")}
        code = self.metadata("general.file_type")
        return names.get(int(code), f"file type {code}") if code and code.isdigit() else "unknown"

    def describe(self) -> dict[str, Any]:
        library = library_versions(self.llama)
        settings = self.settings
        return {
            "model": str(self.name),
            "weights": self.weights_fingerprint(),
            "config": settings.numbers_key(library),
            "dtype": self.file_type(),
            "device": "gpu" if settings.gpu_layers else "cpu",
            "chunk_size": settings.batch_size,
            "kv_cache": settings.kv_cache,
            "flash_attn": "on" if settings.flash else "off",
            "threads": settings.threads,
            "ubatch_size": settings.ubatch_size,
            "gpu_layers": settings.gpu_layers,
            "versions": library,
        }


class Context:
    """A llama.cpp context of ``size`` tokens (one sequence) and its decode batch; freed with it."""

    def __init__(self, backend: LlamaCppBackend, size: int):
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
        _LOG.clear()
        self.ctx = llama.llama_init_from_model(backend.model, params)
        if not self.ctx:
            raise LongctxError(f"llama.cpp cannot make a context of {size} tokens with KV cache {settings.kv_cache}, "
                               f"flash attention {'on' if settings.flash else 'off'} ({_said()}); check the --backend-option values")
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
        _LOG.clear()
        started = time.perf_counter()
        status = self.llama.llama_decode(self.ctx, self.batch)
        self.backend.eval_seconds += time.perf_counter() - started
        if status != 0:
            raise LongctxError(f"llama.cpp could not run {n} tokens at position {first} (llama_decode returned {status}: "
                               f"{_said()})")

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


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """Natural-log softmax over the last axis, in float64."""
    wide = logits.astype(np.float64)
    top = wide.max(axis=-1, keepdims=True)
    return wide - (top + np.log(np.exp(wide - top).sum(axis=-1, keepdims=True)))


def most_likely(logp: np.ndarray, k: int) -> tuple[list[int], list[float]]:
    """The ``k`` most likely ids of one row and their log-probabilities, most likely first
    (ties: the lower id first)."""
    k = min(k, len(logp))
    picked = np.argpartition(-logp, k - 1)[:k]
    picked = picked[np.lexsort((picked, -logp[picked]))]
    return picked.tolist(), logp[picked].tolist()


class Session:
    """One sequence in the backend's context: the tokens read so far (its KV cache)."""

    def __init__(self, backend: LlamaCppBackend):
        self.backend = backend
        self.length = 0
        backend._owner = self
        if backend._context is not None:
            backend._context.forget(0)

    def advance(self, ids: np.ndarray, positions: Sequence[int], tokens: Sequence[Sequence[int]], top_k: int = 0) -> ReadResult:
        """Run ``ids`` after what was read so far; ``positions`` index into ``ids``; ``top_k``: also
        the ``top_k`` most likely next tokens at each position."""
        backend = self.backend
        if backend._owner is not self:
            raise LongctxError("this llama.cpp session was superseded by a newer one of the same backend; read one at a time")
        ids = np.asarray(ids, dtype=np.int64)
        wanted = np.asarray(positions, dtype=np.int64)
        if len(wanted) and (wanted.min() < 0 or wanted.max() >= len(ids)):
            raise LongctxError(f"read position outside the {len(ids)} tokens given")
        if len(ids) and (ids.min() < 0 or ids.max() >= backend.n_vocab):
            raise LongctxError(f"token id outside the model's vocabulary of {backend.n_vocab}")
        context = backend.context(self.length + len(ids), keep=self.length > 0)
        order = np.argsort(wanted, kind="stable")
        ordered = wanted[order]
        top1: list[int] = [0] * len(wanted)
        logprobs: list[list[float]] = [[] for _ in wanted]
        top: list[tuple[list[int], list[float]]] = [([], []) for _ in wanted]
        for start, stop, picked in forward_calls(ordered, len(ids), backend.settings.batch_size):
            rows = ordered[picked] - start  # batch rows whose next-token logits are wanted
            context.decode(ids[start:stop], self.length + start, rows)
            if not len(rows):
                continue
            logp = log_softmax(np.stack([context.logits(int(row)) for row in rows]))  # [reads, vocab]
            for row, index in enumerate(order[picked]):
                top1[index] = int(np.argmax(logp[row]))
                logprobs[index] = logp[row, np.asarray(list(tokens[index]), dtype=np.int64)].tolist()
                if top_k:
                    top[index] = most_likely(logp[row], top_k)
        self.length += len(ids)
        return ReadResult(top1, logprobs, top if top_k else None)

    def snapshot(self) -> tuple[int, bytes | None]:
        """The state here: its length when the cache can be cut back to it, else a copy."""
        context = self.backend._context
        if self.backend.cuttable or context is None or self.length == 0:
            return self.length, None
        return self.length, context.state()

    def restore(self, snapshot: tuple[int, bytes | None], last: bool = False) -> None:
        """Back to a snapshot (``last``, the engine's hint that no later restore needs it, changes
        nothing here: a copied state is set, not handed over)."""
        length, saved = snapshot
        context = self.backend._context
        if context is not None:
            if saved is None:
                context.forget(length)
            else:
                context.set_state(saved)
        self.length = length


class GGUFTokenizer:
    """The GGUF's own tokenizer as llama.cpp runs it, called as the text mode calls a Hugging Face
    tokenizer: ``tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)`` gives
    ``input_ids`` and per token its ``(start, end)`` characters. Special tokens written in the
    text (chat markup) are read as special tokens, as Hugging Face tokenizers do."""

    def __init__(self, llama: Any, model: Any, vocab: Any):
        self.llama, self.vocab = llama, vocab
        self.size = int(llama.llama_vocab_n_tokens(vocab))
        template = llama.llama_model_chat_template(model, None)
        self.chat_template = template.decode("utf-8") if template else None
        self._pieces: dict[int, bytes] = {}

    def __len__(self) -> int:
        return self.size

    def ids(self, text: str, add_special_tokens: bool = False) -> list[int]:
        raw = text.encode("utf-8")
        capacity = len(raw) + 8
        while True:
            buffer = (ctypes.c_int32 * capacity)()
            count = self.llama.llama_tokenize(self.vocab, raw, len(raw), buffer, capacity, add_special_tokens, True)
            if count >= 0:
                return list(buffer[:count])
            capacity = -count

    def piece(self, token: int) -> bytes:
        """The bytes token ``token`` stands for (special tokens as their text)."""
        found = self._pieces.get(token)
        if found is None:
            buffer = ctypes.create_string_buffer(64)
            size = self.llama.llama_token_to_piece(self.vocab, token, buffer, len(buffer), 0, True)
            if size < 0:
                buffer = ctypes.create_string_buffer(-size)
                size = self.llama.llama_token_to_piece(self.vocab, token, buffer, len(buffer), 0, True)
            found = self._pieces[token] = buffer.raw[:size]
        return found

    def offsets(self, text: str, ids: Sequence[int]) -> list[tuple[int, int]]:
        """Each token's characters: the pieces laid end to end over the text's UTF-8 bytes, a
        token that covers part of a character covering all of it."""
        pieces = [self.piece(t) for t in ids]
        raw = text.encode("utf-8")
        if b"".join(pieces) != raw:
            raise LongctxError("the GGUF's tokenizer does not give back the text from its tokens (it normalizes the text "
                               "or adds a space before it), so text-mode targets cannot be placed; score in --mode ids")
        lengths = np.fromiter((len(ch.encode("utf-8")) for ch in text), dtype=np.int64, count=len(text))
        char_of_byte = np.repeat(np.arange(len(text)), lengths)  # [bytes] -> the character each byte belongs to
        spans, at = [], 0
        for piece in pieces:
            end = at + len(piece)
            spans.append((int(char_of_byte[at]), int(char_of_byte[end - 1]) + 1) if end > at else
                         (int(char_of_byte[at]) if at < len(raw) else len(text),) * 2)
            at = end
        return spans

    def __call__(self, text: str, add_special_tokens: bool = True, return_offsets_mapping: bool = False, **_: Any) -> dict:
        if return_offsets_mapping and add_special_tokens:
            raise ValueError("offsets are given for the text's own tokens only: pass add_special_tokens=False")
        ids = self.ids(text, add_special_tokens)
        encoded: dict[str, Any] = {"input_ids": ids}
        if return_offsets_mapping:
            encoded["offset_mapping"] = self.offsets(text, ids)
        return encoded

    def get_vocab(self) -> dict[str, int]:
        return {self.llama.llama_vocab_get_text(self.vocab, i).decode("utf-8", "replace"): i for i in range(self.size)}

    def apply_chat_template(self, conversation: list[dict[str, str]], tokenize: bool = False,
                            add_generation_prompt: bool = False) -> Any:
        """The conversation rendered by the GGUF's chat template (jinja, sandboxed)."""
        if not self.chat_template:
            raise ValueError("the GGUF file has no chat template")
        from jinja2.exceptions import TemplateError
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        def raise_exception(message: str) -> None:
            raise TemplateError(message)

        environment = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        environment.globals["raise_exception"] = raise_exception
        special = {name: self.piece(getattr(self.llama, f"llama_vocab_{name[:3]}")(self.vocab)).decode("utf-8", "replace")
                   for name in ("bos_token", "eos_token")}
        text = environment.from_string(self.chat_template).render(messages=conversation,
                                                                   add_generation_prompt=add_generation_prompt, **special)
        return self.ids(text) if tokenize else text
