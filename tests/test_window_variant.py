"""benchmarks/variants.py's far-blind variant on a qwen2 checkpoint (Qwen2.5-Coder's architecture): its own
sliding window switched on in every layer. With one layer a token sees exactly the last ``window`` tokens,
and RoPE makes attention depend on relative positions only, so the windowed model's prediction after a long
sequence equals the plain model's after that sequence's last ``window`` tokens; the engine reads it so too,
in calls shorter than the sequence (the sliding cache is copied, not cut, at branch points)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from kit.needs import needs

sys.path.insert(0, str(Path(__file__).parent.parent / "benchmarks"))

pytestmark = needs("torch", "transformers", install='pip install -e ".[hf]"')
WINDOW = 4


def tiny_qwen2(folder: Path) -> Path:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
                         num_key_value_heads=2, max_position_embeddings=256)
    torch.manual_seed(0)
    Qwen2ForCausalLM(config).eval().save_pretrained(folder)
    return folder


def test_a_qwen2_window_variant_sees_exactly_its_last_tokens(tmp_path):
    import torch
    from transformers import AutoModelForCausalLM

    from pytest_longctx.backends.hf import TransformersBackend
    from variants import local_window

    plain_folder = tiny_qwen2(tmp_path / "plain")
    windowed_folder = tiny_qwen2(tmp_path / "windowed")
    local_window(windowed_folder, WINDOW)
    config = json.loads((windowed_folder / "config.json").read_text())
    assert (config["model_type"], config["sliding_window"], set(config["layer_types"])) == ("qwen2", WINDOW, {"sliding_attention"})
    plain = AutoModelForCausalLM.from_pretrained(plain_folder, dtype=torch.float32).eval()
    windowed = AutoModelForCausalLM.from_pretrained(windowed_folder, dtype=torch.float32).eval()
    ids = torch.randint(0, 64, (1, 20), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        last = windowed(ids).logits[0, -1].log_softmax(-1)
        tail = plain(ids[:, -WINDOW:]).logits[0, -1].log_softmax(-1)
        whole = plain(ids).logits[0, -1].log_softmax(-1)
    assert torch.allclose(last, tail, atol=1e-5)
    assert (last - whole).abs().max() > 1e-3  # the plain model does see further back
    # the engine's backend, in calls of 3 tokens carrying the sliding cache, reads the same
    backend = TransformersBackend(windowed, chunk_size=3)
    read = backend.read(ids[0].tolist(), [19], [[5, 7]])
    assert read.top1 == [int(last.argmax())]
    assert read.logprobs[0] == pytest.approx([float(last[5]), float(last[7])], abs=1e-5)
