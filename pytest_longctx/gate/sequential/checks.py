"""The checks of a selection as sequential reading sees them (``Check``: a row's or a cell's check, its items in
reading order, the most each can count, the baseline's figures), made as gate/verdicts.py makes the verdicts
(``checks_of``), and the order items are read in (``reading_order``)."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

from pytest_longctx.data.lengths import sorted_lengths
from pytest_longctx.data.load import Dataset
from pytest_longctx.data.records import ALL_CONFIGS, Item, ItemKey, ToolItem, config_kind
from pytest_longctx.gate.keys import cell_key, cell_metrics, cells
from pytest_longctx.gate.thresholds import Thresholds
from pytest_longctx.gate.verdict import Verdict
from pytest_longctx.gate.verdicts import DRIFT_GATED, DRIFT_LABEL
from pytest_longctx.metrics.drift import Block, places
from pytest_longctx.metrics.raw import is_scored
from pytest_longctx.metrics.rows import RowSource, headline, row_specs
from pytest_longctx.scoring.pipeline import compute_sets

SHARE, MEAN, OPEN = "share", "mean", "open"  # what a check's value is over its items: how it can be bounded
Figure = tuple[float, float]  # one item's (numerator, denominator) of a check: hits / scored, KL sum / reads


# ------------------------------------------------------------------ the order


def _digest(key: ItemKey) -> str:
    return hashlib.sha256("/".join(key).encode("utf-8")).hexdigest()


def reading_order(keys: Iterable[ItemKey], within: Callable[[ItemKey], Any] | None = None) -> list[ItemKey]:
    """The items in the order they are read: each (config, length)'s by the digest of its key (``within``: another
    rank, e.g. a benchmark's random orders), the sets taken in turn, lengths shortest first and configs in the
    benchmark's order."""
    by_set: dict[tuple[str, str], list[ItemKey]] = {}
    for key in keys:
        by_set.setdefault((key[0], key[1]), []).append(key)
    lengths = sorted_lengths([length for _, length in by_set])
    rank = {config: n for n, config in enumerate(ALL_CONFIGS)}
    sets = sorted(by_set, key=lambda s: (lengths.index(s[1]), rank.get(s[0], len(rank)), s[0]))
    queues = [sorted(by_set[s], key=within or _digest) for s in sets]
    order = []
    for turn in range(max(map(len, queues), default=0)):
        order.extend(queue[turn] for queue in queues if turn < len(queue))
    return order


# ------------------------------------------------------------------ checks


@dataclass(frozen=True)
class Check:
    """One check of a row or cell as sequential reading sees it: its items (in reading order), the most each can
    count, and what decides its verdict."""

    key: str  # the key of the test it belongs to (a row's or a cell's)
    metric: str  # accuracy, follow, retained, kl
    label: str
    shape: str  # SHARE, MEAN or OPEN
    threshold: float
    at_most: bool
    baseline: float | None  # the baseline's value over the whole selection
    floor: float | None
    items: tuple[ItemKey, ...]
    caps: tuple[float, ...]  # per item: the most its denominator can be (targets, counted targets, far reads)
    base: tuple[float, ...]  # per item: the baseline's numerator (a threshold relative to the baseline)
    drop: float | None = None  # a threshold relative to the baseline: the drop it allows
    paths: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())  # numerator and denominator in a per_item entry

    def word(self, value: float | None) -> str:
        """The verdict the check gives with ``value`` as its final value (as gate/verdict.py judges it)."""
        baseline = (None if value is None else 0.0) if self.metric == "kl" else self.baseline
        return Verdict(self.key, self.label, self.metric, value, baseline, self.threshold, "", at_most=self.at_most,
                       floor=self.floor).word

    def figure(self, entry: Mapping[str, Any] | None) -> Figure:
        """An item's (numerator, denominator) from its entry in a set's ``per_item`` (no drift: nothing)."""
        num, den = _dig(entry, self.paths[0]), _dig(entry, self.paths[1])
        return (float(num or 0.0), float(den or 0.0))

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "metric": self.metric, "label": self.label, "shape": self.shape,
                "threshold": self.threshold, "at_most": self.at_most, "baseline": self.baseline, "floor": self.floor,
                "items": [list(k) for k in self.items], "caps": list(self.caps), "base": list(self.base), "drop": self.drop}

    @classmethod
    def from_json(cls, found: Mapping[str, Any]) -> Check:
        return cls(found["key"], found["metric"], found["label"], found["shape"], found["threshold"], found["at_most"],
                   found["baseline"], found["floor"], tuple(tuple(k) for k in found["items"]), tuple(found["caps"]),
                   tuple(found["base"]), found["drop"])


