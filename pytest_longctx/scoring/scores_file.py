"""Reference scores and baselines on disk (docs/metrics.md#files), and whether one fits a run.

A scores file keeps every per-target raw score keyed by config/length/item, each item
with the fingerprint of the record it was scored on, plus ``meta``. A baseline is a
scores file with the ``rows`` and ``sets`` of its own run.
"""
from __future__ import annotations

import gzip
import json
import os
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from pytest_longctx.data.records import RULES_CONFIGS
from pytest_longctx.errors import LongctxError
from pytest_longctx.metrics.drift import Block
from pytest_longctx.paths import write_atomically, write_bytes_atomically

FORMAT = "pytest-longctx/scores"
# 2: items keep their control reads and a drift block (metrics/drift.py); 1 is still read, without them
VERSION = 2
READS = (1, 2)
# Meta keys that may differ between a baseline and a run: reported once as a warning.
ADVISORY = ("dtype", "device", "versions", "chunk_size", "backend")


@dataclass
class ItemScores:
    """One item's per-target raw scores, with the fingerprint of the record they were scored on,
    its control reads' records and its drift block (docs/metrics.md#drift)."""

    fingerprint: str
    targets: list[dict[str, Any]]
    controls: list[dict[str, Any]] = field(default_factory=list)
    drift: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"fingerprint": self.fingerprint, "targets": self.targets}
        if self.controls:
            body["controls"] = self.controls
        if self.drift:
            body["drift"] = self.drift
        return body

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> ItemScores:
        return cls(body["fingerprint"], list(body["targets"]), list(body.get("controls", [])), body.get("drift"))


