"""``VllmBackend``: the model as vLLM runs it in this process (``LLM``), with the engine
arguments the user passes (tensor parallel, dtype, quantization, KV cache dtype …): reads
through sessions whose queries vLLM batches and serves from its prefix cache."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, Sequence

from pytest_longctx.backends import quantization_words
from pytest_longctx.backends.base import ReadResult, read_by_session
from pytest_longctx.backends.digests import beside_weights, folder_digest, settings_digest
from pytest_longctx.backends.vllm.options import ENGINE_DEFAULTS, PROMPT_ROWS
from pytest_longctx.backends.vllm.queries import Query, Reply
from pytest_longctx.backends.vllm.read_session import VllmReadSession
from pytest_longctx.backends.vllm.traffic import Traffic
from pytest_longctx.errors import LongctxError


def vllm_version() -> str:
    import vllm

    return str(getattr(vllm, "__version__", "unknown"))


def checkpoint_digest(model: str, revision: str | None) -> str:
    """The digest of the checkpoint vLLM loaded: its folder, or the hub snapshot in the local
    cache; a hub model not in the cache is named by its revision."""
    folder = Path(model).expanduser()
    if not folder.is_dir():
        try:
            from huggingface_hub import snapshot_download

            folder = Path(snapshot_download(model, revision=revision, local_files_only=True))
        except Exception:  # noqa: BLE001 - not in the cache, or no hub client: the revision names it
            return f"{model}@{revision or 'main'}"
    return folder_digest(folder)


def stored_quantization(model: str) -> Mapping[str, Any]:
    """The ``quantization_config`` in the config beside ``model``'s weights; empty where there is none."""
    config = beside_weights(model, "config.json")
    try:
        stored = json.loads(config.read_text()).get("quantization_config") if config else None
    except (OSError, ValueError):  # vLLM says what is wrong with a config it cannot read
        return {}
    return stored if isinstance(stored, Mapping) else {}


def amx_int8_refusal(model: str, quantization: Mapping[str, Any], dtype: str, amx: bool) -> str | None:
    """Why vLLM's CPU build cannot read ``model`` in ``dtype``, or None. On a CPU with AMX tiles,
    vLLM (0.32) runs the int8 W8A8 layers of a compressed-tensors checkpoint with its AMX kernel,
    which takes bfloat16 or float16 activations only: in float32 its engine starts, then stops at
    the first read ('int8_scaled_mm_with_quant: expect A to be bfloat16 or half')."""
    if not amx or dtype not in ("float32", "float") or quantization.get("quant_method") != "compressed-tensors":
        return None
    inputs = [group.get("input_activations") or {} for group in (quantization.get("config_groups") or {}).values()
              if isinstance(group, Mapping)]
    if not any(scheme.get("type") == "int" and scheme.get("num_bits") == 8 for scheme in inputs):
        return None
    return (f"vLLM's CPU build runs the int8 W8A8 layers of {model} with its AMX kernel on this CPU, which takes "
            "bfloat16 or float16 activations only: in float32 its engine would stop at the first read. Read it in "
            "bfloat16 (--dtype bfloat16, or --backend-option dtype=bfloat16), or on a CPU without AMX")


def amx_tiles() -> bool:
    """Whether this CPU has AMX tiles that the kernel lets programs use (torch asks the CPU and the OS)."""
    import torch

    probe = getattr(torch.cpu, "_is_amx_tile_supported", None)
    return bool(probe and probe())


