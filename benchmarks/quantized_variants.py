"""A model quantized by the libraries that run on the CPU beside the main stack, each checkpoint
saved as its library saves it, to gate with the transformers backend
(docs/backends.md#quantized-checkpoints). Round to nearest, every linear layer but the LM head:

* ``torchao-int8``: torchao int8 weight-only, through transformers' TorchAoConfig
* ``torchao-intB-gN``: torchao B-bit weight-only in groups of N, B from 1 to 8 (IntxWeightOnlyConfig,
  symmetric: the layout that runs and saves on the CPU; Int4WeightOnlyConfig's default needs a CUDA library)
* ``torchao-int8-dynamic``: torchao int8 weights per channel, int8 activations rounded per token
  as the model runs
* ``autoround-gN``: int4 in groups of N by auto-round's own API in its round-to-nearest mode (no
  tuning steps, no calibration data), saved in its own format (``auto_round``, GPTQ-style
  packing), which transformers runs through auto-round's kernels
* ``gptq-gN``, ``awq-gN``: the same rounding exported by auto-round in the GPTQ and AWQ formats
  (``quant_method`` gptq, awq), which transformers runs through gptqmodel (an environment of its
  own: scripts/setup-venv.sh DIR gptqmodel)
* ``bnb-nf4``, ``bnb-int8``: bitsandbytes nf4 (computed in float32) and LLM.int8(), through BitsAndBytesConfig
* ``ct-w4a16-gN``: compressed-tensors W4A16 in groups of N (``pack-quantized``)
* ``ct-w8a8``: compressed-tensors W8A8, int8 weights per channel, int8 activations dynamic per token
  (``int-quantized``)

The compressed-tensors checkpoints are made with compressed-tensors' own API, as llm-compressor
writes them after a round-to-nearest pass (llm-compressor pins an older transformers).

    python benchmarks/quantized_variants.py --out variants/quantized             # SmolLM2-135M-Instruct, every kind
    python benchmarks/quantized_variants.py --model DIR --out OUT --only bnb-nf4,ct-w4a16-g64
"""
from __future__ import annotations

import argparse
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

KINDS = ("torchao-int8", "torchao-int4-g64", "torchao-int8-dynamic", "autoround-g64", "bnb-nf4", "bnb-int8", "ct-w4a16-g64",
         "ct-w8a8")
W8_CHANNEL = {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "channel"}
A8_TOKEN = {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "token", "dynamic": True}


def w4a16(group_size: int) -> dict[str, Any]:
    return {"num_bits": 4, "type": "int", "symmetric": True, "strategy": "group", "group_size": group_size}


def saved_by_transformers(source: Path, out: Path, quantization_config: Any, **loading: Any) -> Path:
    """``source`` quantized on load by transformers with ``quantization_config``, saved."""
    import torch
    from transformers import AutoModelForCausalLM

    AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32, quantization_config=quantization_config,
                                         **loading).save_pretrained(out)
    return out


def saved_by_compressed_tensors(source: Path, out: Path, weights: dict[str, Any], inputs: dict[str, Any] | None = None,
                                form: str = "pack-quantized") -> Path:
    """``source`` with compressed-tensors' scheme on every linear layer but the LM head, each
    weight's scales from its range (round to nearest), compressed into ``form`` and saved with
    its quantization_config."""
    import torch
    from compressed_tensors.compressors import ModelCompressor
    from compressed_tensors.quantization import (
        QuantizationArgs,
        QuantizationConfig,
        QuantizationScheme,
        QuantizationStatus,
        apply_quantization_config,
    )
    from compressed_tensors.quantization.utils import calculate_qparams
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32)
    scheme = QuantizationScheme(targets=["Linear"], weights=QuantizationArgs(**weights),
                                input_activations=QuantizationArgs(**inputs) if inputs else None)
    apply_quantization_config(model, QuantizationConfig(config_groups={"group_0": scheme}, ignore=["lm_head"], format=form))
    with torch.no_grad():
        for module in model.modules():
            args = getattr(getattr(module, "quantization_scheme", None), "weights", None)
            if args is None:
                continue
            weight = module.weight.unflatten(-1, (-1, args.group_size)) if args.group_size else module.weight[:, None]
            scale, zero_point = calculate_qparams(weight.amin(-1), weight.amax(-1), args)
            module.weight_scale.copy_(scale.reshape(module.weight_scale.shape))
            module.weight_zero_point.copy_(zero_point.reshape(module.weight_zero_point.shape))
            module.quantization_status = QuantizationStatus.FROZEN
    compressor = ModelCompressor.from_pretrained_model(model, quantization_format=form)
    compressor.compress_model(model)
    model.save_pretrained(out)
    compressor.update_config(out)
    return out


