"""Runs the forward passes the planned reads need, and nothing more.

1. Every sequence is cut after its last read; identical cut sequences (across items,
   configs and languages) become one request with the union of their reads.
2. Requests already in the score cache are answered from it; each request computed goes
   into it as soon as it is answered (a run stopped half way keeps what it scored).
3. The rest run as a prefix tree when the backend can save and rewind its state
   (``backend.session()``): each shared prefix once, each continuation only its suffix.
   Otherwise each request is one ``backend.read``.

With ``top_k``, the backend also answers the ``top_k`` most likely next tokens at every read
(what a baseline stores for the drift rows; a backend of the protocol's first form, whose
``read`` takes no ``top_k``, is asked for none: ``backends.base.conforming``); a read's
``also`` tokens (a baseline's top ids, for a candidate) are read beside its own token.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from pytest_longctx.backends.base import (
    Backend,
    SessionBackend,
    TopK,
    compresses,
    conforming,
    context_compression,
    has_sessions,
    status_line,
    vocab_size,
)
from pytest_longctx.errors import LongctxError
from pytest_longctx.progress import Display
from pytest_longctx.scoring import prefix_tree
from pytest_longctx.scoring.answers import Answer, Answers, checked_answers
from pytest_longctx.scoring.reads import ItemReads, Read


@dataclass(frozen=True)
class ReadScore:
    """One read: the top-1 prediction, the log-probability of the token asked for, those of the
    read's ``also`` tokens (in their order), and the top-k tokens when they were asked for."""

    top1: int
    logprob: float
    also: tuple[float, ...] = ()
    top: TopK | None = None


# Per item, per target and then per control read (``ItemReads.every``): one ReadScore per read, or None when unaligned.
ItemReadScores = list[list[ReadScore] | None]
# why a KV-cache press could not compress some contexts (too short for it) -> those contexts' lengths, read uncompressed
Uncompressed = dict[str, list[int]]


@dataclass(frozen=True)
class EngineRun:
    """What ``run_reads`` answers: every planned item's read scores, and the contexts a KV-cache press
    could not compress and read uncompressed instead (``CompressingSession.compress``), by why."""

    scores: list[ItemReadScores]
    uncompressed: Uncompressed = field(default_factory=dict)
    forwarded: int = 0  # the tokens run through the model (requests the cache answered, and a kept prefix run before, not)


@dataclass(eq=False)
class Request:
    """A distinct token sequence, cut after its last read, and the reads wanted in it."""

    ids: np.ndarray
    reads: dict[int, set[int]] = field(default_factory=dict)  # prediction index -> token ids
    items: set[int] = field(default_factory=set)  # indices of the plans that need it
    context: int = 0  # under a KV-cache press: ids[:context] is compressed, the rest read exactly (Read.context)


def collect(plans: Sequence[ItemReads], pressed: bool = False) -> tuple[list[Request], list[list[list[tuple[int, int, Read]]]]]:
    """(distinct requests, and per plan, per target (then control), per read: (request, index, read));
    ``pressed``: under a KV-cache press, reads of other contexts (``Read.context``) are other requests."""
    requests: list[Request] = []
    by_key: dict[bytes, int] = {}
    where: list[list[list[tuple[int, int, Read]]]] = []
    for number, plan in enumerate(plans):
        ends: dict[tuple[int, int], int] = {}  # (sequence, context) -> its last read
        for target in plan.every:
            for read in target.reads:
                context = read.context if pressed else 0
                ends[read.seq, context] = max(ends.get((read.seq, context), 0), read.pos)
        slot: dict[tuple[int, int], int] = {}
        for (seq, context), end in ends.items():
            ids = np.ascontiguousarray(plan.sequences[seq][:end], dtype=np.int64)
            key = ids.tobytes() + (f"|{context}".encode() if context else b"")
            if key not in by_key:
                by_key[key] = len(requests)
                requests.append(Request(ids, context=context))
            slot[seq, context] = by_key[key]
            requests[slot[seq, context]].items.add(number)
        placed = []
        for target in plan.every:
            reads = []
            for read in target.reads:
                request = slot[read.seq, read.context if pressed else 0]
                requests[request].reads.setdefault(read.pos - 1, set()).update((read.token, *read.also))
                reads.append((request, read.pos - 1, read))
            placed.append(reads)
        where.append(placed)
    return requests, where


