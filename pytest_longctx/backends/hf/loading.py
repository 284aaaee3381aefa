"""A model loaded as transformers loads it, from a folder, a ``.gguf`` file or a hub id, with its
tokenizer, each failure one line (``load_pretrained``); and a model packaged for pip converted once
into a folder it loads from (``packaged_folder``: the ``smollm2-135m`` and ``qwen2.5-coder-0.5b`` aliases)."""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Mapping, NoReturn

from pytest_longctx.backends.hf.checkpoint import config_file, has_tokenizer_files, locate, needs_own_code, stored_config
from pytest_longctx.backends.hf.config_checks import config_problem
from pytest_longctx.backends.hf.devices import resolve_device, resolve_dtype
from pytest_longctx.backends.hf.kv_caches import use_checkpoint_scheme
from pytest_longctx.backends.hf.library import import_torch
from pytest_longctx.backends.hf.quantization_libraries import missing_library
from pytest_longctx.backends.hf.refusals import (
    refuse_incomplete,
    refuse_mismatched,
    refuse_missing,
    refuse_quantization,
    refuse_unapplied,
)
from pytest_longctx.backends.hf.stored_tensors import damaged_weights, incomplete_modules, weights_held
from pytest_longctx.backends.packaged import PackagedModel, gguf_file, version
from pytest_longctx.errors import LongctxError, first_line
from pytest_longctx.paths import cache_dir, write_atomically


def load_pretrained(model: str, dtype: str = "auto", device: str = "auto", trust_remote_code: bool = False,
                    loading: Mapping[str, Any] | None = None):
    """(model, tokenizer) from a folder, a .gguf file or a hub id, with one clear error;
    the tokenizer is None for a folder without tokenizer files (the ids mode needs none,
    the text mode says so: ``missing_tokenizer``). ``loading``: ``loading_options``' keywords (a
    device map places the model itself; ``device`` then stays auto). A model that needs its own
    Python code (``auto_map`` in its config) is refused unless
    ``trust_remote_code``: nothing is asked on stdin, nothing of the model's runs."""
    import_torch()
    try:
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError:
        raise LongctxError("the transformers backend needs transformers: pip install 'pytest-longctx[hf]'") from None
    where, extra = locate(model)
    loading = dict(loading or {})
    if loading and device != "auto":
        raise LongctxError(f"--device {device} with --backend-option device-map={loading['device_map']}: choose one "
                           "(the device map places the model; max-memory=… bounds each device; under pytest-xdist, where "
                           "worker N takes GPU N, run a device-mapped model with -n 0)")
    device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, device)  # a dtype it cannot load is said as such, not as a damaged file
    damaged = damaged_weights(where) if not extra and Path(where).is_dir() else None  # a folder, not a .gguf's
    if damaged:
        raise LongctxError(f"--model {model}: cannot load it: {damaged}; re-download or re-save the model")
    quantization: Mapping[str, Any] = {}  # the checkpoint's own quantization_config, once read and checked
    named = config_file(model, where, extra)
    try:
        quantization = _checked_quantization(model, where, extra, named, trust_remote_code)
        trust = bool(trust_remote_code)  # always given: without it transformers asks on stdin
        tokenizer = AutoTokenizer.from_pretrained(where, trust_remote_code=trust, **extra) if has_tokenizer_files(where, extra) else None
        if tokenizer is not None and len(tokenizer) <= 1:  # no vocabulary: every text would be no tokens at all
            tokenizer = None
        # shapes it does not expect are left to refuse_mismatched, which names them (transformers raises only "see the report above")
        loaded, info = AutoModelForCausalLM.from_pretrained(where, dtype=torch_dtype, trust_remote_code=trust, **extra, **loading,
                                                            output_loading_info=True, ignore_mismatched_sizes=True)
    except LongctxError:
        raise
    except Exception as exc:
        _refuse_failed_load(model, where, extra, quantization, device, trust_remote_code, exc)
    held = weights_held(where, extra)
    refuse_mismatched(model, sorted(info.get("mismatched_keys") or []), quantization, loaded, held, named)
    refuse_missing(model, sorted(info.get("missing_keys") or []), quantization, loaded, sorted(info.get("unexpected_keys") or []),
                   held, named)
    if quantization.get("kv_cache_scheme"):  # transformers drops its scales: the backend runs it itself
        try:
            use_checkpoint_scheme(loaded, quantization["kv_cache_scheme"], where)
        except LongctxError as exc:
            raise LongctxError(f"--model {model}: {exc}") from None
    refuse_unapplied(model, quantization, loaded, held, named)
    return (loaded if loading else loaded.to(device)).eval(), tokenizer


