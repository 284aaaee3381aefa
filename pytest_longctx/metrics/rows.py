"""The headline rows (SPEC §1.6), named exactly as the benchmark's score.py names them."""
from __future__ import annotations

from typing import Any

from ..data.load import length_tokens, sorted_lengths
from ..data.records import FAMILIES, PLACEMENTS

KEPT_EN = "Rules kept far back, worst case (1.00 = as the original)"
LANGUAGE = {"rules_cs": "Czech", "rules_de": "German"}


def _at(length: str) -> str:
    return f"at {length} tokens"


def _worst_retained(by_length: dict[str, dict[str, Any]]) -> tuple[float | None, dict[str, Any]]:
    """Lowest retained over length x placement x family cells with a counted target."""
    worst: tuple[float | None, dict[str, Any]] = (None, {})
    for length in sorted_lengths(list(by_length)):
        cells = by_length[length]["cells"]
        for placement in PLACEMENTS:
            for family in FAMILIES:
                value = cells[placement][family]["retained"]
                if value is not None and (worst[0] is None or value < worst[0]):
                    worst = (value, {"length": length, "placement": placement, "family": family})
    return worst


def headline_rows(sets: dict[str, dict[str, dict[str, Any]]]) -> tuple[dict[str, float | None], dict[str, dict[str, Any]]]:
    """(row name -> value, row name -> where it comes from), in the benchmark's order."""
    rows: dict[str, float | None] = {}
    where: dict[str, dict[str, Any]] = {}

    def add(name: str, value: float | None, **source: Any) -> None:
        rows[name] = value
        where[name] = source

    for config, label, metric in (("facts", "Facts recalled", "query_accuracy"), ("tool_calls", "Distant tool calls", "far_accuracy")):
        for length in sorted_lengths(list(sets.get(config, {}))):
            add(f"{label} {_at(length)}", sets[config][length][metric], config=config, length=length, metric=metric)
    for length in sorted_lengths(list(sets.get("rules_en", {}))):
        value = sets["rules_en"][length]["cells"]["system"]["all"]["follow"]
        add(f"Rules followed {_at(length)}", value, config="rules_en", length=length, placement="system", family="all", metric="follow")
    for config, name in (("rules_en", KEPT_EN), ("rules_cs", "Czech rules kept far back, worst case"),
                         ("rules_de", "German rules kept far back, worst case")):
        if config in sets:
            value, cell = _worst_retained(sets[config])
            add(name, value, config=config, metric="retained", worst_of="length x placement x family", **cell)
    for config, language in LANGUAGE.items():
        if config in sets:
            longest = max(sets[config], key=length_tokens)
            value = sets[config][longest]["cells"]["system"]["all"]["follow"]
            add(f"Rules in {language} followed {_at(longest)}", value, config=config, length=longest,
                placement="system", family="all", metric="follow")
    return rows, where