def _dig(entry: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(entry, Mapping) or key not in entry:
            return None
        entry = entry[key]
    return entry


def _counts_in(source: RowSource) -> Callable[[Item], bool]:
    """Whether an item of the row's set counts in the row ``source`` (``RowSource.covers``)."""
    return lambda item: source.covers(getattr(item, "placement", None), getattr(item, "family", None),
                                      getattr(item, "suite", None))


def _share_caps(config: str, item: Item, records: Sequence[Mapping[str, Any]], min_effect: float) -> float:
    """The most targets an item can count in its config's share: its scored queries (facts, sessions), its far
    targets (tool calls), the targets its baseline counts (rules: ``|eff_ref| >= min_effect``)."""
    kind = config_kind(config)
    if kind == "tool_calls":
        assert isinstance(item, ToolItem)
        return float(sum(t.far for t in item.targets))
    if kind == "rules":
        return float(sum(is_scored(r) and abs(r["score_with"] - r["score_without"]) >= min_effect for r in records))
    return float(len(records))


def _far_reads(item: Item, scores: Any) -> float:
    """The far reads of an item's drift block in the baseline (none without one)."""
    if not scores.drift:
        return 0.0
    block = Block.decode(scores.drift)
    if block.ids is None or block.lps is None:
        return 0.0
    return float(sum(group == "far" for group, _, _ in places(item, scores)))


SHARE_PATHS = {"facts": (("recalled",), ("scored",)), "faithfulness": (("recalled",), ("scored",)),
               "tool_calls": (("far", "correct"), ("far", "count")), "follow": (("followed",), ("counted",)),
               "retained": (("eff_sum",), ("eff_ref_sum",)), "kl": (("drift", "far", "kl"), ("drift", "far", "reads"))}


@dataclass(frozen=True)
class Selection:
    """What the checks of a selection are made from: its items, the baseline's scores and metrics of them, the
    thresholds, and the keys of the selected row and cell tests."""

    dataset: Dataset
    baseline: Any  # the baseline ScoresFile
    baseline_sets: Mapping[str, Mapping[str, Mapping[str, Any]]]
    thresholds: Thresholds
    tests: frozenset[str]
    order: Sequence[ItemKey]

    def _items(self, config: str, lengths: Sequence[str], keep: Callable[[Item], bool]) -> list[tuple[ItemKey, Item]]:
        rank = {key: n for n, key in enumerate(self.order)}
        found = [((config, length, item.id), item) for length in lengths
                 for item in self.dataset.configs[config].get(length, []) if keep(item)]
        return sorted(found, key=lambda pair: rank.get(pair[0], len(rank)))

    def _check(self, key: str, metric: str, label: str, shape: str, threshold: float, at_most: bool,
               baseline: float | None, floor: float | None, config: str, lengths: Sequence[str],
               keep: Callable[[Item], bool], drop: float | None = None) -> Check:
        chosen = self._items(config, lengths, keep)
        caps, base = [], []
        path_kind = metric if metric in ("follow", "retained", "kl") else config_kind(config)
        paths = SHARE_PATHS[path_kind]
        for (c, n, item_id), item in chosen:
            scores = self.baseline.scores[c][n][item_id]
            caps.append(_far_reads(item, scores) if metric == "kl" else
                        _share_caps(c, item, scores.targets, self.thresholds.min_effect))
            base.append(float(_dig(self.baseline_sets[c][n]["per_item"].get(item_id), paths[0]) or 0.0))
        return Check(key, metric, label, shape, threshold, at_most, baseline, floor, tuple(k for k, _ in chosen),
                     tuple(caps), tuple(base), drop, paths)

    def checks(self) -> list[Check]:
        """The checks of every selected row and cell test, as gate/verdicts.py makes them."""
        found: list[Check] = []
        configs = self.dataset.configs
        rows, _ = headline(self.baseline_sets)
        for name, source in row_specs({config: list(by_length) for config, by_length in configs.items()}):
            if source.key in self.tests:
                found.extend(self._row_checks(name, source, rows.get(name)))
        for config, by_length in configs.items():
            if config_kind(config) != "rules":
                continue
            for _, length, placement, family in cells(config, list(by_length)):
                key = cell_key(config, length, placement, family)
                if key not in self.tests:
                    continue
                base_cell = self.baseline_sets[config][length]["cells"][placement][family]
                label = f"{config} {length} {placement} prompt, {'all families' if family == 'all' else family}"
                for metric, value in cell_metrics(self.thresholds, key, family, placement).items():
                    keep = _counts_in(RowSource(config, metric, length, placement, family))
                    found.append(self._check(key, metric, label, SHARE if metric == "follow" else OPEN, value, False,
                                             base_cell[metric], 0.0 if metric == "follow" else None, config, [length], keep))
        return found

    def _row_checks(self, name: str, source: RowSource, baseline: float | None) -> list[Check]:
        config, key = source.config, source.key
        lengths = [source.length] if source.length is not None else list(self.dataset.configs[config])
        keep = _counts_in(source) if not source.worst_case else (lambda item: True)
        if source.worst_case:
            threshold = self.thresholds.get(key, "retained")
            assert threshold is not None
            return [self._check(key, "retained", name, OPEN, threshold, False, baseline, None, config, lengths, keep)]
        if source.is_rules:
            metric = source.metric
            threshold = self.thresholds.get(key, metric)
            assert threshold is not None
            own = self._check(key, metric, name, SHARE if metric == "follow" else OPEN, threshold, False, baseline,
                              0.0 if metric == "follow" else None, config, lengths, keep)
        else:
            drop = self.thresholds.get(key, "drop")
            assert drop is not None
            threshold = (baseline if baseline is not None else 0.0) - drop
            own = self._check(key, "accuracy", name, SHARE, threshold, False, baseline, 0.0, config, lengths, keep, drop)
        found = [own]
        kl = self.thresholds.get(key, "kl", default=config_kind(config) in DRIFT_GATED)
        if kl is not None and self.baseline.has_drift:
            found.append(self._check(key, "kl", f"{name}{DRIFT_LABEL}", MEAN, kl, True, 0.0, None, config, lengths, keep))
        return found


def checks_of(dataset: Dataset, baseline: Any, thresholds: Thresholds, tests: frozenset[str],
              within: Callable[[ItemKey], Any] | None = None) -> tuple[list[Check], list[ItemKey]]:
    """(the checks of the selected row and cell ``tests`` over ``dataset``, against ``baseline``; the order their
    items are read in, each set's by ``within``: ``reading_order``)."""
    baseline_sets = compute_sets(dataset, baseline, None, thresholds.min_effect)
    first = Selection(dataset, baseline, baseline_sets, thresholds, tests, ()).checks()
    order = reading_order({key for check in first for key in check.items}, within)
    return Selection(dataset, baseline, baseline_sets, thresholds, tests, order).checks(), order
