"""``score_sets``: the whole pipeline from items to headline rows, for any backend.

items --tokens--> reads --engine--> raw per-target scores --metrics--> sets --> rows
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Collection, Iterator

from pytest_longctx import __version__
from pytest_longctx.backends.base import Backend, context_compression, context_window, describe, incidents, tokenizer_missing, vocab_size
from pytest_longctx.data.load import Dataset, load_dataset
from pytest_longctx.data.records import FAITHFULNESS, Item, ItemKey, Kind, config_kind
from pytest_longctx.errors import LongctxError
from pytest_longctx.metrics import drift, facts, faithfulness, rules, tool_calls
from pytest_longctx.metrics.item_figures import ItemFigures, Sets, item_figures, sets_json
from pytest_longctx.metrics.raw import is_nonfinite
from pytest_longctx.metrics.rows import RowSource, headline
from pytest_longctx.progress import Progress
from pytest_longctx.scoring import engine
from pytest_longctx.scoring.cache import ScoreCache
from pytest_longctx.scoring.chat import chat_markup
from pytest_longctx.scoring.fingerprint import data_fingerprint, item_fingerprint, tokenizer_fingerprint
from pytest_longctx.scoring.groups import Groups
from pytest_longctx.scoring.identity import Judged, compare_judged
from pytest_longctx.scoring.modes import choose_mode, plan_reads
from pytest_longctx.scoring.questions import with_questions
from pytest_longctx.scoring.reads import ItemReads, TargetReads
from pytest_longctx.scoring.records import item_records
from pytest_longctx.scoring.scores_file import ItemScores, ScoresFile, check_fits


@dataclass
class Results:
    """What ``score_sets`` returns: headline rows, their sources, per-config sets, the mode, meta
    and raw scores."""

    rows: dict[str, float | None]
    row_sources: dict[str, RowSource]
    sets: Sets
    mode: str
    meta: dict[str, Any]
    scores: ScoresFile
    reference: str | None = None
    warnings: list[str] = field(default_factory=list)
    min_effect: float = rules.COUNT_NATS  # the rules targets' count threshold the sets were computed with
    tokens_forwarded: int = 0  # the tokens the model ran over (the score cache's answers not)
    tokens_whole: int = 0  # what reading every item at once forwards, without the cache

    def to_json(self) -> dict[str, Any]:
        sources = {name: source.to_json() for name, source in self.row_sources.items()}
        return {"rows": self.rows, "sets": sets_json(self.sets), "reference": self.reference, "mode": self.mode,
                "meta": {**self.meta, "min_effect": self.min_effect}, "row_sources": sources,
                "scores": self.scores.to_json()["scores"],  # per-target raw scores: what `longctx compare` reads
                "tokens_forwarded": self.tokens_forwarded, "tokens_whole": self.tokens_whole,
                "sequential": None}  # every item read: a sequential run's caller puts its stopping record here

    def nonfinite(self) -> list[str]:
        """``config/length/item`` of every item with a NaN or infinite log-probability."""
        return [f"{c}/{n}/{i}" for c, n, i, s in self.scores.items() if any(is_nonfinite(t) for t in s.targets)]

    def as_baseline(self) -> ScoresFile:
        return ScoresFile(mode=self.mode, meta=self.meta, scores=self.scores.scores, rows=self.rows, sets=sets_json(self.sets))


def item_entry(dataset: Dataset, scores: ScoresFile, reference: ScoresFile | None, key: ItemKey,
               min_effect: float = rules.COUNT_NATS) -> ItemFigures:
    """One scored item's figures against ``reference`` (its entry in its set's ``per_item``)."""
    config, length, item_id = key
    item = dataset.item(key)
    mine = scores.scores[config][length][item_id]
    theirs = reference.scores[config][length][item_id] if reference is not None else None
    return _figures(config_kind(config), item, mine, theirs, reference is not None and reference.has_drift, min_effect)


def _figures(kind: Kind, item: Item, mine: ItemScores, theirs: ItemScores | None, drifts: bool,
             min_effect: float) -> ItemFigures:
    """An item's figures from its scores and its reference's (``drifts``: the reference kept its most likely
    tokens, so the item's drift is read against them)."""
    reads = drift.item_reads(item, mine, theirs) if drifts and theirs is not None else None
    return item_figures(kind, item, mine.targets, theirs.targets if theirs is not None else None,
                        drift.item_drift(reads) if reads is not None else None, min_effect)


def compute_sets(dataset: Dataset, scores: ScoresFile, reference: ScoresFile | None,
                 min_effect: float = rules.COUNT_NATS) -> Sets:
    """Metrics of every selected config and length from raw scores (and a reference's);
    ``min_effect``: the reference's rule effect a rules target needs to count, in nats.
    Each set's ``per_item`` holds its items' figures (``ItemFigures``); against a reference that
    keeps its most likely tokens, every set also has its ``drift`` (and each of its items)."""
    sets: Sets = {}
    drifts = reference is not None and reference.has_drift
    for config, by_length in dataset.configs.items():
        kind = config_kind(config)
        for length, items in by_length.items():
            mine = scores.scores.get(config, {}).get(length, {})
            theirs = reference.scores[config][length] if reference is not None else {}
            records = {item_id: s.targets for item_id, s in mine.items()}
            if kind == Kind.FACTS:
                metrics = facts.set_metrics(items, records)
            elif kind == Kind.TOOL_CALLS:
                metrics = tool_calls.set_metrics(items, records)
            elif kind == Kind.FAITHFULNESS:
                metrics = faithfulness.set_metrics(items, records)
            else:
                ref = {i.id: theirs[i.id].targets for i in items} if reference is not None else None
                metrics = rules.set_metrics(items, records, ref, min_effect)
            per_item = {item.id: _figures(kind, item, mine[item.id], theirs.get(item.id), drifts, min_effect)
                        for item in items}
            if drifts:
                metrics["drift"] = drift.set_drift([figures.drift for figures in per_item.values()])
            metrics["per_item"] = per_item
            sets.setdefault(config, {})[length] = metrics
    return sets


def _asking(target: TargetReads, ids: Iterator[list[int]]) -> TargetReads:
    """``target`` with each read also asking for the next reference ids (less a small vocabulary's padding)."""
    return replace(target, reads=tuple(replace(r, also=tuple(i for i in next(ids) if i >= 0)) for r in target.reads))


def with_reference_ids(plans: list[ItemReads], reference: ScoresFile, notes: list[str],
                       vocab_size: int | None = None) -> list[ItemReads]:
    """The plans with every read also asking for the reference's most likely tokens there
    (``Read.also``), where the reference read the same places; an item it read elsewhere
    (another mode or tokenizer) gets no drift, and ``notes`` says how many. An id beyond the
    model's ``vocab_size`` (known only now, not when the reference was read) is one line
    naming the item."""
    found, elsewhere = [], []
    for plan in plans:
        stored = reference.scores.get(plan.config, {}).get(plan.length, {}).get(plan.item.id)
        theirs = drift.Block.decode(stored.drift) if stored is not None and stored.drift else None
        reads = [read for target in plan.every for read in target.reads]
        if theirs is None or theirs.ids is None or theirs.at != [(r.seq, r.pos) for r in reads]:
            if theirs is not None:
                elsewhere.append(f"{plan.config}/{plan.length}/{plan.item.id}")
            found.append(plan)
            continue
        beyond = [i for row in theirs.ids for i in row if i >= vocab_size] if vocab_size else []
        if beyond:
            raise LongctxError(f"{reference.path or 'the reference'}: {plan.config}/{plan.length}/{plan.item.id}: its drift "
                               f"block's 'ids' hold token id {beyond[0]}, beyond this model's vocabulary of {vocab_size} "
                               "tokens: it was made with a model of another vocabulary, or is damaged; recreate it "
                               "from this model's original")
        ids = iter(theirs.ids)
        found.append(replace(plan, targets=tuple(_asking(t, ids) for t in plan.targets),
                             controls=tuple(_asking(t, ids) for t in plan.controls)))
    if elsewhere:
        notes.append(f"drift: {len(elsewhere)} item(s) are read at other places than in the reference ({elsewhere[0]}"
                     f"{', …' if len(elsewhere) > 1 else ''}): scored in another mode or with another tokenizer, they have "
                     "no drift rows")
    return found


def planned_reads(backend: Backend, tokenizer: Any, dataset: Dataset, mode: str, reference: ScoresFile | None = None,
                  notes: list[str] | None = None, beyond_context: bool = False) -> list[ItemReads]:
    """What reading every item of ``dataset`` asks of ``backend`` (``mode`` already chosen): under a KV-cache press
    each context apart from its question, and against a ``reference`` that kept its most likely tokens the
    log-probabilities of those too (``notes``: of items that cannot be compared so). An item longer than the
    backend's ``context_window`` is refused unless ``beyond_context``."""
    plans = plan_reads(dataset, mode, tokenizer)
    if context_compression(backend):  # a press or quantized cache: each context compressed, its question read through it
        plans = with_questions(plans, tokenizer)
    if reference is not None and reference.has_drift:
        plans = with_reference_ids(plans, reference, notes if notes is not None else [], vocab_size(backend))
    if not beyond_context:
        check_context_window(backend, plans)
    return plans


@dataclass(frozen=True)
class Scored:
    """What reading some planned items gave: their raw scores, with the run's meta, and the tokens forwarded."""

    scores: ScoresFile
    forwarded: int


def read_plans(backend: Backend, tokenizer: Any, dataset: Dataset, mode: str, plans: list[ItemReads],
               progress: bool | Callable[[int, int], Progress] = True, reuse_prefixes: bool = True,
               cache: ScoreCache | None = None, notes: list[str] | None = None,
               shared: engine.SharedPrefix | None = None) -> Scored:
    """Raw per-target scores of the planned items (``planned_reads`` of ``dataset``), with the run's ``meta``:
    backend, weights, tokenizer and data fingerprints; every read keeps the model's most likely tokens (when the
    backend gives them). ``shared``: the prefix the plans share with the rest of their selection, run once."""
    fingerprints = {(p.config, p.length, p.item.id): item_fingerprint(p.item) for p in plans}
    factory = (progress if callable(progress) else Progress) if progress else None
    run = engine.run_reads(backend, plans, factory, reuse_prefixes=reuse_prefixes, cache=cache, top_k=drift.TOP_K, mode=mode,
                           shared=shared)
    meta = {  # once read: what the backend says of itself includes what happened on the way (a server that left)
        **describe(backend),
        "tokenizer": tokenizer_fingerprint(tokenizer, mode),
        "mode": mode,
        "data": data_fingerprint((c, n, i, f) for (c, n, i), f in fingerprints.items()),
        "data_source": dataset.source,
        "pytest_longctx": __version__,
    }
    meta["judged"] = Judged.from_meta(meta).to_json()  # the one record of what was judged (scoring/identity.py)
    if FAITHFULNESS in dataset.configs:
        meta["chat_markup"] = chat_markup(tokenizer)  # how the faithfulness sessions were rendered
    compression = context_compression(backend)
    noted = notes if notes is not None else []
    for why, lengths in run.uncompressed.items():  # contexts a press could not compress (too short for it), read exact
        noted.append(f"{compression} could not compress {len(lengths)} context(s) of {min(lengths)} to {max(lengths)} "
                     f"tokens ({why}): they were read uncompressed")
    noted.extend(line for line in incidents(backend) if line not in noted)  # what the backend worked around, never silently
    scores = ScoresFile(mode=mode, meta=meta)
    for plan, result in zip(plans, run.scores):
        key = (plan.config, plan.length, plan.item.id)
        records = item_records(plan, result, drift.TOP_K)
        scores.scores.setdefault(plan.config, {}).setdefault(plan.length, {})[plan.item.id] = ItemScores(
            fingerprints[key], records.targets, records.controls, records.drift)
    return Scored(scores, run.forwarded)


def score_items(backend: Backend, tokenizer: Any, dataset: Dataset, mode: str,
                progress: bool | Callable[[int, int], Progress] = True, reuse_prefixes: bool = True,
                cache: ScoreCache | None = None, beyond_context: bool = False, reference: ScoresFile | None = None,
                notes: list[str] | None = None) -> ScoresFile:
    """Raw per-target scores of every item in ``dataset`` (``planned_reads``, then ``read_plans``)."""
    plans = planned_reads(backend, tokenizer, dataset, mode, reference, notes, beyond_context)
    return read_plans(backend, tokenizer, dataset, mode, plans, progress, reuse_prefixes, cache, notes).scores


def check_context_window(backend: Backend, plans: list[ItemReads]) -> None:
    """One line when the longest text runs past the model's context window: its scores
    there would measure the model outside what it was trained for."""
    window = context_window(backend)
    longest = max(plans, key=lambda plan: plan.tokens_needed, default=None)
    if window and longest is not None and longest.tokens_needed > window:
        # the faithfulness sessions are not split by length: --lengths cannot leave the long ones out
        fewer = ("leave the config out (--sets) or select fewer sessions (--limit; the builtin tool-heavy sessions "
                 "follow the first 300)" if longest.config == FAITHFULNESS else "choose shorter lengths")
        raise LongctxError(
            f"{longest.config} {longest.length}: item {longest.item.id} is read over {longest.tokens_needed} tokens, "
            f"beyond the model's context window of {window} (max_position_embeddings); {fewer}, or "
            "allow it with --longctx-allow-beyond-context (longctx score and blame: --allow-beyond-context)"
        )


def needed_fingerprints(dataset: Dataset, configs: Collection[str] | None = None) -> dict[tuple[str, str, str], str]:
    """(config, length, item id) -> item fingerprint, for the items a reference must cover."""
    return {(c, n, item.id): item_fingerprint(item) for c, n, item in dataset.items() if configs is None or c in configs}


def score_sets(
    backend: Backend,
    tokenizer: Any,
    data: Dataset | str | os.PathLike,
    *,
    mode: str = "auto",
    reference: ScoresFile | None = None,
    progress: bool | Callable[[int, int], Progress] = True,
    cache: ScoreCache | None = None,
    beyond_context: bool = False,
    min_effect: float = rules.COUNT_NATS,
) -> Results:
    """Score ``backend`` (anything with ``read(ids, positions, tokens)``) on ``data``.

    ``tokenizer`` is the model's Hugging Face tokenizer (``None``: ids mode only).
    ``reference`` is the scores file of the model a candidate was derived from: the
    rules configs measure effects relative to it (without one, the model is its own).
    ``cache`` (a ``ScoreCache``) answers forward passes already run with these weights.
    ``beyond_context``: score texts longer than the backend's ``context_window`` too.
    ``min_effect``: the reference's rule effect (nats) a rules target needs to be counted.
    """
    dataset = data if isinstance(data, Dataset) else load_dataset(data)
    fallback: list[str] = []  # auto mode fell back to text: why, in the meta and on the terminal
    mode = choose_mode(mode, tokenizer, dataset, fallback, missing=tokenizer_missing(backend))
    if reference is not None:  # refused before the forward passes, not after
        rules_configs = [c for c in dataset.configs if config_kind(c) == Kind.RULES]
        try:
            check_fits(reference, mode, tokenizer_fingerprint(tokenizer, mode), needed_fingerprints(dataset, rules_configs))
        except LongctxError as exc:
            if not fallback or reference.mode == mode:
                raise
            raise LongctxError(f"{exc}. {fallback[0]}") from None
    notes: list[str] = []
    plans = planned_reads(backend, tokenizer, dataset, mode, reference, notes, beyond_context)
    scored = read_plans(backend, tokenizer, dataset, mode, plans, progress, cache=cache, notes=notes)
    scores = scored.scores
    if fallback:
        scores.meta["mode_fallback"] = fallback[0]
    warnings = (compare_judged(reference.meta, scores.meta, "reference").warnings if reference is not None else []) + notes
    sets = compute_sets(dataset, scores, reference, min_effect)
    rows, row_sources = headline(sets)
    whole = Groups.of(plans, engine.how_read(backend)).whole([(p.config, p.length, p.item.id) for p in plans])
    return Results(rows=rows, row_sources=row_sources, sets=sets, mode=mode, meta=scores.meta, scores=scores,
                   reference=reference.path if reference is not None else None, warnings=warnings, min_effect=min_effect,
                   tokens_forwarded=scored.forwarded, tokens_whole=whole)


def require_finite(results: Results) -> None:
    bad = results.nonfinite()
    if bad:
        shown = ", ".join(bad[:5]) + (f" and {len(bad) - 5} more" if len(bad) > 5 else "")
        raise LongctxError(
            f"non-finite log-probabilities (NaN/inf) in {len(bad)} item(s): {shown}; they are counted as "
            "'nonfinite' and left out of the metrics. Check the model's dtype (float16 overflows; try --dtype float32)"
        )
