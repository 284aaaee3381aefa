"""The headline rows (docs/metrics.md#headline-rows), named exactly as the benchmark's score.py names them."""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from pytest_longctx.data.lengths import length_tokens, sorted_lengths
from pytest_longctx.data.records import FAITHFULNESS, FAMILIES, PLACEMENTS

KEPT = {
    "rules_en": "Rules kept far back, worst case (1.00 = as the original)",
    "rules_cs": "Czech rules kept far back, worst case",
    "rules_de": "German rules kept far back, worst case",
}
LANGUAGE = {"rules_cs": "Czech", "rules_de": "German"}


def _at(length: str) -> str:
    return f"at {length} tokens"


def row_specs(selection: Mapping[str, Sequence[str]]) -> list[tuple[str, dict[str, Any]]]:
    """(row name, where it comes from) for a selection config -> lengths, in the
    benchmark's order; a worst-case row's source gains its cell once values are known."""
    specs: list[tuple[str, dict[str, Any]]] = []
    for config, label, metric in (("facts", "Facts recalled", "query_accuracy"), ("tool_calls", "Distant tool calls", "far_accuracy")):
        for length in sorted_lengths(list(selection.get(config, ()))):
            specs.append((f"{label} {_at(length)}", {"config": config, "length": length, "metric": metric}))
    for length in sorted_lengths(list(selection.get("rules_en", ()))):
        specs.append((f"Rules followed {_at(length)}",
                      {"config": "rules_en", "length": length, "placement": "system", "family": "all", "metric": "follow"}))
    for config, name in KEPT.items():
        if selection.get(config):
            specs.append((name, {"config": config, "metric": "retained", "worst_of": "length x placement x family"}))
    for config, language in LANGUAGE.items():
        if selection.get(config):
            longest = max(selection[config], key=length_tokens)
            specs.append((f"Rules in {language} followed {_at(longest)}",
                          {"config": config, "length": longest, "placement": "system", "family": "all", "metric": "follow"}))
    splits = sorted_lengths(list(selection.get(FAITHFULNESS, ())))
    for split in splits:
        named = f" ({split})" if len(splits) > 1 else ""
        source = {"config": FAITHFULNESS, "length": split, "metric": "recall"}
        specs.append((f"Facts recalled in agent sessions{named}", source))
        specs.append((f"Low-surprisal facts recalled in agent sessions{named}", {**source, "suite": "low_surprisal"}))
    return specs


def _worst_retained(by_length: Mapping[str, dict[str, Any]]) -> tuple[float | None, dict[str, Any]]:
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


def headline_rows(sets: Mapping[str, Mapping[str, dict[str, Any]]]) -> tuple[dict[str, float | None], dict[str, dict[str, Any]]]:
    """(row name -> value, row name -> where it comes from) of computed sets."""
    rows: dict[str, float | None] = {}
    where: dict[str, dict[str, Any]] = {}
    for name, source in row_specs({config: list(by_length) for config, by_length in sets.items()}):
        by_length = sets[source["config"]]
        if "worst_of" in source:
            rows[name], cell = _worst_retained(by_length)
            where[name] = {**source, **cell}
            continue
        metrics = by_length[source["length"]]
        if "suite" in source:  # a suite with no items has no value
            metrics = metrics["by_suite"].get(source["suite"], {})
        rows[name] = (
            metrics["cells"][source["placement"]][source["family"]][source["metric"]]
            if "placement" in source
            else metrics.get(source["metric"])
        )
        where[name] = source
    return rows, where
