"""llama-cpp-python itself: imported on first use with one line when it is missing, its log
kept away from the terminal (its latest warnings and errors kept for the one-line messages),
and its versions."""
from __future__ import annotations

import ctypes
from collections import deque
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from pytest_longctx.errors import LongctxError

# ggml_log_level: what llama.cpp says at these levels is kept for error messages, the rest dropped
LOG_WARN, LOG_ERROR, LOG_CONTINUED = 3, 4, 5
LOG: deque[str] = deque(maxlen=8)  # llama.cpp's latest warnings and errors; cleared before each call that may fail
_LOG_SINK: list[Any] = []  # the installed log callback, kept alive


def load_library() -> Any:
    """The ``llama_cpp`` module, its log routed away from the terminal."""
    try:
        import llama_cpp
    except ImportError:
        raise LongctxError("the llama.cpp backend needs llama-cpp-python: pip install 'pytest-longctx[llama]' "
                           "(it builds llama.cpp from source, a few minutes)") from None
    _quiet(llama_cpp)
    return llama_cpp


def _quiet(library: Any) -> None:
    """Route llama.cpp's log away from the terminal, keeping its warnings and errors for the
    one-line messages."""
    state = {"keep": False}

    def sink(level: int, text: bytes, _user: Any) -> None:
        if level in (LOG_WARN, LOG_ERROR) or (level == LOG_CONTINUED and state["keep"]):
            state["keep"] = True
            line = text.decode("utf-8", "replace").strip()
            if line:
                LOG.append(line)
        elif level != LOG_CONTINUED:
            state["keep"] = False

    _LOG_SINK.append(library.llama_log_callback(sink))
    library.llama_log_set(_LOG_SINK[0], ctypes.c_void_p(0))


def said() -> str:
    """What llama.cpp last logged as a warning or error, for a message; then forgotten."""
    text = "; ".join(LOG)
    LOG.clear()
    return text or "no reason given"


def library_versions(library: Any) -> dict[str, str]:
    """llama-cpp-python's version and that of the llama.cpp library it was built with."""
    try:
        package = version("llama-cpp-python")
    except PackageNotFoundError:
        package = getattr(library, "__version__", "unknown")
    return {"llama-cpp-python": package, "llama.cpp": library.llama_version().decode("utf-8", "replace")}
