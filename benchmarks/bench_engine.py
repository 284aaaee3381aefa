"""The engine against the naive way, on the builtin data, measured in one run.

The naive way is what a plain teacher-forced scorer does: every sequence run whole, one
at a time, full-vocabulary log-softmax at every position. The engine cuts sequences after
their last read, runs each distinct prefix once and applies the LM head only at read
positions. The lower bound is the number of distinct prefix tokens any exact scorer must
run. Each method runs in a forked child, so its peak memory is its own.

    python benchmarks/bench_engine.py --model tiny --lengths 8k,32k --limit 4
    python benchmarks/bench_engine.py --model smollm2-135m --lengths 2k,8k --limit 2
    python benchmarks/bench_engine.py --single 32768     # one long sequence: memory and time
    python benchmarks/bench_engine.py --backends --lengths 2k,8k --limit 2 --sets facts,tool_calls

``tiny`` is a randomly initialised qwen3 with the Qwen3.5 vocabulary (ids mode).

``--backends`` scores the same items with each backend named in one process, one after the
other: the transformers backend on SmolLM2 in float32 (``hf``), the llama.cpp backend on the
packaged Q4_1 file (``llama.cpp``), vLLM in process on the float32 SmolLM2 (``vllm``: a query
per read; ``vllm-prompt-rows``: each piece's reads from one request's prompt log-probabilities) and
a vLLM server the user started on it (``vllm-server`` with ``--vllm-server URL``), each through
``score_sets`` as the gate runs it; for llama.cpp also the share of the time spent inside
``llama_decode`` (the rest is the engine's overhead); for vLLM the requests and the prompt
tokens it computed (those its prefix cache did not serve) against the distinct prefix
tokens, the least an exact scorer computes. vLLM runs in its own environment
(scripts/setup-venv.sh DIR vllm), where llama.cpp is not installed: compare them through hf,
which both environments have.

    python benchmarks/bench_engine.py --backends hf,vllm,vllm-prompt-rows,vllm-server --vllm-server http://127.0.0.1:8000/v1 --lengths 2k

When lm-evaluation-harness is installed
(``pip install "pytest-longctx[peers]"``), its ``loglikelihood`` scores the same targets on the same float32
model, one request (context, continuation) per target as its tasks do, at the lengths of
``--lm-eval-lengths``.
"""
from __future__ import annotations

import argparse
import multiprocessing
import resource
import sys
import time
from functools import partial
from typing import Any, Callable, Sequence

import numpy as np

from pytest_longctx.backends.base import ReadResult, ReadSession, SessionBackend

GROUPS = {"facts": ["facts"], "tool_calls": ["tool_calls"], "rules (en+cs+de)": ["rules_en", "rules_cs", "rules_de"]}


def tiny_model(vocab_size: int, hidden: int = 64, layers: int = 4):
    import torch
    from transformers import AutoModelForCausalLM, Qwen3Config

    config = Qwen3Config(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=65536,
                         tie_word_embeddings=False)
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()


def load(model: str):
    from pytest_longctx.backends import load_backend
    from pytest_longctx.backends.hf import TransformersBackend
    from pytest_longctx.data.qwen import qwen35_tokenizer

    if model == "tiny":
        tokenizer = qwen35_tokenizer()
        return TransformersBackend(tiny_model(len(tokenizer)), tokenizer, name="tiny")
    return load_backend(model, "hf", "float32", "cpu")[0]


def naive_run(backend: Any, plans: list) -> int:
    """Every sequence whole, one at a time, log-softmax over the full vocabulary."""
    import torch

    forwarded = 0
    with torch.inference_mode():
        for plan in plans:
            for ids in plan.sequences:
                logits = backend.model(torch.tensor(ids)[None]).logits[0]  # [seq, vocab]
                logp = torch.log_softmax(logits.float(), dim=-1)  # [seq, vocab]
                for target in plan.targets:
                    for read in target.reads:
                        if plan.sequences[read.seq] is ids:
                            float(logp[read.pos - 1, read.token]), int(logp[read.pos - 1].argmax())
                forwarded += len(ids)
                del logits, logp
    return forwarded


