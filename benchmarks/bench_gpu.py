"""The transformers backend on a model of a real shape: speed, memory and utilisation.

A randomly initialised model is built from its config alone (nothing is downloaded), with
the Qwen3.5 vocabulary so the builtin data runs in the ids mode (no tokenizer either), and
scores the data through ``score_sets`` as the gate does. In the same run, on the same
sequences, a plain transformers forward scores them as lm-evaluation-harness does
(``model(ids).logits``, then a log-softmax over the whole sequence in the logits' dtype,
one distinct sequence at a time, each cut after its last read as a harness request ends
at its continuation). Both go through ``score_sets``, so their reads are the same and
their numbers are compared.

    python benchmarks/bench_gpu.py --shape llama3-8b --lengths 8k,32k --data DATA --out gpu.json
    python benchmarks/bench_gpu.py --shape llama3-1b --lengths 2k,8k --limit 2
    python benchmarks/bench_gpu.py --shape tiny --device cpu --dtype float32 --lengths 2k --limit 1

Printed per length and method: seconds, tokens forwarded and per second, peak memory (on
CUDA ``torch.cuda.max_memory_allocated``; on the CPU the process's peak RSS, reset before
each run), model FLOPs utilisation against the device's dense bf16 peak (``--peak-tflops``
overrides the table; n/a on the CPU) and the ratios of the plain forward to the engine.
Model FLOPs: 2 per weight of the layers per token forwarded, 2 per LM-head weight per
position whose logits are computed, and 4 x layers x attention width per token per
position it attends to (causal). ``--out`` writes the figures as JSON.

On a machine without network access, build the data beforehand elsewhere
(``longctx build`` or a first run with ``--data builtin``) and pass the folder as ``--data``:
what the run needs is the project, that folder, torch, transformers, pyarrow, numpy and scipy.
"""
from __future__ import annotations

import argparse
import json
import math
import resource
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from pytest_longctx.backends.base import Backend, ReadResult

# Rows of the Qwen3.5 checkpoints' embedding and LM head: every id of the Qwen3.5
# tokenizer (the ids the builtin data stores) is below it.
QWEN35_VOCAB = 248320

# name -> (config class, config fields). Llama 3.1 8B and 3.2 1B as published, but with the
# Qwen3.5 vocabulary; "tiny" runs anywhere in seconds.
SHAPES: dict[str, dict[str, Any]] = {
    "llama3-8b": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                      num_key_value_heads=8, head_dim=128, rope_theta=500000.0, max_position_embeddings=131072,
                      tie_word_embeddings=False),
    "llama3-1b": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
                      num_key_value_heads=8, head_dim=64, rope_theta=500000.0, max_position_embeddings=131072,
                      tie_word_embeddings=True),
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=16, rope_theta=500000.0, max_position_embeddings=65536,
                 tie_word_embeddings=False),
}

# Dense (no sparsity) bf16 tensor-core peaks in TFLOPS, by a part of the CUDA device's name;
# the first match wins, so the longer names come first.
PEAK_TFLOPS = (("H100 PCIe", 756.0), ("H100 NVL", 835.0), ("H100", 989.0), ("H200", 989.0), ("GH200", 989.0),
               ("A100", 312.0), ("L40S", 362.0), ("L4", 121.0), ("A10", 125.0))


def build_model(shape: str, dtype: str = "bfloat16", device: str = "cpu", seed: int = 0):
    """A randomly initialised Llama of ``shape`` (``SHAPES``), created on ``device`` in ``dtype``."""
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    config = LlamaConfig(vocab_size=QWEN35_VOCAB, **SHAPES[shape])
    torch.manual_seed(seed)
    with torch.device(device):  # created where it runs: an 8B model is never initialised on the host
        model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype))
    return model.eval()


def peak_tflops(device_name: str, override: float | None) -> float | None:
    if override is not None:
        return override
    return next((tflops for part, tflops in PEAK_TFLOPS if part in device_name), None)


