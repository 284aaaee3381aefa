"""An independent, deliberately simple scorer to check the engine and the metrics against.

One full forward pass per text, full-vocabulary log-softmax everywhere, plain loops over
the raw rows (dicts as written to the files), no code shared with the package.
"""
from __future__ import annotations

import weakref
from typing import Any

import torch

# (id of the model, ids, requests) -> (a weak reference to that model, its reads). The reference
# tells a live model from a later one at the same address: a freed model's id is reused, and a
# memo keyed on the id alone answered a new model with an old one's reads.
_MEMO: dict[tuple, tuple[weakref.ref, list[tuple[int, float]]]] = {}


def reads(model: Any, ids: list[int], requests: list[tuple[int, int]]) -> list[tuple[int, float]]:
    """(argmax, log p(token)) at each (position, token), from one full forward pass with a
    full-vocabulary log-softmax. Memoised per live model: the rules items repeat texts and requests."""
    key = (id(model), tuple(int(i) for i in ids), tuple(requests))
    if key not in _MEMO or _MEMO[key][0]() is not model:
        with torch.no_grad():
            logits = model(torch.tensor([list(key[1])])).logits[0]  # [seq, vocab]
        lp = torch.log_softmax(logits.float(), dim=-1)
        _MEMO[key] = (weakref.ref(model), [(int(lp[p].argmax()), lp[p, t].item()) for p, t in requests])
    return _MEMO[key][1]


def _text_ids_and_starts(tokenizer: Any, text: str) -> tuple[list[int], dict[int, int]]:
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    starts: dict[int, int] = {}
    for index, (start, end) in enumerate(enc["offset_mapping"]):
        if end > start and start not in starts:
            starts[start] = index
    return enc["input_ids"], starts


def target_scores(model: Any, config: str, row: dict[str, Any], mode: str, tokenizer: Any = None) -> list[Any]:
    """Per target: facts/tool_calls -> list of (hit, logprob); rules -> (score_without, score_with); None if unaligned."""
    out: list[Any] = []
    if config.startswith("rules"):
        texts = ("text_without_rule", "text_with_rule")
        if mode == "ids":
            without = reads(model, row["qwen_ids_without_rule"],
                            [(t["qwen_pos_without_rule"] - 1, t["qwen_expected_id"]) for t in row["targets"]])
            with_rule = reads(model, row["qwen_ids_with_rule"],
                              [(t["qwen_pos_with_rule"] - 1, t["qwen_expected_id"]) for t in row["targets"]])
            return [(a[1], b[1]) for a, b in zip(without, with_rule)]
        (ids0, starts0), (ids1, starts1) = [_text_ids_and_starts(tokenizer, row[k]) for k in texts]
        for t in row["targets"]:
            p0 = starts0.get(t["char_without_rule"][0])
            p1 = starts1.get(t["char_with_rule"][0])
            if not p0 or not p1:
                out.append(None)
                continue
            e = tokenizer(t["expected_text"], add_special_tokens=False)["input_ids"][0]
            out.append((reads(model, ids0, [(p0 - 1, e)])[0][1], reads(model, ids1, [(p1 - 1, e)])[0][1]))
        return out
    if mode == "ids":
        ids = row["qwen_ids"]
        positions = []
        for t in row["targets"]:
            positions.append(list(range(*t["qwen_answer_pos"])) if config == "facts" else [t["qwen_pos"]])
    else:
        ids, starts = _text_ids_and_starts(tokenizer, row["text"])
        positions = []
        for t in row["targets"]:
            span = t["answer_char"] if config == "facts" else t["char"]
            first = starts.get(span[0])
            if not first:
                positions.append(None)
            elif config == "facts":
                last = max(i for s, i in starts.items() if s < span[1])
                positions.append(list(range(first, last + 1)))
            else:
                positions.append([first])
    flat = [(p - 1, int(ids[p])) for ps in positions if ps is not None for p in ps]
    found = dict(zip(flat, reads(model, ids, flat)))
    for ps in positions:
        if ps is None:
            out.append(None)
        else:
            out.append([(found[(p - 1, int(ids[p]))][0] == ids[p], found[(p - 1, int(ids[p]))][1]) for p in ps])
    return out


def facts_metrics(scores: list[list[Any]]) -> dict[str, float]:
    """Query and token accuracy, mean log-probability and the unaligned count of the facts items' ``target_scores``."""
    queries = [s for item in scores for s in item if s is not None]
    tokens = [tok for q in queries for tok in q]
    return {
        "query_accuracy": sum(all(h for h, _ in q) for q in queries) / len(queries),
        "token_accuracy": sum(h for h, _ in tokens) / len(tokens),
        "mean_logprob": sum(lp for _, lp in tokens) / len(tokens),
        "unaligned": sum(s is None for item in scores for s in item),
    }


def tool_metrics(rows: list[dict[str, Any]], scores: list[list[Any]]) -> dict[str, float | None]:
    """Accuracy and mean log-probability of the tool-call targets far, fresh and near (None where a group has none)."""
    groups: dict[str, list[tuple[bool, float]]] = {"far": [], "fresh": [], "near": []}
    for row, item in zip(rows, scores):
        for t, s in zip(row["targets"], item):
            if s is None:
                continue
            if t["far"]:
                groups["far"].append(s[0])
                if t["fresh"]:
                    groups["fresh"].append(s[0])
            else:
                groups["near"].append(s[0])
    result: dict[str, float | None] = {}
    for name, values in groups.items():
        result[f"{name}_accuracy"] = sum(h for h, _ in values) / len(values) if values else None
        result[f"{name}_logprob"] = sum(lp for _, lp in values) / len(values) if values else None
    return result


def rules_cells(rows: list[dict[str, Any]], scores: list[list[Any]], ref_scores: list[list[Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """(placement, family or 'all') -> follow, retained, counted."""
    buckets: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for row, mine, ref in zip(rows, scores, ref_scores):
        for s, r in zip(mine, ref):
            if s is None or r is None:
                continue
            eff, eff_ref = s[1] - s[0], r[1] - r[0]
            for key in ((row["placement"], row["family"]), (row["placement"], "all")):
                buckets.setdefault(key, []).append((eff, eff_ref))
    cells = {}
    for key, pairs in buckets.items():
        counted = [(e, er) for e, er in pairs if abs(er) >= 1.0]
        cells[key] = {
            "counted": len(counted),
            "follow": sum(e / er >= 0.5 for e, er in counted) / len(counted) if counted else None,
            "retained": sum(e for e, _ in counted) / sum(er for _, er in counted) if counted else None,
        }
    return cells