def saved_by_auto_round(source: Path, out: Path, group_size: int, form: str = "auto_round", symmetric: bool = True) -> Path:
    """``source`` rounded to int4 in groups of ``group_size`` by auto-round (``iters=0``: to nearest,
    which reads no data), saved in ``form`` (auto-round's own format, auto_gptq or auto_awq; ``symmetric``
    False: with zero points, which auto-round's own format packs as AWQ does). Its API asks for a tokenizer even then:
    the model's own, or for a folder without one a word-level one over its vocabulary (never used)."""
    import torch
    from auto_round import AutoRound
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast

    if any((source / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json")):
        tokenizer = AutoTokenizer.from_pretrained(source)
    else:
        from tokenizers import Tokenizer
        from tokenizers.models import WordLevel

        vocabulary = {str(i): i for i in range(AutoConfig.from_pretrained(source).vocab_size)}
        tokenizer = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(WordLevel(vocab=vocabulary, unk_token="0")))
    model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32)
    rounding = AutoRound(model, tokenizer=tokenizer, bits=4, group_size=group_size, sym=symmetric, iters=0, disable_opt_rtn=True)
    # quantize_and_save, not quantize() then save_quantized(): auto-round 0.16 packs asymmetric layers for its own
    # format only when it knows the format before rounding (else its export fails in WQLinear_GEMM); it writes
    # into a folder named for the model and its bits under the one given, moved up here
    with tempfile.TemporaryDirectory(dir=out.parent if out.parent.exists() else None) as work:
        rounding.quantize_and_save(work, format=form)
        [written] = {p.parent for p in Path(work).glob("**/config.json")}
        out.mkdir(parents=True, exist_ok=True)
        for file in written.iterdir():
            shutil.move(str(file), str(out / file.name))
    return out


def make(kind: str, source: Path, out: Path) -> Path:
    """The checkpoint ``kind`` (see the module docstring) of the float model in ``source``, saved in ``out``."""
    import torch
    from transformers import BitsAndBytesConfig, TorchAoConfig

    grouped = re.fullmatch(r"ct-w4a16-g(\d+)", kind)
    intx = re.fullmatch(r"torchao-int([1-8])-g(\d+)", kind)
    autoround = re.fullmatch(r"(autoround|gptq|awq)-g(\d+)", kind)
    if autoround:
        form = {"autoround": "auto_round", "gptq": "auto_gptq", "awq": "auto_awq"}[autoround.group(1)]
        return saved_by_auto_round(source, out, int(autoround.group(2)), form)
    if kind == "torchao-int8":
        from torchao.quantization import Int8WeightOnlyConfig

        return saved_by_transformers(source, out, TorchAoConfig(Int8WeightOnlyConfig()))
    if intx:
        from torchao.quantization import IntxWeightOnlyConfig, PerGroup

        bits, group = intx.groups()
        return saved_by_transformers(source, out, TorchAoConfig(IntxWeightOnlyConfig(weight_dtype=getattr(torch, f"int{bits}"),
                                                                                      granularity=PerGroup(int(group)))))
    if kind == "torchao-int8-dynamic":
        from torchao.quantization import Int8DynamicActivationInt8WeightConfig

        return saved_by_transformers(source, out, TorchAoConfig(Int8DynamicActivationInt8WeightConfig()))
    if kind == "bnb-nf4":
        return saved_by_transformers(source, out, BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                                                     bnb_4bit_compute_dtype=torch.float32), device_map="cpu")
    if kind == "bnb-int8":
        return saved_by_transformers(source, out, BitsAndBytesConfig(load_in_8bit=True), device_map="cpu")
    if grouped:
        return saved_by_compressed_tensors(source, out, w4a16(int(grouped.group(1))))
    if kind == "ct-w8a8":
        return saved_by_compressed_tensors(source, out, W8_CHANNEL, A8_TOKEN, form="int-quantized")
    raise ValueError(f"unknown kind {kind!r}: expected one of {', '.join(KINDS)} "
                     "(ct-w4a16-gN, torchao-intB-gN, autoround-gN, gptq-gN, awq-gN for other groups)")


def build(model: str, out: Path, kinds: tuple[str, ...]) -> dict[str, Path]:
    """Each of ``kinds`` of ``model`` (a folder or alias) in ``out/KIND`` with the model's tokenizer beside it
    (the text mode reads it there), made once: a folder holding a config.json already is kept."""
    from transformers import AutoTokenizer

    from pytest_longctx.backends.aliases import resolve_model

    source = Path(resolve_model(model))
    built = {kind: out / kind for kind in kinds}
    missing = [kind for kind, folder in built.items() if not (folder / "config.json").is_file()]
    tokenizer = AutoTokenizer.from_pretrained(source) if missing else None
    for kind in missing:
        make(kind, source, built[kind])
        tokenizer.save_pretrained(built[kind])
    return built


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m", help="a float model folder, hub id or alias (default smollm2-135m)")
    parser.add_argument("--out", type=Path, required=True, help="a folder per kind is written under it")
    parser.add_argument("--only", default=",".join(KINDS), help=f"comma-separated kinds (default {','.join(KINDS)})")
    args = parser.parse_args(argv)
    for folder in build(args.model, args.out, tuple(kind.strip() for kind in args.only.split(","))).values():
        print(folder)


if __name__ == "__main__":
    main()
