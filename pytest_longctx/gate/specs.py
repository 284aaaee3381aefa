"""The checks the model gate makes, one spec each (``CheckSpec``): what a check is called, what it reads of an
item's figures, which way its value must go, what sets its threshold (and so its option and default), the least
value it can take, how its value can be bounded before every item is read, and how the reports name it.
Thresholds, the verdicts and their intervals, sequential reading's bounds and tests, the reports and
docs/metrics.md's table of checks all read these.

Adding a check (docs/architecture.md#adding-a-check): its figure on ``ItemFigures`` (metrics/item_figures.py, a
``Share`` of one item), a ``Metric`` for its threshold with its option (options/table.py), and a spec here, named
in ``SPECS`` and in the places its rows or cells take it (gate/keys.py)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from pytest_longctx.data.records import Name
from pytest_longctx.metrics.item_figures import ItemFigures, Share
from pytest_longctx.options.table import THRESHOLD_FIELDS, Metric


class Shape(Name):
    """What a check's value over items is, and so how the items not read yet can bound it."""

    SHARE = "share"  # hits of the targets counted: each unread item adds between none and all of its targets
    MEAN = "mean"  # a mean over reads, each at least about 0 (KL_K) and with no upper limit
    RATIO = "ratio"  # a ratio of signed sums (rule effect kept): no bound before every item is read
    ITEM = "item"  # one item's own figure: known once it is read


@dataclass(frozen=True)
class CheckSpec:
    """One check the gate can make (see the module docstring)."""

    name: str  # what verdicts, the results files and the reports call it
    threshold: Metric  # what sets its threshold (--longctx-threshold PATTERN:METRIC=VALUE, and its own option)
    shape: Shape
    at_most: bool  # the value must stay at or below the threshold (a loss, drift), else reach it
    relative: bool  # the threshold is the baseline's value less the allowed drop
    floor: float | None  # the least value the check can take (a share's 0), where it has one
    words: str  # what the reports call its value
    figure: Callable[[ItemFigures], Share | None]  # what one item counts in it
    hits: Callable[[ItemFigures], tuple[bool | None, ...] | None] | None = None  # per target hits McNemar pairs
    against_itself: bool = False  # the baseline's value is its own against itself: 0 (drift)

    @property
    def default(self) -> float:
        """The threshold where no override names the check: its option's default."""
        return float(THRESHOLD_FIELDS[self.threshold.value].default)

    def baseline_share(self, model: Share, baseline: ItemFigures | None) -> Share | None:
        """The baseline's share of one item, paired with the model's: against itself (drift) nothing over the same
        reads, else its own figure."""
        if self.against_itself:
            return Share(0.0, model.whole)
        return self.figure(baseline) if baseline is not None else None


ACCURACY = CheckSpec("accuracy", Metric.DROP, Shape.SHARE, at_most=False, relative=True, floor=0.0,
                     words="accuracy (facts recalled, far tool calls right, agent-session facts recalled)",
                     figure=lambda f: f.accuracy, hits=lambda f: f.target_hits)
FOLLOW = CheckSpec(Metric.FOLLOW.value, Metric.FOLLOW, Shape.SHARE, at_most=False, relative=False, floor=0.0,
                   words="share of counted rule targets followed", figure=lambda f: f.follow)
RETAINED = CheckSpec(Metric.RETAINED.value, Metric.RETAINED, Shape.RATIO, at_most=False, relative=False, floor=None,
                     words="rule effect retained (1.00 = as the baseline)", figure=lambda f: f.retained)
KL = CheckSpec(Metric.KL.value, Metric.KL, Shape.MEAN, at_most=True, relative=False, floor=None,
               words="drift: mean KL_K at far reads, nats", figure=lambda f: f.far_kl, against_itself=True)
ITEM = CheckSpec(Metric.ITEM_DROP.value, Metric.ITEM_DROP, Shape.ITEM, at_most=True, relative=False, floor=None,
                 words="one item's mean loss against the baseline, nats",
                 figure=lambda f: Share(f.loss, 1.0) if f.loss is not None else None)

SPECS = (ACCURACY, FOLLOW, RETAINED, KL, ITEM)
BY_NAME = {spec.name: spec for spec in SPECS}


def checks_table() -> str:
    """docs/metrics.md's table of checks (between ``<!-- checks -->`` and ``<!-- /checks -->``)."""
    lines = ["| check | its value | must be | threshold | default |", "|---|---|---|---|---|"]
    for spec in SPECS:
        option = THRESHOLD_FIELDS[spec.threshold.value]
        needs = "<= threshold" if spec.at_most else (">= baseline - threshold" if spec.relative else ">= threshold")
        lines.append(f"| `{spec.name}` | {spec.words} | {needs} | `{option.plugin_flag}`, `{spec.threshold}` | {spec.default:g} |")
    return "\n".join(lines) + "\n"
