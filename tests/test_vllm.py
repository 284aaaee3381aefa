"""The vLLM backends against vLLM itself (its CPU build, in its own environment:
scripts/setup-venv.sh DIR vllm; CI runs this file there with LONGCTX_TEST_VLLM=1): SmolLM2 in
process and from a server this module starts, read as the transformers backend reads it;
the gate with a transformers-made baseline; tensor parallelism and an INT8 W8A8 checkpoint on a
tiny model.

Tolerances. vLLM and transformers compute the same float32 model with other kernels (vLLM's
CPU attention, its fused RMSNorm and SiLU): log-probabilities differ by rounding, 3e-5 at most
over the reads measured here; 1e-3 nats leaves room for other CPUs' kernels and is still 50
times below the gate's drift threshold (0.05). Top-1 may differ only where the two most likely
tokens are closer than that (a near tie), and the test says how many such reads there were."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from kit.models import save_model, tiny_llama
from kit.needs import needs, skip_unless
from kit.ports import free_port
from kit.runs import run_pytest

pytestmark = [needs("vllm", "httpx", install="scripts/setup-venv.sh DIR vllm: vLLM's own environment", required_by="LONGCTX_TEST_VLLM"),
              pytest.mark.slow]
ROOT = Path(__file__).resolve().parent.parent
TOLERANCE = 1e-3  # nats; see the module docstring
ENGINE = ["enforce-eager=true", "block-size=32", "max-model-len=4096", "dtype=float32"]


@pytest.fixture(scope="module", autouse=True)
def cpu_memory():
    """vLLM's CPU build reserves its KV cache in host memory: 1 GiB is plenty for 4k tokens."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
        yield


@pytest.fixture(scope="module")
def smollm2(_private_cache):
    from pytest_longctx.backends.aliases import resolve_model

    return resolve_model("smollm2-135m")


@pytest.fixture(scope="module")
def transformers_backend(smollm2):
    from pytest_longctx.backends import load_backend

    return load_backend(smollm2, dtype="float32")[0]


@pytest.fixture(scope="module")
def plans(transformers_backend):
    from pytest_longctx.data.load import load_dataset
    from pytest_longctx.scoring.modes import plan_reads

    # one item of each: 99 reads, 3,855 tokens forwarded
    dataset = load_dataset("builtin", sets=["facts", "tool_calls"], lengths=["2k"], limit=1)
    return plan_reads(dataset, "text", transformers_backend.tokenizer)


@pytest.fixture(scope="module")
def local(plans, transformers_backend):
    """The transformers backend's reads of ``plans``, which vLLM's must equal."""
    from pytest_longctx.scoring import engine

    return flat(engine.run(transformers_backend, plans, top_k=16))


def flat(results):
    return [s for item in results for target in item if target for s in target]


def compare(served, local) -> int:
    """Asserts the reads agree (see TOLERANCE); returns how many top-1s differ at near ties."""
    assert len(served) == len(local) > 50
    worst = max(abs(a.logprob - b.logprob) for a, b in zip(served, local))
    assert worst < TOLERANCE, worst
    ties = 0
    for a, b in zip(served, local):
        if a.top1 != b.top1:
            ids, values = b.top
            assert a.top1 in ids[:2] and abs(values[0] - values[1]) < TOLERANCE, "top-1 differs away from a near tie"
            ties += 1
    drift = [abs(x - y) for a, b in zip(served, local) for x, y in zip(a.top[1], b.top[1])]
    assert max(drift) < TOLERANCE
    return ties


def say(line: str) -> None:
    """A figure for CI's log (which runs this file with -s). Not through capsys: vLLM's logger
    keeps the stream it first sees, and capsys's is closed after the test."""
    print(f"\n{line}", file=sys.__stderr__, flush=True)


