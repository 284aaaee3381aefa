"""``VllmServerBackend``: a model as a running vLLM server serves it (``vllm serve ...``, on
one GPU or tensor-parallel across many), through its OpenAI-compatible completions endpoint.

Prompts are sent as token ids, never text, and every answer is checked against the ids sent
(a proxy or server that re-tokenizes is one line, not wrong scores). Reads are idempotent: a
request that fails on the way (a timeout, a dropped connection, a 5xx) is tried again, a
bounded number of times; a server that stays down is one line, and what was scored before
it went down is in the score cache already. The API key comes from the environment only and
goes into no report."""
from __future__ import annotations

import hashlib
import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Sequence

from pytest_longctx.backends.base import ReadResult, read_by_session
from pytest_longctx.backends.files import settings_digest
from pytest_longctx.backends.vllm.options import ServerOptions
from pytest_longctx.backends.vllm.queries import Query, Reply
from pytest_longctx.backends.vllm.session import VllmReadSession
from pytest_longctx.backends.vllm.traffic import Traffic
from pytest_longctx.errors import LongctxError

# the identity probe: a fixed prompt whose top 16 at its end, rounded, stand for the weights
# behind the served name (a server cannot hand over its files; any change to the weights,
# their quantization or the KV cache moves these numbers)
PROBE = tuple(range(101, 165))
PROBE_DECIMALS = 2
RETRY_WAIT = 1.0  # seconds before the first retry of a failed request; doubled before each further one
# the tokenizer check: text whose ids the local tokenizer must give as the server's does
TOKENIZER_CHECK = "Long-context check: 42 tools, naïve café résumé, ünïcödé — 東京 📎 <tag> \n\tend."


class ServerError(LongctxError):
    """The server could not be reached or answered with an error."""


def _id_of(token: str) -> int:
    """A token as the server writes it with ``return_tokens_as_token_ids``: ``token_id:123``."""
    prefix, _, number = token.partition(":")
    if prefix != "token_id" or not number.lstrip("-").isdigit():
        raise ServerError(f"the server wrote a token as {token!r}, not as token_id:N: it is not a vLLM server of a version "
                          "that takes return_tokens_as_token_ids")
    return int(number)


