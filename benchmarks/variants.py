"""Compressed variants of a model, built the same way every time, for the gate-validity study.

    python benchmarks/variants.py --model smollm2-135m --out variants

writes one folder per variant (safetensors + tokenizer), each a plain transformers model:

* ``int8``      8-bit round-to-nearest weights, one scale per output channel
* ``int4-g64``  4-bit round-to-nearest weights, groups of 64 input channels
* ``int2-g64``  2-bit round-to-nearest weights, groups of 64 input channels
* ``window512`` the same weights, attention limited to the last 512 tokens in every layer
                (a llama checkpoint re-declared as mistral, which has the sliding window)

Quantization is simulated: weights are rounded to the grid and stored back in float32,
so the numbers are those of the quantized model on any runtime. Every ``nn.Linear``
except the LM head is rounded (the LM head shares its weight with the embeddings).
"""
from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path
from typing import Any, Callable

VARIANTS = ("int8", "int4-g64", "int2-g64", "window512")


def round_to_nearest_(model: Any, bits: int, group: int | None) -> None:
    """Asymmetric min-max rounding to ``2**bits`` levels per group (``None``: per channel)."""
    import torch

    levels = 2**bits - 1
    with torch.no_grad():
        for name, module in model.named_modules():
            if not isinstance(module, torch.nn.Linear) or name.endswith("lm_head"):
                continue
            weight = module.weight  # [out, in]
            size = group or weight.shape[1]
            grouped = weight.reshape(weight.shape[0], -1, size)  # [out, in / size, size]
            low = grouped.amin(dim=-1, keepdim=True)
            scale = (grouped.amax(dim=-1, keepdim=True) - low).clamp(min=1e-12) / levels
            grouped.copy_(torch.round((grouped - low) / scale).clamp(0, levels) * scale + low)


def local_window(folder: Path, window: int) -> None:
    """Re-declare a saved llama checkpoint as mistral with a sliding window of ``window``."""
    path = folder / "config.json"
    config = json.loads(path.read_text())
    if config["model_type"] not in ("llama", "mistral"):
        raise SystemExit(f"local window: {config['model_type']} checkpoints are not supported, only llama/mistral")
    config.update(model_type="mistral", architectures=["MistralForCausalLM"], sliding_window=window)
    path.write_text(json.dumps(config, indent=2))


def build(model_ref: str, out: Path, names: tuple[str, ...] = VARIANTS) -> dict[str, Path]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from pytest_longctx.models import resolve_model

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
        model = AutoModelForCausalLM.from_pretrained(source, dtype="float32").eval()
        steps[name](model)
        partial = out / f".{name}.partial"
        shutil.rmtree(partial, ignore_errors=True)
        model.save_pretrained(partial)
        AutoTokenizer.from_pretrained(source).save_pretrained(partial)
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
