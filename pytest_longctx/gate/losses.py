"""What a model lost against its baseline, item by item and target by target, with the
text around each target when the items are at hand.

A target's loss, in nats: facts and tool calls, the log-probability lost (the mean over
the target's tokens); rules, the rule effect lost, ``eff_ref - eff`` in the direction
of the reference's effect, over counted targets only (``|eff_ref| >= 1`` nat). An
item's loss is ``item_loss`` (metrics/item_figures.py), the figure the gate judges an item by, so the numbers here
are the ones it judged; a failing row's message names the items that lost the most
(``accuracy_losers``, ``rules_losers``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from pytest_longctx.data.load import Dataset
from pytest_longctx.data.records import FactItem, Item, Kind, RuleItem, ToolItem, config_kind
from pytest_longctx.gate.keys import item_key
from pytest_longctx.gate.specs import ITEM, RETAINED
from pytest_longctx.gate.thresholds import Thresholds
from pytest_longctx.gate.verdict import verdict_word
from pytest_longctx.metrics.item_figures import Sets, item_loss
from pytest_longctx.metrics.raw import Record, is_scored, mean
from pytest_longctx.metrics.rows import RowSource
from pytest_longctx.metrics.rules import COUNT_NATS, FOLLOW_SHARE, effect_loss
from pytest_longctx.numbers import meets
from pytest_longctx.scoring.scores_file import ScoresFile

BEFORE_CHARS = 160
AFTER_CHARS = 60
FAR_CHARS = 200


OWN_METRIC = {Kind.FACTS: "query accuracy", Kind.FAITHFULNESS: "query accuracy", Kind.TOOL_CALLS: "far accuracy",
              Kind.RULES: RETAINED.name}  # what each kind's item is judged by in the reports (ItemFigures.own_value)


def accuracy_losers(source: RowSource, model_sets: Sets, baseline_sets: Sets, top: int = 3) -> list[str]:
    """Items whose accuracy fell the most (facts: queries recalled; tool calls: far targets)."""
    config, length = source.config, source.length
    mine, theirs = model_sets[config][length]["per_item"], baseline_sets[config][length]["per_item"]
    drops = []
    for item_id, figures in mine.items():
        a, b = figures.own_value, theirs.get(item_id, figures).own_value
        if a is not None and b is not None and a < b:
            drops.append((b - a, item_id, b, a))
    drops.sort(key=lambda d: (-d[0], d[1]))
    return [f"{item_id} {b:.2f} -> {a:.2f}" for _, item_id, b, a in drops[:top]]


def rules_losers(model_sets: Sets, config: str, length: str, placement: str, family: str, top: int = 3) -> list[str]:
    """Items of a cell with the lowest retained effect."""
    per_item = model_sets[config][length]["per_item"]
    counts = RowSource(config, RETAINED.name, length, placement, family).counts
    found = [(value, item_id) for item_id, figures in per_item.items()
             if (value := figures.own_value) is not None and counts(figures)]
    found.sort()
    return [f"{item_id} {RETAINED.name} {value:.2f}" for value, item_id in found[:top] if value < 1.0]


@dataclass(frozen=True)
class Snippet:
    """The target in its text, and what it needs from far back."""

    before: str
    target: str
    after: str
    far: str


@dataclass(frozen=True)
class TargetLoss:
    """What one target lost against the baseline, in nats, with the text around it."""

    config: str
    length: str
    item_id: str
    index: int
    loss: float
    baseline: float  # facts/tool calls: mean log-probability of its tokens; rules: eff_ref
    model: float  # the same for the model; rules: eff
    hit_baseline: bool  # facts: recalled; tool calls: top-1 right; rules: followed (the reference always is)
    hit_model: bool
    distance_tokens: int | None = None
    snippet: Snippet | None = None

    @property
    def where(self) -> str:
        return f"{self.config}/{self.length}/{self.item_id}#{self.index}"

    @property
    def turned_miss(self) -> bool:
        return self.hit_baseline and not self.hit_model


@dataclass(frozen=True)
class ItemLoss:
    """What one item lost against the baseline: its own metric on both sides and its worst targets."""

    config: str
    length: str
    item_id: str
    metric: str  # the item's own headline metric
    baseline: float | None
    model: float | None
    loss: float | None  # the gate's item_drop, nats; None without per-target scores
    threshold: float

    @property
    def key(self) -> str:
        return item_key(self.config, self.length, self.item_id)

    @property
    def passed(self) -> bool:
        return self.loss is None or meets(self.loss, self.threshold, at_most=True)

    @property
    def fall(self) -> float:
        """How far its own metric fell below the baseline's (0 where it did not, or either is unknown)."""
        return max(0.0, self.baseline - self.model) if self.baseline is not None and self.model is not None else 0.0

    @property
    def verdict(self) -> str:
        return verdict_word(None if self.loss is None else self.passed)


