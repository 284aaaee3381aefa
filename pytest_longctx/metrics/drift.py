"""Drift at read positions (docs/metrics.md#drift): how far a model's next-token distribution
moved from its baseline's wherever the benchmark reads, split by how far back the needed
text lies.

A scored item keeps, beside its per-target records, one *drift block* over all its reads
in order (every read of every aligned target, then its control reads):

* ``k``: how many most likely tokens were kept per read;
* ``at``: the (sequence, position) of each read, to check a candidate reads the same ones;
* ``top1``: the model's arg-max at each read;
* ``ids`` / ``lps``: the model's own ``k`` most likely tokens and their log-probabilities
  (what a baseline compares candidates with);
* ``ref``: the model's log-probabilities of its *reference's* ``k`` ids at each read (a
  candidate scored against a baseline).

Arrays are little-endian int32 / float32, base64-encoded: a baseline of kilobytes. With
``p``, ``q`` the baseline's and the candidate's probabilities of the baseline's ids and the
rest bucket ``p_r = 1 - sum p``, ``q_r = 1 - sum q`` (clamped at 1e-12),
``KL_K = sum p (log p - log q) + p_r (log p_r - log q_r)``: a lower bound of the full
KL(P || Q), equal to it when ``k`` covers the vocabulary.
"""
from __future__ import annotations

import base64
import math
import sys
from array import array
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from pytest_longctx.data.records import FAR_TOKENS, FactItem, FaithfulnessItem, Item, RuleItem, ToolItem
from pytest_longctx.metrics.raw import Record, ratio, values
from pytest_longctx.numbers import REST_FLOOR

TOP_K = 16  # most likely tokens a baseline keeps per read
GROUPS = ("far", "near", "control")


# ------------------------------------------------------------------ the block's arrays


def pack(numbers: Iterable[float | int], kind: str) -> str:
    """``numbers`` as little-endian ``kind`` (``"i"`` int32, ``"f"`` float32), base64."""
    packed = array(kind, numbers)
    if packed.itemsize != 4:
        raise RuntimeError(f"array type {kind!r} is {packed.itemsize} bytes here, not 4")
    if sys.byteorder == "big":
        packed.byteswap()
    return base64.b64encode(packed.tobytes()).decode("ascii")


def unpack(text: str, kind: str) -> list:
    """The numbers ``pack`` made; ValueError (binascii.Error) when ``text`` is not its base64."""
    packed = array(kind)
    packed.frombytes(base64.b64decode(text, validate=True))
    if sys.byteorder == "big":
        packed.byteswap()
    return packed.tolist()


def float32(value: float) -> float:
    """``value`` rounded to float32, as the block stores it: the records and the block agree."""
    return array("f", [value])[0]


def block(at: Sequence[tuple[int, int]], top1: Sequence[int], top: Sequence[tuple[Sequence[int], Sequence[float]]] | None,
          ref: Sequence[Sequence[float]] | None, k: int) -> dict[str, Any]:
    """A drift block (see the module docstring); ``top``/``ref`` None when not read."""
    found: dict[str, Any] = {"k": k, "reads": len(at), "at": pack([x for pair in at for x in pair], "i"),
                             "top1": pack(top1, "i")}
    if top is not None:
        found["ids"] = pack([i for ids, _ in top for i in _padded(ids, k, -1)], "i")
        found["lps"] = pack([v for _, lps in top for v in _padded(lps, k, -math.inf)], "f")
    if ref is not None:
        found["ref"] = pack([v for lps in ref for v in _padded(lps, k, math.nan)], "f")
    return found


def _padded(values: Sequence[Any], k: int, fill: Any) -> list[Any]:
    """A backend whose vocabulary is smaller than ``k`` gives fewer ids: pad to ``k``."""
    return list(values) + [fill] * (k - len(values))


