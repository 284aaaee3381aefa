"""The checks of a selection as sequential reading sees them (``Check``: a row's, a cell's or an item's check, its
items in reading order, the most each can count, the baseline's figures), made as gate/evaluation.py makes the
verdicts (``checks_of``), and the order items are read in (``reading_order``)."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

from pytest_longctx.data.lengths import sorted_lengths
from pytest_longctx.data.load import Dataset
from pytest_longctx.data.records import ALL_CONFIGS, Item, ItemKey, Kind, ToolItem, config_kind
from pytest_longctx.gate.evaluation import DRIFT_LABEL, drift_gated
from pytest_longctx.gate.keys import cell_key, cell_metrics, cells, item_key, row_spec
from pytest_longctx.gate.specs import BY_NAME, ITEM, KL, CheckSpec, Shape
from pytest_longctx.gate.thresholds import Thresholds
from pytest_longctx.gate.verdict import Verdict
from pytest_longctx.metrics.drift import Block, places
from pytest_longctx.metrics.item_figures import ItemFigures, Sets, countable
from pytest_longctx.metrics.rows import RowSource, headline, row_specs

Figure = tuple[float, float]  # one item's (numerator, denominator) of a check: hits / scored, KL sum / reads


# ------------------------------------------------------------------ the order


def item_digest(key: ItemKey) -> str:
    """What orders a set's items by default: the digest of the item's key, fixed by the data alone."""
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
    queues = [sorted(by_set[s], key=within or item_digest) for s in sets]
    order = []
    for turn in range(max(map(len, queues), default=0)):
        order.extend(queue[turn] for queue in queues if turn < len(queue))
    return order


# ------------------------------------------------------------------ checks


@dataclass(frozen=True)
class Check:
    """One check of a row, cell or item as sequential reading sees it: its items (in reading order), the most each
    can count, and what decides its verdict."""

    key: str  # the key of the test it belongs to (a row's, a cell's or an item's)
    spec: CheckSpec
    label: str
    threshold: float
    baseline: float | None  # the baseline's value over the whole selection
    items: tuple[ItemKey, ...]
    caps: tuple[float, ...]  # per item: the most its denominator can be (targets, counted targets, far reads; an item: 1)
    base: tuple[float, ...] = ()  # per item: the baseline's numerator (a threshold relative to the baseline)
    drop: float | None = None  # a threshold relative to the baseline: the drop it allows

    @property
    def metric(self) -> str:
        return self.spec.name

    def word(self, value: float | None) -> str:
        """The verdict the check gives with ``value`` as its final value (as gate/verdict.py judges it)."""
        baseline = (None if value is None else 0.0) if self.spec.against_itself else self.baseline
        return Verdict(self.key, self.label, self.metric, value, baseline, self.threshold, "", at_most=self.spec.at_most,
                       floor=self.spec.floor).word

    def figure(self, figures: ItemFigures | None) -> Figure:
        """An item's (numerator, denominator) from its figures (nothing to count: (0, 0))."""
        share = self.spec.figure(figures) if figures is not None else None
        return (float(share.part), float(share.whole)) if share is not None else (0.0, 0.0)

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "metric": self.metric, "label": self.label, "threshold": self.threshold,
                "baseline": self.baseline, "items": [list(k) for k in self.items], "caps": list(self.caps),
                "base": list(self.base), "drop": self.drop}

    @classmethod
    def from_json(cls, found: Mapping[str, Any]) -> Check:
        return cls(found["key"], BY_NAME[found["metric"]], found["label"], found["threshold"], found["baseline"],
                   tuple(tuple(k) for k in found["items"]), tuple(found["caps"]), tuple(found["base"]), found["drop"])


def _far_reads(item: Item, scores: Any) -> float:
    """The far reads of an item's drift block in the baseline (none without one)."""
    if not scores.drift:
        return 0.0
    block = Block.decode(scores.drift)
    if block.ids is None or block.lps is None:
        return 0.0
    return float(sum(group == "far" for group, _, _ in places(item, scores)))


def _cap(spec: CheckSpec, kind: Kind, item: Item, scores: Any, min_effect: float) -> float:
    """The most an item can count in a check's denominator, known from the data and the baseline before the model
    reads it: far reads (drift), its far targets (tool calls' accuracy), the targets its baseline counts (rules),
    its scored queries (facts, agent sessions); an item's own check 1, where its baseline counts anything."""
    if spec.shape == Shape.MEAN:
        return _far_reads(item, scores)
    if spec.shape == Shape.ITEM:
        return 1.0 if countable(kind, scores.targets, min_effect) else 0.0
    if kind == Kind.TOOL_CALLS:
        assert isinstance(item, ToolItem)
        return float(sum(t.far for t in item.targets))
    if kind == Kind.RULES:
        return float(countable(kind, scores.targets, min_effect))
    return float(len(scores.targets))


