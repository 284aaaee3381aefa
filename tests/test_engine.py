"""The engine's plan: each distinct prefix forwarded once, the same numbers as without it,
and a score cache that is never stale."""
from __future__ import annotations

import math
import random

import numpy as np
import pytest
from kit.models import perturbed, tiny_qwen3_5

from pytest_longctx.backends.hf import TransformersBackend
from pytest_longctx.data.load import load_dataset
from pytest_longctx.scoring import engine, prefix_tree
from pytest_longctx.scoring.cache import ScoreCache
from pytest_longctx.scoring.modes import plan_reads


def test_the_prefix_tree_holds_each_distinct_prefix_once():
    rng = random.Random(0)
    trunk = [rng.randrange(50) for _ in range(40)]
    sequences = []
    for _ in range(30):
        cut = rng.randrange(1, 40)
        sequences.append(trunk[:cut] + [rng.randrange(50) for _ in range(rng.randrange(1, 20))])
    sequences = [np.array(s) for s in {tuple(s) for s in sequences}]
    root, paths = prefix_tree.build(sequences)
    distinct_prefixes = {tuple(s[:n]) for s in sequences for n in range(1, len(s) + 1)}
    assert prefix_tree.total_tokens(root) == len(distinct_prefixes)
    for ids, path in zip(sequences, paths):
        assert path[0].start == 0 and path[-1].end == len(ids)
        rebuilt = np.concatenate([node.ids[node.start:node.end] for node in path])
        assert np.array_equal(rebuilt, ids)
        assert all(a.end == b.start for a, b in zip(path, path[1:]))


def flat(scores):
    return [(s.top1, s.logprob) for item in scores for target in item if target for s in target]


def windowed(model, window: int):
    """The same weights with every layer's attention limited to the last ``window`` tokens."""
    import copy

    from transformers import AutoModelForCausalLM

    config = copy.deepcopy(model.config)
    config.layer_types = ["sliding_attention"] * config.num_hidden_layers
    config.sliding_window = window
    local = AutoModelForCausalLM.from_config(config).eval()
    local.load_state_dict(model.state_dict())
    return local


# In float64 sharing prefixes changes no read of an attention model at all. In float32 the
# rounding of a cut sequence differs from a whole one's and some models amplify it: with this
# trained tiny model and a sliding window, single reads moved by up to 4.7e-4 (windows 24 and 65;
# 48 on other runs, whose weights differ with the threads that trained them), each gone in float64.
# So the engine is checked exactly, in float64, instead of within a float32 tolerance that some
# weights exceed. Qwen3.5's gated delta rule computes in float32 whatever the model's dtype
# (transformers' torch implementation casts to it), and its chunked and step-by-step forms round
# differently: 4.8e-6 at most here, so it keeps a float32 tolerance.
EXACT = {"qwen3": 1e-12, "qwen3-sliding-window": 1e-12, "qwen3_5": 1e-5}


@pytest.mark.parametrize("family", list(EXACT))
def test_the_plan_gives_the_scores_of_running_each_sequence_whole(family, qwen_model, qwen_tokenizer, data_dir):
    import copy

    import torch

    # a copy: the session's model stays float32 for the tests after this one
    model = {"qwen3": lambda: copy.deepcopy(qwen_model), "qwen3-sliding-window": lambda: windowed(qwen_model, 48),
             "qwen3_5": lambda: tiny_qwen3_5(len(qwen_tokenizer))}[family]().to(torch.float64)
    backend = TransformersBackend(model, qwen_tokenizer, chunk_size=64)
    plans = plan_reads(load_dataset(data_dir, lengths=["2k"]), "ids")
    planned = flat(engine.run(backend, plans, reuse_prefixes=True))
    whole = flat(engine.run(backend, plans, reuse_prefixes=False))
    assert len(planned) == len(whole) > 100
    assert [t for t, _ in planned] == [t for t, _ in whole]  # identical top-1
    assert max(abs(a - b) for (_, a), (_, b) in zip(planned, whole)) < EXACT[family]


def test_forwarded_tokens_are_the_distinct_prefix_tokens(data_dir):
    plans = plan_reads(load_dataset(data_dir), "ids")
    requests, _ = engine.collect(plans)
    planned = engine.forwarded_tokens(plans)
    distinct = {r.ids[:n].tobytes() for r in requests for n in range(1, len(r.ids) + 1)}
    assert planned == len(distinct)
    naive = sum(len(s) for p in plans for s in p.sequences)
    assert naive > 3 * planned  # the rules items repeat their sessions


class CountingBackend(TransformersBackend):
    sessions = 0

    def session(self):
        CountingBackend.sessions += 1
        return super().session()


def test_the_score_cache_answers_repeats_and_never_serves_a_changed_checkpoint(qwen_model, qwen_tokenizer, data_dir, tmp_path):
    plans = plan_reads(load_dataset(data_dir, sets=["facts", "rules_en"], lengths=["2k"]), "ids")
    backend = CountingBackend(qwen_model, qwen_tokenizer, name="my-org/model")
    cache = ScoreCache.for_backend(backend, tmp_path)
    first = flat(engine.run(backend, plans, cache=cache))
    assert CountingBackend.sessions == 1 and cache.misses > 0 and cache.hits == 0

    again_cache = ScoreCache.for_backend(backend, tmp_path)
    again = flat(engine.run(backend, plans, cache=again_cache))
    assert again == first and again_cache.hits == cache.misses and again_cache.misses == 0
    assert CountingBackend.sessions == 1  # nothing ran

    changed = CountingBackend(perturbed(qwen_model, 0.3), qwen_tokenizer, name="my-org/model")  # same name
    changed_cache = ScoreCache.for_backend(changed, tmp_path)
    other = flat(engine.run(changed, plans, cache=changed_cache))
    assert changed_cache.hits == 0 and CountingBackend.sessions == 2
    assert any(not math.isclose(a, b, abs_tol=1e-3) for (_, a), (_, b) in zip(other, first))
    assert ScoreCache.for_backend(backend, "off") is None


