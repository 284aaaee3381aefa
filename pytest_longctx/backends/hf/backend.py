"""``TransformersBackend``: a loaded transformers model as a ``Backend`` with sessions, what compresses
its contexts (a kvpress press, a quantized KV cache), and what it says about itself."""
from __future__ import annotations

import hashlib
from importlib.metadata import distribution
from typing import Any, Mapping, Sequence

from pytest_longctx.backends.base import ReadResult, read_by_session
from pytest_longctx.backends.digests import key_digests
from pytest_longctx.backends.hf.checkpoint import missing_tokenizer
from pytest_longctx.backends.hf.devices import input_device, placement
from pytest_longctx.backends.hf.fingerprint import config_entries, config_fingerprint, weights_fingerprint
from pytest_longctx.backends.hf.kv_caches import OPTION as KV_CACHE_OPTION
from pytest_longctx.backends.hf.kv_caches import cache_factory, checkpoint_scales, name_of
from pytest_longctx.backends.hf.loaded_quantization import (
    decompress_now,
    described_quantization,
    model_parameters,
    quantization_config,
    recipe_file,
    stored_quantization,
)
from pytest_longctx.backends.hf.loading import load_pretrained
from pytest_longctx.backends.hf.presses import check_model, describe_press
from pytest_longctx.backends.hf.quantization_libraries import library_versions
from pytest_longctx.backends.hf.read_session import TransformersReadSession, cache_kwarg
from pytest_longctx.errors import LongctxError

# Tokens per forward call. A call on top of a cached prefix needs an explicit attention
# mask, which PyTorch's CPU attention runs at about half the speed of the causal case, so
# few long calls beat many short ones. Memory per call grows with the chunk times the
# hidden size and, for that mask, the chunk times the context read so far; never with
# the vocabulary (logits exist only at read positions).
DEFAULT_CHUNK = 8192


class TransformersBackend:
    """Scores a loaded ``transformers`` causal LM; see the package docstring."""

    def __init__(self, model: Any, tokenizer: Any = None, chunk_size: int = DEFAULT_CHUNK, name: str | None = None,
                 fingerprint: str | None = None):
        """``fingerprint``: the weights' fingerprint where the caller knows it (blame's hybrids: from their
        parents' and parts'), so that it is not computed from the model's state_dict, which bitsandbytes
        corrupts once a forward pass has repacked its weights for the CPU."""
        decompress_now(model)
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
        self.kv_cache: str | None = None  # the quantized KV cache each read's context goes into, by name
        self.context_cache: Any = None  # what makes that cache (``use_kv_cache``)

    @property
    def context_compression(self) -> str | None:
        """What compresses each read's context (a press, a quantized KV cache), by name; None: nothing."""
        return self.press_name or self.kv_cache

    def use_kv_cache(self, spec: str) -> None:
        """Read each read's context into the quantized KV cache ``spec`` names (``fp8``) in one call, and its
        question through it (docs/metrics.md#quantized-kv-caches)."""
        name = name_of(spec)
        if checkpoint_scales(self.model):
            raise LongctxError(f"{KV_CACHE_OPTION}={spec}: the checkpoint has a KV cache scheme of its own, which every read "
                               "already runs (its kv_cache_scheme); leave the option out")
        self.context_cache = cache_factory(spec, self.model)
        self.kv_cache = name

    def use_press(self, press: Any, spec: str = "") -> None:
        """Compress each read's context with a kvpress ``press`` (docs/metrics.md#kv-cache-presses):
        the engine then prefills contexts through ``TransformersReadSession.compress``."""
        check_model(press, self.model, spec or type(press).__name__)
        self.press = press
        self.press_name = describe_press(press)

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
        dtypes = sorted({str(p.dtype).removeprefix("torch.") for p in model_parameters(self.model).values()
                         if p.is_floating_point()})
        quantization = quantization_config(self.model)
        config, entries = config_fingerprint(self.model), config_entries(self.model)
        if self.context_compression:  # another press or cache computes something else: its answers are never served for another's
            config = hashlib.sha256(f"{config}|kv_press={self.context_compression}".encode()).hexdigest()[:24]
        return {
            "model": str(self.name),
            "weights": self.weights_fingerprint(),
            "config": config,
            "config_keys": key_digests(entries),
            **({"kv_press": self.press_name} if self.press_name else {}),
            **({"kv_cache": self.kv_cache} if self.kv_cache else {}),
            "dtype": ",".join(dtypes),
            "quantization": described_quantization(self.model, quantization, self.recipe, self._written()),
            "device": placement(self.model) or self.device.type,
            "chunk_size": self.chunk_size,
            "versions": {"torch": str(torch.__version__), "transformers": str(transformers.__version__),
                         **library_versions(quantization), **_kvpress_version(self.press)},
        }


def _kvpress_version(press: Any) -> dict[str, str]:
    return {"kvpress": distribution("kvpress").version} if press is not None else {}

