"""The one line for a checkpoint that did not load as it was made: its quantization has no kernel here or
its library is missing; a weights file lacks tensors the other layers hold; stored tensors of shapes the
config does not make (a scheme field edited, another library version); tensors the files did not fill;
a config that says the weights are quantized over float weights. transformers would start what it
could not load at random and read on: the gate would judge a model nobody made."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, NoReturn, Sequence

from pytest_longctx.backends.hf.config_checks import FIELD
from pytest_longctx.backends.hf.loaded_quantization import claims_quantization, kernels_said, parsed_groups, quantization_held
from pytest_longctx.backends.hf.quantization_libraries import install_hint, library_versions, missing_library
from pytest_longctx.backends.hf.stored_tensors import StoredTensor, absent_tensors, files_of, holds_quantized_storage
from pytest_longctx.backends.quantization_words import describe, method
from pytest_longctx.errors import LongctxError, first_line

# how transformers' quantizers say that a method has no kernel but a GPU's
GPU_ONLY = re.compile(r"\b(GPU|CUDA|XPU)\b")
RANDOM = "loaded, {} would hold random values and the gate would judge a model nobody made"


def refuse_quantization(model: str, quantization: Mapping[str, Any], device: str, exc: Exception) -> None:
    """The one line for a quantized checkpoint that did not load because of its quantization: a
    method that runs only on a GPU, on the CPU; a library missing or too old (transformers raises
    ImportError for both). Anything else is left to the caller."""
    if not quantization:
        return
    first = first_line(exc) or type(exc).__name__
    what = describe(quantization)
    if device == "cpu" and GPU_ONLY.search(str(exc)):
        raise LongctxError(f"--model {model}: its quantization ({what}) runs only on a GPU kernel, and this run is on the "
                           f"CPU ({first}); score it on a GPU (--device cuda)") from None
    if isinstance(exc, ImportError):
        hint = install_hint(quantization)
        raise LongctxError(f"--model {model}: its quantization ({what}) needs a library that is missing here or too old: "
                           f"{first}{'; ' + hint if hint else ''}") from None


def _shown(names: Sequence[str]) -> str:
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def refuse_incomplete(model: str, lacking: Mapping[str, Sequence[str]], failed: str = "") -> None:
    """A weights file that lacks tensors the model's other layers hold: named, file by file; ``failed``: how
    transformers' load stopped on it, where it did."""
    if not lacking:
        return
    files = "; ".join(f"{file} lacks {_shown(names)}" for file, names in sorted(lacking.items()))
    count = sum(len(names) for names in lacking.values())
    then = f"transformers stops on it ({failed})" if failed else RANDOM.format("it" if count == 1 else "they")
    raise LongctxError(f"--model {model}: {files}, which the other layers hold: the file is incomplete (cut short, or "
                       f"tensors deleted from it); {then}: re-download or re-save the model")


def refuse_mismatched(model: str, mismatched: Sequence[tuple[str, Any, Any]], quantization: Mapping[str, Any], loaded: Any,
                       stored: Mapping[str, StoredTensor] | None, config_file: str) -> None:
    """Stored tensors of shapes the model as its config.json makes it does not take (transformers would start them at
    random): a compressed-tensors scheme field whose value the stored ones do not fit, named; a checkpoint written by
    another version of its library, said so; else the config and the weights disagree."""
    if not mismatched:
        return
    key, held, expected = sorted(mismatched, key=lambda m: m[0])[0]
    file = str(stored[key].file) if stored and key in stored else "its weights files"
    many = f"{len(mismatched)} tensor{'s' * (len(mismatched) > 1)} so"
    edited = edited_field(loaded, quantization, mismatched) if quantization else None
    if edited:
        raise LongctxError(f"--model {model}: {config_file}, field {edited.field!r}: {edited.said}, but {file} {edited.holds} "
                           f"({edited.key} is {list(edited.stored)} there, {list(edited.expected)} for {edited.said}; {many}): "
                           "the config does not describe its weights (edited, or saved with another config); set it back to "
                           f"{edited.held}, or re-save the checkpoint with the config it was made with")
    shapes = f"{key} is {list(held)} in {file}, {list(expected)} as its config.json makes it; {many}"
    if not quantization:
        raise LongctxError(f"--model {model}: its weights are stored in shapes its config.json does not make ({shapes}): the "
                           "config and the weights are of different models; re-download or re-save the model")
    what = describe(quantization)
    running = library_versions(quantization)
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