@dataclass
class Counter:
    """What the model's forward calls ran: tokens, and model FLOPs (see the module docstring)."""

    layer_weights: int
    head_weights: int
    attention: int  # layers x query heads x head size
    tokens: int = 0
    flops: float = 0.0

    @classmethod
    def of(cls, model: Any) -> Counter:
        config = model.config
        embedding, head = model.get_input_embeddings().weight, model.get_output_embeddings().weight
        outer = {id(embedding), id(head)}
        layers = sum(p.numel() for p in model.parameters() if id(p) not in outer)
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        return cls(layers, head.numel(), config.num_hidden_layers * config.num_attention_heads * head_dim)

    def hook(self, module: Any, args: tuple, kwargs: dict) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        cache = kwargs.get("past_key_values", kwargs.get("cache"))
        new = int(ids.shape[-1])
        past = int(cache.get_seq_length()) if cache is not None else 0
        keep = kwargs.get("logits_to_keep", 0)
        rows = (keep or new) if isinstance(keep, int) else int(keep.numel())
        self.tokens += new
        self.flops += 2.0 * self.layer_weights * new + 2.0 * self.head_weights * rows
        self.flops += 4.0 * self.attention * (new * past + new * (new + 1) / 2)


class PlainForward(Backend):
    """A backend (a subclass of the package's ``Backend`` protocol) that reads as
    lm-evaluation-harness's ``loglikelihood`` does: the whole sequence through
    ``model(ids).logits``, a log-softmax over every position in the logits' dtype, then the
    positions asked for."""

    def __init__(self, model: Any):
        self.model = model
        self.device = next(model.parameters()).device

    def read(self, ids: Sequence[int], positions: Sequence[int], tokens: Sequence[Sequence[int]], top_k: int = 0):
        import torch

        with torch.inference_mode():
            input_ids = torch.tensor(np.asarray(ids, dtype=np.int64), device=self.device)[None]  # [1, seq]
            logp = torch.log_softmax(self.model(input_ids=input_ids).logits, dim=-1)[0]  # [seq, vocab]
            rows = logp[torch.as_tensor(list(positions), device=self.device)].float()  # [reads, vocab]
            del logp
            top1 = rows.argmax(dim=-1).tolist()
            logprobs = [rows[n, list(asked)].tolist() for n, asked in enumerate(tokens)]
            top = None
            if top_k:
                values, indices = rows.topk(min(top_k, rows.shape[-1]), dim=-1)  # [reads, top_k]
                top = list(zip(indices.tolist(), values.tolist()))
        return ReadResult(top1, logprobs, top)