@dataclass(frozen=True)
class Selection:
    """What the checks of a selection are made from: its items, the baseline's scores and figures of them over the
    whole selection, the thresholds, and the keys of the selected tests (rows, cells and items)."""

    dataset: Dataset
    baseline: Any  # the baseline ScoresFile
    baseline_sets: Sets
    thresholds: Thresholds
    tests: frozenset[str]

    def check(self, key: str, spec: CheckSpec, label: str, threshold: float, baseline: float | None, config: str,
              lengths: Sequence[str], keep: Callable[[Item], bool], drop: float | None = None) -> Check:
        kind = config_kind(config)
        chosen = [((config, length, item.id), item) for length in lengths
                  for item in self.dataset.configs[config].get(length, []) if keep(item)]
        caps, base = [], []
        for (c, n, item_id), item in chosen:
            caps.append(_cap(spec, kind, item, self.baseline.scores[c][n][item_id], self.thresholds.min_effect))
            share = spec.figure(self.baseline_sets[c][n]["per_item"][item_id]) if spec.relative else None
            base.append(float(share.part) if share is not None else 0.0)
        return Check(key, spec, label, threshold, baseline, tuple(k for k, _ in chosen), tuple(caps), tuple(base), drop)

    def checks(self) -> list[Check]:
        """The checks of every selected row, cell and item test, as gate/evaluation.py makes their verdicts."""
        found: list[Check] = []
        configs = self.dataset.configs
        rows, _ = headline(self.baseline_sets)
        for name, source in row_specs({config: list(by_length) for config, by_length in configs.items()}):
            if source.key in self.tests:
                found.extend(self._row_checks(name, source, rows.get(name)))
        for config, by_length in configs.items():
            if config_kind(config) != Kind.RULES:
                continue
            for _, length, placement, family in cells(config, list(by_length)):
                key = cell_key(config, length, placement, family)
                if key not in self.tests:
                    continue
                base_cell = self.baseline_sets[config][length]["cells"][placement][family]
                label = f"{config} {length} {placement} prompt, {'all families' if family == 'all' else family}"
                for spec, value in cell_metrics(self.thresholds, key, family, placement).items():
                    keep = RowSource(config, spec.name, length, placement, family).covers_item
                    found.append(self.check(key, spec, label, value, base_cell[spec.name], config, [length], keep))
        for config, length, item in self.dataset.items():
            key = item_key(config, length, item.id)
            if key in self.tests:
                limit = self.thresholds.get(key, ITEM.threshold)
                assert limit is not None  # every item has its loss checked by default
                found.append(self.check(key, ITEM, key, limit, None, config, [length], lambda found, item=item: found is item))
        return found

    def _row_checks(self, name: str, source: RowSource, baseline: float | None) -> list[Check]:
        config, key = source.config, source.key
        lengths = [source.length] if source.length is not None else list(self.dataset.configs[config])
        keep = source.covers_item if not source.worst_case else (lambda item: True)
        spec = row_spec(source)
        value = self.thresholds.get(key, spec.threshold)
        assert value is not None
        if spec.relative:
            own = self.check(key, spec, name, (baseline if baseline is not None else 0.0) - value, baseline, config,
                             lengths, keep, drop=value)
        else:
            own = self.check(key, spec, name, value, baseline, config, lengths, keep)
        found = [own]
        kl = drift_gated(self.thresholds, source)
        if kl is not None and self.baseline.has_drift and not source.worst_case:
            found.append(self.check(key, KL, f"{name}{DRIFT_LABEL}", kl, 0.0, config, lengths, keep))
        return found


def checks_of(dataset: Dataset, baseline: Any, baseline_sets: Sets, thresholds: Thresholds, tests: frozenset[str],
              within: Callable[[ItemKey], Any] | None = None) -> tuple[list[Check], list[ItemKey]]:
    """(the checks of the selected ``tests`` over ``dataset`` against ``baseline`` (its figures over the whole
    selection: ``baseline_sets``); the order their items are read in, each set's by ``within``: ``reading_order``)."""
    checks = Selection(dataset, baseline, baseline_sets, thresholds, tests).checks()
    order = reading_order({key for check in checks for key in check.items}, within)
    rank = {key: n for n, key in enumerate(order)}
    return [_in_order(check, rank) for check in checks], order


def _in_order(check: Check, rank: Mapping[ItemKey, int]) -> Check:
    """``check`` with its items (and their caps and baseline figures) in reading order."""
    chosen = sorted(range(len(check.items)), key=lambda n: rank[check.items[n]])
    return Check(check.key, check.spec, check.label, check.threshold, check.baseline, tuple(check.items[n] for n in chosen),
                 tuple(check.caps[n] for n in chosen), tuple(check.base[n] for n in chosen), check.drop)
