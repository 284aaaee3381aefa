"""``Endpoint``: one vLLM server as the client reaches it (``vllm serve ...``, on one GPU or
tensor-parallel across many), through its OpenAI-compatible endpoints: its HTTP client, a request
tried again on a failure on the way, what the server says of itself before any read (the model it
serves, vLLM's version, its tokenizer's ids for a check text, the identity probe's answer) and one
completion, checked against the query it answers.

Prompts are sent as token ids, never text, and every answer is checked against the ids sent
(a proxy or server that re-tokenizes is one line, not wrong scores). Reads are idempotent: a
request that fails on the way (a timeout, a dropped connection, a 5xx) is tried again, a
bounded number of times; a server that stays down raises ``Unanswered``, which a fleet of
several servers (``fleet``) takes as the server's leaving. The API key comes from the
environment only, and a user and password in the URL are used to connect only: neither goes
into a line or a report."""
from __future__ import annotations

import hashlib
import json
import os
import time
from typing import Any

from pytest_longctx.backends.vllm.options import ServerOptions
from pytest_longctx.backends.vllm.queries import Query, Reply
from pytest_longctx.backends.vllm.traffic import Traffic
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


class Unanswered(ServerError):
    """The server did not answer a request however often it was tried: it stopped answering."""

    def __init__(self, where: str, path: str, tries: int, problem: str, kept: str):
        self.where, self.path, self.tries, self.problem = where, path, tries, problem
        super().__init__(f"the vLLM server at {where} did not answer {path} after {tries} tries ({problem}); start the "
                         f"server again and rerun ({kept})")

    def short(self) -> str:
        """What happened, without the advice: for a line that names several servers."""
        return f"{self.where} did not answer {self.path} after {self.tries} tries ({self.problem})"


def kept_scores(settings: ServerOptions) -> str:
    """What a rerun after a server went down reads again, by the ``reuse-scores`` option."""
    return ("what was scored before is in the score cache" if settings.reuse_scores else
            "it reads everything again: a served model's answers are kept only under --backend-option reuse-scores=NAME")


def _id_of(token: str) -> int:
    """A token as the server writes it with ``return_tokens_as_token_ids``: ``token_id:123``."""
    prefix, _, number = token.partition(":")
    if prefix != "token_id" or not number.lstrip("-").isdigit():
        raise ServerError(f"the server wrote a token as {token!r}, not as token_id:N: it is not a vLLM server of a version "
                          "that takes return_tokens_as_token_ids")
    return int(number)


class Endpoint:
    """One server: connected to and asked what it serves on creation; see the module docstring."""

    def __init__(self, url: str, settings: ServerOptions, traffic: Traffic):
        """``url``: the server's root as entered (a ``Redacted`` connects as given and shows redacted);
        ``traffic``: where its requests are counted (the backend's, shared by every server)."""
        import httpx

        self.settings, self.traffic = settings, traffic
        self.url = url
        self.base = actual(url).rstrip("/")  # entered redacted: connect to it as given
        self.where = entered(url).rstrip("/")  # the server as lines and files name it: redacted
        key = os.environ.get(settings.api_key_env, "")
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self.client = httpx.Client(headers=headers, timeout=settings.timeout)
        self.answered = 0  # completions it answered
        self._probe: str | None = None
        try:
            self._check_served_model()
            self.version = str(self._get("/version", api=False).get("version", "unknown"))
            self.served_ids = self._served_ids()
        except BaseException:
            self.close()  # a refused server: nobody else holds its client to close it
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

    # -------------------------------------------------------------- HTTP

    def _url(self, path: str, api: bool = True, shown: bool = False) -> str:
        """The endpoint's URL; ``shown``: as a line names it (without credentials)."""
        base = self.where if shown else self.base
        return (base if api else base.removesuffix("/v1")) + path

    def _request(self, method: str, path: str, payload: dict | None = None, api: bool = True) -> dict:
        """One request, tried again on a failure on the way (timeout, connection, 5xx) up to
        ``retries`` times; a 4xx is one line, a server that stays down ``Unanswered``."""
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
                problem = hidden(f"{type(exc).__name__}: {exc}", self.url)  # httpx had the URL as given
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
        raise Unanswered(self.where, path, self.settings.retries + 1, problem, kept_scores(self.settings))

    def _get(self, path: str, api: bool = True) -> dict:
        return self._request("GET", path, api=api)

    # -------------------------------------------------------------- reading

    def complete(self, query: Query) -> Reply:
        """The server's answer to one query, counted in the traffic."""
        payload: dict[str, Any] = {"model": self.served_model, "prompt": list(query.prompt), "max_tokens": 1,
                                   "temperature": 0.0, "logprobs": len(query.ids) if query.ids else query.top_k,
                                   "return_tokens_as_token_ids": True, "return_token_ids": True}
        if query.ids:
            payload["logprob_token_ids"] = list(query.ids)
        self.traffic.sending(1)
        try:
            reply = _reply(self._request("POST", "/completions", payload), query, self._url("/completions", shown=True))
        except BaseException:
            self.traffic.failed()  # no longer in flight, whatever the answer was
            raise
        self.traffic.answered(query, reply)
        self.answered += 1
        return reply

    def probe(self) -> str:
        """The identity probe's digest as this server answers it (see ``PROBE``); asked once."""
        if self._probe is None:
            reply = self.complete(Query(PROBE, top_k=min(16, self.settings.max_logprobs)))
            rounded = sorted((token, round(value, PROBE_DECIMALS)) for token, value in reply.logprobs.items())
            self._probe = hashlib.sha256(json.dumps(rounded).encode()).hexdigest()[:24]
        return self._probe

    def close(self) -> None:
        self.client.close()


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
