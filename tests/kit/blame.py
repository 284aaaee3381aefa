"""Blame run on two transformers models already in memory, as the tests build them."""
from __future__ import annotations

from typing import Any

from pytest_longctx.backends.hybrids.transformers import StateDictPair
from pytest_longctx.data.load import Dataset
from pytest_longctx.gate.blame import BlameReport, blame_pair
from pytest_longctx.scoring.scores_file import ScoresFile


def blame(original: Any, candidate: Any, tokenizer: Any, dataset: Dataset, baseline: ScoresFile | None, *,
          names: tuple[str, str] = ("original", "candidate"), **options: Any) -> BlameReport:
    """Blame the parts of ``candidate`` (a transformers model) for its failing rows against
    ``original``'s ``baseline``; ``blame_pair``'s options. Both models are changed in place
    while hybrids are scored, and are as loaded again on return."""
    return blame_pair(StateDictPair(original, candidate, tokenizer, names), dataset, baseline, **options)


def row_figures(model: Any, dataset: Dataset, baseline: ScoresFile) -> dict[str, Any]:
    """The rows' far drift and verdicts of ``model`` itself (a transformers model, no hybrid), scored and judged as
    the gate does."""
    from pytest_longctx.backends.hf import TransformersBackend
    from pytest_longctx.gate.blame.records import row_states
    from pytest_longctx.gate.evaluation import evaluate
    from pytest_longctx.gate.thresholds import Thresholds
    from pytest_longctx.scoring.pipeline import compute_sets, score_items

    scores = score_items(TransformersBackend(model), None, dataset, "ids", progress=False, reference=baseline)
    thresholds = Thresholds()
    evaluation = evaluate(compute_sets(dataset, scores, baseline, thresholds.min_effect),
                          compute_sets(dataset, baseline, None, thresholds.min_effect), thresholds)
    return row_states(evaluation, list(evaluation.drift))
