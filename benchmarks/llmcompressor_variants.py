"""Checkpoints made by llm-compressor itself (``oneshot``, saved compressed in the
compressed-tensors format vLLM serves), to gate with the transformers backend in the main
environment (docs/backends.md#llm-compressor-checkpoints). llm-compressor pins an older
transformers and compressed-tensors, so this runs in an environment of its own:

    bash scripts/setup-venv.sh .llmcompressor-venv llmcompressor
    .llmcompressor-venv/bin/python benchmarks/llmcompressor_variants.py --out variants/llmcompressor
    .llmcompressor-venv/bin/python benchmarks/llmcompressor_variants.py --model smollm2-135m --text FILE --out OUT \\
        --only w4a16-g64,w8a8,w4a16-gptq-g64
    .llmcompressor-venv/bin/python benchmarks/llmcompressor_variants.py --model FLOAT --recipe fix.yaml --out FIXED

``--recipe``: one checkpoint, in OUT itself, made with a recipe file such as the one ``longctx
blame`` prints for a candidate llm-compressor made (its fix set's layers in the ignore lists).

Without ``--model`` the float model is a tiny random qwen3 (width 128, 2 layers, 128 tokens;
``--tiny llama``: a Llama of that shape with SmolLM2's 49,152 tokens) made here and saved in
``OUT/float``: what the tests read the checkpoints against. Kinds
(every linear layer but the LM head unless said):

* ``w4a16``: the preset scheme W4A16 (int4 weights in groups of 128), round to nearest
* ``w4a16-gN``: int4 weights in groups of N (N must divide every layer's input width), round to nearest
* ``w4a16-ignore``: W4A16 with the first layer's attention and every ``down_proj`` left in float
  (the recipe's ``ignore`` list)
* ``w8a8``: W8A8, int8 weights per channel and int8 activations rounded per token as the model
  runs (vLLM's int8 kernels), round to nearest
* ``w8a8-smoothquant``: SmoothQuant (strength 0.8), then W8A8
* ``w8a16``: the preset W8A16 (int8 weights in groups of 128), round to nearest
* ``fp8-dynamic``: FP8_DYNAMIC, float8 (e4m3) weights per channel and float8 activations rounded
  per token as the model runs
* ``fp8-block``: FP8_BLOCK, float8 weights in blocks of 128x128 and float8 activations rounded in
  groups of 128 as the model runs
* ``nvfp4a16``: NVFP4A16, float4 (e2m1) weights in groups of 16 with float8 scales and one float32
  scale per tensor
* ``mxfp4a16``: MXFP4A16, float4 (e2m1) weights in groups of 32 with power-of-two scales
* ``w8a8-kv-fp8``: W8A8 with a float8 KV cache (``kv_cache_scheme``: e4m3, one scale per layer for
  keys and one for values, calibrated), as vLLM serves with ``kv-cache-dtype=fp8``
* ``w4a16-asym``: W4A16_ASYM, int4 weights in groups of 128 with zero points (packed eight to a
  word), which transformers 5.25 with compressed-tensors 0.20 does not load (tests/test_llmcompressor_checkpoints.py)
* ``w4a16-gptq`` / ``w4a16-gptq-gN``: GPTQ in groups of 128 / N
* ``w4a16-awq-gN``: AWQ's activation-aware scales (llm-compressor's own mappings for the
  architecture), then int4 in groups of N, round to nearest
* ``w4a16-autoround-gN``: AutoRound (the auto-round library inside llm-compressor, ``--iters``
  steps of signed gradient descent per decoder layer), int4 in groups of N

The calibrated kinds (SmoothQuant, GPTQ, AWQ, AutoRound, the KV cache's scales) read ``--samples`` sequences of ``--seq`` tokens: cut
from ``--text`` when given, else random token ids (enough to exercise the tiny model, meaningless
for a real one). ``OUT/made.json`` records each kind's seconds, recipe and the versions used.
"""
from __future__ import annotations

import argparse
import json
import re
import time
from pathlib import Path
from typing import Any

KINDS = ("w4a16", "w4a16-g32", "w4a16-ignore", "w8a8", "w8a8-smoothquant", "w4a16-gptq", "w4a16-awq-g32",
         "w4a16-autoround-g32", "w8a16", "fp8-dynamic", "fp8-block", "nvfp4a16", "mxfp4a16", "w4a16-asym", "w8a8-kv-fp8")
# the kinds that are one of llm-compressor's preset schemes, rounded to nearest, by the preset's name
PRESETS = {"w8a8": "W8A8", "w8a16": "W8A16", "fp8-dynamic": "FP8_DYNAMIC", "fp8-block": "FP8_BLOCK",
           "nvfp4a16": "NVFP4A16", "mxfp4a16": "MXFP4A16", "w4a16-asym": "W4A16_ASYM"}
