"""The one request builder both vLLM backends send: a read as a one-token generation.

A read at position ``p`` of a sequence is a generation of one token (greedy) whose prompt is
the sequence's token ids up to and including ``p``: the sampled token is the top-1 there, and
the log-probabilities vLLM returns for it are the model's full-vocabulary ones. Sent this way,
the prompt's blocks already computed are served from vLLM's prefix cache; vLLM's per-prompt-
position log-probabilities (``prompt_logprobs``) turn the prefix cache off for the request
unless it says otherwise, which only vLLM in process can (``VllmBackend.rows``). vLLM
returns either the ``logprobs`` most likely tokens or the log-probabilities of given ids
(``logprob_token_ids``), not both in one request, and at most ``max_ids`` per request: a read
that needs both, or more ids, is several queries."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from pytest_longctx.backends.base import Prediction
from pytest_longctx.errors import LongctxError


@dataclass(frozen=True)
class Query:
    """One generation of one token: the prompt's ids, how many of the most likely tokens to
    return (``top_k``; 0: only the sampled one), or the ids whose log-probabilities to return."""

    prompt: tuple[int, ...]
    top_k: int = 0
    ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class Reply:
    """What vLLM answered for a query: the token it sampled (greedy: the most likely), the
    log-probabilities it returned by token id, and how many prompt tokens its prefix cache
    served (None when the server does not say)."""

    sampled: int
    logprobs: dict[int, float]
    cached: int | None = None


# two tokens this close in log-probability are a tie that rounding decides (a prompt row and a read's
# own request compute the same position in other steps: 2e-6 nats apart on SmolLM2, vLLM 0.32 CPU)
TIE = 1e-4


def _chunks(ids: Sequence[int], size: int) -> list[tuple[int, ...]]:
    return [tuple(ids[at:at + size]) for at in range(0, len(ids), size)]


def first_queries(prompt: tuple[int, ...], asked: Sequence[int], top_k: int, max_ids: int) -> list[Query]:
    """The queries a read starts with: the ``top_k`` most likely tokens when they are wanted
    (the ids asked for follow once it is known which are not among them), else the ids asked
    for, ``max_ids`` at a time."""
    if top_k:
        if top_k > max_ids:
            raise LongctxError(f"the top {top_k} tokens are wanted at every read but vLLM returns at most {max_ids} "
                               "log-probabilities per request: start it with --max-logprobs 128 (a server) or "
                               "pass --backend-option max-logprobs=128")
        return [Query(prompt, top_k=top_k)]
    return [Query(prompt, ids=chunk) for chunk in _chunks(sorted(set(asked)), max_ids)] or [Query(prompt)]


def follow_ups(prompt: tuple[int, ...], asked: Sequence[int], replies: Sequence[Reply], max_ids: int) -> list[Query]:
    """The queries for the ids asked for that the replies so far did not return."""
    known = {token for reply in replies for token in reply.logprobs}
    return [Query(prompt, ids=chunk) for chunk in _chunks(sorted(set(asked) - known), max_ids)]


def prediction(replies: Sequence[Reply], asked: Sequence[int], top_k: int, where: str) -> Prediction:
    """The read's answer from its replies: top-1, the log-probabilities of ``asked`` (in its
    order) and the top-k (most likely first, ties by the lower id) when ``top_k``. ``where``
    names the read in an error."""
    merged: dict[int, float] = {}
    for reply in replies:
        merged.update(reply.logprobs)
    sampled = {reply.sampled for reply in replies}
    values = [merged[token] for token in sampled if token in merged]
    tie = len(values) == len(sampled) and max(values) - min(values) <= TIE
    if len(sampled) != 1 and not tie:
        raise LongctxError(f"vLLM sampled different tokens ({', '.join(map(str, sorted(sampled)))}) for the same prompt {where}: "
                           "greedy generation is not deterministic on this deployment (a batch-variant kernel, or kernels that compute "
                           "a prompt otherwise when the prefix cache served part of it than whole): to compute every prompt in "
                           "the same block-aligned steps, pass the engine options max-num-seqs=1, max-num-batched-tokens=32 and "
                           "block-size=32 (--backend-option; a server: --max-num-seqs 1 --max-num-batched-tokens 32 --block-size 32)")
    best = replies[0].sampled
    if best in merged and any(value > merged[best] + TIE for value in merged.values()):
        raise LongctxError(f"vLLM sampled token {best} {where} although a more likely one was returned: the server does not "
                           "sample greedily (a default temperature or logits processor overrides temperature=0)")
    missing = [token for token in asked if token not in merged]
    if missing:
        raise LongctxError(f"vLLM returned no log-probability for token(s) {missing[:5]} {where}")
    top = None
    if top_k:
        ranked = sorted(replies[0].logprobs.items(), key=lambda pair: (-pair[1], pair[0]))[:top_k]
        top = ([token for token, _ in ranked], [value for _, value in ranked])
    return best, [merged[token] for token in asked], top