class VllmBackend:
    """Scores a model with vLLM in this process; see the package docstring."""

    def __init__(self, llm: Any, name: str, arguments: Mapping[str, Any]):
        self.llm = llm
        self.name = name
        self.arguments = dict(arguments)
        self.max_ids = int(arguments["max_logprobs"])
        self.prompt_rows = bool(arguments.get(PROMPT_ROWS, False))
        config = llm.llm_engine.model_config
        self.model_config = config
        self.max_model_len: int | None = int(config.max_model_len)
        self.traffic = Traffic()
        self.tokenizer = self._tokenizer()
        self._digest: str | None = None

    @classmethod
    def load(cls, model: str, arguments: Mapping[str, Any], name: str | None = None, trust_remote_code: bool = False) -> VllmBackend:
        from vllm import LLM
        from vllm.platforms import current_platform

        refused = amx_int8_refusal(model, stored_quantization(model), str(arguments.get("dtype", "auto")),
                                   amx=current_platform.is_cpu() and amx_tiles())
        if refused:
            raise LongctxError(refused)
        try:
            llm = LLM(model=model, trust_remote_code=trust_remote_code, **{k: v for k, v in arguments.items() if k != PROMPT_ROWS})
        except RuntimeError as exc:
            if "initialization failed" not in str(exc):
                raise
            # the engine's processes said why in vLLM's log; the error that reaches here does not
            given = ", ".join(f"{k.replace('_', '-')}={v}" for k, v in arguments.items() if k not in ENGINE_DEFAULTS)
            raise LongctxError(f"vLLM could not start its engine for {model} ({given or 'default engine arguments'}): the "
                               "reason is in vLLM's log above (often an engine argument this device does not support, such "
                               "as an fp8 KV cache on a CPU without AVX-512, or memory: on a CPU set VLLM_CPU_KVCACHE_SPACE "
                               "to the GiB its KV cache may take)") from None
        return cls(llm, name or model, arguments)

    def _tokenizer(self) -> Any:
        """The model's tokenizer as a transformers tokenizer (the text mode needs its offsets):
        the one vLLM loaded, from the same files."""
        from transformers import AutoTokenizer

        config = self.model_config
        try:
            return AutoTokenizer.from_pretrained(config.tokenizer, revision=config.tokenizer_revision,
                                                 trust_remote_code=config.trust_remote_code)
        except Exception:  # noqa: BLE001 - whatever stops it: the ids mode still scores the model
            self.tokenizer_missing = f"transformers cannot load the tokenizer of {config.tokenizer}"
            return None

    @property
    def context_window(self) -> int | None:
        """The positions the model was trained for (its config's ``max_position_embeddings``)."""
        return getattr(self.model_config.hf_text_config, "max_position_embeddings", None)

    @property
    def vocab_size(self) -> int:
        return int(self.model_config.get_vocab_size())

    # -------------------------------------------------------------- reading

    def read(self, ids: Sequence[int], positions: Sequence[int], tokens: Sequence[Sequence[int]], top_k: int = 0) -> ReadResult:
        return read_by_session(self.session, ids, positions, tokens, top_k)

    def session(self) -> VllmReadSession:
        """A sequence read piece by piece; vLLM's prefix cache holds its state."""
        return VllmReadSession(self)

    def answer(self, queries: Sequence[Query]) -> list[Reply]:
        """One ``generate`` call for every query: vLLM batches them."""
        from vllm import SamplingParams

        params = [SamplingParams(max_tokens=1, temperature=0.0, logprobs=q.top_k if not q.ids else None,
                                 logprob_token_ids=list(q.ids) or None, detokenize=False) for q in queries]
        outputs = self._generate([q.prompt for q in queries], params)
        replies = []
        for output in outputs:
            generated = output.outputs[0]
            logprobs = {int(token): float(entry.logprob) for token, entry in generated.logprobs[0].items()}
            replies.append(Reply(int(generated.token_ids[0]), logprobs, output.num_cached_tokens))
        self.traffic.record(queries, replies)
        return replies

    def rows(self, prompt: tuple[int, ...], at: Sequence[int], top_k: int) -> list[Reply | None] | None:
        """The session's ``Host.rows`` under ``prompt-rows=true`` (else None: each read is its own query): one request
        with vLLM's prompt log-probabilities, reading its prefix cache (``skip_reading_prefix_cache=False``; vLLM turns
        the cache off for such a request unless told). vLLM computes the positions past the blocks its cache served
        and returns their rows (the ``top_k`` most likely tokens, at least the top-1, and the next prompt token); the
        rows of the positions it served are placeholders, so a read there is None. The read at the prompt's end is
        the generated token's row."""
        if not self.prompt_rows:
            return None
        from vllm import SamplingParams

        width = min(self.max_ids, max(top_k, 1))
        params = SamplingParams(max_tokens=1, temperature=0.0, logprobs=width, prompt_logprobs=width,
                                skip_reading_prefix_cache=False, detokenize=False)
        output = self._generate([prompt], [params])[0]
        generated, cached = output.outputs[0], output.num_cached_tokens
        self.traffic.record([Query(prompt)], [Reply(int(generated.token_ids[0]), {}, cached)])
        replies: list[Reply | None] = []
        for position in at:
            if position < cached:  # its row is a placeholder: vLLM served the position from its cache
                replies.append(None)
                continue
            last = position == len(prompt) - 1
            row = generated.logprobs[0] if last else output.prompt_logprobs[position + 1]
            best = min(row.items(), key=lambda pair: pair[1].rank, default=None) if row else None
            if best is None or best[1].rank != 1 or not (last or prompt[position + 1] in row):
                raise LongctxError(f"vLLM returned no log-probabilities of the most likely and the next prompt token after "
                                   f"{position + 1} prompt tokens (computed past {cached} from its cache): its prompt "
                                   f"log-probabilities (vLLM {vllm_version()}) are not what this backend reads; the reads "
                                   "cannot be trusted")
            replies.append(Reply(int(best[0]), {int(token): float(entry.logprob) for token, entry in row.items()}))
        return replies

    def _generate(self, prompts: Sequence[tuple[int, ...]], params: Sequence[Any]) -> list[Any]:
        """vLLM's outputs for ``prompts`` (token ids), checked to be for those ids."""
        from vllm.inputs import TokensPrompt

        try:
            outputs = self.llm.generate([TokensPrompt(prompt_token_ids=list(p)) for p in prompts], list(params), use_tqdm=False)
        except Exception as exc:
            if type(exc).__name__ != "EngineDeadError":
                raise
            raise LongctxError("vLLM's engine stopped in the middle of the run (EngineDeadError; its log above says why); what "
                               "was scored before is in the score cache: rerun to go on") from None
        if any(list(output.prompt_token_ids) != list(prompt) for prompt, output in zip(prompts, outputs)):
            raise LongctxError("vLLM answered for other prompt ids than were sent; the reads cannot be trusted")
        return outputs

    def status(self) -> str:
        return self.traffic.line()

    def close(self) -> None:
        """Stop vLLM's engine (its processes and the memory they hold)."""
        self.llm.llm_engine.engine_core.shutdown()

    # -------------------------------------------------------------- identity

    def weights_fingerprint(self) -> str:
        if self._digest is None:
            self._digest = checkpoint_digest(str(self.model_config.model), self.model_config.revision)
        return self._digest

    def quantization(self) -> str:
        """What the checkpoint's own quantization is, in the words the transformers backend uses
        (``compressed-tensors W8A8, int8 weights per channel, int8 activations dynamic per token; round to
        nearest, by llm-compressor``), from its stored config and the recipe beside its weights; vLLM
        rounds the activations a scheme names, and the keys and values of a KV cache scheme when its cache
        is float8. vLLM's method name where the checkpoint stores none."""
        stored = getattr(self.model_config.hf_config, "quantization_config", None)
        stored = stored if isinstance(stored, Mapping) else getattr(stored, "to_dict", dict)()
        if not stored:
            return str(self.model_config.quantization or "none")
        recipe = beside_weights(str(self.model_config.model), "recipe.yaml")
        # vLLM rounds keys and values with a checkpoint's KV cache scales only when its cache is float8 (kv-cache-dtype=fp8)
        cache_rounded = str(self.llm.llm_engine.vllm_config.cache_config.cache_dtype).startswith("fp8")
        return "; ".join(filter(None, (quantization_words.describe(stored, cache_rounded=cache_rounded),
                                       quantization_words.made_by(recipe, stored))))

    def describe(self) -> dict[str, Any]:
        """What makes the served model this model; ``config`` digests every setting here and
        vLLM's version, so that the score cache and a baseline tell two deployments apart."""
        engine = self.llm.llm_engine.vllm_config
        config, cache, parallel = self.model_config, engine.cache_config, engine.parallel_config
        settings = {
            "revision": config.revision or "",
            "quantization": self.quantization(),
            "quantization_method": str(config.quantization or "none"),  # vLLM's name for the kernels it runs
            "kv_cache": str(cache.cache_dtype),
            "block_size": int(cache.block_size),
            "tensor_parallel": int(parallel.tensor_parallel_size),
            "pipeline_parallel": int(parallel.pipeline_parallel_size),
            "engine_arguments": {k: v for k, v in sorted(self.arguments.items()) if isinstance(v, (str, int, float, bool))},
        }
        versions = {"vllm": vllm_version()}
        return {
            "model": str(self.name),
            "weights": self.weights_fingerprint(),
            "config": settings_digest({**settings, "versions": versions}),
            "dtype": str(config.dtype).removeprefix("torch."),
            "device": str(engine.device_config.device_type) if getattr(engine, "device_config", None) else "unknown",
            **settings,
            "versions": versions,
        }
