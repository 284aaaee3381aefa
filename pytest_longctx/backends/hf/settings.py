"""The transformers backend's ``--backend-option`` settings as ``from_pretrained`` keywords: where a
device map places the model, what each device may hold, where the weights that fit nowhere go."""
from __future__ import annotations

import os
import re
import tempfile
from typing import Any, Mapping

from pytest_longctx.errors import LongctxError
from pytest_longctx.options.backend_keys import TRANSFORMERS

SIZE = re.compile(r"\d+(\.\d+)?\s*([KMGT]i?B)?", re.IGNORECASE)


def loading_options(options: Mapping[str, str]) -> dict[str, Any]:
    """``--backend-option`` settings as ``from_pretrained`` keywords: ``device-map`` (the model
    spread over the visible GPUs, then the CPU, then ``offload-folder``), ``max-memory``
    (``0:10GiB,1:20GiB,cpu:30GiB``: what each device may hold), ``offload-folder`` (where weights
    that fit nowhere else go); the keys are options/backend_keys.py's ``TRANSFORMERS``."""
    loading, _ = TRANSFORMERS.parse(options)
    if "device_map" not in loading and loading:
        key = next(iter(options))
        raise LongctxError(f"--backend-option {key}={options[key]}: needs device-map=… (auto: across the visible GPUs, "
                           "then the CPU)")
    if "max_memory" in loading:
        loading["max_memory"] = _max_memory(loading["max_memory"])
    if "offload_folder" in loading:
        _check_writable(loading["offload_folder"])
    return loading


def _check_writable(folder: str) -> None:
    """accelerate writes the offloaded weights there while the model loads: an unwritable folder
    would stop the load on a bare OSError."""
    try:
        os.makedirs(folder, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        raise LongctxError(f"--backend-option offload-folder={folder}: not a folder this process can write "
                           f"({exc.strerror or type(exc).__name__}); give one it can write, with room for the weights "
                           "that fit on no device") from None


def _max_memory(text: str) -> dict[int | str, str]:
    """``0:10GiB,cpu:30GiB`` as accelerate's ``max_memory``: GPU indices as ints."""
    budget: dict[int | str, str] = {}
    for part in text.split(","):
        device, colon, size = (x.strip() for x in part.partition(":"))
        if not colon or not (device.isdigit() or device in ("cpu", "mps")) or not SIZE.fullmatch(size):
            raise LongctxError(f"--backend-option max-memory={text}: expected DEVICE:SIZE, comma-separated, with DEVICE a "
                               "GPU index or cpu and SIZE like 10GiB (e.g. 0:10GiB,1:20GiB,cpu:30GiB)")
        budget[int(device) if device.isdigit() else device] = size
    return budget
