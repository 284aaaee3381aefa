"""A backend's answers, checked: a ``ReadResult`` of the shape asked for (a top-1 id and the asked
tokens' log-probabilities at every read position, the top-k where asked), every log-probability at
most 0; anything else one line naming the backend, the item and what it returned. Every backend's
answers pass through ``checked_answers`` before the engine keeps them."""
from __future__ import annotations

import math
from typing import Any, Callable

from pytest_longctx.backends.base import Backend, TopK
from pytest_longctx.errors import LongctxError

# One request's answers: prediction index -> (top-1 id, token id -> log-probability, top-k or None).
Answer = tuple[int, dict[int, float], TopK | None]
Answers = dict[int, Answer]


# A log-probability is at most 0. Both backends' log-softmax (torch in float32, numpy in
# float64) gave at most exactly 0 over 3,200 random rows, flat to one token taking all the
# mass, of 2 to 152k tokens; the margin leaves room for another backend's rounding (a
# logsumexp taken in half precision), far below any logit a backend might pass off.
MAX_LOGPROB = 1e-4


def _above_zero(name: str, item: str, index: int, token: int, value: float, where: str) -> LongctxError:
    return LongctxError(f"{name} returned {value:.6g} as the log-probability of token {token} at read position {index} "
                        f"of item {item}{where}; log-probabilities must be <= 0 (logits? take log_softmax over the "
                        "vocabulary)")


def _check_at_most_zero(name: str, item: Callable[[int], str], index: int, asked: dict[int, float], top: TopK | None) -> None:
    """Refuse a log-probability above 0 (NaN and -inf pass: a candidate's non-finite values fail its checks)."""
    for token, value in asked.items():
        if MAX_LOGPROB < value < math.inf:
            raise _above_zero(name, item(index), index, token, value, "")
    for token, value in zip(*top) if top is not None else ():
        if MAX_LOGPROB < value < math.inf:
            raise _above_zero(name, item(index), index, token, value, " (among its top-k)")


def checked_answers(backend: Backend, method: str, result: Any, indices: list[int], tokens: list[list[int]], top_k: int,
             item: Callable[[int], str] = lambda index: "?") -> Answers:
    """A backend's ``ReadResult`` as answers, checked: anything else, or a log-probability
    above 0, is one line naming the backend, the item (``item(index)`` names the one that
    asked for a read) and what it returned, not a traceback in the engine or a wrong score.
    Every backend's answers pass through here."""
    name = f"backend {type(backend).__name__}: {method}()"
    expected = ("expected ReadResult(top1, logprobs): per position asked, the top-1 token id and the log-probabilities "
                "of the tokens asked for (pytest_longctx.backends.base)")
    if not isinstance(result, (tuple, list)) or len(result) not in (2, 3):
        raise LongctxError(f"{name} returned {type(result).__name__}; {expected}")
    top1, logprobs = result[0], result[1]
    top = result[2] if len(result) == 3 and top_k else None
    try:
        if len(top1) != len(indices) or len(logprobs) != len(indices):
            raise LongctxError(f"{name} returned {len(top1)} top-1 ids and {len(logprobs)} log-probability lists "
                               f"for {len(indices)} positions; {expected}")
        if top is not None and len(top) != len(indices):
            raise LongctxError(f"{name} returned top-k tokens for {len(top)} of {len(indices)} positions; "
                               "with top_k, ReadResult.top holds (ids, log-probabilities) per position")
        answers: Answers = {}
        for n, (i, t, toks, lps) in enumerate(zip(indices, top1, tokens, logprobs)):
            values = [float(v) for v in lps]
            if len(values) != len(toks):
                raise LongctxError(f"{name} returned {len(values)} log-probabilities at a position where {len(toks)} "
                                   f"tokens were asked for; {expected}")
            best = None
            if top is not None:
                ids, top_lps = top[n]
                best = ([int(x) for x in ids], [float(x) for x in top_lps])
                if len(best[0]) != len(best[1]) or len(best[0]) > top_k:
                    raise LongctxError(f"{name} returned {len(best[0])} top ids and {len(best[1])} log-probabilities "
                                       f"where top_k={top_k} were asked for")
            answers[i] = (int(t), dict(zip(toks, values)), best)
            _check_at_most_zero(name, item, i, answers[i][1], best)
    except (TypeError, ValueError) as exc:
        raise LongctxError(f"{name} returned {type(result).__name__} holding values of the wrong type ({exc}); {expected}") from None
    return answers