class VllmServerBackend:
    """Scores the model a vLLM server serves; see the module docstring."""

    def __init__(self, settings: ServerOptions, name: str):
        import httpx

        self.settings = settings
        self.base = settings.base_url.rstrip("/")
        self.name = name
        key = os.environ.get(settings.api_key_env, "")
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self.client = httpx.Client(headers=headers, timeout=settings.timeout)
        self.max_ids = settings.max_logprobs
        self.traffic = Traffic()
        self.pool = ThreadPoolExecutor(max_workers=settings.concurrency, thread_name_prefix="longctx-vllm")
        served = self._get("/models").get("data") or []
        names = [str(entry.get("id")) for entry in served]
        wanted = settings.served_model
        if not wanted and len(names) != 1:
            raise ServerError(f"the vLLM server at {self.base} serves {', '.join(names) or 'no model'}: name one with "
                              "--backend-option served-model=NAME")
        if wanted and wanted not in names:
            raise ServerError(f"the vLLM server at {self.base} does not serve {wanted!r}; it serves {', '.join(names)}")
        entry = served[names.index(wanted or names[0])]
        self.served_model = str(entry["id"])
        self.root = str(entry.get("root") or self.served_model)
        limit = entry.get("max_model_len")
        self.max_model_len: int | None = int(limit) if limit else None
        self.version = str(self._get("/version", api=False).get("version", "unknown"))
        self.tokenizer = self._tokenizer()
        self._probe: str | None = None

    # -------------------------------------------------------------- HTTP

    def _url(self, path: str, api: bool = True) -> str:
        return (self.base if api else self.base.removesuffix("/v1")) + path

    def _request(self, method: str, path: str, payload: dict | None = None, api: bool = True) -> dict:
        """One request, tried again on a failure on the way (timeout, connection, 5xx) up to
        ``retries`` times; a 4xx or a server that stays down is one line."""
        import httpx

        url = self._url(path, api)
        problem = ""
        for attempt in range(self.settings.retries + 1):
            if attempt:
                time.sleep(min(RETRY_WAIT * 2.0 ** (attempt - 1), 30.0))
            try:
                response = self.client.request(method, url, json=payload)
            except httpx.TimeoutException:
                problem = f"no answer within {self.settings.timeout:g} s (--backend-option timeout=SECONDS)"
                continue
            except httpx.TransportError as exc:
                problem = f"{type(exc).__name__}: {exc}"
                continue
            if response.status_code >= 500:
                problem = f"HTTP {response.status_code}: {response.text[:200]}"
                continue
            if response.status_code in (401, 403):
                raise ServerError(f"the vLLM server at {self.base} refused the request (HTTP {response.status_code}): put its "
                                  f"API key in the environment variable {self.settings.api_key_env}")
            if response.status_code >= 400:
                raise ServerError(f"the vLLM server at {self.base} refused {path} (HTTP {response.status_code}): "
                                  f"{_message(response)}")
            try:
                return response.json()
            except ValueError:
                raise ServerError(f"{url} answered with something other than JSON: is it a vLLM server?") from None
        raise ServerError(f"the vLLM server at {self.base} did not answer {path} after {self.settings.retries + 1} tries "
                          f"({problem}); what was scored before is in the score cache: start the server again and rerun")

    def _get(self, path: str, api: bool = True) -> dict:
        return self._request("GET", path, api=api)

    # -------------------------------------------------------------- tokenizer

    def _tokenizer(self) -> Any:
        """The local tokenizer the ``tokenizer`` option names, checked against the server's
        ``/tokenize`` where it has one; None (the ids mode only) without the option."""
        if not self.settings.tokenizer:
            self.tokenizer_missing = ("a vLLM server's tokenizer is not at hand here: name a local copy with "
                                      "--backend-option tokenizer=FOLDER_OR_HUB_ID for the text mode")
            return None
        from transformers import AutoTokenizer

        try:
            tokenizer = AutoTokenizer.from_pretrained(self.settings.tokenizer)
        except Exception as exc:  # noqa: BLE001 - whatever stops it is one line
            raise LongctxError(f"--backend-option tokenizer={self.settings.tokenizer}: transformers cannot load it "
                               f"({type(exc).__name__}); give a folder with tokenizer files or a hub id in the local cache") from None
        local = tokenizer(TOKENIZER_CHECK, add_special_tokens=False)["input_ids"]
        try:
            served = self._request("POST", "/tokenize", {"model": self.served_model, "prompt": TOKENIZER_CHECK,
                                                         "add_special_tokens": False}, api=False).get("tokens")
        except ServerError:
            served = None  # no /tokenize: nothing to check against
        if served is not None and list(served) != list(local):
            raise LongctxError(f"--backend-option tokenizer={self.settings.tokenizer}: it tokenizes a check text into other ids "
                               f"than the server's tokenizer for {self.served_model} ({len(local)} ids against {len(served)}); "
                               "give the tokenizer of the served model")
        return tokenizer

    # -------------------------------------------------------------- reading

    def read(self, ids: Sequence[int], positions: Sequence[int], tokens: Sequence[Sequence[int]], top_k: int = 0) -> ReadResult:
        return read_by_session(self.session, ids, positions, tokens, top_k)

    def session(self) -> VllmReadSession:
        return VllmReadSession(self)

    def _complete(self, query: Query) -> Reply:
        payload: dict[str, Any] = {"model": self.served_model, "prompt": list(query.prompt), "max_tokens": 1,
                                   "temperature": 0.0, "logprobs": len(query.ids) if query.ids else query.top_k,
                                   "return_tokens_as_token_ids": True, "return_token_ids": True}
        if query.ids:
            payload["logprob_token_ids"] = list(query.ids)
        try:
            answer = self._request("POST", "/completions", payload)
        except BaseException:
            self.traffic.failed()
            raise
        reply = _reply(answer, query, self.base)
        self.traffic.answered(query, reply)
        return reply

    def answer(self, queries: Sequence[Query]) -> list[Reply]:
        """Every query in flight at once (up to ``concurrency``): vLLM batches them."""
        self.traffic.sending(len(queries))
        return list(self.pool.map(self._complete, queries))

    def status(self) -> str:
        return self.traffic.line()

    def close(self) -> None:
        self.pool.shutdown(wait=False)
        self.client.close()

    # -------------------------------------------------------------- identity

    def probe(self) -> str:
        """The identity probe's digest (see ``PROBE``)."""
        if self._probe is None:
            reply = self.answer([Query(PROBE, top_k=min(16, self.max_ids))])[0]
            rounded = sorted((token, round(value, PROBE_DECIMALS)) for token, value in reply.logprobs.items())
            self._probe = hashlib.sha256(json.dumps(rounded).encode()).hexdigest()[:24]
        return self._probe

    def describe(self) -> dict[str, Any]:
        """What the server says of the model it serves; ``weights`` is the identity probe's digest
        (a server cannot hand over its files), ``config`` digests the rest and vLLM's version."""
        served = {"served_model": self.served_model, "root": self.root, "max_model_len": self.max_model_len}
        versions = {"vllm": self.version}
        return {
            "model": str(self.name),
            "weights": f"probe:{self.probe()}",
            "config": settings_digest({**served, "versions": versions}),
            **served,
            "versions": versions,
        }


def _message(response: Any) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:200]
    error = body.get("error", body) if isinstance(body, dict) else body
    return str(error.get("message", error) if isinstance(error, dict) else error)[:300]


def _reply(answer: dict, query: Query, where: str) -> Reply:
    """A completion as a Reply, checked against the query: the ids the server read must be the
    ids sent."""
    try:
        choice = answer["choices"][0]
        logprobs = choice["logprobs"]
        sampled = _id_of(logprobs["tokens"][0])
        returned = {_id_of(token): float(value) for token, value in (logprobs["top_logprobs"][0] or {}).items()}
        returned.setdefault(sampled, float(logprobs["token_logprobs"][0]))
    except (KeyError, IndexError, TypeError) as exc:
        raise ServerError(f"the server at {where} answered a completion without its log-probabilities ({type(exc).__name__}: "
                          f"{exc}): is it a vLLM server?") from None
    read = choice.get("prompt_token_ids")
    usage = answer.get("usage") or {}
    if (read is not None and list(read) != list(query.prompt)) or usage.get("prompt_tokens", len(query.prompt)) != len(query.prompt):
        raise ServerError(f"the server at {where} read other token ids than were sent ({usage.get('prompt_tokens')} prompt tokens "
                          f"for {len(query.prompt)} sent): something between re-tokenizes the prompt; send to vLLM directly")
    details = usage.get("prompt_tokens_details") or {}
    cached = details.get("cached_tokens")
    return Reply(sampled, returned, int(cached) if cached is not None else None)
