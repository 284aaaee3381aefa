"""The INT8 W8A8 checkpoint benchmarks/variants.py writes for vLLM (``w8a8-int8``, the
compressed-tensors format): int8 weights whose scales give the float weights back to half a
step, every other tensor as it was, and the config fields vLLM's loader reads to choose its
int8 scheme. Plain torch and safetensors; tests/test_vllm.py runs such a checkpoint in vLLM."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from conftest import needs, tiny_qwen3

pytestmark = needs("torch", "transformers", "safetensors", install='pip install -e ".[hf]"')


def test_the_w8a8_checkpoint_holds_int8_weights_per_channel_and_the_scheme_vllm_reads(tmp_path):
    import torch
    from safetensors.torch import load_file

    sys.path.insert(0, str(Path(__file__).parent.parent / "benchmarks"))
    from variants import linear_layers, write_w8a8

    model = tiny_qwen3(vocab_size=64)
    model.save_pretrained(tmp_path)
    before = load_file(tmp_path / "model.safetensors")
    layers = list(linear_layers(model))
    assert len(layers) == 2 * 7 and "lm_head" not in layers  # q, k, v, o, gate, up, down in each of 2 layers
    write_w8a8(tmp_path, layers)
    after = load_file(tmp_path / "model.safetensors")

    for layer in layers:
        weight, scale, float_weight = after[f"{layer}.weight"], after[f"{layer}.weight_scale"], before[f"{layer}.weight"]
        assert weight.dtype == torch.int8 and scale.dtype == torch.float32 and scale.shape == (float_weight.shape[0], 1)
        # symmetric, one scale per output channel: its largest magnitude at 127, every weight to nearest
        assert torch.equal(weight.abs().amax(dim=1), torch.full((weight.shape[0],), 127, dtype=torch.int8))
        assert ((weight.float() * scale - float_weight).abs() <= scale * (0.5 + 1e-5)).all(), layer
        assert (weight.float() * scale - float_weight).abs().max() > 0  # it did round
    untouched = set(before) - {f"{layer}.weight" for layer in layers}
    assert {"lm_head.weight", "model.embed_tokens.weight", "model.norm.weight"} <= untouched
    assert set(after) == set(before) | {f"{layer}.weight_scale" for layer in layers}
    assert all(torch.equal(after[name], before[name]) for name in untouched)

    config = json.loads((tmp_path / "config.json").read_text())
    assert config["model_type"] == "qwen3"  # the model's own config is kept
    quantization = config["quantization_config"]
    # what vLLM's compressed-tensors loader reads to pick CompressedTensorsW8A8Int8 (dynamic per token)
    assert quantization["quant_method"] == "compressed-tensors" and quantization["format"] == "int-quantized"
    assert quantization["ignore"] == ["lm_head"]
    (group,) = quantization["config_groups"].values()
    assert group["targets"] == ["Linear"]
    weights, inputs = group["weights"], group["input_activations"]
    assert (weights["num_bits"], weights["type"], weights["symmetric"], weights["strategy"], weights["dynamic"]) == \
        (8, "int", True, "channel", False)
    assert (inputs["num_bits"], inputs["type"], inputs["symmetric"], inputs["strategy"], inputs["dynamic"]) == \
        (8, "int", True, "token", True)
