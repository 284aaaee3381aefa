"""The backend protocol: anything that can read teacher-forced predictions can be scored.

``Backend`` reads whole sequences; a ``SessionBackend`` also hands out ``ReadSession``s, one
sequence read piece by piece whose state can be saved and rewound, through which the engine
runs shared prefixes once. ``advance_in_calls`` is the body every built-in session's
``advance`` shares: each backend supplies only its forward step. Every optional member a
feature asks of a backend or a session is a protocol of its own here (``CompressesContexts``,
``CompressingSession``, ``HasTokenizer``, ``KnowsVocabulary``, ...), asked for through it."""
from __future__ import annotations

import bisect
import inspect
from typing import Any, Callable, Iterator, NamedTuple, Protocol, Sequence, TypeGuard, runtime_checkable

from pytest_longctx.errors import LongctxError

# At most this many read positions per forward call: bounds the [reads, vocab] logits.
MAX_READS_PER_CALL = 256
# how a ``weights`` fingerprint that the user declared (for a model whose files are out of reach) starts
DECLARED = "declared:"
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

    ``read(ids, positions, tokens, top_k=0)`` runs the model over ``ids`` and, for each
    ``positions[i]``, returns the arg-max next token and the log-probabilities (natural
    log, full-vocabulary softmax) of every id in ``tokens[i]`` as the token that follows
    that position. Positions may come in any order; results follow the given order.

    With ``top_k > 0`` it also returns, in ``ReadResult.top``, the ``top_k`` most likely next
    tokens at each position with their log-probabilities, most likely first: a baseline made
    with such a backend stores them, and later candidates are compared with it token
    distribution against token distribution (docs/metrics.md#drift). A candidate needs no
    top-k: it is compared through the log-probabilities of the baseline's ids. A backend
    whose ``read(ids, positions, tokens)`` takes no ``top_k`` (the protocol's first form) is
    still scored, and asked for no top-k (``conforming``).

    Optional members, each declared by a protocol below and asked for through it (``isinstance``
    or the function beside it), never by name:

    * ``tokenizer`` (``HasTokenizer``), and why there is none (``ExplainsMissingTokenizer``);
    * ``describe() -> dict`` (``Describing``): what the backend says about itself;
    * ``context_window`` (``KnowsContextWindow``), ``vocab_size`` (``KnowsVocabulary``);
    * ``session() -> ReadSession`` (``SessionBackend``): the engine runs shared prefixes once;
    * ``context_compression`` (``CompressesContexts``): what compresses each read's context, read
      through its sessions' ``compress`` (``CompressingSession``);
    * ``status() -> str`` (``ReportsStatus``): its traffic, on the progress line;
    * ``incidents() -> list[str]`` (``ReportsIncidents``): trouble it worked around while reading,
      which the run's warnings carry;
    * ``close()`` (``Closing``): releases what the backend holds.

    The engine refuses any log-probability above 0 (logits passed off as log-probabilities).
    """

    def read(self, ids: Sequence[int], positions: Sequence[int], tokens: Sequence[Sequence[int]], top_k: int = 0) -> ReadResult: ...


@runtime_checkable
class ReadSession(Protocol):
    """One sequence read piece by piece: the model's state (its KV cache) after the tokens read
    so far, which the engine saves at a branch point of its prefix tree and rewinds to."""

    def advance(self, ids: Sequence[int], positions: Sequence[int], tokens: Sequence[Sequence[int]],
                top_k: int = 0) -> ReadResult:
        """Run ``ids`` after what was read so far and answer as ``Backend.read`` does;
        ``positions`` index into ``ids``."""
        ...

    def snapshot(self) -> Any:
        """The state here, opaque to the engine: handed back to ``restore``."""
        ...

    def restore(self, snapshot: Any, last: bool = False) -> None:
        """Back to a snapshot; ``last``: no later restore needs it (a copied state may be
        taken over instead of copied again)."""
        ...


@runtime_checkable
class SessionBackend(Backend, Protocol):
    """A backend whose sequences can be read piece by piece (see ``ReadSession``)."""

    def session(self) -> ReadSession:
        """A new session at the start of a sequence."""
        ...


def has_sessions(backend: Backend) -> TypeGuard[SessionBackend]:
    """Whether the backend hands out sessions (the engine then runs shared prefixes once)."""
    return isinstance(backend, SessionBackend) and callable(backend.session)


# --------------------------------------------------------------- optional members


@runtime_checkable
class CompressingSession(ReadSession, Protocol):
    """A session that can compress a context before the reads after it (a KV-cache press, a quantized KV
    cache): the sessions of a backend that ``CompressesContexts``."""

    def compress(self, ids: Sequence[int]) -> str | None:
        """Read ``ids``, a context, at the start of the session with the backend's compression at work;
        later ``advance`` calls read on through the compressed cache. Returns why the context was read
        uncompressed instead (a press that refused it, too short for it), None when it was compressed:
        the engine hands these back with its scores and the pipeline notes them."""
        ...


def compresses(session: ReadSession) -> TypeGuard[CompressingSession]:
    """Whether a session can compress a context (``CompressingSession``)."""
    return isinstance(session, CompressingSession)


@runtime_checkable
class CompressesContexts(Protocol):
    """A backend that compresses each read's context (a KV-cache press, a quantized KV cache): the
    engine reads each context through its sessions' ``compress`` and each read's question after it,
    and the reads are planned so (scoring/questions.py)."""

    @property
    def context_compression(self) -> str | None:
        """What compresses each read's context, by name, as results and reports name it; None: nothing."""
        ...


def context_compression(backend: Backend) -> str | None:
    """What compresses each read's context (``CompressesContexts``), or None."""
    return backend.context_compression if isinstance(backend, CompressesContexts) else None


@runtime_checkable
class HasTokenizer(Protocol):
    """A backend that brings its model's tokenizer."""

    @property
    def tokenizer(self) -> Any:
        """A Hugging Face tokenizer (or one that encodes as one does), for the ``text`` mode; None: the
        backend reads the data's stored ids only (the ``ids`` mode)."""
        ...


def tokenizer_of(backend: Backend) -> Any:
    """The backend's tokenizer (``HasTokenizer``), or None."""
    return backend.tokenizer if isinstance(backend, HasTokenizer) else None


@runtime_checkable
class ExplainsMissingTokenizer(Protocol):
    """A backend that can say why it has no tokenizer."""

    @property
    def tokenizer_missing(self) -> str | None:
        """Why ``tokenizer`` is None (a model folder without tokenizer files), which the text mode's
        error says; None where nothing is missing or the backend cannot say."""
        ...


def tokenizer_missing(backend: Backend) -> str | None:
    """Why the backend has no tokenizer (``ExplainsMissingTokenizer``), or None."""
    return backend.tokenizer_missing if isinstance(backend, ExplainsMissingTokenizer) else None


@runtime_checkable
class KnowsVocabulary(Protocol):
    """A backend that knows the token ids its model takes."""

    @property
    def vocab_size(self) -> int | None:
        """How many token ids the model takes and predicts: an id fed or asked for at or beyond it is
        refused before any forward pass (the model would fail on it, or read garbage)."""
        ...


def vocab_size(backend: Backend) -> int | None:
    """The backend's ``vocab_size`` (``KnowsVocabulary``), or None."""
    return backend.vocab_size if isinstance(backend, KnowsVocabulary) else None


@runtime_checkable
class KnowsContextWindow(Protocol):
    """A backend that knows how long a sequence its model was trained for."""

    @property
    def context_window(self) -> int | None:
        """The longest sequence the model was trained for, or None where unknown: a text longer than
        that is refused unless the user allows it (its scores would measure the model outside it)."""
        ...


def context_window(backend: Backend) -> int | None:
    """The backend's ``context_window`` (``KnowsContextWindow``), or None."""
    return backend.context_window if isinstance(backend, KnowsContextWindow) else None


@runtime_checkable
class ReportsStatus(Protocol):
    """A backend with traffic worth showing while it reads (a served model's requests)."""

    def status(self) -> str:
        """A short line on what it is doing (requests in flight, prefix-cache hits), shown on the
        progress line."""
        ...


def status_line(backend: Backend) -> Callable[[], str] | None:
    """The backend's ``status`` (``ReportsStatus``), or None."""
    return backend.status if isinstance(backend, ReportsStatus) and callable(backend.status) else None


@runtime_checkable
class ReportsIncidents(Protocol):
    """A backend that works around trouble on the way and must say so (one of several servers that stopped
    answering, its reads taken over by the others): never silently."""

    def incidents(self) -> list[str]:
        """A line for each so far, as a warning says it."""
        ...


def incidents(backend: Backend) -> list[str]:
    """The backend's ``incidents`` (``ReportsIncidents``), or none."""
    return list(backend.incidents()) if isinstance(backend, ReportsIncidents) and callable(backend.incidents) else []


@runtime_checkable
class Describing(Protocol):
    """A backend that says what it is."""

    def describe(self) -> dict[str, Any]:
        """Model id, weight fingerprint, config digest, dtype, device, library versions, recorded in
        results and baselines; a ``weights`` of None (no fingerprint) keeps the score cache off, and one
        that starts with ``DECLARED`` is the user's word, not a measurement."""
        ...


def describe(backend: Backend) -> dict[str, Any]:
    """What a backend says about itself (``Describing``), or its class name."""
    info = backend.describe() if isinstance(backend, Describing) else {}
    return {"backend": type(backend).__name__, **info}


@runtime_checkable
class Closing(Protocol):
    """A backend that holds something to release (engine processes, connections, threads)."""

    def close(self) -> None:
        """Release it; the package calls it (``close``) when it is done with a backend it loaded."""
        ...


def close(backend: Backend) -> None:
    """Release what a backend holds, if it has a ``close()`` (``Closing``)."""
    if isinstance(backend, Closing) and callable(backend.close):
        backend.close()


# --------------------------------------------------------------- the protocol's first form


class _ReadWithoutTopK:
    """A backend whose ``read`` takes no ``top_k``, as a Backend: asked for top-k, it gives none."""

    def __init__(self, backend: Backend):
        self.backend = backend

    def read(self, ids: Sequence[int], positions: Sequence[int], tokens: Sequence[Sequence[int]], top_k: int = 0) -> ReadResult:
        return self.backend.read(ids, positions, tokens)


class _SessionsWithoutTopK(_ReadWithoutTopK):
    """Such a backend with sessions, whose ``advance`` may take no ``top_k`` either."""

    def __init__(self, backend: SessionBackend):
        super().__init__(backend)
        self.sessions = backend

    def session(self) -> ReadSession:
        return _AdvanceWithoutTopK(self.sessions.session())


class _AdvanceWithoutTopK:
    def __init__(self, session: ReadSession):
        self.session = session

    def advance(self, ids: Sequence[int], positions: Sequence[int], tokens: Sequence[Sequence[int]],
                top_k: int = 0) -> ReadResult:
        return self.session.advance(ids, positions, tokens)

    def snapshot(self) -> Any:
        return self.session.snapshot()

    def restore(self, snapshot: Any, last: bool = False) -> None:
        self.session.restore(snapshot, last=last)


def conforming(backend: Backend, top_k: int) -> tuple[Backend, int]:
    """(the backend as the protocol has it, the ``top_k`` to ask it for): a backend whose ``read``
    takes no ``top_k`` keyword (the protocol's first form, still accepted) is adapted once,
    where scoring starts, and asked for no top-k."""
    try:
        parameters = inspect.signature(backend.read).parameters
    except (TypeError, ValueError):  # no signature to inspect (a builtin): taken as the first form
        parameters = {}
    if "top_k" in parameters or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return backend, top_k
    return (_SessionsWithoutTopK(backend) if has_sessions(backend) else _ReadWithoutTopK(backend)), 0


# --------------------------------------------------------------- the sessions' shared body

Prediction = tuple[int, list[float], TopK | None]  # at one read: top-1 id, log p of the tokens asked for, the top-k or None
# A backend's forward step: (start, stop, rows, tokens, top_k) runs tokens [start, stop) of the
# piece after what the session holds and answers, per row (a read position minus start,
# ascending), the Prediction for the tokens asked for there (the top-k only when top_k > 0).
ForwardStep = Callable[[int, int, list[int], list[Sequence[int]], int], list[Prediction]]


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


def advance_in_calls(length: int, positions: Sequence[int], tokens: Sequence[Sequence[int]], top_k: int,
                     chunk_size: int, forward: ForwardStep) -> ReadResult:
    """A session's ``advance`` over a piece of ``length`` tokens, written once for every backend:
    the reads in ascending order, ``forward`` once per call of ``forward_calls``, and its
    predictions gathered into a ``ReadResult`` in the order of ``positions``."""
    if any(not 0 <= position < length for position in positions):
        raise LongctxError(f"read position outside the {length} tokens given")
    order = sorted(range(len(positions)), key=positions.__getitem__)  # stable: equal positions keep their order
    ordered = [int(positions[i]) for i in order]
    top1: list[int] = [0] * len(positions)
    logprobs: list[list[float]] = [[] for _ in positions]
    top: list[TopK] = [([], []) for _ in positions]
    for start, stop, picked in forward_calls(ordered, length, chunk_size):
        indices = order[picked]
        predictions = forward(start, stop, [p - start for p in ordered[picked]], [tokens[i] for i in indices], top_k)
        for index, (best, asked, most) in zip(indices, predictions):
            top1[index], logprobs[index] = best, asked
            if most is not None:
                top[index] = most
    return ReadResult(top1, logprobs, top if top_k else None)


def read_by_session(make_session: Callable[[], ReadSession], ids: Sequence[int], positions: Sequence[int],
                    tokens: Sequence[Sequence[int]], top_k: int = 0) -> ReadResult:
    """``read`` for a backend with sessions: one new session over ``ids`` cut after the last
    read position (never run past it)."""
    if not len(positions):
        return ReadResult([], [], [] if top_k else None)
    end = int(max(positions)) + 1
    return make_session().advance(ids[:end], positions, tokens, top_k)