# the first layer's attention and every layer's down_proj stay in float in ``w4a16-ignore``
IGNORED = ["lm_head", r"re:.*layers\.0\.self_attn\..*", r"re:.*mlp\.down_proj$"]
SMOOTHING = 0.8
# llm-compressor's float8 KV cache: static scales per tensor, calibrated on the keys after their rotary embedding
FP8_CACHE = {"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": False, "symmetric": True}
ITERS = 200  # AutoRound's default steps per decoder layer


def tiny_float_model(out: Path, architecture: str = "qwen3") -> Path:
    """A random qwen3 small enough to quantize in a second, wide enough (128, 256) for the
    preset groups of 128, saved in float32; ``llama``: the same shape as a Llama with SmolLM2's
    vocabulary size, which tests/test_vllm.py runs in vLLM with SmolLM2's tokenizer."""
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig, Qwen3Config

    kind, vocab_size = (LlamaConfig, 49152) if architecture == "llama" else (Qwen3Config, 128)
    config = kind(vocab_size=vocab_size, hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=32, max_position_embeddings=4096, tie_word_embeddings=False)
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config, dtype=torch.float32).save_pretrained(out)
    return out


def int4_groups(group_size: int) -> dict[str, Any]:
    """One scheme: int4 weights, symmetric, in groups of ``group_size``, activations left in float."""
    return {"group_0": {"targets": ["Linear"], "weights": {"num_bits": 4, "type": "int", "symmetric": True,
                                                           "strategy": "group", "group_size": group_size}}}


def recipe(kind: str, iters: int = ITERS) -> tuple[list[Any], bool]:
    """The modifiers that make ``kind``, and whether they read calibration data."""
    from llmcompressor.modifiers.quantization import GPTQModifier, QuantizationModifier
    from llmcompressor.modifiers.smoothquant import SmoothQuantModifier

    grouped = re.fullmatch(r"w4a16(?:-(gptq|awq|autoround))?(?:-g(\d+))?", kind)
    if grouped:
        method, group = grouped.groups()
        scheme: dict[str, Any] = {"config_groups": int4_groups(int(group))} if group else {"scheme": "W4A16"}
        if method == "gptq":
            return [GPTQModifier(targets="Linear", ignore=["lm_head"], **scheme)], True
        if method == "awq":
            import torch
            from llmcompressor.modifiers.transform import AWQModifier
            from llmcompressor.pipelines.cache import IntermediatesCache

            if not torch.accelerator.is_available():
                # llm-compressor 0.14's AWQ pins its cached activations for faster copies to the
                # accelerator and fails without one; pinning changes no value, so it is skipped
                IntermediatesCache.pin_memory = lambda self, *args, **kwargs: None

            return [AWQModifier(), QuantizationModifier(targets="Linear", ignore=["lm_head"], **scheme)], True
        if method == "autoround":
            from llmcompressor.modifiers.autoround import AutoRoundModifier

            return [AutoRoundModifier(targets="Linear", ignore=["lm_head"], iters=iters, enable_torch_compile=False,
                                      **scheme)], True
        return [QuantizationModifier(targets="Linear", ignore=["lm_head"], **scheme)], False
    if kind == "w4a16-ignore":
        return [QuantizationModifier(targets="Linear", scheme="W4A16", ignore=IGNORED)], False
    if kind in PRESETS:
        return [QuantizationModifier(targets="Linear", scheme=PRESETS[kind], ignore=["lm_head"])], False
    if kind == "w8a8-kv-fp8":
        return [QuantizationModifier(targets="Linear", scheme="W8A8", ignore=["lm_head"], kv_cache_scheme=FP8_CACHE)], True
    if kind == "w8a8-smoothquant":
        return [SmoothQuantModifier(smoothing_strength=SMOOTHING),
                QuantizationModifier(targets="Linear", scheme="W8A8", ignore=["lm_head"])], True
    raise ValueError(f"unknown kind {kind!r}: expected one of {', '.join(KINDS)} (w4a16-gN, w4a16-gptq-gN for other groups)")


