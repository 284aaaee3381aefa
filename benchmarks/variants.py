"""Compressed variants of a model, built the same way every time, for the gate-validity study.

    python benchmarks/variants.py --model smollm2-135m --out variants

writes one folder per variant (safetensors + tokenizer), each a plain transformers model:

* ``int8``      8-bit round-to-nearest weights, one scale per output channel
* ``int4-g64``  4-bit round-to-nearest weights, groups of 64 input channels
* ``int2-g64``  2-bit round-to-nearest weights, groups of 64 input channels
* ``window512`` the same weights, attention limited to the last 512 tokens in every layer
                (a llama checkpoint re-declared as mistral, which has the sliding window; a qwen2
                checkpoint's own sliding window switched on in every layer)

INT8 W8A8 for vLLM (``--longctx-backend vllm``) is made by llm-compressor itself, in its own
environment (``benchmarks/llmcompressor_variants.py --model DIR --only w8a8``), no longer here.

In the default variants quantization is simulated: weights are rounded to the grid and
stored back in float32, so the numbers are those of the quantized model on any runtime.
Every ``nn.Linear`` except the LM head is rounded (the LM head shares its weight with the
embeddings).

A quantized KV cache changes no weight, so it is a backend instead of a folder:
``--longctx-backend variants:kv_int4`` (with this folder on ``PYTHONPATH``) loads the
model unchanged and rounds every key and value to 4 bits as the attention layers make
them (per token, groups of 64 channels; keys before the rotary embedding), so all later
tokens attend to the rounded cache. Unlike transformers' ``QuantizedCache`` it keeps no
recent tokens in full precision, which makes it slightly harsher on near context.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
from pathlib import Path
from typing import Any, Callable

VARIANTS = ("int8", "int4-g64", "int2-g64", "window512")


def gate_environment() -> dict[str, str]:
    """The environment of a gate run in its own process that may name this folder's backends
    (``--longctx-backend variants:kv_int4``): this one, with this folder on ``PYTHONPATH``."""
    here = str(Path(__file__).parent)
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")]))}


def rounded(tensor: Any, bits: int, group: int | None) -> Any:
    """``tensor`` on an asymmetric min-max grid of ``2**bits`` levels per group of its last
    dimension (``None``: the whole last dimension is one group)."""
    import torch

    levels = 2**bits - 1
    size = group or tensor.shape[-1]
    grouped = tensor.reshape(*tensor.shape[:-1], -1, size)  # [..., last / size, size]
    low = grouped.amin(dim=-1, keepdim=True)
    scale = (grouped.amax(dim=-1, keepdim=True) - low).clamp(min=1e-12) / levels
    return (torch.round((grouped - low) / scale).clamp(0, levels) * scale + low).reshape(tensor.shape)


def linear_layers(model: Any) -> dict[str, Any]:
    """Every ``nn.Linear`` of ``model`` but the LM head, by module name."""
    import torch

    return {name: module for name, module in model.named_modules()
            if isinstance(module, torch.nn.Linear) and not name.endswith("lm_head")}


def round_to_nearest_(model: Any, bits: int, group: int | None) -> None:
    """Round the weights of every linear layer but the LM head, per group of input channels."""
    import torch

    with torch.no_grad():
        for module in linear_layers(model).values():
            module.weight.copy_(rounded(module.weight, bits, group))  # weight: [out, in]


def kv_quantized(bits: int, group: int) -> Callable[..., Any]:
    """A ``--longctx-backend`` factory: the model as it is, its keys and values rounded."""

    def factory(model: str, dtype: str, device: str) -> Any:
        from pytest_longctx.backends.aliases import resolve_model
        from pytest_longctx.backends.hf import TransformersBackend

        label = f"int{bits}-g{group} per token"
        backend = TransformersBackend.load(resolve_model(model), dtype=dtype, device=device,
                                           name=f"{model} (KV cache {label})")
        projections = [m for n, m in backend.model.named_modules() if n.endswith(("self_attn.k_proj", "self_attn.v_proj"))]
        if not projections:
            raise SystemExit(f"KV cache variant: {model} has no self_attn.k_proj/v_proj layers to round")
        for module in projections:
            module.register_forward_hook(lambda _module, _args, out: rounded(out, bits, group))
        # the weights are unchanged: the config carries the difference into the score cache key
        backend.model.config.kv_cache_quantization = label
        return backend

    return factory


kv_int4 = kv_quantized(4, 64)


def local_window(folder: Path, window: int) -> None:
    """Limit a saved checkpoint's attention to the last ``window`` tokens in every layer: a llama one
    re-declared as mistral with that sliding window, a qwen2 one with its own sliding window switched
    on from the first layer (transformers reads ``layer_types`` where the config states them)."""
    path = folder / "config.json"
    config = json.loads(path.read_text())
    if config["model_type"] in ("llama", "mistral"):
        config.update(model_type="mistral", architectures=["MistralForCausalLM"], sliding_window=window)
    elif config["model_type"] == "qwen2":
        config.update(use_sliding_window=True, sliding_window=window, max_window_layers=0,
                      layer_types=["sliding_attention"] * config["num_hidden_layers"])
    else:
        raise SystemExit(f"local window: {config['model_type']} checkpoints are not supported, only llama, mistral, qwen2")
    path.write_text(json.dumps(config, indent=2))


def build(model_ref: str, out: Path, names: tuple[str, ...] = VARIANTS) -> dict[str, Path]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from pytest_longctx.backends.aliases import resolve_model

    source = resolve_model(model_ref)
    steps: dict[str, Callable[[Any], None]] = {
        "int8": lambda m: round_to_nearest_(m, 8, None),
        "int4-g64": lambda m: round_to_nearest_(m, 4, 64),
        "int2-g64": lambda m: round_to_nearest_(m, 2, 64),
        "window512": lambda m: None,
    }
    built = {}
    for name in names:
        folder = out / name
        built[name] = folder
        if (folder / "config.json").exists():
            continue
        model = AutoModelForCausalLM.from_pretrained(source, dtype="float32", trust_remote_code=False).eval()
        steps[name](model)
        partial = out / f".{name}.partial"
        shutil.rmtree(partial, ignore_errors=True)
        model.save_pretrained(partial)
        AutoTokenizer.from_pretrained(source, trust_remote_code=False).save_pretrained(partial)
        if name == "window512":
            local_window(partial, 512)
        partial.rename(folder)
    return built


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--out", type=Path, default=Path("variants"))
    parser.add_argument("--only", nargs="*", choices=VARIANTS, default=list(VARIANTS))
    args = parser.parse_args()
    for name, folder in build(args.model, args.out, tuple(args.only)).items():
        print(f"{name}: {folder}")


if __name__ == "__main__":
    main()