@dataclass
class ScoresFile:
    """Reference scores on disk: per-target raw scores by config, length and item, with meta; a
    baseline also holds its rows and sets."""

    mode: str
    meta: dict[str, Any]
    scores: dict[str, dict[str, dict[str, ItemScores]]] = field(default_factory=dict)
    rows: dict[str, float | None] | None = None
    sets: dict[str, Any] | None = None
    path: str | None = None

    @property
    def has_drift(self) -> bool:
        """Whether its items keep their most likely tokens: a candidate can be compared with it
        at every read (a version 1 file, or one made by a backend without ``top_k``, cannot)."""
        return any(s.drift and "ids" in s.drift for _, _, _, s in self.items())

    def items(self) -> Iterator[tuple[str, str, str, ItemScores]]:
        for config, by_length in self.scores.items():
            for length, by_item in by_length.items():
                for item_id, item in by_item.items():
                    yield config, length, item_id, item

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "format": FORMAT,
            "version": VERSION,
            "mode": self.mode,
            "meta": self.meta,
            "scores": {
                config: {length: {i: s.to_json() for i, s in by_item.items()} for length, by_item in by_length.items()}
                for config, by_length in self.scores.items()
            },
        }
        if self.rows is not None:
            body["rows"] = self.rows
            body["sets"] = self.sets
        return body

    def save(self, path: str | os.PathLike) -> None:
        """Written whole to a temporary file, then renamed: never a half-written file."""
        data = json.dumps(self.to_json(), indent=None, separators=(",", ":"), allow_nan=False).encode()
        if Path(path).suffix != ".gz":
            write_bytes_atomically(path, data)
            return

        def gzipped(partial: Path) -> None:
            with open(partial, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as handle:
                handle.write(data)

        write_atomically(path, gzipped)


RECREATE = "recreate it (longctx score --save_scores, or pytest --longctx-update-baseline)"


def read_json_file(path: Path, what: str, fix: str) -> Any:
    """The JSON a file holds, gzipped or not; damage is one line naming the file and ``fix``."""
    try:
        raw = path.read_bytes()
        return json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    except (OSError, EOFError, zlib.error, gzip.BadGzipFile, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise LongctxError(f"{what} {path}: corrupt or truncated ({type(exc).__name__}: {exc}); {fix}") from None


def load_scores(path: str | os.PathLike, what: str = "reference scores") -> ScoresFile:
    """Read a scores file or baseline; any damage is one line naming the file and the fix."""
    path = Path(path)
    if not path.is_file():
        raise LongctxError(f"{what} {path}: no such file")
    return checked_scores(read_json_file(path, what, RECREATE), path, what)


def checked_scores(body: Any, path: str | os.PathLike, what: str) -> ScoresFile:
    """A scores file from the JSON read from ``path``, its format and version checked."""
    if not isinstance(body, dict) or body.get("format") != FORMAT:
        raise LongctxError(f"{what} {path}: not a pytest-longctx scores file; {RECREATE}")
    if body.get("version") not in READS:
        raise LongctxError(f"{what} {path}: format version {body.get('version')}, this pytest-longctx reads "
                           f"{' and '.join(map(str, READS))}; {RECREATE}")
    try:
        scores = scores_from_json(body, str(path))
    except (KeyError, TypeError, AttributeError) as exc:
        raise LongctxError(f"{what} {path}: malformed ({type(exc).__name__}: {exc}); {RECREATE}") from None
    check_drift_blocks(scores, what, RECREATE)
    return scores


def check_drift_blocks(scores: ScoresFile, what: str, fix: str) -> None:
    """Every item's drift block decodes: a damaged one is one line naming the file and item."""
    for config, length, item_id, item in scores.items():
        if item.drift:
            try:
                Block.decode(item.drift)
            except (KeyError, TypeError, ValueError) as exc:  # binascii.Error is a ValueError
                raise LongctxError(f"{what} {scores.path}: {config}/{length}/{item_id}: its drift block is damaged "
                                   f"({type(exc).__name__}: {exc}); {fix}") from None


def scores_from_json(body: dict[str, Any], path: str | None = None) -> ScoresFile:
    """A scores file from its JSON body (``mode``, ``meta``, ``scores``, optional ``rows``
    and ``sets``), as a scores file or a results JSON holds it; KeyError/TypeError when malformed."""
    scores = {
        config: {
            length: {i: ItemScores.from_json(s) for i, s in by_item.items()}
            for length, by_item in by_length.items()
        }
        for config, by_length in body["scores"].items()
    }
    return ScoresFile(mode=body["mode"], meta=dict(body["meta"]), scores=scores, rows=body.get("rows"),
                      sets=body.get("sets"), path=path)


def check_fits(reference: ScoresFile, mode: str, tokenizer: str, needed: dict[tuple[str, str, str], str],
               what: str = "reference scores") -> None:
    """Refuse a reference scored on other data, with another tokenizer or (for the rules
    configs) in another mode: its numbers would not be comparable with this run's.

    ``tokenizer`` is this run's tokenizer fingerprint; ``needed`` maps every
    (config, length, item id) the reference must cover to the item's fingerprint.
    """
    name = f"{what} {reference.path or ''}".strip()
    if reference.meta.get("tokenizer") != tokenizer:
        raise LongctxError(
            f"{name}: made with another tokenizer ({reference.meta.get('tokenizer')} vs {tokenizer} now); "
            "scores under different tokenizations are not comparable: recreate it with this tokenizer"
        )
    if reference.mode != mode and any(config in RULES_CONFIGS for config, _, _ in needed):
        raise LongctxError(
            f"{name}: scored in {reference.mode} mode, this run is in {mode} mode; the rules configs need the "
            f"model and its reference in the same mode: pass --mode {reference.mode} or recreate the reference"
        )
    for (config, length, item_id), fingerprint in needed.items():
        stored = reference.scores.get(config, {}).get(length, {}).get(item_id)
        if stored is None:
            raise LongctxError(
                f"{name}: has no scores for {config}/{length}/{item_id}; recreate it on the same data and "
                "selection (or a superset: --sets, --lengths, --limit)"
            )
        if stored.fingerprint != fingerprint:
            raise LongctxError(
                f"{name}: {config}/{length}/{item_id} was scored on different data (item fingerprint "
                f"{stored.fingerprint} vs {fingerprint} now); it is stale: recreate it on this data"
            )


def advisory_differences(reference_meta: dict[str, Any], meta: dict[str, Any]) -> list[str]:
    """Differences that leave the numbers comparable but are worth a warning."""
    return [f"{key}: {reference_meta.get(key)} there, {meta.get(key)} here"
            for key in ADVISORY if reference_meta.get(key) != meta.get(key)]
