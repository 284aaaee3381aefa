"""``VllmServerBackend``: a model as a running vLLM server serves it (``vllm serve ...``, on
one GPU or tensor-parallel across many), through its OpenAI-compatible completions endpoint.

Prompts are sent as token ids, never text, and every answer is checked against the ids sent
(a proxy or server that re-tokenizes is one line, not wrong scores). Reads are idempotent: a
request that fails on the way (a timeout, a dropped connection, a 5xx) is tried again, a
bounded number of times; a server that stays down is one line. Nothing a server answers can
stand for its weights, so its answers are kept in the score cache only under a name the user
declares for what it serves (``reuse-scores``). The API key comes from the environment only,
and a user and password in the URL are used to connect only: neither goes into a line or a
report."""
from __future__ import annotations

import hashlib
import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Sequence

from pytest_longctx.backends.base import DECLARED, ReadResult, read_by_session
from pytest_longctx.backends.digests import settings_digest
from pytest_longctx.backends.vllm.options import ServerOptions
from pytest_longctx.backends.vllm.queries import Query, Reply
from pytest_longctx.backends.vllm.read_session import VllmReadSession
from pytest_longctx.backends.vllm.traffic import Traffic
from pytest_longctx.data.qwen import qwen35_tokenizer
from pytest_longctx.errors import LongctxError, actual, entered, hidden

# the identity probe: a fixed prompt whose top 16 at its end, rounded. It moves with most changes
# behind the served name, not with all (one that shows only far back in a long context leaves it
# as it was), so it only adds to a name the user declares (reuse-scores), never stands for the weights
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


def check_server_url(url: str, given_as: str, key_env: str) -> None:
    """Refuse a server URL with a query string or a fragment: the only thing one would carry is a
    key (``?api_key=…``), which must not be on a command line (it lands in shell histories and CI
    logs, as ``api-key=`` would), and the client adds the endpoints' paths after the URL."""
    if "?" in url or "#" in url:
        other = " (or another, named with --backend-option api-key-env=NAME)" if key_env == ServerOptions().api_key_env else ""
        raise LongctxError(f"{given_as}{entered(url)}: a vLLM server's URL takes no query string or fragment "
                           f"(?…, #…): give it as http://HOST:PORT/v1; an API key goes in the environment variable "
                           f"{key_env}{other}, never on the command line (it would land in shell histories and CI logs)")


