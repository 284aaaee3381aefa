"""``LlamaCppBackend``: a .gguf file loaded by llama.cpp, read through sessions in one context
sized to the longest sequence read, and what it says about itself (the file's digest, its
quantization, the settings that change the numbers)."""
from __future__ import annotations

import ctypes
import weakref
from dataclasses import replace
from pathlib import Path
from typing import Any, Sequence

from pytest_longctx.backends.base import ReadResult, read_by_session
from pytest_longctx.backends.digests import file_digest
from pytest_longctx.backends.llama_cpp.context import Context
from pytest_longctx.backends.llama_cpp.library import LOG, library_versions, load_library, said
from pytest_longctx.backends.llama_cpp.read_session import LlamaCppReadSession
from pytest_longctx.backends.llama_cpp.settings import DEFAULTS, Settings, default_threads
from pytest_longctx.backends.llama_cpp.tokenizer import GGUFTokenizer
from pytest_longctx.errors import LongctxError

CONTEXT_STEP = 256  # contexts are made in whole multiples of this many tokens


def checked_file(model: str) -> Path:
    """The .gguf file ``model`` names, or one line saying why it is none."""
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


class LlamaCppBackend:
    """Scores a .gguf file with llama.cpp; see the package docstring."""

    def __init__(self, llama: Any, model: Any, path: Path, settings: Settings, name: str):
        self.llama = llama
        self.model = model
        self.path = path
        self.settings = replace(settings, threads=settings.threads or default_threads())
        self.name = name
        self.vocab = llama.llama_model_get_vocab(model)
        self.n_vocab = int(llama.llama_vocab_n_tokens(self.vocab))
        self.tokenizer = GGUFTokenizer(llama, model, self.vocab)
        # a recurrent state cannot be cut back to a branch point: it is copied there instead
        self.cuttable = not (llama.llama_model_is_recurrent(model) or llama.llama_model_is_hybrid(model))
        self.eval_seconds = 0.0  # wall time spent inside llama_decode: llama.cpp's own share of a run
        self.current: Context | None = None  # the context made so far
        self.reader: LlamaCppReadSession | None = None  # the session reading in it now
        self._digest: str | None = None
        self._free = weakref.finalize(self, llama.llama_model_free, model)

    @classmethod
    def load(cls, model: str, settings: Settings = DEFAULTS, name: str | None = None) -> LlamaCppBackend:
        path = checked_file(model)
        llama = load_library()
        if settings.gpu_layers and not llama.llama_supports_gpu_offload():
            raise LongctxError(f"--backend-option gpu-layers={settings.gpu_layers} (or --device cuda): this llama-cpp-python "
                               "was built for the CPU only; rebuild it with CMAKE_ARGS='-DGGML_CUDA=on', or run on the CPU")
        params = llama.llama_model_default_params()
        params.n_gpu_layers = settings.gpu_layers
        LOG.clear()
        loaded = llama.llama_model_load_from_file(str(path).encode(), params)
        if not loaded:
            raise LongctxError(f"--model {model}: llama.cpp cannot load it ({said()}); the file is damaged, truncated or "
                               "of an architecture this llama.cpp does not know: re-download or re-convert it")
        return cls(llama, loaded, path, settings, name or model)

    def close(self) -> None:
        """Free the context and the model now, unmapping the file: blame's hybrids are written to
        temporary files, which the disk gets back only once llama.cpp lets go of them. The context
        and the session point back at the backend, so without this the garbage collector's
        cycle search frees them, whenever it runs."""
        if self.current is not None:
            self.current.close()
        self.current = self.reader = None
        self._free()

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

    def session(self) -> LlamaCppReadSession:
        """A sequence read piece by piece whose KV cache can be cut back (or its state saved and
        restored): the engine runs shared prefixes once through it. One session at a time: a
        new one starts over in the same context."""
        return LlamaCppReadSession(self)

    def context(self, length: int, keep: bool) -> Context:
        """The context, holding at least ``length`` tokens; a larger one is made when needed
        (its size at least doubles), carrying the sequence read so far when ``keep``."""
        if not self._free.alive:
            raise LongctxError(f"{self.name}: this llama.cpp backend was closed; load the file again to read it")
        old = self.current
        if old is not None and old.size >= length:
            return old
        size = -(-max(length, 2 * old.size if old else 0) // CONTEXT_STEP) * CONTEXT_STEP
        state = old.state() if old is not None and keep else None
        if old is not None:
            old.close()
        self.current = None
        made = Context(self, size)
        if state is not None:
            made.set_state(state)
        self.current = made
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
