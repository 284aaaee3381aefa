"""The headline rows (docs/metrics.md#headline-rows), named exactly as the benchmark's score.py names them,
and where each comes from (``RowSource``)."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping, Sequence

from pytest_longctx.data.lengths import length_tokens, sorted_lengths
from pytest_longctx.data.records import FAITHFULNESS, FAMILIES, PLACEMENTS, FaithfulnessItem, Item, Kind, RuleItem, config_kind
from pytest_longctx.metrics.item_figures import ItemFigures
from pytest_longctx.options.table import Metric

KEPT = {
    "rules_en": "Rules kept far back, worst case (1.00 = as the original)",
    "rules_cs": "Czech rules kept far back, worst case",
    "rules_de": "German rules kept far back, worst case",
}
LANGUAGE = {"rules_cs": "Czech", "rules_de": "German"}
WORST_OF = "length x placement x family"  # what a worst-case row is the worst of


@dataclass(frozen=True)
class RowSource:
    """Where a headline row comes from: its config and metric, and the length, rules cell or
    suite it reads. A worst-case row (rules retained) reads the worst cell over every length,
    placement and family: its cell is known once values are, and stays unknown (no length)
    when no cell has a counted target."""

    config: str
    metric: str
    length: str | None = None
    placement: str | None = None
    family: str | None = None
    suite: str | None = None  # agent sessions: the items of this suite alone
    worst_case: bool = False

    @property
    def is_rules(self) -> bool:
        """A rules row: it reads a cell of placement x family (a worst case: once known)."""
        return config_kind(self.config) == Kind.RULES

    @property
    def cell(self) -> tuple[str, str, str] | None:
        """(length, placement, family) of the rules cell it reads; None for any other row, and
        for a worst case with no counted cell."""
        if self.length is None or self.placement is None or self.family is None:
            return None
        return self.length, self.placement, self.family

    @property
    def key(self) -> str:
        """The key its checks go by (what ``--longctx-threshold`` patterns match)."""
        if not self.is_rules:
            return f"{self.config}-{self.length}" + (f"-{self.suite}" if self.suite is not None else "")
        if self.worst_case:
            return f"{self.config}-retained-worst"
        return f"{self.config}-{self.metric}-{self.length}"

    def covers(self, placement: str | None, family: str | None, suite: str | None) -> bool:
        """Whether an item of the row's set, with these fields, counts in the row: a rules row's items are
        those of its cell (its placement; its family, or any under ``all``), an agent-session row's those
        of its suite; any other row counts every item of its set."""
        if self.is_rules:
            return placement == self.placement and self.family in ("all", family)
        return self.suite is None or suite == self.suite

    def covers_item(self, item: Item) -> bool:
        """Whether an item of the row's set counts in the row (``covers``, from the item's own fields)."""
        if isinstance(item, RuleItem):
            return self.covers(item.placement, item.family, None)
        return self.covers(None, None, item.suite if isinstance(item, FaithfulnessItem) else None)

    def counts(self, figures: ItemFigures) -> bool:
        """Whether a scored item of the row's set counts in the row (``covers``, from its figures' labels)."""
        return self.covers(figures.placement, figures.family, figures.suite)

    def to_json(self) -> dict[str, Any]:
        """As the results JSON writes it (``row_sources``): the fields it has, a worst case's
        ``worst_of`` and its cell where known."""
        fields = ({"config": self.config, "metric": self.metric, "worst_of": WORST_OF, "length": self.length,
                   "placement": self.placement, "family": self.family} if self.worst_case else
                  {"config": self.config, "length": self.length, "placement": self.placement, "family": self.family,
                   "metric": self.metric, "suite": self.suite})
        return {name: value for name, value in fields.items() if value is not None}


def _at(length: str) -> str:
    return f"at {length} tokens"


def row_specs(selection: Mapping[str, Sequence[str]]) -> list[tuple[str, RowSource]]:
    """(row name, where it comes from) for a selection config -> lengths, in the
    benchmark's order; a worst-case row's cell is known once values are (``headline``)."""
    specs: list[tuple[str, RowSource]] = []
    for config, label, metric in (("facts", "Facts recalled", "query_accuracy"), ("tool_calls", "Distant tool calls", "far_accuracy")):
        for length in sorted_lengths(list(selection.get(config, ()))):
            specs.append((f"{label} {_at(length)}", RowSource(config, metric, length)))
    for length in sorted_lengths(list(selection.get("rules_en", ()))):
        specs.append((f"Rules followed {_at(length)}", RowSource("rules_en", Metric.FOLLOW.value, length, "system", "all")))
    for config, name in KEPT.items():
        if selection.get(config):
            specs.append((name, RowSource(config, Metric.RETAINED.value, worst_case=True)))
    for config, language in LANGUAGE.items():
        if selection.get(config):
            longest = max(selection[config], key=length_tokens)
            specs.append((f"Rules in {language} followed {_at(longest)}", RowSource(config, Metric.FOLLOW.value, longest, "system", "all")))
    splits = sorted_lengths(list(selection.get(FAITHFULNESS, ())))
    for split in splits:
        named = f" ({split})" if len(splits) > 1 else ""
        source = RowSource(FAITHFULNESS, "recall", split)
        specs.append((f"Facts recalled in agent sessions{named}", source))
        specs.append((f"Low-surprisal facts recalled in agent sessions{named}", replace(source, suite="low_surprisal")))
    return specs


def _worst_retained(source: RowSource, by_length: Mapping[str, dict[str, Any]]) -> tuple[float | None, RowSource]:
    """Lowest retained over length x placement x family cells with a counted target, and
    the source with that cell."""
    worst: tuple[float | None, RowSource] = (None, source)
    for length in sorted_lengths(list(by_length)):
        cells = by_length[length]["cells"]
        for placement in PLACEMENTS:
            for family in FAMILIES:
                value = cells[placement][family][Metric.RETAINED.value]
                if value is not None and (worst[0] is None or value < worst[0]):
                    worst = (value, replace(source, length=length, placement=placement, family=family))
    return worst


def _value(source: RowSource, by_length: Mapping[str, dict[str, Any]]) -> float | None:
    metrics = by_length[source.length]
    if source.suite is not None:  # a suite with no items has no value
        metrics = metrics["by_suite"].get(source.suite, {})
    if source.cell is not None:
        return metrics["cells"][source.placement][source.family][source.metric]
    return metrics.get(source.metric)


def headline(sets: Mapping[str, Mapping[str, dict[str, Any]]]) -> tuple[dict[str, float | None], dict[str, RowSource]]:
    """(row name -> value, row name -> where it comes from) of computed sets."""
    rows: dict[str, float | None] = {}
    where: dict[str, RowSource] = {}
    for name, source in row_specs({config: list(by_length) for config, by_length in sets.items()}):
        by_length = sets[source.config]
        if source.worst_case:
            rows[name], where[name] = _worst_retained(source, by_length)
        else:
            rows[name], where[name] = _value(source, by_length), source
    return rows, where