class VllmServerBackend:
    """Scores the model a vLLM server serves; see the module docstring."""

    def __init__(self, settings: ServerOptions, name: str):
        import httpx

        check_server_url(settings.base_url, "the server's URL ", settings.api_key_env)
        self.settings = settings
        self.base = actual(settings.base_url).rstrip("/")  # entered redacted: connect to it as given
        self.where = entered(settings.base_url).rstrip("/")  # the server as lines and files name it: redacted
        self.name = entered(name)
        key = os.environ.get(settings.api_key_env, "")
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self.client = httpx.Client(headers=headers, timeout=settings.timeout)
        self.max_ids = settings.max_logprobs
        self.traffic = Traffic()
        self.pool = ThreadPoolExecutor(max_workers=settings.concurrency, thread_name_prefix="longctx-vllm")
        self._probe: str | None = None
        try:
            self._check_served_model()
            self.version = str(self._get("/version", api=False).get("version", "unknown"))
            self.tokenizer = self._tokenizer()
        except BaseException:
            self.close()  # a refused server: nobody else holds the client and the pool to close them
            raise

    def _check_served_model(self) -> None:
        """The served model the options name (or the only one), its root and ``max_model_len``."""
        served = self._get("/models").get("data")
        if not isinstance(served, list) or not all(isinstance(entry, dict) and "id" in entry for entry in served):
            raise ServerError(f"{self.where}/models answered without a list of models under 'data', each with an 'id', "
                              "as vLLM's OpenAI-compatible server does: is it one (give its root, http://HOST:PORT/v1)?")
        names = [str(entry["id"]) for entry in served]
        wanted = self.settings.served_model
        if not wanted and len(names) != 1:
            raise ServerError(f"the vLLM server at {self.where} serves {', '.join(names) or 'no model'}: name one with "
                              "--backend-option served-model=NAME")
        if wanted and wanted not in names:
            raise ServerError(f"the vLLM server at {self.where} does not serve {wanted!r}; it serves {', '.join(names)}")
        entry = served[names.index(wanted or names[0])]
        self.served_model = str(entry["id"])
        self.root = str(entry.get("root") or self.served_model)
        limit = entry.get("max_model_len")
        if limit is not None and not isinstance(limit, int):
            raise ServerError(f"{self.where}/models gives {self.served_model} a max_model_len of {limit!r}, not a whole number "
                              "of tokens: is it a vLLM server?")
        self.max_model_len: int | None = limit or None

    # -------------------------------------------------------------- HTTP

    def _url(self, path: str, api: bool = True, shown: bool = False) -> str:
        """The endpoint's URL; ``shown``: as a line names it (without credentials)."""
        base = self.where if shown else self.base
        return (base if api else base.removesuffix("/v1")) + path

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
                problem = hidden(f"{type(exc).__name__}: {exc}", self.settings.base_url)  # httpx had the URL as given
                continue
            if response.status_code >= 500:
                problem = f"HTTP {response.status_code}: {response.text[:200]}"
                continue
            if response.status_code in (401, 403):
                raise ServerError(f"the vLLM server at {self.where} refused the request (HTTP {response.status_code}): put its "
                                  f"API key in the environment variable {self.settings.api_key_env}")
            if response.status_code >= 400:
                raise ServerError(f"the vLLM server at {self.where} refused {path} (HTTP {response.status_code}): "
                                  f"{_message(response)}")
            shown = self._url(path, api, shown=True)
            try:
                body = response.json()
            except ValueError:
                raise ServerError(f"{shown} answered with something other than JSON: is it a vLLM server?") from None
            if not isinstance(body, dict):
                raise ServerError(f"{shown} answered {_kind(body)} where vLLM answers a JSON object: is it a vLLM server "
                                  "(give its root, http://HOST:PORT/v1)?")
            return body
        kept = ("what was scored before is in the score cache" if self.settings.reuse_scores else
                "it reads everything again: a served model's answers are kept only under --backend-option reuse-scores=NAME")
        raise ServerError(f"the vLLM server at {self.where} did not answer {path} after {self.settings.retries + 1} tries "
                          f"({problem}); start the server again and rerun ({kept})")

    def _get(self, path: str, api: bool = True) -> dict:
        return self._request("GET", path, api=api)

    # -------------------------------------------------------------- tokenizer

    def _tokenizer(self) -> Any:
        """The local tokenizer the ``tokenizer`` option names, checked against the server's
        ``/tokenize`` where it has one. Without the option, None (the ids mode only, which sends
        the data's stored Qwen3.5 ids): the server's tokenizer is then checked against Qwen3.5's."""
        served = self._served_ids()
        if not self.settings.tokenizer:
            self.tokenizer_missing = ("a vLLM server's tokenizer is not at hand here: name a local copy with "
                                      "--backend-option tokenizer=FOLDER_OR_HUB_ID for the text mode")
            data = _data_ids()
            if served is not None and data is not None and served != data:
                raise LongctxError(f"the vLLM server at {self.where} serves {self.served_model} with another tokenizer than "
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

    def _served_ids(self) -> list[int] | None:
        """The server's ``/tokenize`` of the check text; None where it has none (or refuses it)."""
        try:
            answer = self._request("POST", "/tokenize", {"model": self.served_model, "prompt": TOKENIZER_CHECK,
                                                         "add_special_tokens": False}, api=False)
        except ServerError:
            return None
        tokens = answer.get("tokens")
        if not isinstance(tokens, list) or not all(isinstance(token, int) for token in tokens):
            raise ServerError(f"{self._url('/tokenize', api=False, shown=True)} answered without a list of token ids under "
                              "'tokens', as vLLM's does: is it a vLLM server?")
        return tokens

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

    def _complete(self, query: Query) -> Reply:
        payload: dict[str, Any] = {"model": self.served_model, "prompt": list(query.prompt), "max_tokens": 1,
                                   "temperature": 0.0, "logprobs": len(query.ids) if query.ids else query.top_k,
                                   "return_tokens_as_token_ids": True, "return_token_ids": True}
        if query.ids:
            payload["logprob_token_ids"] = list(query.ids)
        try:
            reply = _reply(self._request("POST", "/completions", payload), query, self._url("/completions", shown=True))
        except BaseException:
            self.traffic.failed()  # no longer in flight, whatever the answer was
            raise
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
        """What the server says of the model it serves. A server cannot hand over its files, so
        ``weights`` is None (the score cache keeps nothing for it) unless the user declares what it
        serves (``reuse-scores=NAME``): then the declared name, and the identity probe's digest
        beside it. ``config`` digests the rest and vLLM's version."""
        served = {"served_model": self.served_model, "root": self.root, "max_model_len": self.max_model_len}
        versions = {"vllm": self.version}
        declared = self.settings.reuse_scores
        identity = {"weights": f"{DECLARED}{declared}", "probe": self.probe()} if declared else {"weights": None}
        return {
            "model": str(self.name),
            **identity,
            "config": settings_digest({**served, "versions": versions, **identity}),
            **served,
            "versions": versions,
        }


def _data_ids() -> list[int] | None:
    """The check text in the data's tokenizer (Qwen3.5); None where it cannot be made here
    (without the bench extra): the check is then left out."""
    try:
        tokenizer = qwen35_tokenizer()
    except LongctxError:
        return None
    return list(tokenizer(TOKENIZER_CHECK, add_special_tokens=False)["input_ids"])


def _message(response: Any) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:200]
    error = body.get("error", body) if isinstance(body, dict) else body
    return str(error.get("message", error) if isinstance(error, dict) else error)[:300]