@pytest.mark.parametrize("rows", [False, True], ids=["a query per read", "prompt rows"])
def test_vllm_in_process_reads_as_transformers(smollm2, plans, local, rows):
    from pytest_longctx.backends import load_backend
    from pytest_longctx.scoring import engine

    backend, tokenizer = load_backend(smollm2, backend="vllm", options=[*ENGINE, f"prompt-rows={str(rows).lower()}"])
    try:
        assert tokenizer is not None
        described = backend.describe()
        assert described["tensor_parallel"] == 1 and described["dtype"] == "float32" and described["versions"]["vllm"]
        served = flat(engine.run(backend, plans, top_k=16))
        ties = compare(served, local)
        say(f"vLLM in process{', prompt rows' if rows else ''}: {len(served)} reads, {ties} near-tie top-1 differences; "
            f"{backend.status()}")
        requests = backend.traffic.requests
        if not rows:  # a query per read, whose prompt the prefix cache served mostly
            assert requests >= len(served) and backend.traffic.cached_tokens > backend.traffic.prompt_tokens / 2
            return
        # a piece's reads came from one request's prompt rows (and follow-ups for ids outside its top 16), each
        # prompt token computed once but for a prefix shared with another request, cached only in whole 32-token blocks
        extra = backend.traffic.computed_tokens - engine.forwarded_tokens(plans)
        assert requests < len(served) / 2 and 0 <= extra < 32 * requests, (extra, backend.status())
        # again: every piece's blocks are in the cache now, so its rows are placeholders and each read is its own query
        again = flat(engine.run(backend, plans, top_k=16))
        assert backend.traffic.requests - requests >= len(served), backend.status()
        ties = compare(again, local)
        say(f"vLLM in process, prompt rows read again from its cache: {ties} near-tie top-1 differences; {backend.status()}")
    finally:
        backend.close()


@pytest.fixture(scope="module")
def server(smollm2, tmp_path_factory):
    """``vllm serve`` on SmolLM2 (float32, eager), started and stopped here."""
    import httpx

    port = free_port()
    log = tmp_path_factory.mktemp("vllm") / "server.log"
    command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", smollm2, "--served-model-name", "smollm2",
               "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32", "--enforce-eager", "--block-size", "32",
               "--max-model-len", "4096", "--max-logprobs", "128", "--enable-prompt-tokens-details"]
    with open(log, "wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 600
        while True:
            if process.poll() is not None:
                pytest.fail(f"vllm serve stopped (exit {process.returncode}):\n{log.read_text()[-3000:]}")
            try:
                if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"vllm serve did not start in 600 s:\n{log.read_text()[-3000:]}")
            time.sleep(2)
        yield f"{url}/v1"
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)


def test_vllm_server_reads_as_transformers(server, smollm2, plans, local):
    from pytest_longctx.backends import load_backend
    from pytest_longctx.scoring import engine

    backend, tokenizer = load_backend(server, backend="vllm-server", options=["max-logprobs=128", f"tokenizer={smollm2}"])
    assert tokenizer is not None  # checked against the server's /tokenize
    assert backend.describe()["served_model"] == "smollm2" and backend.describe()["weights"] is None  # nothing reused
    served = flat(engine.run(backend, plans, top_k=16))
    ties = compare(served, local)
    say(f"vLLM server: {len(served)} reads, {ties} near-tie top-1 differences; {backend.status()}")
    assert backend.traffic.computed_tokens is not None and backend.traffic.cached_tokens > backend.traffic.prompt_tokens / 2


def test_the_gate_passes_vllm_against_a_transformers_baseline(server, smollm2, tmp_path):
    """The usual case: the baseline made by transformers from the original, the candidate
    read as vLLM serves it. Same weights: it passes, with drift below 0.001 nats."""
    baseline, results = tmp_path / "baseline.json.gz", tmp_path / "results.json"
    common = ["--longctx-only", "--longctx-lengths", "2k", "--longctx-limit", "2", "--longctx-sets", "facts,tool_calls",
              "--longctx-baseline", str(baseline)]
    made = run_pytest(tmp_path, *common, "--longctx-model", smollm2, "--longctx-dtype", "float32", "--longctx-update-baseline")
    assert made.returncode == 0, made.stdout[-3000:]
    gated = run_pytest(tmp_path, *common, "--longctx-model", server, "--longctx-backend", "vllm-server",
                       "--longctx-backend-option", "max-logprobs=128", "--longctx-backend-option", f"tokenizer={smollm2}",
                       "--longctx-out", str(results))
    assert gated.returncode == 0, gated.stdout[-3000:]
    assert "baseline made by TransformersBackend" in gated.stdout and "model read by VllmServerBackend (vllm " in gated.stdout
    drift = json.loads(results.read_text())["drift"]
    far = [row["far"]["kl"] for row in drift.values() if row.get("far", {}).get("kl") is not None]
    assert far and max(far) < 1e-3


