"""What makes a loaded transformers model this model, as digests: its configuration as it computes
(the attention kernel, the quantization's library versions and kernels, the KV cache's scales), and
its weights, checksummed bit for bit where they are (``weights_fingerprint``)."""
from __future__ import annotations

import contextlib
import hashlib
from typing import Any, Iterator

from pytest_longctx.backends.digests import settings_digest
from pytest_longctx.backends.hf.kv_caches import checkpoint_scales
from pytest_longctx.backends.hf.library import import_torch
from pytest_longctx.backends.hf.loaded_quantization import quantization_config, quantization_kernels
from pytest_longctx.backends.hf.quantization_libraries import library_versions
from pytest_longctx.errors import LongctxError

# Config entries that name or date a checkpoint without changing what it computes.
VOLATILE_CONFIG = ("_name_or_path", "_commit_hash", "transformers_version", "dtype", "torch_dtype")


def config_fingerprint(model: Any) -> str:
    """A digest of the model's configuration: the same weights under another config (a
    sliding window, rope scaling, another attention kernel, another quantization or the
    version of the library that runs it) compute something else."""
    return settings_digest(config_entries(model))


def config_entries(model: Any) -> dict[str, Any]:
    """What of the model's configuration changes what it computes, by key: the config's own entries (less
    those that only name or date it), the attention kernel, the quantization's libraries and kernels, the KV
    cache's scales, and what weights were de-quantized from."""
    config = {k: v for k, v in model.config.to_dict().items() if k not in VOLATILE_CONFIG}
    config["_attn_implementation"] = getattr(model.config, "_attn_implementation", None)
    quantization = quantization_config(model)
    libraries = library_versions(quantization)
    if libraries:  # absent otherwise: the digests of models without quantization stay as they were
        config["_quantization_libraries"] = libraries
    kernels = quantization_kernels(model)
    if kernels:  # another kernel rounds otherwise
        config["_quantization_kernels"] = kernels
    scales = checkpoint_scales(model)
    if scales:  # the KV cache's scales, which transformers keeps out of the state_dict
        config["_kv_cache_scales"] = scales
    if quantization.get("dequantized_on_load"):  # what the weights were de-quantized from
        config["_dequantized_from"] = quantization
    return config


def weights_fingerprint(model: Any) -> str:
    """sha256 over (name, shape, dtype, checksum of the raw bits) of every tensor.

    The checksum is an integer polynomial over the tensor's bits viewed as int32 words,
    so any change of any bit changes it (up to hash collisions), it is the same on every
    device, and it runs where the weights are (no copy of a large model to the host).
    """
    torch = import_torch()
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
    torch = import_torch()
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