class CountingSession(ReadSession):
    """A ``ReadSession`` that forwards to another and counts the tokens it runs: a subclass of
    the protocol, written against its signatures, so a change of them fails a type check here
    and the smoke run (tests/test_benchmarks.py) at once."""

    def __init__(self, inner: ReadSession, forwarded: list[int]):
        self.inner = inner
        self.forwarded = forwarded

    def advance(self, ids: Sequence[int], positions: Sequence[int], tokens: Sequence[Sequence[int]],
                top_k: int = 0) -> ReadResult:
        self.forwarded[0] += len(ids)
        return self.inner.advance(ids, positions, tokens, top_k)

    def snapshot(self) -> Any:
        return self.inner.snapshot()

    def restore(self, snapshot: Any, last: bool = False) -> None:
        self.inner.restore(snapshot, last)


def engine_run(backend: SessionBackend, plans: list) -> int:
    """The engine, counting the tokens its sessions really forward."""
    from pytest_longctx.scoring import engine

    forwarded = [0]
    make_session = backend.session

    def counting_session() -> ReadSession:
        return CountingSession(make_session(), forwarded)

    backend.session = counting_session  # type: ignore[method-assign]
    try:
        engine.run(backend, plans)
    finally:
        backend.session = make_session  # type: ignore[method-assign]
    return forwarded[0]


def measured(work: Callable[[], int]) -> dict[str, float]:
    """Run ``work`` in a forked child: (tokens it forwarded, seconds, peak RSS growth in GB)."""
    context = multiprocessing.get_context("fork")
    queue = context.Queue()

    def child() -> None:
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        started = time.perf_counter()
        try:
            tokens = work()
            seconds = time.perf_counter() - started
            peak = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 2**20  # KiB -> GiB
            queue.put({"tokens": tokens, "seconds": seconds, "peak_gb": peak})
        except Exception as exc:  # reported, not raised: the other methods still run
            queue.put({"error": f"{type(exc).__name__}: {exc}"})

    process = context.Process(target=child)
    process.start()
    process.join()
    if process.exitcode != 0:
        return {"error": f"the child died (exit {process.exitcode}; out of memory?)"}
    return queue.get()


def row(name: str, lower: int, whole: int, naive: dict, lean: dict) -> list[str]:
    """One table row; ``whole`` is what the naive way forwards (every sequence whole), known
    without running it."""
    def cell(result: dict, key: str, fmt: str) -> str:
        return "skipped" if "skipped" in result else "error" if "error" in result else format(result[key], fmt)

    def ratio(mine: float | None, key: str) -> str:
        if mine is None or "error" in lean or not lean[key]:
            return "n/a"
        return f"{mine / lean[key]:.2f}x"

    within = "n/a" if "error" in lean else f"{lean['tokens'] / lower:.3f}"
    ran = "error" not in naive and "skipped" not in naive
    return [name, f"{lower:,}", f"{whole:,}", cell(lean, "tokens", ","), within, ratio(whole, "tokens"),
            cell(naive, "seconds", ".1f"), cell(lean, "seconds", ".1f"), ratio(naive.get("seconds") if ran else None, "seconds"),
            cell(naive, "peak_gb", ".2f"), cell(lean, "peak_gb", ".2f"), ratio(naive.get("peak_gb") if ran else None, "peak_gb")]


