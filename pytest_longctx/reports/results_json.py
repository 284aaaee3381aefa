"""The results JSON of a gate run (``--longctx-out``)."""
from __future__ import annotations

from dataclasses import asdict
from typing import Any

from pytest_longctx.gate.comparison import Comparison
from pytest_longctx.gate.model_run import GateRun
from pytest_longctx.gate.sequential.reading import totals
from pytest_longctx.metrics.item_figures import sets_json


def results_json(run: GateRun, comparison: Comparison) -> dict[str, Any]:
    """The CLI's results JSON, plus the baseline's rows, the gate's verdicts and its outcome (PASS only where every
    selected check was judged and passed; gate/outcome.py)."""
    evaluation = comparison.evaluation
    return {
        "outcome": comparison.verdict,
        "not_judged": comparison.not_judged,
        "rows": evaluation.rows,
        "sets": sets_json(evaluation.sets),
        "reference": str(run.options.baseline) if run.baseline is not None else None,  # as the command gave it
        "mode": run.scores.mode,
        "meta": {**run.scores.meta, "min_effect": run.thresholds.min_effect},
        "row_sources": {name: source.to_json() for name, source in evaluation.row_sources.items()},
        "baseline_rows": evaluation.baseline_rows,
        "verdicts": evaluation.verdicts_json(),
        "drift": {name: {**asdict(found), "kind": evaluation.damage_kind(name)} for name, found in evaluation.drift.items()},
        "scores": run.scores.to_json()["scores"],  # per-target raw scores: what `longctx compare` reads
        # the tokens the model ran over (after prefix sharing; the score cache's answers not), of what reading every
        # selected item at once forwards without the cache
        "tokens_forwarded": run.reader.forwarded, "tokens_whole": run.reader.whole,
        # sequential reading's stopping record per unit (gate/sequential/reading.py's replay does it again), or null
        "sequential": ({"totals": found.to_json(), "units": {unit: r.to_json() for unit, r in run.readings.items()}}
                       if (found := totals(run.readings.values())) is not None else None),
    }
