"""Arguments that several ``longctx`` subcommands take the same way."""
from __future__ import annotations

import argparse

from pytest_longctx.parse import comma_list, finite_nonnegative, significance_level


def names(text: str) -> list[str]:
    """An argparse type: a comma-separated list of at least one name."""
    try:
        return comma_list(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def nonnegative(text: str) -> float:
    """An argparse type: a finite number >= 0."""
    try:
        return finite_nonnegative(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a finite number >= 0") from None


def level(text: str) -> float:
    """An argparse type: a significance level, above 0 and below 0.5."""
    try:
        return significance_level(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: {exc}") from None


def add_reader_arguments(parser: argparse.ArgumentParser) -> None:
    """How the model is loaded and run, where past answers are kept, and progress."""
    parser.add_argument("--backend", default="hf", help="'hf' (transformers), 'llama.cpp' (a .gguf file), 'vllm' (in process), "
                        "'vllm-server' (a running vLLM server) or module:factory")
    parser.add_argument("--backend-option", action="append", default=[], metavar="KEY=VALUE",
                        help="a setting of the backend (llama.cpp: cache-type-k=q8_0, cache-type-v=q4_0, threads=4, "
                        "batch-size=2048, ubatch-size=512, gpu-layers=N, flash-attn=auto; vllm: its engine arguments, "
                        "tensor-parallel-size=2; vllm-server: tokenizer=FOLDER, served-model=NAME); repeatable")
    parser.add_argument("--dtype", default="auto", help="auto (float32 on CPU), float32, bfloat16, float16")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N")
    parser.add_argument("--trust-remote-code", action="store_true",
                        help="let a model that needs its own Python code (auto_map in its config) run it; refused by default")
    parser.add_argument("--cache-dir", metavar="DIR", help="where answers of past forward passes are kept "
                        "(default: the user cache; 'off' to disable)")
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