EACH, TREE, PRESSED = "each", "tree", "pressed"  # how run_reads reads a backend's requests


def how_read(backend: Backend, reuse_prefixes: bool = True) -> str:
    """How ``run_reads`` reads ``backend``: each request whole (no sessions), as a prefix tree through one
    session, or each context through a KV-cache press with its questions after it."""
    reader, _ = conforming(backend, 0)
    if context_compression(backend):
        return PRESSED
    return TREE if reuse_prefixes and has_sessions(reader) else EACH


def forwarded_tokens(plans: Sequence[ItemReads], reuse_prefixes: bool = True) -> int:
    """Tokens the engine forwards for these plans (the distinct prefix tokens when
    prefixes are reused: the least any exact teacher-forced scorer must run)."""
    requests, _ = collect(plans)
    if not requests:
        return 0
    if not reuse_prefixes:
        return sum(len(r.ids) for r in requests)
    root, _ = prefix_tree.build([r.ids for r in requests])
    return prefix_tree.total_tokens(root)


@dataclass(eq=False)
class SharedPrefix:
    """The prefix every request of a selection's items begins with, with every read any of them has inside it
    (``of``), run once across the engine runs that read parts of that selection (sequential reading reads a unit
    a group of items at a time): the first run that needs it forwards it, keeps the model's state after it and
    its answers, and every later run starts from that state. So reading a selection in parts forwards no more
    than reading it whole, where each part would otherwise forward the prefix again."""

    ids: np.ndarray
    reads: dict[int, set[int]]  # prediction index (inside the prefix) -> the tokens asked there
    session: Any = None  # the session that ran it, once run
    state: Any = None  # its snapshot after the prefix
    answers: Answers = field(default_factory=dict)

    @classmethod
    def of(cls, plans: Sequence[ItemReads]) -> SharedPrefix | None:
        """The prefix the requests of ``plans`` share (None where they share nothing, or are one request)."""
        requests, _ = collect(plans)
        if len(requests) < 2:
            return None
        shared = min(prefix_tree.common_prefix(requests[0].ids, r.ids) for r in requests[1:])
        if not shared:
            return None
        reads: dict[int, set[int]] = {}
        for request in requests:
            for index, tokens in request.reads.items():
                if index < shared:
                    reads.setdefault(index, set()).update(tokens)
        return cls(requests[0].ids[:shared].copy(), reads)

    def holds(self, request: Request) -> bool:
        return len(request.ids) >= len(self.ids) and bool(np.array_equal(request.ids[: len(self.ids)], self.ids))

    def start(self, backend: Backend, reader: SessionBackend, tracker: _Tracker, top_k: int) -> Any:
        """A session at the end of the prefix: run once (its reads answered and kept), then restored."""
        if self.session is None:
            self.session = reader.session()
            indices = sorted(self.reads)
            tokens = [sorted(self.reads[i]) for i in indices]
            result = self.session.advance(self.ids, indices, tokens, top_k=top_k)
            self.answers = checked_answers(backend, "session().advance", result, indices, tokens, top_k,
                                           lambda index: f"the prefix its items share (read position {index})")
            tracker.tokens(len(self.ids))
            self.state = self.session.snapshot()
        else:
            self.session.restore(self.state, last=False)
        return self.session

    def release(self) -> None:
        """Let go of the model's state after the prefix and the session that ran it (which hold the model): a later
        run forwards the prefix again."""
        self.session = self.state = None


ProgressFactory = Callable[[int, int], Display]


