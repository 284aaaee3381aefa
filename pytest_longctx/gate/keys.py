"""The keys of the checks a gate can make (a row's is ``RowSource.key``; a rules cell's and an item's are made
here), the cells of a rules set, the metrics a threshold may set at each key, and the thresholds that apply to
a cell."""
from __future__ import annotations

from typing import Iterable, Mapping

from pytest_longctx.data.load import Dataset
from pytest_longctx.data.records import FAMILIES, PLACEMENTS, Kind, config_kind
from pytest_longctx.gate.specs import ACCURACY, BY_NAME, FOLLOW, ITEM, KL, RETAINED, CheckSpec
from pytest_longctx.gate.thresholds import Thresholds
from pytest_longctx.metrics.rows import RowSource, row_specs
from pytest_longctx.options.table import Metric


def cell_key(config: str, length: str, placement: str, family: str) -> str:
    return f"{config}-{length}-{placement}-{family}"


def item_key(config: str, length: str, item_id: str) -> str:
    """``facts-8k-<id>``; an id that already starts so (the builtin's ``facts-8k-00``) is its own key."""
    prefix = f"{config}-{length}-"
    return item_id if item_id.startswith(prefix) else prefix + item_id


def cell_metrics(thresholds: Thresholds, key: str, family: str, placement: str) -> dict[CheckSpec, float]:
    """Thresholds that apply to a cell, by check: retained in every family cell and follow in the
    system-prompt cell of all families by default, anything an override adds."""
    found = {
        RETAINED: thresholds.get(key, RETAINED.threshold, default=family != "all"),
        FOLLOW: thresholds.get(key, FOLLOW.threshold, default=family == "all" and placement == "system"),
    }
    return {spec: value for spec, value in found.items() if value is not None}


def cells(config: str, lengths: Iterable[str]) -> list[tuple[str, str, str, str]]:
    return [(config, length, placement, family) for length in lengths for placement in PLACEMENTS
            for family in ("all", *FAMILIES)]


ITEM_METRICS = frozenset({ITEM.threshold})
CELL_METRICS = frozenset({RETAINED.threshold, FOLLOW.threshold})  # by default retained in family cells, follow in system-all


def row_spec(source: RowSource) -> CheckSpec:
    """A headline row's own check: accuracy rows' accuracy, rules rows' their metric (follow, retained)."""
    return BY_NAME[source.metric] if source.is_rules else ACCURACY


def row_metrics(source: RowSource) -> frozenset[Metric]:
    """What a row's checks can bound: accuracy rows their drop, rules rows their own metric, and
    every row with a length its drift (``kl``: by default on facts and tool calls)."""
    own = row_spec(source).threshold
    return frozenset({own, KL.threshold} if source.length is not None else {own})


def check_keys(selection: Mapping[str, Mapping[str, Iterable[str]]]) -> dict[str, frozenset[Metric]]:
    """The key of every check a gate on ``selection`` (config -> length -> item ids) can make, thresholded
    or not (what a ``--threshold`` pattern may name), with the metrics a threshold may set there: its
    items, rules cells and headline rows."""
    found = {item_key(config, length, i): ITEM_METRICS
             for config, by_length in selection.items() for length, ids in by_length.items() for i in ids}
    found.update({cell_key(*cell): CELL_METRICS for config, by_length in selection.items() if config_kind(config) == Kind.RULES
                  for cell in cells(config, list(by_length))})
    found.update({source.key: row_metrics(source)
                  for _, source in row_specs({config: list(by_length) for config, by_length in selection.items()})})
    return found


def dataset_keys(dataset: Dataset) -> dict[str, frozenset[Metric]]:
    """The key of every check a gate on ``dataset`` can make, with its metrics (``check_keys``)."""
    return check_keys({config: {length: [item.id for item in items] for length, items in by_length.items()}
                       for config, by_length in dataset.configs.items()})