@dataclass(frozen=True)
class Block:
    """A drift block decoded: per read, its place, the arg-max, the top-k and the reference's."""

    k: int
    at: list[tuple[int, int]]
    top1: list[int]
    ids: list[list[int]] | None
    lps: list[list[float]] | None
    ref: list[list[float]] | None

    @classmethod
    def decode(cls, found: Mapping[str, Any]) -> Block:
        """The block stored as ``found``; ValueError/TypeError naming the field when it is not
        one ``block`` could have made (arrays of other lengths, a place or id out of range, a
        padding id with a log-probability). Its numbers may be NaN: whether a file holding
        them can judge is the reader's to say (scoring/scores_file.py)."""
        k, n = _count(found, "k", 1), _count(found, "reads", 0)

        def flat(name: str, kind: str, size: int) -> list[Any]:
            if not isinstance(found[name], str):
                raise TypeError(f"field {name!r} is a {type(found[name]).__name__}, not base64 text")
            numbers = unpack(found[name], kind)
            if len(numbers) != size:
                raise ValueError(f"field {name!r}: {len(numbers)} values for {n} reads")
            return numbers

        def rows(name: str, kind: str) -> list[list[Any]] | None:
            if name not in found:
                return None
            numbers = flat(name, kind, n * k)
            return [numbers[r * k:(r + 1) * k] for r in range(n)]

        at, top1 = flat("at", "i", 2 * n), flat("top1", "i", n)
        ids, lps = rows("ids", "i"), rows("lps", "f")
        if any(x < 0 for x in at):
            raise ValueError(f"field 'at': a negative place at read {next(i for i, x in enumerate(at) if x < 0) // 2}")
        _check_ids("top1", [[t] for t in top1])
        if ids is not None:
            _check_ids("ids", ids)
            if lps is None:
                raise ValueError("field 'ids' without 'lps'")
            for r, (row, values) in enumerate(zip(ids, lps)):
                if any(i == -1 and v != -math.inf for i, v in zip(row, values)):
                    raise ValueError(f"field 'ids': padding (-1) with a log-probability at read {r}")
        return cls(k, list(zip(at[::2], at[1::2])), top1, ids, lps, rows("ref", "f"))


MAX_TOKEN_ID = 2**30  # no vocabulary is this large: a drift block's id at or above it is damage


def _count(found: Mapping[str, Any], name: str, least: int) -> int:
    value = found[name]
    if not isinstance(value, int) or isinstance(value, bool) or value < least:
        raise ValueError(f"field {name!r} is {value!r}, not a whole number of at least {least}")
    return value


def _check_ids(name: str, rows: Sequence[Sequence[int]]) -> None:
    """Token ids in [0, MAX_TOKEN_ID), or -1 (the padding of a small vocabulary) in ``ids``."""
    least = -1 if name == "ids" else 0
    for r, row in enumerate(rows):
        bad = [i for i in row if not least <= i < MAX_TOKEN_ID]
        if bad:
            raise ValueError(f"field {name!r}: {bad[0]} at read {r} is not a token id")


# ------------------------------------------------------------------ one read


def kl_k(base_lps: Sequence[float], model_lps: Sequence[float]) -> float:
    """KL_K of the candidate from the baseline over the baseline's top-k ids and the rest
    bucket (0 log 0 = 0); NaN when a candidate log-probability is not finite."""
    total, p_sum, q_sum = 0.0, 0.0, 0.0
    for lp, lq in zip(base_lps, model_lps):
        if lp == -math.inf:  # padding of a small vocabulary, or a token of probability 0
            continue
        if not math.isfinite(lq) or not math.isfinite(lp):
            return math.nan
        p = math.exp(lp)
        total += p * (lp - lq)
        p_sum += p
        q_sum += math.exp(lq)
    p_rest = max(0.0, 1.0 - p_sum)
    q_rest = max(REST_FLOOR, 1.0 - q_sum)
    if p_rest > 0.0:
        total += p_rest * (math.log(p_rest) - math.log(q_rest))
    return total


@dataclass(frozen=True)
class ReadDrift:
    """One read of a candidate against its baseline."""

    group: str  # far, near or control
    kl: float  # KL_K (NaN: not finite)
    same_top1: bool  # the candidate's arg-max is the baseline's
    model_lp: float | None  # the candidate's log-probability of the token read (None: not finite)
    base_lp: float | None  # the baseline's
    target: int | None = None  # the target it belongs to; None: a control read
    distance: int | None = None  # tokens back to what the target needs, where the item says

    @property
    def dlogp(self) -> float | None:
        """The candidate's minus the baseline's log-probability of the token read."""
        return None if self.model_lp is None or self.base_lp is None else self.model_lp - self.base_lp


def target_group(item: Item, index: int) -> str:
    """Whether target ``index`` of ``item`` needs text far back (``FAR_TOKENS`` or more) or near."""
    if isinstance(item, ToolItem):
        return "far" if item.targets[index].far else "near"
    if isinstance(item, (FactItem, RuleItem)):
        return "far" if item.targets[index].distance_tokens >= FAR_TOKENS else "near"
    assert isinstance(item, FaithfulnessItem)
    return "near" if item.depth == "recent" else "far"


def _token_logprobs(records: Sequence[Record]) -> list[float | None]:
    return [v for r in records for v in values(r)]


def aligned(model: Block, base: Block) -> bool:
    return model.at == base.at and base.ids is not None and base.lps is not None and model.ref is not None


Place = tuple[str, "int | None", "int | None"]  # (group, target index or None for a control read, distance or None)