def target_loss(config: str, mine: Record, theirs: Record,
                min_effect: float = COUNT_NATS) -> tuple[float, float, float, bool, bool] | None:
    """(loss, baseline, model, hit under the baseline, hit under the model) of one target
    scored on both sides, or None (not scored, or a rules target the reference ignores)."""
    if not (is_scored(mine) and is_scored(theirs)):
        return None
    if config_kind(config) == Kind.RULES:
        counted = effect_loss(mine, theirs, min_effect)
        if counted is None:
            return None
        loss, eff_ref, eff = counted
        return loss, eff_ref, eff, True, eff / eff_ref >= FOLLOW_SHARE
    model, baseline = mean(mine["logprobs"]), mean(theirs["logprobs"])
    assert model is not None and baseline is not None  # a scored target has at least one token
    return baseline - model, baseline, model, all(theirs["hits"]), all(mine["hits"])


Spanned = Union[FactItem, ToolItem, RuleItem]  # items whose targets are spans of a stored text


def spanned(item: Item | None) -> Spanned | None:
    return item if isinstance(item, (FactItem, ToolItem, RuleItem)) else None


def snippet(item: Spanned, index: int) -> Snippet:
    """The text around target ``index`` of ``item`` and what it needs from far back."""
    if isinstance(item, FactItem):
        fact = item.targets[index]
        text, span, far = item.text, fact.answer_char, f"fact: {fact.fact}"
    elif isinstance(item, ToolItem):
        call = item.targets[index]
        text, span = item.text, call.char
        definition = next((d for d in item.definitions if d.id == call.definition_id), None)
        far = f"{definition.kind} definition: {definition.text}" if definition else f"definition {call.definition_id}"
    else:
        rule = item.targets[index]
        text, span = item.text_with_rule, rule.char_with_rule
        far = (f"rule ({item.placement} prompt, {item.family}): {item.rule} "
               f"-- expects {rule.expected_text!r} where the session has {rule.original_text!r}")
    start, end = max(0, span[0] - BEFORE_CHARS), min(len(text), span[1] + AFTER_CHARS)
    return Snippet(before=("…" if start else "") + text[start:span[0]], target=text[span[0]:span[1]],
                   after=text[span[1]:end] + ("…" if end < len(text) else ""), far=_shorten(far, FAR_CHARS))


def _shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def losses(model: ScoresFile | None, baseline: ScoresFile, sets: dict, baseline_sets: dict, thresholds: Thresholds,
           dataset: Dataset | None) -> tuple[list[ItemLoss], list[TargetLoss]]:
    """Every evaluated item (worst first) and every target scored on both sides (worst
    first). Without the model's raw scores only the items' metrics are known."""
    items = {(c, n, item.id): item for c, n, item in dataset.items()} if dataset is not None else {}
    found_items: list[ItemLoss] = []
    found_targets: list[TargetLoss] = []
    for config, by_length in sets.items():
        for length, metrics in by_length.items():
            kind = config_kind(config)
            for item_id, figures in metrics["per_item"].items():
                mine = model.scores[config][length][item_id].targets if model is not None else None
                theirs = baseline.scores[config][length][item_id].targets
                base_value = baseline_sets[config][length]["per_item"][item_id].own_value
                limit = thresholds.get(item_key(config, length, item_id), ITEM.threshold)
                assert limit is not None  # item_drop applies to every item by default
                found_items.append(ItemLoss(config, length, item_id, OWN_METRIC[kind], base_value, figures.own_value,
                                            item_loss(kind, mine, theirs, thresholds.min_effect) if mine is not None else None,
                                            limit))
                if mine is None:
                    continue
                record = spanned(items.get((config, length, item_id)))
                for index, (a, b) in enumerate(zip(mine, theirs)):
                    found = target_loss(config, a, b, thresholds.min_effect)
                    if found is not None:
                        found_targets.append(TargetLoss(
                            config, length, item_id, index, *found,
                            distance_tokens=record.targets[index].distance_tokens if record else None,
                            snippet=snippet(record, index) if record else None))
    # the items whose own metric fell the most first, as a failing row's message names them; then by what they lost in nats
    found_items.sort(key=lambda i: (-i.fall, i.loss is None, -(i.loss or 0.0), i.key))
    found_targets.sort(key=lambda t: (-t.loss, t.where))
    return found_items, found_targets