def _reply(answer: dict, query: Query, endpoint: str) -> Reply:
    """A completion as a Reply, checked against the query: the ids the server read must be the
    ids sent. ``endpoint`` names the server's in an error."""
    try:
        choice = answer["choices"][0]
        logprobs = choice["logprobs"]
        sampled = _id_of(logprobs["tokens"][0])
        returned = {_id_of(token): float(value) for token, value in (logprobs["top_logprobs"][0] or {}).items()}
        returned.setdefault(sampled, float(logprobs["token_logprobs"][0]))
        read = choice.get("prompt_token_ids")
        usage = answer.get("usage") or {}
        counted = usage.get("prompt_tokens", len(query.prompt))
        cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
        cached = None if cached is None else int(cached)
    except (KeyError, IndexError, TypeError, ValueError, AttributeError):
        raise ServerError(f"{endpoint} answered a completion in another shape than vLLM's (expected choices[0].logprobs with "
                          "tokens, token_logprobs and top_logprobs as objects of token_id:N, and usage.prompt_tokens): is it "
                          "a vLLM server?") from None
    if (read is not None and list(read) != list(query.prompt)) or counted != len(query.prompt):
        raise ServerError(f"{endpoint} read other token ids than were sent ({counted} prompt tokens for {len(query.prompt)} "
                          "sent): something between re-tokenizes the prompt; send to vLLM directly")
    return Reply(sampled, returned, cached)


def _kind(body: Any) -> str:
    """What a JSON answer that is no object is, for a line."""
    kinds = {str: "a JSON string", list: "a JSON array", bool: "a JSON boolean", int: "a JSON number", float: "a JSON number"}
    return kinds.get(type(body), "JSON null")
