"""Arguments that several ``longctx`` subcommands take the same way."""
from __future__ import annotations

import argparse

from pytest_longctx.gate.options import THRESHOLD_OPTIONS, subcommand_flag
from pytest_longctx.gate.thresholds import Thresholds, parse_overrides
from pytest_longctx.parse import comma_list, finite_nonnegative, significance_level

FLAGS = {field: subcommand_flag(name) for field, name in THRESHOLD_OPTIONS.items()}  # the flag that sets each threshold


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
    parser.add_argument("--kv-press", metavar="NAME[:KEY=VALUE,...]",
                        help="compress each read's context with a kvpress press (transformers backend): snapkv:compression_ratio=0.5, "
                        "streaming_llm:compression_ratio=0.75,n_sink=4, knorm, tova, expected_attention, or module:object")
    add_loading_arguments(parser)


def add_loading_arguments(parser: argparse.ArgumentParser) -> None:
    """How a model is loaded, where past answers are kept, and progress: the reader's arguments that
    do not name the backend (``longctx blame`` names its own)."""
    parser.add_argument("--dtype", default="auto", help="auto (float32 on CPU), float32, bfloat16, float16")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N")
    parser.add_argument("--trust-remote-code", action="store_true",
                        help="let a model that needs its own Python code (auto_map in its config) run it; refused by default")
    parser.add_argument("--cache-dir", metavar="DIR", help="where answers of past forward passes are kept "
                        "(default: the user cache; 'off' to disable)")
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")


def add_context_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--allow-beyond-context", action="store_true",
                        help="score texts longer than the model's context window (refused by default)")


def add_threshold_arguments(parser: argparse.ArgumentParser) -> None:
    """The gate's thresholds, as the plugin's options (same names less ``longctx-``, same defaults); each
    flag's dest is its field of ``Thresholds``."""
    defaults = Thresholds()

    def add(name: str, **settings: object) -> None:
        settings.setdefault("metavar", FLAGS[name].lstrip("-").replace("-", "_").upper())  # as the flag, not the field
        parser.add_argument(FLAGS[name], dest=name, **settings)

    add("drop", type=nonnegative, default=defaults.drop,
        help=f"largest allowed accuracy drop, facts and distant tool calls (default {defaults.drop:g})")
    add("retained", type=nonnegative, default=defaults.retained,
        help=f"lowest allowed retained rule effect per cell (default {defaults.retained:g})")
    add("follow", type=nonnegative, default=defaults.follow, help=f"lowest allowed share of rules followed (default {defaults.follow:g})")
    add("item_drop", type=nonnegative, default=defaults.item_drop,
        help=f"largest allowed mean loss of one item, nats (default {defaults.item_drop:g})")
    add("kl", type=nonnegative, default=defaults.kl, metavar="NATS",
        help=f"largest allowed mean KL_K at far reads, facts and tool calls (drift; default {defaults.kl:g})")
    add("overrides", action="append", default=[], metavar="PATTERN:METRIC=VALUE",
        help="per row, cell or item, as the plugin's --longctx-threshold; repeatable")
    add("alpha", type=level, metavar="A", help="fail a row or cell only when its shortfall beyond the threshold is significant "
        "at level A (one-sided paired bootstrap over items; default: the point estimate decides)")
    add("min_effect", type=nonnegative, default=defaults.min_effect, metavar="NATS",
        help=f"rules: the baseline's rule effect a target needs to be counted (default {defaults.min_effect:g} nats; "
             "applies when the metrics are recomputed from raw scores)")


def thresholds_of(args: argparse.Namespace) -> Thresholds:
    """The ``Thresholds`` the flags of ``add_threshold_arguments`` give; a malformed --threshold is one line."""
    values = {name: getattr(args, name) for name in FLAGS}
    return Thresholds(**{**values, "overrides": parse_overrides(values["overrides"], FLAGS["overrides"])})
