"""Tiny llama GGUF files for the llama.cpp blame tests: random tensors with a fixed seed, SmolLM2's
tokenizer, and the planted pair (an F32 original, a candidate with noise in two layers stored as
Q8_0) with the pins a blame recipe gives it. ``gguf`` is imported by the functions that write."""
from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import numpy as np

from pytest_longctx.backends.llama_cpp.recipe import tensor_pattern
from pytest_longctx.backends.llama_cpp.settings import Settings

HIDDEN, FFN, HEADS, KV_HEADS, LAYERS = 64, 128, 4, 2, 4
PLANTED = (1, 3)  # the layers the planted pair's candidate damages
MATRICES = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")
SETTINGS = Settings(threads=2)


def tensors_of(vocab: int, ffn: int = FFN, head: bool = True) -> dict[str, np.ndarray]:
    """A tiny llama's tensors in numpy order ([out, in]), random with a fixed seed."""
    rng = np.random.default_rng(5)
    kv = HIDDEN // HEADS * KV_HEADS
    shapes = {"token_embd.weight": (vocab, HIDDEN)}
    for n in range(LAYERS):
        shapes |= {f"blk.{n}.attn_norm.weight": (HIDDEN,), f"blk.{n}.attn_q.weight": (HIDDEN, HIDDEN),
                   f"blk.{n}.attn_k.weight": (kv, HIDDEN), f"blk.{n}.attn_v.weight": (kv, HIDDEN),
                   f"blk.{n}.attn_output.weight": (HIDDEN, HIDDEN), f"blk.{n}.ffn_norm.weight": (HIDDEN,),
                   f"blk.{n}.ffn_gate.weight": (ffn, HIDDEN), f"blk.{n}.ffn_up.weight": (ffn, HIDDEN),
                   f"blk.{n}.ffn_down.weight": (HIDDEN, ffn)}
    shapes["output_norm.weight"] = (HIDDEN,)
    if head:
        shapes["output.weight"] = (vocab, HIDDEN)
    return {name: (1.0 + 0.1 * rng.standard_normal(shape) if len(shape) == 1 else 0.5 * rng.standard_normal(shape))
            .astype(np.float32) for name, shape in shapes.items()}


@functools.cache
def smollm2_tokenizer_fields() -> tuple[tuple[str, Any, Any, Any], ...]:
    """(key, value, type, array item type) of each ``tokenizer.`` field of SmolLM2's GGUF, read once per process:
    the gguf package reads a file's 49k token strings one at a time (about 4 s)."""
    from gguf import GGUFReader, GGUFValueType

    from pytest_longctx.backends.aliases import smollm2_gguf

    found = []
    for name, field in GGUFReader(smollm2_gguf()).fields.items():
        if name.startswith("tokenizer."):
            kind = field.types[0]
            found.append((name, field.contents(), kind, field.types[-1] if kind == GGUFValueType.ARRAY else None))
    return tuple(found)


def write_gguf(path: Path, tensors: dict[str, np.ndarray], quantized: set[str] = frozenset(), architecture: str = "llama") -> Path:
    """A llama GGUF of ``tensors`` with SmolLM2's tokenizer; ``quantized`` stored as Q8_0 (and
    the file type then Q8_0, else F32)."""
    from gguf import GGMLQuantizationType, GGUFWriter, LlamaFileType
    from gguf.quants import quantize

    writer = GGUFWriter(path, architecture)
    vocab = len(tensors["token_embd.weight"])
    writer.add_context_length(8192)
    writer.add_embedding_length(HIDDEN)
    writer.add_block_count(LAYERS)
    writer.add_feed_forward_length(len(tensors["blk.0.ffn_up.weight"]))
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_dimension_count(HIDDEN // HEADS)
    writer.add_vocab_size(vocab)
    writer.add_file_type(LlamaFileType.MOSTLY_Q8_0 if quantized else LlamaFileType.ALL_F32)
    for name, value, kind, sub_type in smollm2_tokenizer_fields():
        writer.add_key_value(name, value, kind, sub_type=sub_type)
    for name, values in tensors.items():
        if name in quantized:
            writer.add_tensor(name, quantize(values, GGMLQuantizationType.Q8_0), raw_dtype=GGMLQuantizationType.Q8_0)
        else:
            writer.add_tensor(name, values)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def planted_pair(folder: Path, vocab: int) -> tuple[Path, Path]:
    """The original (F32) and the candidate: planted layers with noise (a third of each tensor's spread: enough to
    fail, not so much that one planted layer alone ruins the model and restoring the other changes nothing) and stored
    as Q8_0."""
    clean = tensors_of(vocab)
    damaged = dict(clean)
    rng = np.random.default_rng(7)
    planted = [f"blk.{n}.{m}.weight" for n in PLANTED for m in MATRICES]
    for name in planted:  # in a fixed order: a set's order of strings changes with each process's hash seed
        damaged[name] = (clean[name] + rng.standard_normal(clean[name].shape) * clean[name].std() / 3).astype(np.float32)
    return write_gguf(folder / "original.gguf", clean), write_gguf(folder / "candidate.gguf", damaged, set(planted))


def pins(kept: list[str]) -> list[str]:
    """The recipe's pins for the planted pair with the layers ``kept``: the candidate holds each matrix kind at two
    types (the planted layers Q8_0, the rest F32), so the layers not kept are pinned at theirs, F32 first."""
    others = [n for n in range(LAYERS) if f"layer.{n}" not in kept]
    return [f"  --tensor-type '{tensor_pattern([f'blk.{n}.{m}.weight' for n in others if (n in PLANTED) == hard])}="
            f"{'q8_0' if hard else 'f32'}' \\" for m in MATRICES for hard in (False, True) if any((n in PLANTED) == hard for n in others)]
