"""Candidates whose every figure is drawn at random from a baseline's, read by the gate with no model: the drawn
scores (``drawn``) are handed to the gate's reader in place of the engine's (``Drawn``), through a backend that reads
nothing (``NoModel``); and an agent session of the faithfulness card's fields (``session``), to give the test data
every set kind."""
from __future__ import annotations

import copy
import math
import random

import numpy as np

from pytest_longctx.metrics.drift import Block, block
from pytest_longctx.scoring import engine
from pytest_longctx.scoring.pipeline import Scored
from pytest_longctx.scoring.scores_file import ItemScores, ScoresFile


def drawn(baseline: ScoresFile, seed: int, damage: float, nan: float) -> ScoresFile:
    """A candidate's scores drawn from the baseline's: each hit lost with probability ``damage``, log-probabilities
    and rule effects moved by up to 2 x ``damage`` nats, every read's distribution moved as much (its drift), and a
    log-probability NaN with probability ``nan``."""
    rng = random.Random(seed)
    found = ScoresFile(mode=baseline.mode, meta=copy.deepcopy(baseline.meta))
    for config, length, item_id, scores in baseline.items():
        targets = [_moved(record, rng, damage, nan) for record in scores.targets]
        controls = [_moved(record, rng, damage, 0.0) for record in scores.controls]
        theirs = Block.decode(scores.drift)
        ref = []
        for lps in theirs.lps:
            p = np.exp(np.array(lps, dtype=float))
            q = p * np.exp([rng.uniform(-2 * damage, 2 * damage) for _ in lps])
            q = q / max(1.0, q.sum() + rng.uniform(0.0, damage))  # a sub-distribution: its rest bucket at least 0
            ref.append([math.log(v) if v > 0 else -math.inf for v in q])
        top1 = [t if rng.random() > damage else t + 1 for t in theirs.top1]
        mine = block(theirs.at, top1, None, ref, theirs.k)
        found.scores.setdefault(config, {}).setdefault(length, {})[item_id] = ItemScores(scores.fingerprint, targets, controls, mine)
    return found


def _moved(record: dict, rng: random.Random, damage: float, nan: float) -> dict:
    if "unaligned" in record:
        return dict(record)
    if "logprobs" in record:
        lps = [None if rng.random() < nan else lp - rng.uniform(0, 2 * damage) for lp in record["logprobs"]]
        return {"hits": [h and rng.random() > damage for h in record["hits"]], "logprobs": lps}
    return {"score_without": record["score_without"] - rng.uniform(0, 2 * damage),
            "score_with": record["score_with"] - rng.uniform(0, 4 * damage)}


class Drawn:
    """The gate's reader's source in place of the engine: the drawn scores of the items planned, and the tokens the
    engine forwards for them (their distinct prefix tokens, a prefix kept from an earlier run of the unit not again)."""

    def __init__(self, scores: ScoresFile):
        self.scores = scores
        self.kept: set[int] = set()

    def __call__(self, backend, tokenizer, dataset, mode, plans, *args, shared=None, **kwargs) -> Scored:
        part = ScoresFile(mode=mode, meta=copy.deepcopy(self.scores.meta))
        for plan in plans:
            found = self.scores.scores[plan.config][plan.length][plan.item.id]
            part.scores.setdefault(plan.config, {}).setdefault(plan.length, {})[plan.item.id] = found
        forwarded = engine.forwarded_tokens(plans)
        if shared is not None and plans:
            forwarded -= len(shared.ids) if id(shared) in self.kept else 0
            self.kept.add(id(shared))
        return Scored(part, forwarded)


class NoModel:
    """A backend the drawn scores stand in for, with sessions (the engine reads it as a prefix tree, as the drawn
    tokens are counted) and the baseline's tokenizer (the agent sessions are read in text mode): nothing is read
    through it."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def read(self, ids, positions, tokens, top_k=0):
        raise AssertionError("the drawn scores answer every read")

    def session(self):
        raise AssertionError("the drawn scores answer every read")


def session(n: int) -> dict:
    """An agent session with one planted fact and a probe that needs it (the faithfulness card's fields)."""
    fact = f"The nightly build runs on runner {4000 + 17 * n}."
    turns = [{"role": "system", "content": "You are a terse engineering assistant.", "name": None},
             {"role": "user", "content": f"Set up the build for the service number {n}.", "name": None},
             {"role": "assistant", "content": fact, "name": None}]
    turns += [{"role": "user" if k % 2 else "assistant", "content": f"Step {k}: tidy the module and its tests.", "name": None}
              for k in range(6)]
    return {"id": f"s{n:04d}", "messages": turns, "probe": "Which runner does the nightly build run on?",
            "required_facts": [rf"runner {4000 + 17 * n}"], "probe_type": "verbatim", "depth": ("early", "mid", "recent")[n],
            "concept": "build", "placement": "statement", "suite": ("standard", "low_surprisal", "standard")[n]}
