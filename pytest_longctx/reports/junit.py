"""The gate's results in the junit XML: ``<properties>`` of the test suite, control
characters written out as in the terminal (XML 1.0 forbids most of them). A property's name holds
no space, comma or parenthesis: a row is named by its key (``facts-2k``, as ``-k`` and
``--longctx-threshold`` name it), not by its label (docs/reports.md#junit)."""
from __future__ import annotations

from typing import Any

from pytest_longctx.gate.specs import KL
from pytest_longctx.numbers import number
from pytest_longctx.reports.format import visible
from pytest_longctx.scoring.identity import Judged


def suite_properties(run: Any, comparison: Any) -> list[tuple[str, str]]:
    """junit ``<properties>`` of the test suite: the outcome, every row, the model, the baseline, the thresholds."""
    evaluation, name = comparison.evaluation, str(run.options.model)
    judged = Judged.from_meta(run.scores.meta, name)
    baseline = Judged.from_meta(run.baseline.meta) if run.baseline is not None else None
    properties = [("longctx.outcome", comparison.verdict),
                  ("longctx.not_judged", visible(comparison.not_judged or "")),
                  ("longctx.model", visible(name)),
                  ("longctx.candidate", visible(judged.describe()) if run.scores.meta else ""),
                  ("longctx.quantization", visible(judged.quantization)),
                  ("longctx.kv_cache", visible(judged.kv_cache)),
                  ("longctx.kv_press", visible(judged.press)),
                  ("longctx.baseline", visible(str(run.options.baseline)) if run.baseline_path else ""),  # as given
                  ("longctx.baseline_model", visible(baseline.describe()) if baseline is not None else ""),
                  ("longctx.baseline_compressed", visible("; ".join(baseline.compressions())) if baseline is not None else ""),
                  ("longctx.mode", run.scores.mode),
                  ("longctx.tokens_forwarded", str(run.reader.forwarded))]
    properties += [(f"longctx.threshold.{name}", visible(value)) for name, value in run.thresholds.describe().items()]
    for verdict in evaluation.verdicts:
        key = verdict.key
        if verdict.label in evaluation.rows:
            properties += [(f"longctx.row.{key}", number(verdict.model, 6)),
                           (f"longctx.baseline_row.{key}", number(verdict.baseline, 6)),
                           (f"longctx.threshold_row.{key}", number(verdict.threshold, 6)),
                           (f"longctx.verdict.{key}", evaluation.row_word(verdict.label))]
            if verdict.interval is not None:
                properties += [(f"longctx.interval_low.{key}", number(verdict.interval[0], 6)),
                               (f"longctx.interval_high.{key}", number(verdict.interval[1], 6)),
                               (f"longctx.items.{key}", str(verdict.items))]
            if verdict.p is not None:
                properties += [(f"longctx.mcnemar_lost.{key}", str(verdict.lost)),
                               (f"longctx.mcnemar_gained.{key}", str(verdict.gained)),
                               (f"longctx.p.{key}", number(verdict.p, 6))]
        elif verdict.metric == KL.name:
            properties += [(f"longctx.verdict.{key}.kl", verdict.word),
                           (f"longctx.threshold_row.{key}.kl", number(verdict.threshold, 6))]
    for verdict in evaluation.verdicts:
        if verdict.settling is not None:
            properties.append((f"longctx.settled.{verdict.key}.{verdict.metric}", visible(verdict.settling.text())))
    for name, found in evaluation.drift.items():
        key = evaluation.row_sources[name].key
        properties += [(f"longctx.drift_{group}_kl.{key}", number(getattr(found, group).kl, 6)) for group in ("far", "near", "control")]
        properties += [(f"longctx.drift_far_same_top1.{key}", number(found.far.same_top1, 6)),
                       (f"longctx.drift_far_dlogp.{key}", number(found.far.dlogp, 6)),
                       (f"longctx.drift_excess.{key}", number(found.difference, 6)),
                       (f"longctx.damage.{key}", evaluation.damage_kind(name) or "")]
        if found.interval is not None:
            properties += [(f"longctx.drift_excess_low.{key}", number(found.interval[0], 6)),
                           (f"longctx.drift_excess_high.{key}", number(found.interval[1], 6))]
    return properties
