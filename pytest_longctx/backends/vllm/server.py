"""``VllmServerBackend``: a model as a running vLLM server serves it (``vllm serve ...``, on
one GPU or tensor-parallel across many), or as several replicas of one deployment serve it, through
their OpenAI-compatible completions endpoints: each server an ``Endpoint``, all of them a ``Fleet``
(one server is a fleet of one). Nothing a server answers can stand for its weights, so its answers
are kept in the score cache only under a name the user declares for what it serves
(``reuse-scores``)."""
from __future__ import annotations

from typing import Any, Sequence

from pytest_longctx.backends.base import DECLARED, ReadResult, read_by_session
from pytest_longctx.backends.digests import settings_digest
from pytest_longctx.backends.vllm.endpoint import TOKENIZER_CHECK, Endpoint
from pytest_longctx.backends.vllm.fleet import Fleet, check_alike
from pytest_longctx.backends.vllm.options import ServerOptions
from pytest_longctx.backends.vllm.queries import Query, Reply
from pytest_longctx.backends.vllm.read_session import VllmReadSession
from pytest_longctx.backends.vllm.traffic import Traffic
from pytest_longctx.backends.vllm.urls import server_urls
from pytest_longctx.data.qwen import qwen35_tokenizer
from pytest_longctx.errors import LongctxError, entered


class VllmServerBackend:
    """Scores the model one or several vLLM servers serve; see the module docstring."""

    def __init__(self, settings: ServerOptions, name: str):
        """``settings.base_url``: the server's URL, or several, comma-separated (urls.py)."""
        urls = server_urls(settings.base_url, "the server's URL ", settings.api_key_env)
        self.settings = settings
        self.name = entered(name)
        self.traffic = Traffic()
        endpoints: list[Endpoint] = []
        try:
            for url in urls:
                endpoints.append(Endpoint(url, settings, self.traffic))
            if len(endpoints) > 1:
                check_alike(endpoints)
            self.fleet = Fleet(endpoints, settings.concurrency)
        except BaseException:
            for endpoint in endpoints:  # refused: nobody else holds their clients to close them
                endpoint.close()
            raise
        first = endpoints[0]
        self.served_model, self.root, self.version = first.served_model, first.root, first.version
        self.max_model_len = first.max_model_len
        self.max_ids = settings.max_logprobs
        try:
            self.tokenizer = self._tokenizer(first)
        except BaseException:
            self.close()
            raise

    # -------------------------------------------------------------- tokenizer

    def _tokenizer(self, first: Endpoint) -> Any:
        """The local tokenizer the ``tokenizer`` option names, checked against the server's
        ``/tokenize`` where it has one. Without the option, None (the ids mode only, which sends
        the data's stored Qwen3.5 ids): the server's tokenizer is then checked against Qwen3.5's."""
        served = first.served_ids
        if not self.settings.tokenizer:
            self.tokenizer_missing = ("a vLLM server's tokenizer is not at hand here: name a local copy with "
                                      "--backend-option tokenizer=FOLDER_OR_HUB_ID for the text mode")
            data = _data_ids()
            if served is not None and data is not None and served != data:
                raise LongctxError(f"the vLLM server at {first.where} serves {self.served_model} with another tokenizer than "
                                   f"the data's (a check text is {len(served)} ids there, {len(data)} in Qwen3.5), so the ids "
                                   "mode's stored Qwen3.5 ids mean nothing to it: pass the served model's tokenizer, "
                                   "--backend-option tokenizer=FOLDER_OR_HUB_ID, to score in text mode")
            return None
        from transformers import AutoTokenizer

        try:
            tokenizer = AutoTokenizer.from_pretrained(self.settings.tokenizer)
        except Exception as exc:  # noqa: BLE001 - whatever stops it is one line
            raise LongctxError(f"--backend-option tokenizer={self.settings.tokenizer}: transformers cannot load it "
                               f"({type(exc).__name__}); give a folder with tokenizer files or a hub id in the local cache") from None
        local = list(tokenizer(TOKENIZER_CHECK, add_special_tokens=False)["input_ids"])
        if served is not None and served != local:
            raise LongctxError(f"--backend-option tokenizer={self.settings.tokenizer}: it tokenizes a check text into other ids "
                               f"than the server's tokenizer for {self.served_model} ({len(local)} ids against {len(served)}); "
                               "give the tokenizer of the served model")
        return tokenizer

    # -------------------------------------------------------------- reading

    def read(self, ids: Sequence[int], positions: Sequence[int], tokens: Sequence[Sequence[int]], top_k: int = 0) -> ReadResult:
        return read_by_session(self.session, ids, positions, tokens, top_k)

    def session(self) -> VllmReadSession:
        return VllmReadSession(self)

    def rows(self, prompt: tuple[int, ...], at: Sequence[int], top_k: int) -> None:
        """None: a server reads every read as its own query. Its completions endpoint takes
        ``prompt_logprobs`` but then computes the whole prompt again (it turns the prefix cache off for
        the request), which would cost more than the partial blocks the per-read queries recompute."""
        return None

    def answer(self, queries: Sequence[Query]) -> list[Reply]:
        """Every query in flight at once (up to ``concurrency`` on each server): vLLM batches them."""
        return self.fleet.answer(queries)

    def status(self) -> str:
        fleet = self.fleet
        servers = f", {len(fleet.alive)} of {len(fleet.endpoints)} servers" if len(fleet.endpoints) > 1 else ""
        return self.traffic.line() + servers

    def incidents(self) -> list[str]:
        """A line for each server that stopped answering and left the others to read (fleet.py)."""
        return list(self.fleet.incidents)

    def close(self) -> None:
        self.fleet.close()

    # -------------------------------------------------------------- identity

    def describe(self) -> dict[str, Any]:
        """What the server says of the model it serves. A server cannot hand over its files, so
        ``weights`` is None (the score cache keeps nothing for it) unless the user declares what it
        serves (``reuse-scores=NAME``): then the declared name, and the identity probe's digest
        beside it. ``config`` digests the rest and vLLM's version."""
        served = {"served_model": self.served_model, "root": self.root, "max_model_len": self.max_model_len}
        versions = {"vllm": self.version}
        declared = self.settings.reuse_scores
        # every server's answer to the probe is the same (fleet.check_alike): the first's stands for them
        identity = {"weights": f"{DECLARED}{declared}", "probe": self.fleet.endpoints[0].probe()} if declared else {"weights": None}
        return {
            "model": str(self.name),
            **identity,
            "config": settings_digest({**served, "versions": versions, **identity}),
            **served,
            "versions": versions,
            **self._servers(),
        }

    def _servers(self) -> dict[str, list[str]]:
        """Several servers: which (redacted), and those that stopped answering, why; nothing for one."""
        fleet = self.fleet
        if len(fleet.endpoints) == 1:
            return {}
        return {"servers": [endpoint.where for endpoint in fleet.endpoints],
                **({"servers_lost": list(fleet.lost)} if fleet.lost else {})}


def _data_ids() -> list[int] | None:
    """The check text in the data's tokenizer (Qwen3.5); None where it cannot be made here
    (without the bench extra): the check is then left out."""
    try:
        tokenizer = qwen35_tokenizer()
    except LongctxError:
        return None
    return list(tokenizer(TOKENIZER_CHECK, add_special_tokens=False)["input_ids"])