class _Tracker:
    """Reports progress: tokens as they run, an item once its last request is answered; and
    keeps each request's answers as it is answered, handing them to ``keep`` at once (the
    score cache: a run stopped half way keeps what it scored). A backend's optional
    ``status()`` (a server backend's requests in flight) is shown on the progress line."""

    def __init__(self, factory: ProgressFactory | None, requests: list[Request], n_items: int,
                 keep: Callable[[Request, Answers], None] | None = None, status: Callable[[], str] | None = None):
        self.factory = factory
        self.progress: Display | None = None
        self.requests = requests
        self.keep = keep
        self.status = status
        self.done: list[Answers] = [{} for _ in requests]
        self.forwarded = 0  # tokens run through the model
        self.left = [0] * n_items
        for request in requests:
            for number in request.items:
                self.left[number] += 1

    def start(self, total_tokens: int) -> None:
        if self.factory:
            self.progress = self.factory(len(self.left), total_tokens)
            if self.status is not None:
                self.progress.detail = self.status
            self.progress.advance(items=sum(1 for count in self.left if count == 0))  # answered from the cache

    def close(self) -> None:
        if self.progress:
            self.progress.close()

    def tokens(self, count: int) -> None:
        self.forwarded += count
        if self.progress:
            self.progress.advance(tokens=count)

    def answered(self, request: int, answers: Answers) -> None:
        self.done[request] = answers
        if self.keep is not None:
            self.keep(self.requests[request], answers)
        finished = 0
        for number in self.requests[request].items:
            self.left[number] -= 1
            finished += self.left[number] == 0
        if self.progress and finished:
            self.progress.advance(items=finished)


def _read_each(backend: Backend, reader: Backend, requests: list[Request], tracker: _Tracker, top_k: int,
               named: Callable[[Request], str]) -> list[Answers]:
    """Each request one ``read``; ``reader``: ``backend`` as the protocol has it (``conforming``)."""
    tracker.start(sum(len(r.ids) for r in requests))
    for number, request in enumerate(requests):
        indices = sorted(request.reads)
        tokens = [sorted(request.reads[i]) for i in indices]
        result = reader.read(request.ids, indices, tokens, top_k=top_k)
        tracker.tokens(len(request.ids))
        tracker.answered(number, checked_answers(backend, "read", result, indices, tokens, top_k,
                                                 lambda _, request=request: named(request)))
    return tracker.done


def _tree(requests: list[Request], numbers: list[int], offset: int = 0) -> tuple[prefix_tree.Node, list[list[prefix_tree.Node]],
                                                                              dict[tuple[int, int], Request]]:
    """The prefix tree of ``requests[n]`` for ``n`` in ``numbers``, each from its token ``offset`` on
    (its reads' indices less ``offset``), and which request asks at each (node, index)."""
    root, paths = prefix_tree.build([requests[n].ids[offset:] for n in numbers])
    asker: dict[tuple[int, int], Request] = {}  # (node, prediction index) -> a request that reads there
    for number, path in zip(numbers, paths):
        for index, tokens in requests[number].reads.items():
            if index < offset:  # a read inside a shared prefix: answered when the prefix ran
                continue
            node = prefix_tree.node_at(path, index - offset)
            node.reads.setdefault(index - offset, set()).update(tokens)
            asker.setdefault((id(node), index - offset), requests[number])
    return root, paths, asker


def _read_tree(backend: Backend, reader: SessionBackend, requests: list[Request], tracker: _Tracker, top_k: int,
               named: Callable[[Request], str], shared: SharedPrefix | None = None) -> list[Answers]:
    """The requests as a prefix tree through one session: each shared prefix once. With ``shared`` (the prefix
    every request begins with, kept across runs), the tree starts after it, from its kept state."""
    if shared is None or not all(shared.holds(r) for r in requests):
        numbers = list(range(len(requests)))
        root, paths, asker = _tree(requests, numbers)
        tracker.start(prefix_tree.total_tokens(root))
        _visit_tree(backend, reader.session(), root, paths, asker, requests, numbers, 0, tracker, top_k, named)
        return tracker.done
    offset = len(shared.ids)
    beyond = [n for n, r in enumerate(requests) if len(r.ids) > offset]  # the rest end inside the prefix
    root, paths, asker = _tree(requests, beyond, offset)
    tracker.start((0 if shared.session is not None else offset) + prefix_tree.total_tokens(root))
    session = shared.start(backend, reader, tracker, top_k)
    for number, request in enumerate(requests):
        if number not in beyond:
            tracker.answered(number, {i: shared.answers[i] for i in request.reads})
    _visit_tree(backend, session, root, paths, asker, requests, beyond, offset, tracker, top_k, named,
                inside=shared.answers)
    return tracker.done