def bench_data(args: argparse.Namespace) -> None:
    from pytest_longctx.data.load import load_dataset
    from pytest_longctx.parse import comma_list
    from pytest_longctx.reports.format import table
    from pytest_longctx.scoring import engine
    from pytest_longctx.scoring.modes import choose_mode, plan_reads

    backend = load(args.model)
    rows, notes = [], []
    for length in comma_list(args.lengths):
        for name, sets in GROUPS.items():
            dataset = load_dataset(args.data, sets=sets, lengths=[length], limit=args.limit)
            mode = choose_mode("auto", backend.tokenizer, dataset)
            plans = plan_reads(dataset, mode, backend.tokenizer)
            lower = engine.forwarded_tokens(plans)
            whole = sum(len(s) for p in plans for s in p.sequences)
            projected = whole and max(len(s) for p in plans for s in p.sequences) * backend.model.config.vocab_size * 8 / 2**30
            if projected > args.naive_memory_gb:
                naive = {"skipped": f"its logits alone need {projected:.0f} GB (--naive-memory-gb {args.naive_memory_gb:g})"}
            else:
                naive = measured(lambda plans=plans: naive_run(backend, plans))
            lean = measured(lambda plans=plans: engine_run(backend, plans))
            rows.append(row(f"{length} {name}", lower, whole, naive, lean))
            notes.extend(f"{length} {name}, {method}: {result.get('skipped') or result['error']}"
                         for method, result in (("naive", naive), ("engine", lean)) if "skipped" in result or "error" in result)
            print(f"{length} {name}: done", file=sys.stderr, flush=True)
    print(f"model {args.model}, data {args.data}, limit {args.limit} items per config and length")
    print(table(["set", "lower bound", "naive tokens", "engine tokens", "engine/bound", "tokens ratio",
                 "naive s", "engine s", "time ratio", "naive GB", "engine GB", "memory ratio"], rows))
    for note in notes:
        print(note)


