"""llama.cpp's quantizer, ``llama_model_quantize`` (what the ``llama-quantize`` tool runs), through
llama-cpp-python, which ships the library but not the tool: a GGUF file quantized to a file
type, with the tool's ``--tensor-type PATTERN=TYPE`` overrides and ``--allow-requantize``."""
from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Sequence

from pytest_longctx.backends.llama_cpp.library import LOG, load_library, said
from pytest_longctx.errors import LongctxError
from pytest_longctx.paths import write_atomically


def quantize(source: Path, target: Path, file_type: str, threads: int,
             tensor_types: Sequence[tuple[str, str]] = (), requantize: bool = False) -> None:
    """``source`` quantized to ``file_type`` (``Q4_K_M``, as llama-quantize names it) into ``target``,
    written atomically, with the overrides ``tensor_types`` ((pattern, ggml type), in order)."""
    llama = load_library()
    code = getattr(llama, f"LLAMA_FTYPE_MOSTLY_{file_type.upper()}", getattr(llama, f"LLAMA_FTYPE_ALL_{file_type.upper()}", None))
    if code is None:
        raise LongctxError(f"file type {file_type}: llama.cpp's quantizer knows no such type (e.g. Q8_0, Q4_K_M, F16)")
    params = llama.llama_model_quantize_default_params()
    params.ftype = code
    params.nthread = threads
    params.allow_requantize = requantize
    if tensor_types:  # a table ended by an empty pattern, as llama-quantize passes it
        table = (llama.llama_model_tensor_override * (len(tensor_types) + 1))()
        for slot, (pattern, kind) in zip(table, tensor_types):
            ggml_type = getattr(llama, f"GGML_TYPE_{kind.upper()}", None)
            if ggml_type is None:
                raise LongctxError(f"--tensor-type '{pattern}={kind}': llama.cpp knows no ggml type {kind}")
            slot.pattern, slot.type = pattern.encode(), ggml_type
        table[len(tensor_types)].pattern, table[len(tensor_types)].type = None, llama.GGML_TYPE_COUNT
        params.tt_overrides = ctypes.cast(table, ctypes.POINTER(llama.llama_model_tensor_override))

    def run(partial: Path) -> None:
        LOG.clear()
        if llama.llama_model_quantize(str(source).encode(), str(partial).encode(), params) != 0:
            raise LongctxError(f"{source}: llama.cpp's quantizer could not make it {file_type} ({said()})")

    write_atomically(target, run)

