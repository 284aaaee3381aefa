"""Inputs of the report tests: a reference model and a degraded copy scored on the
hand-built 2k items, written as the files users hand to ``longctx compare``."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kit.models import degraded_model


@dataclass
class Pair:
    """A reference and its degraded copy scored, and the files written of them."""

    baseline: Path  # the reference's baseline (raw scores, rows, sets)
    results: Path  # the degraded model's results JSON (longctx score --out)
    scores: Path  # the degraded model's scores file (--save_scores)
    reference: object  # scoring.pipeline.Results of each side
    degraded: object


def score_pair(model: Any, tokenizer: Any, data_dir: Path, folder: Path) -> Pair:
    """``model`` (the reference) and its degraded copy (kit.models.degraded_model, as the plugin tests degrade:
    their forward passes are cached already) scored on ``data_dir``'s 2k items, written into ``folder``."""
    from pytest_longctx.backends.hf import TransformersBackend
    from pytest_longctx.data.load import load_dataset
    from pytest_longctx.reports.format import write_json
    from pytest_longctx.scoring.cache import ScoreCache
    from pytest_longctx.scoring.pipeline import score_sets

    dataset = load_dataset(str(data_dir), lengths=["2k"])

    def score(backend, reference=None):
        return score_sets(backend, tokenizer, dataset, reference=reference, progress=False,
                          cache=ScoreCache.for_backend(backend))

    reference = score(TransformersBackend(model, tokenizer, name="reference"))
    degraded = score(TransformersBackend(degraded_model(model), tokenizer, name="degraded"), reference.scores)
    pair = Pair(folder / "reference.json.gz", folder / "degraded.json", folder / "degraded.json.gz", reference, degraded)
    reference.as_baseline().save(pair.baseline)
    write_json(pair.results, degraded.to_json())
    degraded.scores.save(pair.scores)
    return pair
