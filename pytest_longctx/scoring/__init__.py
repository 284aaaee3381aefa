"""Scoring: items to token reads, the forward passes they need, and per-target records.

``score_sets`` (the whole pipeline from items to headline rows) is the public entry point."""
from pytest_longctx.scoring.pipeline import score_sets

__all__ = ["score_sets"]