def calibration(tokenizer: Any, text: Path | None, vocab_size: int, samples: int, seq: int) -> Any:
    """``samples`` sequences of ``seq`` token ids as a dataset: consecutive pieces of ``text``, or random ids."""
    import torch
    from datasets import Dataset

    if text is not None:
        ids = tokenizer(text.read_text(), add_special_tokens=False)["input_ids"]
        if len(ids) < samples * seq:
            raise SystemExit(f"--text {text}: {len(ids)} tokens, fewer than --samples {samples} x --seq {seq}")
        rows = [ids[i * seq:(i + 1) * seq] for i in range(samples)]
    else:
        rows = torch.randint(0, vocab_size, (samples, seq), generator=torch.Generator().manual_seed(1)).tolist()
    return Dataset.from_dict({"input_ids": rows, "attention_mask": [[1] * seq for _ in rows]})


def from_file(path: Path) -> tuple[str, bool]:
    """A recipe file as ``oneshot`` takes it, and whether it reads calibration data (a calibrated
    modifier's name in it)."""
    text = path.read_text()
    return str(path), bool(re.search(r"\b(GPTQ|AWQ|AutoRound|SmoothQuant)Modifier\b", text))


def make(kind: str, source: Path, out: Path, data: Any, samples: int, seq: int, recipe_file: Path | None = None,
         iters: int = ITERS) -> dict[str, Any]:
    """The checkpoint ``kind`` (or the one ``recipe_file`` makes) of the float model in ``source``, made
    by ``oneshot`` and saved compressed in ``out``; what it took."""
    import torch
    from llmcompressor import oneshot
    from transformers import AutoModelForCausalLM

    started = time.perf_counter()
    modifiers, calibrated = from_file(recipe_file) if recipe_file else recipe(kind, iters)
    model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32)
    extra = {"dataset": data, "num_calibration_samples": samples, "max_seq_length": seq} if calibrated else {}
    oneshot(model=model, recipe=modifiers, **extra)
    model.save_pretrained(out, save_compressed=True)  # with the recipe beside it, as llm-compressor saves
    return {"seconds": round(time.perf_counter() - started, 1), "calibration_samples": samples if calibrated else 0}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="a float model folder or alias, e.g. smollm2-135m (default: a tiny random model, "
                                        "made in OUT/float)")
    parser.add_argument("--tiny", choices=("qwen3", "llama"), default="qwen3", help="the tiny random model's architecture")
    parser.add_argument("--out", type=Path, required=True, help="a folder per kind is written under it")
    parser.add_argument("--only", default=",".join(KINDS), help=f"comma-separated kinds (default {','.join(KINDS)})")
    parser.add_argument("--text", type=Path, help="a text file the calibrated kinds read (default: random token ids)")
    parser.add_argument("--samples", type=int, default=16, help="calibration sequences (default 16)")
    parser.add_argument("--seq", type=int, default=256, help="tokens per calibration sequence (default 256)")
    parser.add_argument("--iters", type=int, default=ITERS, help=f"AutoRound's steps per decoder layer (default {ITERS})")
    parser.add_argument("--recipe", type=Path, help="make one checkpoint in OUT with this recipe file instead of the kinds")
    args = parser.parse_args(argv)
    from importlib.metadata import version

    from transformers import AutoConfig, AutoTokenizer

    from pytest_longctx.backends.aliases import resolve_model

    if args.recipe and not args.model:
        parser.error("--recipe needs --model, the float model it was made from")
    source = Path(resolve_model(args.model)) if args.model else tiny_float_model(args.out / "float", args.tiny)
    has_tokenizer = any((source / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json"))
    tokenizer = AutoTokenizer.from_pretrained(source) if has_tokenizer else None
    if args.text and tokenizer is None:
        parser.error(f"--text: {source} has no tokenizer to cut it into tokens")
    vocab_size = AutoConfig.from_pretrained(source).vocab_size
    data = calibration(tokenizer, args.text, vocab_size, args.samples, args.seq)
    record = args.out / "made.json"  # kept across runs into the same OUT: one entry per kind made
    made: dict[str, Any] = json.loads(record.read_text()) if record.is_file() else {"kinds": {}}
    made.update({"float": str(source), "versions": {name: version(name) for name in (
        "llmcompressor", "compressed-tensors", "transformers", "torch", "auto-round")}})
    kinds = [("recipe", args.out)] if args.recipe else [(k.strip(), args.out / k.strip()) for k in args.only.split(",")]
    for kind, folder in kinds:
        made["kinds"][kind] = make(kind, source, folder, data, args.samples, args.seq, args.recipe, args.iters)
        if tokenizer is not None:
            tokenizer.save_pretrained(folder)  # the text mode reads it beside the weights
        print(f"{folder}: {made['kinds'][kind]['seconds']} s", flush=True)
        args.out.mkdir(parents=True, exist_ok=True)
        record.write_text(json.dumps(made, indent=1) + "\n")


if __name__ == "__main__":
    main()