def _read_pressed(backend: Backend, reader: SessionBackend, requests: list[Request], tracker: _Tracker, top_k: int,
                  named: Callable[[Request], str]) -> tuple[list[Answers], Uncompressed]:
    """Under a KV-cache press (docs/metrics.md#kv-cache-presses): requests that share a context share
    one session, whose ``compress`` prefills that context with the press; their questions then run
    as a prefix tree through the compressed cache, each shared question prefix once. With the answers,
    the contexts the press could not compress, by why."""
    groups: dict[bytes, list[int]] = {}
    for number, request in enumerate(requests):
        groups.setdefault(request.ids[: request.context].tobytes(), []).append(number)
    trees = []
    for numbers in groups.values():
        context = requests[numbers[0]].context
        trees.append((context, numbers, *_tree(requests, numbers, context)))
    tracker.start(sum(context + prefix_tree.total_tokens(root) for context, _, root, _, _ in trees))
    uncompressed: Uncompressed = {}
    for context, numbers, root, paths, asker in trees:
        session = reader.session()
        if context:
            if not compresses(session):
                raise LongctxError(f"backend {type(backend).__name__}: its sessions cannot compress a context (no compress()); "
                                   "a KV-cache press runs in the transformers backend")
            ids = requests[numbers[0]].ids[:context]
            refused = session.compress(ids)
            if refused is not None:
                uncompressed.setdefault(refused, []).append(len(ids))
            tracker.tokens(context)
        _visit_tree(backend, session, root, paths, asker, requests, numbers, context, tracker, top_k, named)
    return tracker.done, uncompressed


def _visit_tree(backend: Backend, session: Any, root: prefix_tree.Node, paths: list[list[prefix_tree.Node]],
                asker: dict[tuple[int, int], Request], requests: list[Request], numbers: list[int], offset: int,
                tracker: _Tracker, top_k: int, named: Callable[[Request], str], inside: Answers | None = None) -> None:
    """Run a tree depth first through ``session``; node indices are the requests' less ``offset``; ``inside``: the
    answers of the reads before ``offset`` (a shared prefix's, run before)."""

    def answer(end: int, index: int) -> Answer:
        if index < offset:
            assert inside is not None
            return inside[index]
        return prefix_tree.node_at(paths[end], index - offset).results[index - offset]

    def visit(node: prefix_tree.Node) -> None:
        if node.tokens:
            indices = sorted(node.reads)
            tokens = [sorted(node.reads[i]) for i in indices]
            result = session.advance(node.ids[node.start : node.end], [i - node.start for i in indices], tokens, top_k=top_k)
            node.results.update(checked_answers(backend, "session().advance", result, indices, tokens, top_k,
                                                lambda index: named(asker[id(node), index])))
            tracker.tokens(node.tokens)
        for end in node.ends:
            number = numbers[end]
            tracker.answered(number, {i: answer(end, i) for i in requests[number].reads})
        if not node.children:
            return
        saved = session.snapshot()  # the branch point: every child starts from here
        for k, child in enumerate(node.children):
            if k:
                session.restore(saved, last=k == len(node.children) - 1)
            visit(child)

    visit(root)


def check_vocabulary(backend: Backend, requests: list[Request], named: Callable[[Request], str], mode: str) -> None:
    """Before any forward pass: one line when a token id fed or asked for is beyond the
    backend's ``vocab_size`` (the model would fail with an index error, or read garbage), with
    the fix for the ``mode`` the ids come from."""
    size = vocab_size(backend)
    if not isinstance(size, int) or size <= 0:
        return
    for request in requests:
        largest = max((max(tokens) for tokens in request.reads.values() if tokens), default=-1)
        largest = max(largest, int(request.ids.max()) if len(request.ids) else -1)
        if largest >= size:
            raise LongctxError(
                f"item {named(request)} needs token id {largest}, beyond the model's vocabulary of {size} tokens: "
                + ("the ids do not come from this model's tokenizer (ids mode feeds the data's stored Qwen3.5 ids; "
                   "score such a model in text mode, --longctx-mode text / --mode text, with its own tokenizer)"
                   if mode == "ids" else
                   "the text mode's tokenizer makes ids the model has no embedding for (a tokenizer of another model, "
                   "or a model whose vocabulary was cut); load the model with the tokenizer it was trained with"))


