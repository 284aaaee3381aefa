"""The first-order estimate of each part's restore, before any hybrid (docs/blame.md#the-estimate), and
what it says of the damage: concentrated in a few parts, or spread over most.

Blame's objective is the blamed rows' far drift as a share of the candidate's, their mean: each far read
of row ``r`` (``N_r`` of them, the candidate's far drift ``D_r``) counts its KL_K with weight
``1 / (R * N_r * D_r)`` over the ``R`` rows, so that the objective is 1 at the candidate and a part's
estimated restore share is comparable with the measured mean restore share that ranks the parts. The pair
computes it (``EstimatesRestores``): one forward and backward pass of the candidate over the reads'
sequences, about three scorings of the blamed items, every part at once."""
from __future__ import annotations

import sys
import time
from collections import defaultdict
from typing import Sequence

from pytest_longctx.backends.hybrids.pair import EstimatesRestores, Pair, SequenceReads, WeightedRead
from pytest_longctx.data.load import Dataset
from pytest_longctx.gate.blame.records import BlameReport, Direction, GroupTest, PartBlame, Spread
from pytest_longctx.gate.evaluation import Evaluation
from pytest_longctx.metrics.drift import Block, places
from pytest_longctx.options.table import CARRY
from pytest_longctx.scoring.modes import plan_reads
from pytest_longctx.scoring.scores_file import ScoresFile

SPREAD_SHARE = 0.8  # the share of the estimate's total that the leading parts must hold for the damage to be concentrated
SPREAD_FROM = 0.25  # spread: those leading parts are more than this share of the changed parts (and more than 2)
LEADING = 5  # the parts with the largest estimates that the report names


def weighted_reads(report: BlameReport, evaluation: Evaluation, items: Dataset, baseline: ScoresFile,
                   tokenizer: object) -> list[SequenceReads]:
    """The far reads of the blamed rows, each with its weight in the objective (the module's docstring), grouped
    by the token sequence they are read in; a read two rows share counts in both."""
    rows = [row for row in report.rows if (report.candidate[row].far or 0.0) > 0.0]
    plans = {(p.config, p.length, p.item.id): p for p in plan_reads(items, baseline.mode, tokenizer)}
    weights: dict[tuple[tuple[str, str, str], int], dict[int, WeightedRead]] = defaultdict(dict)
    for row in rows:
        source = evaluation.row_sources[row]
        found = []
        for item_id in evaluation.drift_items(row):
            key = (source.config, str(source.length), item_id)
            stored = baseline.scores[key[0]][key[1]][item_id]
            block = Block.decode(stored.drift or {})
            assert block.ids is not None and block.lps is not None  # a baseline with drift blocks: checked before
            for n, (group, _, _) in enumerate(places(plans[key].item, stored)):
                if group == "far":
                    found.append((key, block.at[n], block.ids[n], block.lps[n]))
        candidate = report.candidate[row].far
        assert candidate is not None
        weight = 1.0 / (len(rows) * len(found) * candidate) if found else 0.0
        for key, (seq, position), ids, lps in found:
            held = weights[(key, seq)].get(position)
            weights[(key, seq)][position] = WeightedRead(position, tuple(ids), tuple(lps), weight + (held.weight if held else 0.0))
    return [SequenceReads(tuple(int(t) for t in plans[key].sequences[seq][:max(reads)]),
                          tuple(reads[p] for p in sorted(reads)))
            for (key, seq), reads in weights.items()]


def estimate(report: BlameReport, pair: Pair, evaluation: Evaluation, items: Dataset, baseline: ScoresFile,
             changed: Sequence[PartBlame], progress: bool) -> None:
    """Each changed part's estimate (``PartBlame.estimate``), or why there is none (``estimates_why_not``)."""
    if not changed:
        return
    if not isinstance(pair, EstimatesRestores):
        report.estimates_why_not = ("the backend runs the models forward only (llama.cpp: GGUF files), so there is no "
                                    "gradient to estimate a restore from: the parts are searched without one")
        return
    sequences = weighted_reads(report, evaluation, items, baseline, pair.tokenizer)
    if progress:
        tokens = sum(len(s.ids) for s in sequences)
        print(f"blame: the first-order estimate of {len(changed)} parts: one forward and backward pass of the candidate over "
              f"{len(sequences)} sequences ({tokens:,} tokens)", file=sys.stderr, flush=True)
    started = time.monotonic()
    found = pair.restore_estimates(sequences, [entry.part for entry in changed])
    report.estimate_seconds = time.monotonic() - started
    if found.why_not:
        report.estimates_why_not = f"{found.why_not}: the parts are searched without an estimate"
        return
    for entry in changed:
        entry.estimate = found.by_part.get(entry.name)


def ordered(entries: Sequence[PartBlame]) -> list[PartBlame]:
    """``entries`` by estimate, largest first (stable: the model's order among equals, and where there is none)."""
    return sorted(entries, key=lambda e: -(e.estimate or 0.0))


def group_estimate(entries: Sequence[PartBlame]) -> float | None:
    """What restoring ``entries`` together does, to first order: the sum of their estimates."""
    known = [e.estimate for e in entries]
    return None if not known or any(e is None for e in known) else sum(e for e in known if e is not None)


def spread(report: BlameReport, changed: Sequence[PartBlame], first: Sequence[GroupTest]) -> Spread | None:
    """Whether the damage is spread: the first split's two halves each restore ``CARRY`` of the far drift or more,
    measured, and the estimate needs more than ``SPREAD_FROM`` of the changed parts (at least 3) for
    ``SPREAD_SHARE`` of its total. None: concentrated, or unknown (no estimate: the group search goes on)."""
    restored = [t for t in first if t.direction is Direction.RESTORE and not t.second]
    halves = [report.mean_share(t.states) for t in restored]
    if report.estimates_why_not or len(restored) != 2 or not all(h is not None and h >= CARRY for h in halves):
        return None
    positive = [e for e in ordered(changed) if (e.estimate or 0.0) > 0.0]
    total, held, needed = sum(e.estimate or 0.0 for e in positive), 0.0, 0
    for entry in positive:
        if total <= 0 or held >= SPREAD_SHARE * total:
            break
        held, needed = held + (entry.estimate or 0.0), needed + 1
    if needed <= max(2, int(SPREAD_FROM * len(changed))):
        return None
    return Spread(len(changed), needed, halves, [(e.name, e.estimate or 0.0) for e in positive[:LEADING]])