def even_llama(folder: Path, smollm2: str) -> str:
    """A random Llama with an even number of heads (SmolLM2's 9 cannot be split in 2), with
    SmolLM2's tokenizer."""
    from transformers import AutoTokenizer

    return str(save_model(folder, tiny_llama(49152, width=128, tied=False), AutoTokenizer.from_pretrained(smollm2)))


def test_tensor_parallel_reads_as_one_device_and_as_transformers(smollm2, tmp_path, monkeypatch):
    from pytest_longctx.backends import load_backend

    # vLLM's CPU workers bind their threads per NUMA node, and this machine has one: each of the
    # two workers gets a core of its own instead
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "0|1")
    folder = even_llama(tmp_path / "tiny-llama", smollm2)
    ids = np.random.default_rng(0).integers(0, 49152, 700).tolist()
    positions, tokens = [10, 300, 699], [[1, 2], [3], [ids[1]]]
    answers = {}
    for size in (1, 2):
        backend, _ = load_backend(folder, backend="vllm", options=[*ENGINE, f"tensor-parallel-size={size}"])
        try:
            assert backend.describe()["tensor_parallel"] == size
            answers[size] = backend.read(ids, positions, tokens, top_k=16)
        finally:
            backend.close()
    local = load_backend(folder, dtype="float32")[0].read(ids, positions, tokens, top_k=16)
    for size, got in answers.items():
        assert got.top1 == local.top1, size
        assert np.allclose(np.concatenate(got.logprobs), np.concatenate(local.logprobs), atol=1e-4), size
        assert [t[0] for t in got.top] == [t[0] for t in local.top], size
    assert np.allclose(np.concatenate(answers[1].logprobs), np.concatenate(answers[2].logprobs), atol=1e-4)


def test_bad_engine_arguments_are_one_line(smollm2, monkeypatch):
    from pytest_longctx.backends import load_backend
    from pytest_longctx.errors import LongctxError

    with pytest.raises(LongctxError, match="not one of vLLM's engine arguments \\(did you mean tensor-parallel-size"):
        load_backend(smollm2, backend="vllm", options=["tensor-paralel-size=2"])
    with pytest.raises(LongctxError, match="enable-prefix-caching=false: every read would compute its whole prompt"):
        load_backend(smollm2, backend="vllm", options=["enable-prefix-caching=false"])
    with pytest.raises(LongctxError, match="the gate sets it itself"):
        load_backend(smollm2, backend="vllm", options=["logprobs-mode=processed_logprobs"])
    with pytest.raises(LongctxError, match="prompt-rows=yes: expected true or false"):
        load_backend(smollm2, backend="vllm", options=["prompt-rows=yes"])
    # an engine that cannot start (here: a KV cache larger than the machine's memory) is one line, not vLLM's bare RuntimeError
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "100000")
    with pytest.raises(LongctxError, match=r"^vLLM could not start its engine for .*enforce-eager=True.*the reason is in vLLM's log"):
        load_backend(smollm2, backend="vllm", options=["enforce-eager=true"])



def w8a8_twin(folder: Path, source: str, activations: bool = True):
    """A W8A8 int8 checkpoint's arithmetic done by hand in float, in transformers: the float
    model ``source`` with the weight of each layer the checkpoint quantized set to int8 *
    scale, and (``activations``) the layer's input rounded to int8 per token before the
    product (the token's largest magnitude at 127, to nearest), as vLLM's CPU kernel does."""
    import torch
    from safetensors.torch import load_file

    from pytest_longctx.backends.hf import TransformersBackend

    def per_token_int8(_module, args):
        scale = args[0].abs().amax(dim=-1, keepdim=True) / 127
        return (torch.round(args[0] * (1 / scale)).clamp(-128, 127) * scale,)

    backend = TransformersBackend.load(source, dtype="float32", device="cpu")
    tensors = load_file(folder / "model.safetensors")
    quantized = 0
    with torch.no_grad():
        for name, module in backend.model.named_modules():
            if f"{name}.weight_scale" in tensors:
                module.weight.copy_(tensors[f"{name}.weight"].float() * tensors[f"{name}.weight_scale"])
                if activations:
                    module.register_forward_pre_hook(per_token_int8)
                quantized += 1
    assert quantized == sum(name.endswith(".weight_scale") for name in tensors) > 0
    return backend