class Memory:
    """Peak memory of one run: CUDA's allocator, or the process's peak RSS on the CPU."""

    def __init__(self, device: Any):
        import torch

        self.torch, self.device = torch, device
        self.cuda = device.type == "cuda"
        self.resettable = self.cuda or self._reset_rss()
        self.kind = ("torch.cuda.max_memory_allocated" if self.cuda else
                     "peak RSS of the process (VmHWM, reset before each run)" if self.resettable else
                     "peak RSS of the process so far (ru_maxrss; cannot be reset here)")

    @staticmethod
    def _reset_rss() -> bool:
        try:
            Path("/proc/self/clear_refs").write_text("5")  # Linux: resets the peak RSS to the current RSS
            return True
        except OSError:
            return False

    def reset(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize(self.device)
            self.torch.cuda.empty_cache()
            self.torch.cuda.reset_peak_memory_stats(self.device)
        elif self.resettable:
            self._reset_rss()

    def peak_gb(self) -> float:
        if self.cuda:
            self.torch.cuda.synchronize(self.device)
            return self.torch.cuda.max_memory_allocated(self.device) / 2**30
        try:
            status = Path("/proc/self/status").read_text()
            return next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:")) / 2**20
        except (OSError, StopIteration):
            return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux


def read_values(results: Any) -> tuple[list[float], list[bool]]:
    """Every read's log-probability (targets, then controls, item by item) and every top-1 hit."""
    values: list[float] = []
    hits: list[bool] = []
    for _, _, _, item in results.scores.items():
        for record in [*item.targets, *item.controls]:
            values.extend(v for v in record.get("logprobs", ()) if v is not None)
            values.extend(record[k] for k in ("score_without", "score_with") if record.get(k) is not None)
            hits.extend(record.get("hits", ()))
    return values, hits


def measure(backend: Any, model: Any, dataset: Any, memory: Memory, peak: float | None) -> tuple[dict[str, Any], Any]:
    """(figures, results) of ``score_sets`` over ``dataset`` with ``backend``."""
    import torch

    from pytest_longctx.scoring import score_sets

    counter = Counter.of(model)
    handle = model.register_forward_pre_hook(counter.hook, with_kwargs=True)
    memory.reset()
    started = time.perf_counter()
    try:
        results = score_sets(backend, None, dataset, mode="ids", progress=False)
    except (torch.OutOfMemoryError, MemoryError) as exc:
        return {"error": f"out of memory: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"}, None
    finally:
        handle.remove()
    if memory.cuda:
        torch.cuda.synchronize(memory.device)
    seconds = time.perf_counter() - started
    values, _ = read_values(results)
    achieved = counter.flops / seconds / 1e12
    return {"seconds": seconds, "tokens": counter.tokens, "tokens_per_s": counter.tokens / seconds,
            "tflops": achieved, "mfu": achieved / peak if peak else None, "peak_memory_gb": memory.peak_gb(),
            "reads": len(values), "logprob_sum": math.fsum(values)}, results


def compare(engine: Any, plain: Any) -> dict[str, Any]:
    """How far the plain forward's reads are from the engine's."""
    mine, my_hits = read_values(engine)
    theirs, their_hits = read_values(plain)
    if len(mine) != len(theirs) or len(my_hits) != len(their_hits):
        return {"max_abs_diff": None, "top1_agree": None}
    diff = max((abs(a - b) for a, b in zip(mine, theirs)), default=0.0)
    agree = sum(a == b for a, b in zip(my_hits, their_hits)) / len(my_hits) if my_hits else None
    return {"max_abs_diff": diff, "top1_agree": agree}


def bench(args: argparse.Namespace) -> dict[str, Any]:
    import torch
    import transformers

    from pytest_longctx.backends.hf import TransformersBackend, resolve_device
    from pytest_longctx.data.load import load_dataset
    from pytest_longctx.parse import comma_list

    device = torch.device(resolve_device(args.device))
    model = build_model(args.shape, args.dtype, str(device))
    backend = TransformersBackend(model, None, chunk_size=args.chunk_size, name=f"random {args.shape}")
    backend.weights_fingerprint()  # computed once here, not inside the first timed run
    with torch.inference_mode():  # kernels and allocator warmed up before anything is timed
        model(input_ids=torch.zeros(1, 16, dtype=torch.long, device=device))
    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    peak = peak_tflops(device_name, args.peak_tflops) if device.type == "cuda" or args.peak_tflops else None
    memory = Memory(device)
    sets = comma_list(args.sets)
    report: dict[str, Any] = {
        "shape": args.shape, "dtype": args.dtype, "device": str(device), "device_name": device_name,
        "parameters": sum(p.numel() for p in model.parameters()),
        "weights_gb": sum(p.numel() * p.element_size() for p in model.parameters()) / 2**30,
        "peak_tflops": peak, "memory": memory.kind,
        "attention": model.config._attn_implementation, "chunk_size": args.chunk_size, "data": str(args.data),
        "sets": sets, "limit": args.limit, "torch": str(torch.__version__), "transformers": transformers.__version__,
        "lengths": {},
    }
    for length in comma_list(args.lengths):
        dataset = load_dataset(args.data, sets=sets, lengths=[length], limit=args.limit)
        scored = sum(1 for _ in dataset.items())
        everything = scored if args.limit is None else sum(1 for _ in load_dataset(args.data, sets=sets, lengths=[length]).items())
        engine, engine_results = measure(backend, model, dataset, memory, peak)
        plain, plain_results = measure(PlainForward(model), model, dataset, memory, peak)
        figures: dict[str, Any] = {"items": scored, "items_in_data": everything, "engine": engine, "plain": plain}
        if engine_results is not None and plain_results is not None:
            figures.update(compare(engine_results, plain_results))
            figures["time_ratio"] = plain["seconds"] / engine["seconds"]
            figures["memory_ratio"] = plain["peak_memory_gb"] / engine["peak_memory_gb"]
        if engine_results is not None:
            figures["projected_s"] = engine["seconds"] * everything / scored  # linear in items
        report["lengths"][length] = figures
        print(f"{length}: done", file=sys.stderr, flush=True)
    return report


def printed(report: dict[str, Any]) -> str:
    from pytest_longctx.reports.format import table

    def number(value: Any, fmt: str, scale: float = 1.0) -> str:
        return "n/a" if value is None else format(scale * value, fmt)

    rows = []
    for length, figures in report["lengths"].items():
        for method in ("engine", "plain"):
            run = figures[method]
            if "error" in run:
                rows.append([length, method, run["error"], *[""] * 6])
                continue
            mfu = "n/a" if run["mfu"] is None else f"{100 * run['mfu']:.1f} %"
            rows.append([length, method, f"{run['seconds']:.1f}", f"{run['tokens']:,}", f"{run['tokens_per_s']:,.0f}",
                         f"{run['peak_memory_gb']:.2f}", mfu, f"{run['reads']:,}", f"{run['logprob_sum']:.6g}"])
    lines = [f"random {report['shape']} ({report['parameters'] / 1e9:.2f} B parameters) in {report['dtype']} on "
             f"{report['device_name']} ({report['device']}), attention {report['attention']}, chunk {report['chunk_size']}, "
             f"torch {report['torch']}, transformers {report['transformers']}",
             f"data {report['data']}, sets {','.join(report['sets'])}, limit {report['limit']} items per config and length",
             f"memory: {report['memory']}, the weights' {report['weights_gb']:.2f} GB included; bf16 peak: "
             + (f"{report['peak_tflops']:g} TFLOPS" if report["peak_tflops"] else
                "n/a on the CPU" if report["device"] == "cpu" else "n/a (not in the table: --peak-tflops)"),
             table(["length", "method", "seconds", "tokens run", "tokens/s", "peak GB", "MFU", "reads", "sum of log-probs"],
                   rows)]
    for length, figures in report["lengths"].items():
        if "time_ratio" in figures:
            lines.append(f"{length}: plain forward / engine: {figures['time_ratio']:.2f}x the time, "
                         f"{figures['memory_ratio']:.2f}x the memory; reads differ by at most "
                         f"{number(figures['max_abs_diff'], '.2e')} nats, top-1 the same at "
                         f"{number(figures['top1_agree'], '.1f', 100)} % of the target reads")
        if "projected_s" in figures:
            lines.append(f"{length}: all {figures['items_in_data']} items of these sets: about "
                         f"{figures['projected_s'] / 60:.1f} min with the engine (its {figures['items']} items' time, scaled)")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    from pytest_longctx.data.records import CONFIGS
    from pytest_longctx.errors import LongctxError

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", choices=sorted(SHAPES), default="llama3-8b")
    parser.add_argument("--dtype", choices=("bfloat16", "float16", "float32"), default="bfloat16")
    parser.add_argument("--device", default="auto", help="auto (cuda when available), cpu, cuda or cuda:N")
    parser.add_argument("--data", default="builtin", help="'builtin' or a folder of benchmark data")
    parser.add_argument("--lengths", default="8k,32k")
    parser.add_argument("--sets", default=",".join(CONFIGS), help="configs split by length (comma-separated)")
    parser.add_argument("--limit", type=lambda text: None if text == "all" else int(text), default=4,
                        help="items per config and length, or 'all'")
    parser.add_argument("--chunk-size", type=int, default=8192, help="tokens per forward call of the engine")
    parser.add_argument("--peak-tflops", type=float, help="the device's dense bf16 peak, where the table has none")
    parser.add_argument("--out", type=Path, help="also write the figures here as JSON")
    args = parser.parse_args(argv)
    try:
        report = bench(args)
    except LongctxError as exc:
        sys.exit(f"bench_gpu: {exc}")
    print(printed(report))
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")
    return report


if __name__ == "__main__":
    main()
