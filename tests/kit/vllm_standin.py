"""A stand-in vLLM server for the vllm-server backend's tests: an HTTP server on loopback that
speaks vLLM's completions protocol (token-id prompts, ``logprobs``, ``logprob_token_ids``,
``return_tokens_as_token_ids``, cached-token counts) and answers each request with one full
forward pass of a tiny transformers model; its attributes make it misbehave as servers do."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

BLOCK = 32  # the stand-in's prefix-cache block: a prompt's cached tokens are its whole blocks seen before


class StandIn:
    """What the stand-in server does; tests change its attributes to make it misbehave."""

    def __init__(self, model: Any, names: tuple[str, ...] = ("org/tiny",), max_model_len: int = 4096, key: str | None = None,
                 tokenize: Callable[[str], list[int]] | None = None) -> None:
        """``model`` answers the completions under ``names``, within ``max_model_len``; ``key``, when set, is the
        bearer token every request must carry; ``tokenize`` answers /tokenize (none: that endpoint is not found)."""
        self.model, self.names, self.max_model_len, self.key, self.tokenize = model, list(names), max_model_len, key, tokenize
        self.prompts: list[tuple[int, ...]] = []  # completions' prompts, as they arrived
        self.seen: set[tuple[int, ...]] = set()  # the blocks computed so far (prefixes of whole blocks)
        self.errors = 0  # the next this many completions answer 503
        self.answer_limit: int | None = None  # completions answered before the server goes down
        self.retokenize = False
        self.plain_tokens = False  # write tokens as text, not token_id:N (not a vLLM server)
        self.cache_shift = 0  # added to the sampled id when the prefix cache served part of the prompt
        self.shapes: dict[str, object] = {}  # an endpoint's path -> the JSON it answers instead (of another shape)
        self.paths: list[str] = []  # every request's path, as it arrived
        self.lock = threading.Lock()
        self.url = ""  # where it is served, http://127.0.0.1:PORT/v1, once it is

    def completion(self, body: dict) -> tuple[int, dict]:
        """(HTTP status, answer) to a /v1/completions request's ``body``, as vLLM answers it unless told otherwise."""
        import torch

        prompt = tuple(body["prompt"])
        with self.lock:
            if self.answer_limit is not None and len(self.prompts) >= self.answer_limit:
                return 599, {}
            if self.errors:
                self.errors -= 1
                return 503, {"error": {"message": "overloaded"}}
            if len(prompt) + body["max_tokens"] > self.max_model_len:  # as vLLM refuses it
                return 400, {"error": {"message": f"This model's maximum context length is {self.max_model_len} tokens"}}
            self.prompts.append(prompt)
            cached = max((n for n in range(BLOCK, len(prompt), BLOCK) if prompt[:n] in self.seen), default=0)
            self.seen.update(prompt[:n] for n in range(BLOCK, len(prompt) + 1, BLOCK))
        with torch.no_grad():
            logits = self.model(torch.tensor([list(prompt)]), logits_to_keep=1).logits[0, -1]
        logp = torch.log_softmax(logits.double(), dim=-1)
        sampled = (int(logp.argmax()) + (self.cache_shift if cached else 0)) % len(logp)  # tests swap in wider models
        ids = body.get("logprob_token_ids") or [int(t) for t in torch.topk(logp, body["logprobs"]).indices] if body["logprobs"] else []
        name = (lambda t: f"tok{t}") if self.plain_tokens else (lambda t: f"token_id:{t}")
        read = list(prompt[:-1]) + [0] if self.retokenize else list(prompt)
        return 200, {"choices": [{"logprobs": {"tokens": [name(sampled)], "token_logprobs": [float(logp[sampled])],
                                               "top_logprobs": [{name(t): float(logp[t]) for t in ids}]},
                                  "prompt_token_ids": read}],
                     "usage": {"prompt_tokens": len(prompt), "prompt_tokens_details": {"cached_tokens": cached}}}


def serve(standin: StandIn) -> tuple[str, ThreadingHTTPServer]:
    """Serve ``standin`` on a free loopback port from a thread of its own: (its URL, the server, to shut down)."""

    class Handler(BaseHTTPRequestHandler):
        """vLLM's endpoints as ``standin`` answers them: /v1/models, /version, /v1/completions, /tokenize."""

        def log_message(self, *args: Any) -> None:
            """Quiet: no line on stderr per request."""

        def reply(self, status: int, body: object) -> None:
            """Answer ``body`` as JSON with ``status`` (the endpoint's other shape where ``standin.shapes`` holds one;
            599: no answer, the connection dropped)."""
            if status == 200 and self.path in standin.shapes:
                body = standin.shapes[self.path]
            if status == 599:  # gone: drop the connection without an answer
                self.close_connection = True
                self.connection.close()
                return
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def authorised(self) -> bool:
            """Whether the request carries ``standin.key`` where it wants one; a 401 answered where not."""
            standin.paths.append(self.path)
            if standin.key and self.headers.get("Authorization") != f"Bearer {standin.key}":
                self.reply(401, {"error": {"message": "Unauthorized"}})
                return False
            return True

        def do_GET(self) -> None:
            """The served models and the server's version."""
            if not self.authorised():
                return
            if self.path == "/v1/models":
                self.reply(200, {"data": [{"id": n, "root": f"/models/{n}", "max_model_len": standin.max_model_len}
                                          for n in standin.names]})
            elif self.path == "/version":
                self.reply(200, {"version": "0.32.0"})
            else:
                self.reply(404, {"error": {"message": "not found"}})

        def do_POST(self) -> None:
            """A completion, or a prompt tokenized."""
            if not self.authorised():
                return
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if self.path == "/v1/completions":
                self.reply(*standin.completion(body))
            elif self.path == "/tokenize" and standin.tokenize is not None:
                self.reply(200, {"tokens": standin.tokenize(body["prompt"])})
            else:
                self.reply(404, {"error": {"message": "not found"}})

    class Server(ThreadingHTTPServer):
        """A threading server with room for the client's connections in its listen backlog."""

        # the client opens up to 16 connections at once (concurrency); with the default listen
        # backlog of 5, an accept loop that falls behind on loaded cores has the kernel reset the rest
        request_queue_size = 64

    httpd = Server(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{httpd.server_address[1]}/v1", httpd

