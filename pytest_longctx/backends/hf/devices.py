"""Where the transformers backend runs a model and in which dtype: ``--device`` and ``--dtype``
checked against this machine, the device the token ids go to, and the kinds of device a device
map spread the model over."""
from __future__ import annotations

from typing import Any

from pytest_longctx.backends.hf.library import import_torch
from pytest_longctx.errors import LongctxError

DTYPES = ("auto", "float32", "bfloat16", "float16")


def resolve_device(device: str) -> str:
    torch = import_torch()
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    kind, colon, index = device.partition(":")
    if kind not in ("cpu", "cuda", "mps") or (colon and not (kind == "cuda" and index.isdigit())):
        raise LongctxError(f"--device {device}: expected auto, cpu, cuda, cuda:N or mps")
    if kind == "cuda" and not torch.cuda.is_available():
        raise LongctxError(f"--device {device}: no CUDA device is available here; use --device cpu")
    if index and int(index) >= torch.cuda.device_count():
        raise LongctxError(f"--device {device}: this machine has {torch.cuda.device_count()} CUDA device(s), cuda:0 to "
                           f"cuda:{torch.cuda.device_count() - 1}")
    if kind == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise LongctxError(f"--device {device}: MPS (Apple GPU) is not available here; use --device cpu")
    return device


def resolve_dtype(dtype: str, device: str):
    """``auto``: float32 on the CPU (exact), the checkpoint's dtype on an accelerator."""
    torch = import_torch()
    if dtype not in DTYPES:
        raise LongctxError(f"--dtype {dtype}: the transformers backend loads weights as one of {', '.join(DTYPES)}; "
                           "a quantized checkpoint loads with --dtype auto, its own quantization_config kept (a GGUF "
                           "file also with --backend llama.cpp)")
    if dtype == "auto":
        return torch.float32 if device == "cpu" else "auto"
    return getattr(torch, dtype)


def input_device(model: Any) -> Any:
    """Where the token ids go: a model dispatched by a device map runs from its hook's device
    (its parameters may be on the meta device, offloaded), any other where its weights are."""
    device = getattr(getattr(model, "_hf_hook", None), "execution_device", None)
    return import_torch().device(device) if device is not None else next(model.parameters()).device


def placement(model: Any) -> str | None:
    """The kinds of device a device map spread the model over (``cpu,cuda``, ``cpu,disk``), or
    None for a model on one device."""
    mapped = getattr(model, "hf_device_map", None)
    if not mapped:
        return None
    kinds = {str(d) if str(d) in ("cpu", "disk", "meta") else import_torch().device(d).type for d in mapped.values()}
    return ",".join(sorted(kinds))