def _checked_quantization(model: str, where: str, extra: Mapping[str, Any], named: str,
                          trust_remote_code: bool) -> Mapping[str, Any]:
    """The checkpoint's own quantization_config as its config.json holds it, once checked: a model that
    needs its own code refused unless trusted, a config transformers or its library cannot read, a
    library missing here."""
    stored = stored_config(where, extra)
    if "auto_map" in stored and not trust_remote_code:  # transformers would load a model_type it knows without it
        raise LongctxError(needs_own_code(model, stored.get("model_type")))
    written = stored.get("quantization_config") or {}
    problem = config_problem(written, named) if written else None
    if problem:
        raise LongctxError(f"--model {model}: {problem}")
    missing = missing_library(written)
    if missing:
        raise LongctxError(f"--model {model}: {missing}")
    return written


def _refuse_failed_load(model: str, where: str, extra: Mapping[str, Any], quantization: Mapping[str, Any], device: str,
                        trust_remote_code: bool, exc: Exception) -> NoReturn:
    """transformers' failure to load the model as one line: by its quantization, its own code, a weights file that
    lacks tensors; else what transformers said (an OSError or ValueError: a missing file, offline), or a damaged file
    (safetensors, torch and GGUF raise their own types)."""
    refuse_quantization(model, quantization, device, exc)
    if isinstance(exc, (OSError, ValueError)):
        if "trust_remote_code" in str(exc) and not trust_remote_code:
            raise LongctxError(needs_own_code(model)) from None
        first = first_line(exc) or type(exc).__name__
        refuse_incomplete(model, incomplete_modules(weights_held(where, extra) or {}), first)
        offline = " (offline: only local folders, .gguf files and models already in the Hugging Face cache load)"
        hub_id = not extra and not Path(where).expanduser().exists()
        raise LongctxError(f"--model {model}: cannot load it: {first}{offline if hub_id else ''}") from None
    said = first_line(exc)
    refuse_incomplete(model, incomplete_modules(weights_held(where, extra) or {}), f"{type(exc).__name__}{': ' + said if said else ''}")
    raise LongctxError(f"--model {model}: cannot load it: {type(exc).__name__}{': ' + said if said else ''} "
                       "(a damaged or partly downloaded weights file? re-download or re-save the model)") from None


def packaged_folder(packaged: PackagedModel) -> str:
    """The alias of a model packaged for pip: a safetensors folder (float32) converted from its GGUF
    file once (SmolLM2-135M about 30 s, Qwen2.5-Coder-0.5B about 80 s), then reused."""
    gguf = gguf_file(packaged)
    folder = cache_dir("models") / f"{packaged.folder}-{version(packaged)}"
    if (folder / "config.json").exists():
        return str(folder)
    print(f"longctx: converting {os.path.basename(gguf)} into {folder} (once)", file=sys.stderr, flush=True)
    model, tokenizer = load_pretrained(gguf, dtype="float32", device="cpu")
    # the weights are de-quantized on load; drop the GGUF marker so they save as plain float32
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config

    def save(partial: Path) -> None:
        model.save_pretrained(partial)
        tokenizer.save_pretrained(partial)

    write_atomically(folder, save)
    return str(folder)
