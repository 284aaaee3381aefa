"""The backend protocol: anything that can read teacher-forced predictions can be scored."""
from __future__ import annotations

from typing import Any, NamedTuple, Protocol, Sequence, runtime_checkable


class ReadResult(NamedTuple):
    """What a backend answers for one sequence: per read position, its top-1 token and the log-
    probabilities asked for."""

    top1: list[int]  # the most likely next token at each position
    logprobs: list[list[float]]  # log p(token) at each position, for the tokens asked for there


@runtime_checkable
class Backend(Protocol):
    """Reads predictions of a causal language model.

    ``read(ids, positions, tokens)`` runs the model over ``ids`` and, for each
    ``positions[i]``, returns the arg-max next token and the log-probabilities (natural
    log, full-vocabulary softmax) of every id in ``tokens[i]`` as the token that follows
    that position. Positions may come in any order; results follow the given order.

    A backend may also expose ``tokenizer`` (a Hugging Face tokenizer, for the ``text``
    mode) and ``describe() -> dict`` (model id, weight fingerprint, dtype, device,
    library versions: recorded in results and baselines), and ``context_window`` (the
    longest sequence it was trained for, or None): texts longer than that are refused
    unless the user allows them.
    """

    def read(self, ids: Sequence[int], positions: Sequence[int], tokens: Sequence[Sequence[int]]) -> ReadResult: ...


def describe(backend: Any) -> dict[str, Any]:
    """What a backend says about itself, or its class name."""
    info = backend.describe() if hasattr(backend, "describe") else {}
    return {"backend": type(backend).__name__, **info}
