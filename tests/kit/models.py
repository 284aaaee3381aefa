"""Tiny models made offline from a config (qwen3, qwen3_5, llama), trained or damaged copies of
them, and saving a model with its tokenizer as a folder the backends load. torch and
transformers are imported by each function, so importing this module needs neither."""
from __future__ import annotations

from pathlib import Path
from typing import Any

PLANTED = (1, 3)  # the decoder layers ``damaged`` puts its noise in unless told others
DEGRADE = dict(scale=0.6, seed=3)  # the noise of ``degraded_model``: the plugin's and the reports' failing candidate


def tiny_qwen3(vocab_size: int, seed: int = 0, layers: int = 2, init: float = 0.2, width: int = 32,
               intermediate: int | None = None, context: int = 65536) -> Any:
    """A randomly initialised qwen3 model small enough to run anywhere in milliseconds (``width`` 64 for
    a library whose blocks of 64 weights must fit in a layer's input): 4 heads, 2 of keys and values,
    an MLP ``intermediate`` wide (twice ``width`` unless given), weights drawn with std ``init``
    (transformers' default is 0.02), ``context`` positions, an LM head of its own."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen3Config

    config = Qwen3Config(
        vocab_size=vocab_size, hidden_size=width, intermediate_size=intermediate or 2 * width, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, head_dim=width // 4, max_position_embeddings=context,
        initializer_range=init, tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()


def tiny_qwen3_5(vocab_size: int, seed: int = 0) -> Any:
    """A randomly initialised hybrid model: linear-attention layers carry a recurrent state."""
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.models.qwen3_5 import Qwen3_5TextConfig

    config = Qwen3_5TextConfig(
        vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, linear_key_head_dim=8, linear_value_head_dim=8, linear_num_key_heads=2,
        linear_num_value_heads=4, initializer_range=0.2,
    )
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()


def tiny_llama(vocab_size: int, seed: int = 0, layers: int = 2, width: int = 64, intermediate: int | None = None,
               heads: int = 4, kv_heads: int = 2, context: int = 4096, tied: bool = True) -> Any:
    """A randomly initialised llama model in float32 at transformers' default initialisation: ``heads``
    attention heads of ``width // heads``, ``kv_heads`` of keys and values, an MLP ``intermediate`` wide
    (twice ``width`` unless given), ``context`` positions, the LM head ``tied`` to the embeddings or not."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=vocab_size, hidden_size=width, intermediate_size=intermediate or 2 * width,
                         num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
                         max_position_embeddings=context, tie_word_embeddings=tied)
    torch.manual_seed(seed)
    return LlamaForCausalLM(config).to(torch.float32).eval()


def tiny_decoder(kind: str, vocab_size: int, layers: int = 3) -> Any:
    """The KV-cache and press tests' model: a llama or a qwen3 (``kind``) of ``layers`` layers, 64 wide,
    an MLP of 96, 512 positions, at transformers' default initialisation, seeded 0."""
    shape = dict(layers=layers, width=64, intermediate=96, context=512)
    if kind == "llama":
        return tiny_llama(vocab_size, tied=False, **shape)
    return tiny_qwen3(vocab_size, init=0.02, **shape)


def training_sequences(rows: dict[tuple[str, str], list[dict[str, Any]]], tokenizer: Any) -> list[list[int]]:
    """The texts of the test items as token ids; in the rules texts with the rule, the
    governed action's first token is replaced by the rule's, so a model trained on them
    reacts to the rule."""
    sequences = set()
    for (config, _), split_rows in rows.items():
        for row in split_rows:
            if not config.startswith("rules"):
                sequences.add(tuple(tokenizer(row["text"], add_special_tokens=False)["input_ids"]))
                continue
            sequences.add(tuple(tokenizer(row["text_without_rule"], add_special_tokens=False)["input_ids"]))
            enc = tokenizer(row["text_with_rule"], add_special_tokens=False, return_offsets_mapping=True)
            ids = list(enc["input_ids"])
            starts = {start: i for i, (start, _) in reversed(list(enumerate(enc["offset_mapping"])))}
            for t in row["targets"]:
                ids[starts[t["char_with_rule"][0]]] = tokenizer(t["expected_text"], add_special_tokens=False)["input_ids"][0]
            sequences.add(tuple(ids))
    return [list(s) for s in sorted(sequences)]