def refuse_missing(model: str, missing: Sequence[str], quantization: Mapping[str, Any], loaded: Any,
                    unexpected: Sequence[str], stored: Mapping[str, StoredTensor] | None, config_file: str) -> None:
    """A model some of whose tensors its weights files did not fill is refused: transformers starts them at random
    and reads on, so the gate would judge a model nobody made. Said by its cause: a quantization config over weights
    that hold none; a layer format its library loads with no kernel here (the layer's stored tensors are there under
    names the loaded layer does not take: auto-round's asymmetric AWQ packing on the CPU); else a weights file that
    lacks them."""
    if not missing:
        return
    if stored is not None and claims_quantization(quantization) and not holds_quantized_storage(stored):
        _refuse_unheld(model, quantization, stored, config_file, f", without {_shown(missing)} that its library reads")
    modules = sorted({key.rpartition(".")[0] for key in missing})
    untaken = quantization and any(name.startswith(tuple(f"{m}." for m in modules)) for name in unexpected)
    if not untaken:
        refuse_incomplete(model, absent_tensors(modules, stored or {}))
        raise LongctxError(f"--model {model}: {len(missing)} of its tensors are not in its weights files ({_shown(missing)}); "
                           f"{RANDOM.format('they')}: re-download or re-save the model; a checkpoint of another "
                           "architecture fails so too")
    kernels = kernels_said(loaded)
    why = (f"its quantization ({describe(quantization)}{'; ' + kernels if kernels else ''}) did not take those layers "
           "here: gate it where its library has a kernel for this format (a GPU, or another packing format)")
    if quantization.get("quant_method") == "auto-round" and missing_library({"quant_method": "gptq"}):
        why += ("; auto-round runs its GPTQ and AWQ packings through gptqmodel's kernels where gptqmodel is installed: pip "
                "install 'pytest-longctx[gptqmodel]' (an environment of its own: scripts/setup-venv.sh DIR gptqmodel)")
    raise LongctxError(f"--model {model}: {len(missing)} of its tensors are not in its weights files ({_shown(missing)}); "
                       f"{RANDOM.format('they')}: {why}")


def refuse_unapplied(model: str, quantization: Mapping[str, Any], loaded: Any, stored: Mapping[str, StoredTensor] | None,
                      config_file: str) -> None:
    """A config that says the weights are quantized, over a model none of whose modules the library took and whose
    weights files hold plain floats: transformers loaded the weights as stored (its fp8 on a CPU "de-quantizes"
    whatever it finds), and the gate would judge a float model as that quantization."""
    if stored is not None and not quantization_held(loaded, quantization, stored):
        _refuse_unheld(model, quantization, stored, config_file, " and transformers loaded them as stored")


def _refuse_unheld(model: str, quantization: Mapping[str, Any], stored: Mapping[str, StoredTensor], config_file: str,
                   how: str) -> NoReturn:
    dtypes = ", ".join(sorted({t.dtype for t in stored.values() if t.dtype not in ("I64", "BOOL")}))
    files = files_of(stored)
    raise LongctxError(f"--model {model}: {config_file}, field 'quantization_config': it says the weights are quantized "
                       f"({describe(quantization)}), but {files} hold{'s' * (', ' not in files)} them in float "
                       f"({dtypes}){how}: nothing in the checkpoint is quantized, and the gate would judge float weights as "
                       "that quantization; delete quantization_config to judge them as the float model they are, or give the "
                       "quantized checkpoint's weights")


@dataclass(frozen=True)
class EditedField:
    """A field of a compressed-tensors scheme whose value the stored tensors do not fit, and the value they do."""
    field: str
    said: Any
    held: Any
    holds: str  # what the weights file holds, in words
    key: str
    stored: tuple[int, ...]
    expected: tuple[int, ...]


def edited_field(model: Any, quantization: Mapping[str, Any], mismatched: Iterable[tuple[str, Any, Any]]) -> EditedField | None:
    """For a compressed-tensors checkpoint whose stored tensors' shapes the loaded model does not expect
    (``mismatched``: transformers' (name, stored shape, expected shape)), the scheme field whose value would make the
    stored ones: ``num_bits`` from a packed weight's width (compressed-tensors' own packing asked, for each width),
    ``group_size`` from a scale's; None when neither explains it."""
    if method(quantization) != "compressed-tensors":
        return None
    for key, stored, expected in sorted(mismatched, key=lambda m: m[0]):
        owner, _, leaf = key.rpartition(".")
        try:
            module = model.get_submodule(owner)
        except AttributeError:
            continue
        weights = getattr(getattr(module, "quantization_scheme", None), "weights", None)
        columns = getattr(module, "in_features", None)
        if weights is None or not isinstance(columns, int) or not stored:
            continue
        field = f"{FIELD}.config_groups.{_group_of(model, module.quantization_scheme, quantization)}.weights"
        found = None
        if leaf == "weight_packed":
            bits = [b for b in range(1, 9) if _packed_columns(columns, b) == stored[-1]]
            if len(bits) == 1 and bits[0] != weights.num_bits:
                found = ("num_bits", weights.num_bits, bits[0], f"holds its layers packed in {bits[0]} bits")
        elif leaf == "weight_scale" and weights.group_size and columns % stored[-1] == 0 and columns // stored[-1] != weights.group_size:
            size = columns // stored[-1]
            found = ("group_size", weights.group_size, size, f"holds its layers' scales in groups of {size}")
        if found:
            name, said, held, holds = found
            return EditedField(f"{field}.{name}", said, held, holds, key, tuple(stored), tuple(expected))
    return None


def _packed_columns(columns: int, bits: int) -> int:
    """The int32 words compressed-tensors packs a row of ``columns`` values of ``bits`` bits into; 0 if it cannot say."""
    import torch

    try:
        from compressed_tensors.compressors import pack_to_int32

        return int(pack_to_int32(torch.zeros(1, columns, dtype=torch.int8), bits).shape[-1])
    except Exception:  # noqa: BLE001 - an older or newer packer: no width inferred
        return 0


def _group_of(model: Any, scheme: Any, quantization: Mapping[str, Any]) -> str:
    """The name of the config group whose scheme a module carries."""
    named = [name for name, group in parsed_groups(model).items() if group == scheme]
    groups = list(quantization.get("config_groups") or {})
    return named[0] if named else groups[0] if len(groups) == 1 else "<group>"