def bench_single(length: int) -> None:
    """One sequence of ``length`` tokens, reads at 64 positions: chunked engine vs full logits."""
    from pytest_longctx.backends.hf import TransformersBackend
    from pytest_longctx.reports.format import table

    vocab = 32000
    backend = TransformersBackend(tiny_model(vocab), None, name="tiny")
    ids = np.random.default_rng(0).integers(0, vocab, length)
    positions = list(np.linspace(length // 2, length - 2, 64).astype(int))
    tokens = [[int(ids[p + 1])] for p in positions]

    def naive() -> int:
        import torch

        with torch.inference_mode():
            logp = torch.log_softmax(backend.model(torch.tensor(ids)[None]).logits[0].float(), dim=-1)  # [seq, vocab]
            [float(logp[p, t[0]]) for p, t in zip(positions, tokens)]
        return length

    def lean() -> int:
        backend.read(ids, positions, tokens)
        return max(positions) + 1

    naive_result, lean_result = measured(naive), measured(lean)
    print(f"one {length}-token sequence, tiny qwen3 (vocab {vocab}), 64 reads in its second half")
    print(table(["method", "tokens run", "seconds", "peak GB"],
                [[n, str(r.get("tokens", "error")), f"{r['seconds']:.1f}" if "seconds" in r else r.get("error", ""),
                  f"{r['peak_gb']:.2f}" if "peak_gb" in r else ""]
                 for n, r in (("naive (full logits)", naive_result), ("engine (chunked)", lean_result))]))


def timed(work: Callable[[], Any]) -> tuple[Any, float]:
    started = time.perf_counter()
    done = work()
    return done, time.perf_counter() - started


def headline(results: Any, config: str, length: str) -> float | None:
    """The metric a set's headline row reads: facts recalled, distant tool calls right."""
    metrics = results.sets[config][length]
    return metrics["query_accuracy"] if config == "facts" else metrics["far_accuracy"]


def lm_eval_requests(dataset: Any, config: str, length: str) -> list[tuple[str, str, bool]]:
    """(context, continuation, counted) per target: the text before the target and the target's
    text, as an lm-evaluation-harness task would pose it; ``counted``: the target enters the
    headline (every fact; far tool calls)."""
    requests = []
    for item in dataset.configs[config][length]:
        for target in item.targets:
            span = target.answer_char if config == "facts" else target.char
            requests.append((item.text[: span[0]], item.text[span[0] : span[1]], config == "facts" or target.far))
    return requests


def split_differently(tokenizer: Any, requests: list[tuple[str, str, bool]]) -> int:
    """Counted targets a harness scores as other tokens than the model reads in the whole
    text: the context's trailing whitespace moves onto the continuation (as
    lm-evaluation-harness does), or the context tokenized alone is no prefix of the whole
    text's tokens."""
    differ = 0
    for context, continuation, counted in requests:
        stripped = context.rstrip()
        alone = tokenizer(stripped, add_special_tokens=False)["input_ids"]
        whole = tokenizer(context + continuation, add_special_tokens=False)["input_ids"]
        differ += counted and (stripped != context or list(whole[: len(alone)]) != list(alone))
    return differ


def lm_eval_run(folder: str, requests: list[tuple[str, str, bool]]) -> tuple[float | None, float]:
    """(accuracy over counted targets, seconds) of lm-evaluation-harness's loglikelihood on the
    float32 model in ``folder``: a target is right when its continuation is the greedy one."""
    from lm_eval.api.instance import Instance
    from lm_eval.models.huggingface import HFLM

    model = HFLM(pretrained=folder, device="cpu", dtype="float32", batch_size=1)
    instances = [Instance(request_type="loglikelihood", doc={}, arguments=(context, continuation), idx=n)
                 for n, (context, continuation, _) in enumerate(requests)]
    answers, seconds = timed(lambda: model.loglikelihood(instances, disable_tqdm=True))
    counted = [greedy for (_, greedy), (_, _, count) in zip(answers, requests) if count]
    return (sum(counted) / len(counted) if counted else None), seconds


def backend_named(name: str, args: argparse.Namespace) -> Any:
    """A backend of the comparison, on SmolLM2: transformers in float32, llama.cpp on the packaged
    Q4_1 file, vLLM in process (float32, eager; a query per read, or each piece's prompt rows) or the vLLM
    server at ``--vllm-server``."""
    from pytest_longctx.backends import load_backend

    if name == "hf":
        return load_backend("smollm2-135m", "hf", "float32", "cpu")[0]
    if name == "llama.cpp":
        return load_backend("smollm2-135m-gguf", "llama.cpp")[0]
    if name in ("vllm", "vllm-prompt-rows"):
        rows = f"prompt-rows={str(name == 'vllm-prompt-rows').lower()}"
        return load_backend("smollm2-135m", "vllm", options=["dtype=float32", "enforce-eager=true", *args.vllm_option, rows])[0]
    if name == "vllm-server":
        if not args.vllm_server:
            raise SystemExit("--backends vllm-server needs --vllm-server http://HOST:PORT/v1")
        from pytest_longctx.backends.aliases import resolve_model

        return load_backend(args.vllm_server, "vllm-server", options=[f"tokenizer={resolve_model('smollm2-135m')}",
                                                                       "max-logprobs=128"])[0]
    raise SystemExit(f"--backends {name}: expected hf, llama.cpp, vllm, vllm-prompt-rows or vllm-server")


def inside(backend: Any) -> tuple[float | None, Any]:
    """(seconds spent inside the library, the vLLM traffic) so far, where the backend counts them."""
    return getattr(backend, "eval_seconds", None), getattr(backend, "traffic", None)


def bench_backends(args: argparse.Namespace) -> None:
    import importlib.util
    from copy import copy

    from pytest_longctx.backends.aliases import resolve_model
    from pytest_longctx.data.load import load_dataset
    from pytest_longctx.parse import comma_list
    from pytest_longctx.reports.format import table
    from pytest_longctx.scoring import engine
    from pytest_longctx.scoring.modes import plan_reads
    from pytest_longctx.scoring.pipeline import score_sets

    names = comma_list(args.backends)
    backends = {name: backend_named(name, args) for name in names}
    tokenizer = next(iter(backends.values())).tokenizer
    with_lm_eval = importlib.util.find_spec("lm_eval") is not None
    lm_eval_lengths = comma_list(args.lm_eval_lengths)
    speed, accuracy = [], []
    for length in comma_list(args.lengths):
        for config in comma_list(args.sets):
            dataset = load_dataset(args.data, sets=[config], lengths=[length], limit=args.limit)
            bound = engine.forwarded_tokens(plan_reads(dataset, "text", tokenizer))  # distinct prefix tokens
            headlines = []
            for name, backend in backends.items():
                library_before, traffic = inside(backend)
                before = copy(traffic) if traffic is not None else None
                results, seconds = timed(partial(score_sets, backend, backend.tokenizer, dataset, mode="text", progress=False))
                library_after, traffic = inside(backend)
                library = "" if library_before is None else f"{100 * (library_after - library_before) / seconds:.0f} %"
                requests = computed = share = ""
                if traffic is not None:
                    asked = traffic.requests - before.requests
                    prompts = traffic.prompt_tokens - before.prompt_tokens
                    cached = traffic.cached_tokens - before.cached_tokens
                    requests = f"{asked:,}"
                    computed = f"{prompts - cached:,} of {prompts:,}" if not traffic.uncounted else f"? of {prompts:,}"
                    share = f"{(prompts - cached) / bound:.2f}x" if not traffic.uncounted else "?"
                speed.append([f"{length} {config}", name, f"{bound:,}", f"{seconds:.1f}", f"{bound / seconds:.0f}", library,
                              requests, computed, share])
                headlines.append(f"{headline(results, config, length):.3f}")
            lm_accuracy = lm_seconds = None
            requests_lm = lm_eval_requests(dataset, config, length)
            if with_lm_eval and length in lm_eval_lengths:
                lm_accuracy, lm_seconds = lm_eval_run(resolve_model("smollm2-135m"), requests_lm)
                speed.append([f"{length} {config}", "lm-eval loglikelihood", f"{bound:,}", f"{lm_seconds:.1f}",
                              f"{bound / lm_seconds:.0f}", "", f"{len(requests_lm):,}", "", ""])
            counted = sum(c for _, _, c in requests_lm)
            accuracy.append([f"{length} {config}", str(counted), *headlines,
                             "not run" if lm_accuracy is None else f"{lm_accuracy:.3f}",
                             str(split_differently(tokenizer, requests_lm))])
            print(f"{length} {config}: done", file=sys.stderr, flush=True)
    threads = [f"{b.settings.threads} threads for llama.cpp" for b in backends.values() if hasattr(b, "eval_seconds")]
    print(f"data {args.data}, limit {args.limit} items per config and length; "
          + ", ".join([*threads, f"torch {__import__('torch').get_num_threads()} threads"]))
    print("tokens: the distinct prefix tokens of the items (the least any exact scorer must run); vLLM: tokens it computed "
          "(prompt tokens not served from its prefix cache) and their ratio to that bound")
    print(table(["set", "backend", "tokens", "s", "tokens/s", "inside the library", "requests", "vLLM computed", "computed / bound"],
                speed))
    print(table(["set", "targets", *[f"{name} (engine)" for name in backends], "lm-eval loglikelihood (hf model)",
                 "context tokenized apart differs"], accuracy))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="tiny", help="'tiny' or any model the transformers backend loads")
    parser.add_argument("--data", default="builtin")
    parser.add_argument("--lengths", default="8k")
    parser.add_argument("--limit", type=int, default=4, help="items per config and length (the naive way is slow)")
    parser.add_argument("--naive-memory-gb", type=float, default=12.0,
                        help="skip the naive way where its logits alone would need more memory than this")
    parser.add_argument("--single", type=int, metavar="TOKENS", help="measure one sequence of this length instead")
    parser.add_argument("--backends", nargs="?", const="hf,llama.cpp", metavar="NAMES",
                        help="compare backends on SmolLM2 instead (and lm-evaluation-harness): hf, llama.cpp, vllm, "
                             "vllm-prompt-rows (vllm with prompt-rows=true), vllm-server, comma-separated "
                             "(default hf,llama.cpp)")
    parser.add_argument("--vllm-server", metavar="URL", help="--backends vllm-server: the server, http://HOST:PORT/v1")
    parser.add_argument("--vllm-option", action="append", default=[], metavar="KEY=VALUE",
                        help="--backends vllm: one of vLLM's engine arguments (block-size=32); repeatable")
    parser.add_argument("--sets", default="facts,tool_calls", help="--backends: facts and/or tool_calls")
    parser.add_argument("--lm-eval-lengths", default="2k", help="--backends: lengths lm-evaluation-harness runs at")
    args = parser.parse_args()
    if args.backends:
        bench_backends(args)
    elif args.single:
        bench_single(args.single)
    else:
        bench_data(args)


if __name__ == "__main__":
    main()
