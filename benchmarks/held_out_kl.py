"""How far each checkpoint is from its float model on plain text, beside what the gate measures:

    python benchmarks/held_out_kl.py --model smollm2-135m --text FILE --skip 4096 --tokens 1024 \\
        --checkpoints variants/llmcompressor-smollm2 variants/quantized

reads ``--tokens`` tokens of ``--text`` (after its first ``--skip``: the pieces
``benchmarks/llmcompressor_variants.py`` calibrates on are its first 16 x 256 tokens by default,
so these are text of the same kind that no method saw) with one forward pass through the float
model and through each checkpoint (every folder holding a ``config.json`` under each
``--checkpoints`` folder, loaded by transformers with its own ``quantization_config``), takes a
full-vocabulary log-softmax in float64 at every position, and prints per checkpoint the mean
KL(float || checkpoint) and the share of positions whose most likely token is the float
model's. The calibrated methods (GPTQ, AWQ, AutoRound, SmoothQuant) lower the error on text like
their calibration data; the gate reads far context and tool calls (docs/evidence.md).
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def log_probabilities(folder: str, ids: Any) -> Any:
    """The model in ``folder`` loaded in float32 as the gate's transformers backend loads it (its own
    ``quantization_config``, float4 weights widened to float32), its log-softmax at every position (float64)."""
    import torch

    from pytest_longctx.backends.hf import TransformersBackend

    model = TransformersBackend.load(folder, dtype="float32", device="cpu").model
    with torch.no_grad():
        return torch.log_softmax(model(ids).logits[0].double(), dim=-1)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m", help="the float model: a folder, hub id or alias (default smollm2-135m)")
    parser.add_argument("--text", type=Path, required=True, help="a plain text file")
    parser.add_argument("--skip", type=int, default=4096, help="tokens of --text to leave out first (default 4096)")
    parser.add_argument("--tokens", type=int, default=1024, help="tokens to read (default 1024)")
    parser.add_argument("--checkpoints", type=Path, nargs="+", required=True, help="folders of checkpoints")
    args = parser.parse_args(argv)
    import torch
    from transformers import AutoTokenizer

    from pytest_longctx.backends.aliases import resolve_model

    source = resolve_model(args.model)
    ids = AutoTokenizer.from_pretrained(source)(args.text.read_text(), add_special_tokens=False)["input_ids"]
    piece = ids[args.skip:args.skip + args.tokens]
    if len(piece) < args.tokens:
        parser.error(f"--text {args.text}: {len(ids)} tokens, fewer than --skip {args.skip} + --tokens {args.tokens}")
    batch = torch.tensor([piece])
    reference = log_probabilities(source, batch)
    folders = sorted(p.parent for root in args.checkpoints for p in root.glob("*/config.json") if p.parent.name != "float")
    print(f"{args.tokens} tokens of {args.text.name} after its first {args.skip}, against {args.model}")
    for folder in folders:
        mine = log_probabilities(str(folder), batch)
        kl = (reference.exp() * (reference - mine)).sum(-1).mean().item()
        same = (reference.argmax(-1) == mine.argmax(-1)).double().mean().item()
        print(f"{folder.name}: KL {kl:.4f} nats, same top-1 {same:.3f}")


if __name__ == "__main__":
    main()