def seven_bit_weights(folder: Path) -> None:
    """Halve a W8A8 checkpoint's int8 weights in place (each scale doubled), so that no weight
    exceeds 64 in magnitude: the same scheme, one bit of weight precision less."""
    import torch
    from safetensors.torch import load_file, save_file

    path = folder / "model.safetensors"
    tensors = load_file(path)
    for name in [name for name in tensors if name.endswith(".weight_scale")]:
        weight = name.removesuffix("_scale")
        tensors[weight] = torch.round(tensors[weight].float() / 2).to(torch.int8)
        tensors[name] = tensors[name] * 2
    save_file(tensors, path, metadata={"format": "pt"})


def cpu_has_vnni() -> bool:
    """Whether the CPU multiplies int8 by int8 into int32 in one instruction (AVX-512 VNNI or
    AVX-VNNI): without it oneDNN sums pairs of u8 x s8 products in int16 first."""
    flags = next((line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags")), "").split()
    return bool({"avx512_vnni", "avx_vnni"} & set(flags))


def llmcompressor_w8a8(folder: Path, smollm2: str) -> tuple[str, Path]:
    """(the float tiny Llama, its INT8 W8A8 checkpoint) as llm-compressor made them in its own environment
    (benchmarks/llmcompressor_variants.py --tiny llama --only w8a8, under LONGCTX_LLMCOMPRESSOR_CHECKPOINTS/llama),
    copied into ``folder`` with SmolLM2's tokenizer beside each."""
    from transformers import AutoTokenizer

    where = os.environ.get("LONGCTX_LLMCOMPRESSOR_CHECKPOINTS")
    made = Path(where) / "llama" if where else None
    missing = made is None or not all((made / kind / "config.json").is_file() for kind in ("float", "w8a8"))
    skip_unless(f"no llm-compressor W8A8 tiny Llama under LONGCTX_LLMCOMPRESSOR_CHECKPOINTS ({where})" if missing else None,
                "benchmarks/llmcompressor_variants.py --tiny llama --only w8a8 --out DIR/llama in llm-compressor's environment",
                required_by="LONGCTX_TEST_LLMCOMPRESSOR")
    tokenizer = AutoTokenizer.from_pretrained(smollm2)
    for kind in ("float", "w8a8"):
        shutil.copytree(made / kind, folder / kind)
        tokenizer.save_pretrained(folder / kind)
    return str(folder / "float"), folder / "w8a8"


def test_a_w8a8_int8_checkpoint_runs_the_arithmetic_it_describes(smollm2, tmp_path):
    """An INT8 W8A8 checkpoint (compressed-tensors: int8 weights per output channel, int8
    activations per token) llm-compressor made of a tiny Llama: vLLM loads it as int8 and reads it as the
    same arithmetic done by hand in float reads it, far closer than the same int8 weights
    with float activations or the float model. (On SmolLM2, 30 layers deep, a rounding
    boundary crossed by a float-order difference moves a read by 0.06 nats on average, as much
    as the scheme itself: the match is only measurable on a shallow model.)

    With full-range int8 weights (llm-compressor's use -128 too) vLLM 0.32's CPU product is not
    exact. Without VNNI its oneDNN product sums pairs of (activation + 128) x weight products in
    int16, which such weights overflow (255 x 128 x 2 > 32767): the reads move 0.017 nats on
    average from the hand-made arithmetic, eight times the scheme's own effect (measured on an AVX2
    CPU with weights in [-127, 127]). On an AVX-512 VNNI CPU they move 0.00037 nats on average
    (0.0017 at most), a fifth of the scheme's distance from the float model, cause not pinned down
    (reading -128 as -127 is not it: that twin is 0.0018 away). With weights of at most 64 in
    magnitude both CPUs read the hand-made arithmetic (under 1e-4 nats on average): the test
    checks that, and for the full-range weights what each kind of CPU was measured to do. On a CPU with AMX
    tiles vLLM runs these layers with its AMX kernel, which takes no float32 activations (its engine died at
    the first read in CI): there the test checks the backend refuses before the engine starts, and skips."""
    from pytest_longctx.backends import load_backend
    from pytest_longctx.backends.vllm.in_process import amx_tiles
    from pytest_longctx.errors import LongctxError

    source, full = llmcompressor_w8a8(tmp_path, smollm2)
    if amx_tiles():  # vLLM's AMX int8 kernel takes bfloat16 or float16 activations only
        with pytest.raises(LongctxError, match="AMX kernel on this CPU"):
            load_backend(str(full), backend="vllm", options=ENGINE)
        pytest.skip("this CPU has AMX tiles: vLLM runs int8 W8A8 there in bfloat16 or float16 only (float32 is refused, "
                    "checked above), and the float32 arithmetic this test compares cannot be run")
    ids = np.random.default_rng(0).integers(0, 49152, 700).tolist()
    positions = list(range(20, 700, 40))
    tokens = [[ids[p + 1], 7] for p in positions]

    def reads(folder: Path) -> dict[str, np.ndarray]:
        """The log-probabilities vLLM serves for ``folder`` and those of the three hand-made models."""
        backend, _ = load_backend(str(folder), backend="vllm", options=ENGINE)
        try:
            said = backend.describe()  # in the transformers backend's words: the scheme, who made it and how
            assert said["quantization"].startswith(
                "compressed-tensors W8A8, int8 weights per channel, int8 activations dynamic per token, rounded as they "
                "run; round to nearest, by llm-compressor (compressed-tensors ") and said["quantization_method"] == "compressed-tensors"
            found = {"vLLM": np.concatenate(backend.read(ids, positions, tokens).logprobs)}
        finally:
            backend.close()
        others = {"twin": w8a8_twin(folder, source), "int8 weights only": w8a8_twin(folder, source, activations=False),
                  "float": load_backend(source, dtype="float32")[0]}
        found.update({name: np.concatenate(other.read(ids, positions, tokens).logprobs) for name, other in others.items()})
        say(f"vLLM W8A8 int8 ({folder.name}), tiny Llama: reads differ (mean / max nats) " +
            ", ".join(f"from {name} {gap(found, 'vLLM', name):.2g} / {np.abs(found['vLLM'] - found[name]).max():.2g}"
                      for name in others))
        return found

    def gap(found: dict[str, np.ndarray], one: str, other: str) -> float:
        return float(np.abs(found[one] - found[other]).mean())

    def matches_twin(found: dict[str, np.ndarray]) -> bool:
        # mean, not max: an activation that lies on a rounding boundary rounds either way under
        # another float order, and one such step moves a read by about 1e-3 nats
        twin = gap(found, "vLLM", "twin")
        return twin < 1e-4 and min(gap(found, "vLLM", "int8 weights only"), gap(found, "vLLM", "float")) > 10 * twin

    quantized = json.loads((full / "config.json").read_text())["quantization_config"]
    assert quantized["format"] == "int-quantized" and quantized["ignore"] == ["lm_head"]
    seven = tmp_path / "w8a8-int8-7bit"
    shutil.copytree(full, seven)
    seven_bit_weights(seven)
    full_range = reads(full)
    assert matches_twin(reads(seven))
    if cpu_has_vnni():  # near the arithmetic it describes, nearer than to the other two models
        assert gap(full_range, "vLLM", "twin") < 0.5 * min(gap(full_range, "vLLM", "int8 weights only"),
                                                        gap(full_range, "vLLM", "float"))
    else:  # saturated: farther from the arithmetic it describes than that arithmetic is from the float model
        assert gap(full_range, "vLLM", "twin") > 4 * gap(full_range, "twin", "float")