def trained_qwen3(sequences: list[list[int]], vocab_size: int, steps: int = 60, seed: int = 0) -> Any:
    """A tiny qwen3 that has memorised ``sequences``, so its predictions hit and rules move
    them: trained over the ids the sequences use, then spread over the full vocabulary
    (unused ids get zero embeddings and zero logits)."""
    import torch

    used = sorted({t for s in sequences for t in s})
    index = {t: i for i, t in enumerate(used)}
    width = max(map(len, sequences))
    inputs = torch.zeros(len(sequences), width, dtype=torch.long)
    labels = torch.full((len(sequences), width), -100)
    for row, sequence in enumerate(sequences):
        compact = torch.tensor([index[t] for t in sequence])
        inputs[row, : len(compact)] = compact
        labels[row, : len(compact) - 1] = compact[1:]  # right padding never reaches a causal model's real tokens
    small = tiny_qwen3(len(used), seed=seed)
    small.train()
    optimizer = torch.optim.Adam(small.parameters(), lr=2e-2)
    for _ in range(steps):
        logits = small(inputs).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    full = tiny_qwen3(vocab_size, seed=seed)
    state = small.state_dict()
    with torch.no_grad():
        for name, tensor in full.state_dict().items():
            if name in ("model.embed_tokens.weight", "lm_head.weight"):
                tensor.zero_()
                tensor[torch.tensor(used)] = state[name]
            else:
                tensor.copy_(state[name])
    return full.eval()


def perturbed(model: Any, scale: float, seed: int = 0) -> Any:
    """A copy of ``model`` with Gaussian noise of ``scale`` times each tensor's std added."""
    import copy

    import torch

    noisy = copy.deepcopy(model)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for tensor in noisy.parameters():
            if tensor.numel() > 1:
                tensor.add_(torch.randn(tensor.shape, generator=generator) * tensor.std() * scale)
    return noisy


def degraded_model(model: Any) -> Any:
    """The failing candidate of the plugin and report tests: ``model`` with the noise of ``DEGRADE``."""
    return perturbed(model, DEGRADE["scale"], seed=DEGRADE["seed"])


def damaged(model: Any, layers: tuple[int, ...] = PLANTED, scale: float = 1.0) -> Any:
    """A copy of ``model`` with heavy noise in the given decoder layers only."""
    import copy

    import torch

    noisy = copy.deepcopy(model)
    generator = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for name, tensor in noisy.named_parameters():
            if any(name.startswith(f"model.layers.{n}.") for n in layers) and tensor.numel() > 1:
                tensor.add_(torch.randn(tensor.shape, generator=generator) * tensor.std() * scale)
    return noisy


def save_model(folder: Path, model: Any, tokenizer: Any = None) -> Path:
    """``model`` saved in ``folder`` as transformers saves it, with ``tokenizer`` beside it when
    given (the text mode and the plugin read it from there); the folder."""
    model.save_pretrained(folder)
    if tokenizer is not None:
        tokenizer.save_pretrained(folder)
    return folder


def with_biases(vocab_size: int, seed: int = 3, layers: int = 4):
    """A tiny qwen3 whose attention projections have biases: a constant written into the residual stream."""
    import torch
    from transformers import AutoModelForCausalLM

    config = tiny_qwen3(vocab_size, seed=seed, layers=layers, init=0.5).config
    config.attention_bias = True
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()


def cancelling(vocab_size: int, seed: int = 3, layers: int = 4):
    """An original whose residual channels 0 and 1 pass layer 1's MLP and layer 2's attention unread (their
    norms' weights are 0 there), and a candidate whose layer 1 writes a constant into those channels (the
    attention's output bias) that layer 2 half takes back: layer 1's damage hurts alone, and restoring
    layer 2 alone makes it worse (the whole constant then reaches the later layers). Every other layer
    (3 and on, and 0 where there are more than 4) is nudged by a rounding-sized noise, parts in question too."""
    import torch

    original = with_biases(vocab_size, seed, layers)
    with torch.no_grad():
        original.model.layers[1].post_attention_layernorm.weight[:2] = 0
        original.model.layers[2].input_layernorm.weight[:2] = 0
    written = torch.zeros(original.config.hidden_size)
    written[0], written[1] = 64.0, -44.8
    candidate = damaged(original, layers=(3,) if layers == 4 else (0, *range(3, layers)), scale=1e-3)
    with torch.no_grad():
        candidate.model.layers[1].self_attn.o_proj.bias.add_(written)
        candidate.model.layers[2].self_attn.o_proj.bias.add_(-0.5 * written)
    return original, candidate