def test_the_same_weights_under_another_config_are_not_served_from_the_cache(qwen_model, qwen_tokenizer, data_dir, tmp_path):
    plans = plan_reads(load_dataset(data_dir, sets=["facts"], lengths=["2k"]), "ids")
    backend = TransformersBackend(qwen_model, qwen_tokenizer, name="m")
    local = TransformersBackend(windowed(qwen_model, 16), qwen_tokenizer, name="m")
    assert backend.weights_fingerprint() == local.weights_fingerprint()
    first = flat(engine.run(backend, plans, cache=ScoreCache.for_backend(backend, tmp_path)))
    cache = ScoreCache.for_backend(local, tmp_path)
    second = flat(engine.run(local, plans, cache=cache))
    assert cache.hits == 0 and cache.misses > 0
    assert second == flat(engine.run(local, plans))  # what the windowed model computes, not the first one's answers
    assert second != first


def test_a_gate_of_the_model_its_baseline_was_made_from_is_answered_from_the_cache(qwen_model, qwen_tokenizer, data_dir, tmp_path):
    """Making a baseline, then gating the same model against it, cost the same twice: the gate's reads also
    ask for the baseline's most likely tokens, which keyed other requests. The cache keys a request by
    its tokens and read positions and answers it wherever it kept every token asked (the top-k it kept
    among them); the answers are those of an uncached run."""
    from pytest_longctx.scoring.pipeline import score_items

    dataset = load_dataset(data_dir, sets=["facts", "tool_calls"], lengths=["2k"])
    backend = CountingBackend(qwen_model, qwen_tokenizer, name="my-org/model")
    baseline = score_items(backend, qwen_tokenizer, dataset, "ids", progress=False, cache=ScoreCache.for_backend(backend, tmp_path))
    assert baseline.has_drift
    made = CountingBackend.sessions
    cache = ScoreCache.for_backend(backend, tmp_path)
    gated = score_items(backend, qwen_tokenizer, dataset, "ids", progress=False, cache=cache, reference=baseline)
    assert cache.hits > 0 and cache.misses == 0 and CountingBackend.sessions == made  # nothing ran
    fresh = score_items(backend, qwen_tokenizer, dataset, "ids", progress=False, reference=baseline)
    assert gated.to_json()["scores"] == fresh.to_json()["scores"]
    changed = CountingBackend(perturbed(qwen_model, 0.3), qwen_tokenizer, name="my-org/model")
    other = ScoreCache.for_backend(changed, tmp_path)
    score_items(changed, qwen_tokenizer, dataset, "ids", progress=False, cache=other, reference=baseline)
    assert other.hits == 0  # another model's answers are never served


def test_a_unit_read_a_group_at_a_time_gives_a_full_reads_figures_and_forwards_no_more(qwen_model, qwen_tokenizer, data_dir):
    """Sequential reading reads a unit a group of items at a time (scoring/groups.py), the prefix they all share
    kept across the runs (engine.SharedPrefix): every read is the one reading the unit whole gives, bit for bit,
    each run forwards what Groups.cost says, and together they forward the distinct prefix tokens of the unit, as
    the whole read does; reading only some groups forwards less."""
    from dataclasses import replace

    from pytest_longctx.scoring.groups import Groups
    from pytest_longctx.scoring.reads import Read, TargetReads

    backend = TransformersBackend(qwen_model, qwen_tokenizer, chunk_size=64)
    # every item behind one prefix (a system prompt, the tools), with a read inside it (a control read)
    prefix = np.array(qwen_tokenizer.encode("You are a careful agent. Follow the rules below, and use the tools."))
    plans = [replace(p, sequences=tuple(np.concatenate([prefix, s]) for s in p.sequences),
                     targets=tuple(replace(t, reads=tuple(replace(r, pos=r.pos + len(prefix)) for r in t.reads)) for t in p.targets),
                     controls=(TargetReads((Read(0, 5, int(prefix[5])),)),))
             for p in plan_reads(load_dataset(data_dir, sets=["facts", "rules_en", "rules_cs"], lengths=["2k"]), "ids")]
    keys = [(p.config, p.length, p.item.id) for p in plans]
    whole = engine.run_reads(backend, plans)
    requests, _ = engine.collect(plans)
    distinct = {r.ids[:n].tobytes() for r in requests for n in range(1, len(r.ids) + 1)}
    assert whole.forwarded == len(distinct)
    groups = Groups.of(plans)
    members: dict[int, list] = {}
    for key in keys:
        members.setdefault(groups.group[key], []).append(key)
    assert 1 < len(members) < len(keys)  # a session's items (both languages) share it: fewer groups than items
    assert groups.shared is not None and len(groups.shared.ids) >= len(prefix) and 4 in groups.shared.reads
    forwarded, found = 0, {}
    for n, chosen in enumerate(reversed(list(members.values()))):
        run = engine.run_reads(backend, [groups.plans[k] for k in chosen], shared=groups.shared)
        assert run.forwarded == groups.cost(chosen, first=n == 0)
        forwarded += run.forwarded
        found.update(zip(chosen, run.scores))
    assert forwarded == whole.forwarded == groups.whole(keys)
    assert [found[k] for k in keys] == whole.scores
    some = list(members.values())[0]
    assert groups.cost(some, first=True) < whole.forwarded
