"""Short-context control reads (docs/metrics.md#control-reads): reads whose whole context is
the start of the item's text, so drift there is general damage, not long-context damage."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from pytest_longctx.data.records import FactItem, ToolItem
from pytest_longctx.scoring.reads import ItemReads, Read, TargetReads

CONTROL_TOKENS = 512  # control reads see only the item's first this many tokens
CONTROL_READS = 16  # per facts and tool_calls item


def control_reads(ids: np.ndarray) -> tuple[TargetReads, ...]:
    """Reads whose whole context is the first ``CONTROL_TOKENS`` tokens of the item's text:
    ``CONTROL_READS`` evenly spaced positions, chosen from the item alone (its length), so
    a candidate and its baseline read the same ones. Drift there is general damage."""
    last = min(CONTROL_TOKENS, len(ids) - 1)  # a read at pos sees tokens [0, pos)
    if last < 1:
        return ()
    positions = sorted({max(1, round(last * (n + 1) / CONTROL_READS)) for n in range(CONTROL_READS)})
    return tuple(TargetReads((Read(0, p, int(ids[p])),)) for p in positions)


def with_controls(plan: ItemReads) -> ItemReads:
    """Facts and tool_calls items get their control reads (docs/metrics.md#control-reads)."""
    if isinstance(plan.item, (FactItem, ToolItem)):
        return replace(plan, controls=control_reads(plan.sequences[0]))
    return plan