def run(
    backend: Backend, plans: Sequence[ItemReads], progress: ProgressFactory | None = None, reuse_prefixes: bool = True, cache: Any = None,
    top_k: int = 0, mode: str = "ids",
) -> list[ItemReadScores]:
    """Scores of every read of every planned item (its targets, then its control reads): ``run_reads``'
    scores alone, without the contexts a KV-cache press could not compress."""
    return run_reads(backend, plans, progress, reuse_prefixes, cache, top_k, mode).scores


def run_reads(
    backend: Backend, plans: Sequence[ItemReads], progress: ProgressFactory | None = None, reuse_prefixes: bool = True, cache: Any = None,
    top_k: int = 0, mode: str = "ids", shared: SharedPrefix | None = None,
) -> EngineRun:
    """Scores of every read of every planned item (its targets, then its control reads), the contexts a KV-cache
    press could not compress, and the tokens forwarded. ``progress(items, tokens)`` makes the progress display once
    the work left is known; ``cache`` answers known requests; ``top_k``: also the most likely tokens at every
    read (none from a backend whose ``read`` takes no ``top_k``: ``conforming``); ``mode``: where the
    plans' ids come from (the data's stored ids, or the model's tokenizer: ``text``); ``shared``: the prefix the
    plans share with the other runs of their selection, run once across them (``SharedPrefix``)."""
    reader, top_k = conforming(backend, top_k)
    # a backend that compresses each read's context names what does (``CompressesContexts``: a KV-cache press, a quantized
    # KV cache): its sessions' ``compress`` then reads the context, the rest read through it
    compression = context_compression(backend)
    pressed = bool(compression)
    requests, where = collect(plans, pressed)

    def named(request: Request) -> str:
        first = plans[min(request.items)]
        others = len(request.items) - 1
        return f"{first.config}/{first.length}/{first.item.id}" + (f" (and {others} other item(s))" if others else "")

    check_vocabulary(backend, requests, named, mode)
    if pressed and requests and not any(r.context for r in requests):
        raise LongctxError(f"{compression} compresses each read's context, and these reads name "
                           "none (scoring/questions.py places them for the model gate's items): this path does not run presses yet")
    answers: list[Answers | None] = [cache.get(r, top_k) if cache is not None else None for r in requests]
    todo = [n for n, a in enumerate(answers) if a is None]
    subset = [requests[n] for n in todo]
    keep = (lambda request, found: cache.put(request, found, top_k)) if cache is not None else None
    tracker = _Tracker(progress, subset, len(plans), keep=keep, status=status_line(backend))
    uncompressed: Uncompressed = {}
    try:
        if any(r.context for r in subset):
            if not has_sessions(reader):
                raise LongctxError(f"backend {type(backend).__name__}: a KV-cache press needs a backend with sessions")
            computed, uncompressed = _read_pressed(backend, reader, subset, tracker, top_k, named)
        elif subset and reuse_prefixes and has_sessions(reader):
            computed = _read_tree(backend, reader, subset, tracker, top_k, named, shared)
        elif subset:
            computed = _read_each(backend, reader, subset, tracker, top_k, named)
        else:
            computed = []
            tracker.start(0)
    finally:
        tracker.close()
    for n, found in zip(todo, computed):
        answers[n] = found
    return EngineRun(_item_scores(plans, where, answers), uncompressed, tracker.forwarded)


def _item_scores(plans: Sequence[ItemReads], where: list[list[list[tuple[int, int, Read]]]],
                 answers: list[Answers | None]) -> list[ItemReadScores]:
    """Each plan's read scores from the requests' answers (``collect``'s ``where`` says which answer is whose)."""
    results: list[ItemReadScores] = []
    for plan, placed in zip(plans, where):
        item: ItemReadScores = []
        for target, reads in zip(plan.every, placed):
            if target.unaligned:
                item.append(None)
                continue
            scores = []
            for request, index, read in reads:
                top1, logprobs, top = answers[request][index]
                scores.append(ReadScore(top1, logprobs[read.token], tuple(logprobs[t] for t in read.also), top))
            item.append(scores)
        results.append(item)
    return results