def places(item: Item, scores: Any) -> list[Place]:
    """Where each read of an item's drift block belongs, in the block's order: its group,
    its target (None: a control read) and how far back that target's needed text lies."""
    found: list[Place] = [
        (target_group(item, i), i, None if isinstance(item, FaithfulnessItem) else item.targets[i].distance_tokens)
        for i, record in enumerate(scores.targets) for _ in values(record)]
    return found + [("control", None, None)] * sum(len(values(r)) for r in scores.controls)


def item_reads(item: Item, model: Any, base: Any) -> list[ReadDrift] | None:
    """The drift of every read of one item, from both sides' scores (``targets``, ``controls``
    and ``drift`` of a scores file's item); None when either side has no drift block or the
    candidate did not read the baseline's ids at the baseline's places."""
    if not model.drift or not base.drift:
        return None
    mine, theirs = Block.decode(model.drift), Block.decode(base.drift)
    if not aligned(mine, theirs):
        return None
    where = places(item, base)
    model_lps = _token_logprobs([*model.targets, *model.controls])
    base_lps = _token_logprobs([*base.targets, *base.controls])
    if not len(where) == len(model_lps) == len(base_lps) == len(theirs.at):
        return None
    assert theirs.ids is not None and theirs.lps is not None and mine.ref is not None
    return [ReadDrift(group, kl_k(theirs.lps[n], mine.ref[n]), mine.top1[n] == theirs.top1[n], model_lps[n], base_lps[n],
                      target, distance) for n, (group, target, distance) in enumerate(where)]


# ------------------------------------------------------------------ sums and means


@dataclass(frozen=True)
class ReadSums:
    """One group of an item's reads: those with a finite KL (``reads``), their KL sum, how many kept the
    baseline's arg-max, the Δ log p sum over the reads where it is finite (the numerators and denominators
    the bootstrap resamples), and how many KLs were not finite."""

    reads: int
    kl: float
    same_top1: int
    dlogp_reads: int
    dlogp: float
    nonfinite: int

    def to_json(self) -> dict[str, Any]:
        return {"reads": self.reads, "kl": self.kl, "same_top1": self.same_top1, "dlogp_reads": self.dlogp_reads,
                "dlogp": self.dlogp, "nonfinite": self.nonfinite}

    @classmethod
    def from_json(cls, found: Mapping[str, Any]) -> ReadSums:
        return cls(found["reads"], found["kl"], found["same_top1"], found["dlogp_reads"], found["dlogp"], found["nonfinite"])


@dataclass(frozen=True)
class ItemDrift:
    """An item's reads against its baseline, by group: far, near and control."""

    far: ReadSums
    near: ReadSums
    control: ReadSums

    def group(self, name: str) -> ReadSums:
        """The sums of group ``name`` (one of ``GROUPS``)."""
        return {"far": self.far, "near": self.near, "control": self.control}[name]

    def to_json(self) -> dict[str, Any]:
        return {name: self.group(name).to_json() for name in GROUPS}

    @classmethod
    def from_json(cls, found: Mapping[str, Any]) -> ItemDrift:
        return cls(*(ReadSums.from_json(found[name]) for name in GROUPS))


def item_drift(reads: Sequence[ReadDrift]) -> ItemDrift:
    """The sums of an item's reads, by group."""
    sums = []
    for group in GROUPS:
        mine = [r for r in reads if r.group == group]
        finite = [r for r in mine if math.isfinite(r.kl)]
        deltas = [r.dlogp for r in mine if r.dlogp is not None]
        sums.append(ReadSums(reads=len(finite), kl=sum(r.kl for r in finite), same_top1=sum(r.same_top1 for r in finite),
                             dlogp_reads=len(deltas), dlogp=sum(deltas), nonfinite=len(mine) - len(finite)))
    return ItemDrift(*sums)


def pooled(summaries: Iterable[ItemDrift]) -> dict[str, dict[str, Any]]:
    """Per group, over items: reads, mean KL_K, same top-1 rate, mean Δ log p (None: no read)."""
    summaries = list(summaries)
    found = {}
    for group in GROUPS:
        part = [s.group(group) for s in summaries]
        reads = sum(p.reads for p in part)
        deltas = sum(p.dlogp_reads for p in part)
        found[group] = {"reads": reads, "nonfinite": sum(p.nonfinite for p in part),
                        "kl": ratio(sum(p.kl for p in part), reads),
                        "same_top1": ratio(sum(p.same_top1 for p in part), reads),
                        "dlogp": ratio(sum(p.dlogp for p in part), deltas)}
    return found


def set_drift(drifts: Sequence[ItemDrift | None]) -> dict[str, Any]:
    """A set's drift by group over its items' (those both sides have a drift block for: the others' None)."""
    found = [d for d in drifts if d is not None]
    return {"items": len(found), "items_without": len(drifts) - len(found), **pooled(found)}
