"""The backend protocol: anything that can read teacher-forced predictions can be scored."""
from __future__ import annotations

import bisect
import inspect
from typing import Any, Callable, Iterator, NamedTuple, Protocol, Sequence, runtime_checkable

# At most this many read positions per forward call: bounds the [reads, vocab] logits.
MAX_READS_PER_CALL = 256
TopK = tuple[list[int], list[float]]  # the most likely next tokens at a position and their log-probabilities, most likely first


class ReadResult(NamedTuple):
    """What a backend answers for one sequence: per read position, its top-1 token and the log-
    probabilities asked for; with ``top_k``, also the ``top_k`` most likely tokens there."""

    top1: list[int]  # the most likely next token at each position
    logprobs: list[list[float]]  # log p(token) at each position, for the tokens asked for there
    top: list[TopK] | None = None  # with top_k > 0: (ids, log-probabilities) of the top_k most likely, per position


@runtime_checkable
class Backend(Protocol):
    """Reads predictions of a causal language model.

    ``read(ids, positions, tokens)`` runs the model over ``ids`` and, for each
    ``positions[i]``, returns the arg-max next token and the log-probabilities (natural
    log, full-vocabulary softmax) of every id in ``tokens[i]`` as the token that follows
    that position. Positions may come in any order; results follow the given order.

    A backend that also takes a keyword ``top_k`` (``read(ids, positions, tokens,
    top_k=16)``) returns, in ``ReadResult.top``, the ``top_k`` most likely next tokens at
    each position with their log-probabilities, most likely first: a baseline made with
    such a backend stores them, and later candidates are compared with it token
    distribution against token distribution (docs/metrics.md#drift). Candidates need only
    ``read``: they are asked for the log-probabilities of the baseline's ids.

    A backend may also expose ``tokenizer`` (a Hugging Face tokenizer, for the ``text``
    mode; when None, ``tokenizer_missing`` may say why) and ``describe() -> dict`` (model
    id, weight fingerprint, dtype, device, library versions: recorded in results and
    baselines), ``context_window`` (the longest sequence it was trained for, or None):
    texts longer than that are refused unless the user allows them, and ``vocab_size``
    (the token ids it takes): larger ids are refused before any forward pass. The engine
    refuses any log-probability above 0 (logits passed off as log-probabilities). ``session()`` (see the transformers backend) lets the
    engine run shared prefixes once; its ``advance`` takes ``top_k`` as ``read`` does.
    """

    def read(self, ids: Sequence[int], positions: Sequence[int], tokens: Sequence[Sequence[int]]) -> ReadResult: ...


def describe(backend: Any) -> dict[str, Any]:
    """What a backend says about itself, or its class name."""
    info = backend.describe() if hasattr(backend, "describe") else {}
    return {"backend": type(backend).__name__, **info}


def takes_top_k(method: Callable[..., Any]) -> bool:
    """Whether a backend's ``read`` (or a session's ``advance``) accepts the ``top_k`` keyword."""
    try:
        parameters = inspect.signature(method).parameters
    except (TypeError, ValueError):
        return False
    return "top_k" in parameters or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())


def forward_calls(sorted_positions: Sequence[int], end: int, chunk_size: int) -> Iterator[tuple[int, int, slice]]:
    """(start, stop, slice of ``sorted_positions``) per forward call over tokens ``[0, end)``:
    chunks of at most ``chunk_size`` tokens, cut early once ``MAX_READS_PER_CALL`` reads fall
    in one."""
    start, first = 0, 0
    while start < end:
        stop = min(start + chunk_size, end)
        last = bisect.bisect_left(sorted_positions, stop)
        if last - first > MAX_READS_PER_CALL:
            last = first + MAX_READS_PER_CALL
            stop = int(sorted_positions[last - 1]) + 1
        yield start, stop, slice(first, last)
        start, first = stop, last


def read_by_session(make_session: Callable[[], Any], ids: Sequence[int], positions: Sequence[int],
                    tokens: Sequence[Sequence[int]], top_k: int = 0) -> ReadResult:
    """``read`` for a backend with sessions: one new session over ``ids`` cut after the last
    read position (never run past it)."""
    if not len(positions):
        return ReadResult([], [], [] if top_k else None)
    end = int(max(positions)) + 1
    return make_session().advance(ids[:end], positions, tokens, top_k)
