"""The one driver of sequential reading (``read_unit``): a unit's checks and reading order made from its selection
and the baseline, then its items read a group at a time until every selected test is settled. The gate, ``longctx
score`` and the benchmark's replay all read through it; what reads a batch of items is theirs to give (``Read``)."""
from __future__ import annotations

from typing import Any, Callable, Collection, Mapping, Protocol, Sequence

from pytest_longctx.data.load import Dataset
from pytest_longctx.data.records import ItemKey
from pytest_longctx.gate.sequential.checks import checks_of
from pytest_longctx.gate.sequential.reading import Reading
from pytest_longctx.gate.thresholds import Thresholds
from pytest_longctx.metrics.item_figures import ItemFigures, Sets
from pytest_longctx.options.table import Sequential

Read = Callable[[Sequence[ItemKey]], Mapping[ItemKey, "ItemFigures | None"]]  # items read together -> their figures


class Grouping(Protocol):
    """Which items are read together and what reading them forwards: the engine's ``scoring.groups.Groups``, or a
    shard's record of them (``gate.shards.UnitPlan``), which a merge replays a reading from."""

    @property
    def group(self) -> Mapping[ItemKey, int]: ...

    def cost(self, keys: Sequence[ItemKey], first: bool) -> int: ...

    def whole(self, keys: Sequence[ItemKey]) -> int: ...


def read_unit(mode: Sequential, thresholds: Thresholds, dataset: Dataset, baseline: Any, baseline_sets: Sets,
              tests: frozenset[str], groups: Grouping, read: Read, within: Callable[[ItemKey], Any] | None = None,
              only: Collection[ItemKey] | None = None) -> Reading:
    """Read ``dataset`` (one unit's selection) against ``baseline`` (its figures over the whole selection:
    ``baseline_sets``) until the checks of the selected ``tests`` are settled under ``mode``: ``read`` reads the
    items ``groups`` puts together and gives their figures. ``within``: the order within each set (default: by
    each item's digest, ``reading_order``); ``only``: a shard's part, the items it may read (gate/shards.py)."""
    checks, order = checks_of(dataset, baseline, baseline_sets, thresholds, tests, within)
    everything = [(c, n, item.id) for c, n, item in dataset.items()]
    reading = Reading(mode, thresholds.alpha, checks, order, groups.group, groups.cost, groups.whole(everything),
                      frozenset(only) if only is not None else None)
    while batch := reading.next_batch():
        reading.take(batch, reading.figures(read(batch)))
    return reading
