"""Build the benchmark: every requested config at every requested length, written in
the Hugging Face layout with a data card."""
from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Callable, Sequence

from pytest_longctx.data.builtin.card import write_card
from pytest_longctx.data.builtin.facts import build_facts
from pytest_longctx.data.builtin.faithfulness import SPLIT, build_faithfulness
from pytest_longctx.data.builtin.fit import SegmentEncoder
from pytest_longctx.data.builtin.plan import DEFAULT_SEED, plan
from pytest_longctx.data.builtin.rules import build_rules
from pytest_longctx.data.builtin.tool_calls import build_tool_calls
from pytest_longctx.data.builtin.write import write_split
from pytest_longctx.data.records import ALL_CONFIGS, CONFIGS, FAITHFULNESS, RULES_CONFIGS
from pytest_longctx.errors import LongctxError


def _stderr(message: str) -> None:
    print(f"longctx: {message}", file=sys.stderr, flush=True)


def build(
    out: Path,
    lengths: Sequence[str],
    seed: int = DEFAULT_SEED,
    sets: Sequence[str] = CONFIGS,
    limit: int | None = None,
    progress: Callable[[str], None] = _stderr,
) -> list[Path]:
    """Write ``out/<config>/<length>-00000-of-00001.parquet`` for each config and
    length, and ``out/README.md``. ``limit`` caps the items (sessions, for rules). The
    faithfulness config is not split by length: it is written once, as ``train``."""
    unknown = [s for s in sets if s not in ALL_CONFIGS]
    if unknown:
        raise LongctxError(f"--sets: unknown config {', '.join(unknown)}; known: {', '.join(ALL_CONFIGS)}")
    encoder = SegmentEncoder()
    written = []
    for length in lengths if any(s in CONFIGS for s in sets) else ():
        counts = plan(length, limit)
        started = time.perf_counter()
        if "facts" in sets:
            written.append(write_split(out, "facts", length, build_facts(counts, seed, encoder)))
        if "tool_calls" in sets:
            written.append(write_split(out, "tool_calls", length, build_tool_calls(counts, seed, encoder)))
        langs = tuple(config.split("_", 1)[1] for config in RULES_CONFIGS if config in sets)
        if langs:
            for config, rows in build_rules(counts, seed, encoder, langs).items():
                written.append(write_split(out, config, length, rows))
        progress(f"built {length} ({', '.join(s for s in CONFIGS if s in sets)}) in {time.perf_counter() - started:.1f}s")
    if FAITHFULNESS in sets:
        written.append(write_split(out, FAITHFULNESS, SPLIT, build_faithfulness(seed, limit)))
        progress(f"built {FAITHFULNESS} ({SPLIT})")
    write_card(out, seed)
    return written
