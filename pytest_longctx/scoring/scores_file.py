"""Reference scores and baselines on disk (docs/metrics.md#files), and whether one fits a run.

A scores file keeps every per-target raw score keyed by config/length/item, each item
with the fingerprint of the record it was scored on, plus ``meta``. A baseline is a
scores file with the ``rows`` and ``sets`` of its own run.
"""
from __future__ import annotations

import gzip
import json
import math
import os
import re
import zlib
from collections import Counter
from dataclasses import dataclass, field
from itertools import accumulate
from pathlib import Path
from typing import Any, Callable, Iterator

from pytest_longctx.data.records import RULES_CONFIGS, ItemKey
from pytest_longctx.errors import LongctxError
from pytest_longctx.metrics.drift import Block
from pytest_longctx.metrics.raw import is_scored, values
from pytest_longctx.parse import at_least_one, option_value
from pytest_longctx.paths import write_atomically, write_bytes_atomically
from pytest_longctx.scoring.scores_schema import Malformed, check_body

FORMAT = "pytest-longctx/scores"
# 2: items keep their control reads and a drift block (metrics/drift.py); 1 is still read, without them
VERSION = 2
READS = (1, 2)


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
# what a file that cannot be read at all is told: an update never replaces a file it cannot read (what it would
# drop is unknown), so the file goes first
REPLACE = ("restore it (git checkout -- FILE), or remove it and recreate it (longctx score --save_scores, or pytest "
           "--longctx-update-baseline)")
UPGRADE = "upgrade pytest-longctx to read it (pip install -U pytest-longctx)"
RESULTS_KEYS = {"rows", "sets", "mode", "meta"}  # what a results JSON (--out, --longctx-out) holds besides its scores
# what a run that made scores unable to judge is told (check_judgeable): nothing was written
UNJUDGEABLE = ("a baseline or reference must judge every target: check the model (a NaN weight? try dtype float32); "
               "the file is left as it was")

# Reading is bounded: a file's decompressed bytes and its JSON nesting. The committed baseline is
# 0.6 MB decompressed and a full-benchmark one (every config at 2k, 8k and 32k) a few MB: the byte
# limit is far above both; a scores file nests 8 deep.
MAX_BYTES, MAX_BYTES_VARIABLE = 256 * 2**20, "LONGCTX_MAX_FILE_BYTES"
MAX_NESTING, MAX_NESTING_VARIABLE = 64, "LONGCTX_MAX_NESTING"
LFS_POINTER = b"version https://git-lfs.github.com/spec/v1"
_CHUNK = 2**20
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_DEPTH_STEP = [0] * 256
for _open, _close in (b"[]", b"{}"):
    _DEPTH_STEP[_open], _DEPTH_STEP[_close] = 1, -1


def _limit(variable: str, default: int) -> int:
    value = os.environ.get(variable)
    return default if value is None else option_value(variable, value, at_least_one)


def _bounded_bytes(path: Path, limit: int) -> bytes | None:
    """The file's bytes, un-gzipped, read in chunks; None when there are more than ``limit``."""
    with open(path, "rb") as raw:
        gzipped = raw.read(2) == b"\x1f\x8b"
        raw.seek(0)
        stream: Any = gzip.GzipFile(fileobj=raw, mode="rb") if gzipped else raw
        chunks, size = [], 0
        while size <= limit:
            chunk = stream.read(min(_CHUNK, limit + 1 - size))
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
            size += len(chunk)
    return None


def _nesting(data: bytes, limit: int) -> bool:
    """Whether the JSON in ``data`` nests deeper than ``limit``, found without recursion:
    its strings cut out, the depth after each bracket left."""
    brackets = _STRING.sub(b"", data).translate(None, _NOT_BRACKETS)
    return len(brackets) > limit and any(map(limit.__lt__, accumulate(map(_DEPTH_STEP.__getitem__, brackets))))


class FileProblem(LongctxError):
    """A file that cannot be read as what it should be: one line, ``{name}: {problem}; {fix}``.
    ``problem`` says what is wrong with it, ``remedy`` what would make it readable as it is (fetch
    it, raise a limit; empty where only recreating it helps), for a line of another purpose."""

    def __init__(self, name: str, problem: str, fix: str, remedy: str = ""):
        super().__init__(f"{name}: {problem}; {fix}")
        self.problem, self.remedy = problem, remedy


def read_json_file(path: Path, what: str, fix: str) -> Any:
    """The JSON a file holds, gzipped or not, read within the limits on its decompressed size
    (``LONGCTX_MAX_FILE_BYTES``) and nesting (``LONGCTX_MAX_NESTING``); a missing file, a
    folder, a Git LFS pointer and damage are one line (``FileProblem``) naming the file and ``fix``."""
    name = f"{what} {path}"
    if path.is_dir():
        inside = sorted(p.name for p in path.iterdir() if p.name.endswith((".json", ".json.gz")))[:3]
        raise FileProblem(name, "is a folder, not a file", "give the file itself"
                          + (f" (it holds {', '.join(inside)})" if inside else ""))
    if not path.exists():
        raise FileProblem(name, "no such file", fix)
    max_bytes, max_nesting = _limit(MAX_BYTES_VARIABLE, MAX_BYTES), _limit(MAX_NESTING_VARIABLE, MAX_NESTING)
    try:
        raw = _bounded_bytes(path, max_bytes)
        if raw is None:
            raise_limit = f"if it is genuine, raise the limit: {MAX_BYTES_VARIABLE}=BYTES"
            raise FileProblem(name, f"holds more than {max_bytes:,} bytes (decompressed), more than any scores file "
                                    "needs", raise_limit, raise_limit)
        if raw.startswith(LFS_POINTER):
            raise FileProblem(name, "is a Git LFS pointer, not the file",
                              "fetch it (git lfs pull), or commit the file itself, without LFS", "fetch it (git lfs pull)")
        text = raw.decode("utf-8")
        if _nesting(raw, max_nesting):
            raise_limit = f"if it is genuine, raise the limit: {MAX_NESTING_VARIABLE}=LEVELS"
            raise FileProblem(name, f"nests deeper than {max_nesting} levels, deeper than any scores file",
                              f"{fix} (or, {raise_limit})", raise_limit)
        return json.loads(text)
    except (OSError, EOFError, zlib.error, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise FileProblem(name, f"corrupt or truncated ({type(exc).__name__}: {exc})", fix) from None


def load_scores(path: str | os.PathLike, what: str = "reference scores") -> ScoresFile:
    """Read a reference scores file or baseline, one that can judge a candidate
    (``check_judgeable``); anything else is one line naming the file, item and field, and the fix."""
    path = Path(path)
    return check_judgeable(checked_scores(read_json_file(path, what, REPLACE), path, what), f"{what} {path}", RECREATE)


class UnknownLoss(LongctxError):
    """The file a write would replace cannot be read, so what the write would drop of it is
    unknown, and the write is refused. ``reason`` is the line's end, for a line that names the
    file and says it is not written."""

    def __init__(self, path: str | os.PathLike, reason: str):
        super().__init__(f"{path}: NOT written: {reason}")
        self.reason = reason


def held_items(path: str | os.PathLike) -> list[ItemKey]:
    """The items the scores file at ``path`` holds, read as far as knowing them needs: its format,
    version and field types, not its values (a file that cannot judge still holds its items)."""
    body = scores_body(read_json_file(Path(path), "baseline", REPLACE), path, "baseline")
    return [(config, length, item_id) for config, by_length in body["scores"].items()
            for length, by_item in by_length.items() for item_id in by_item]


def dropped_items(path: str | os.PathLike, kept: Callable[[ItemKey], bool]) -> str | None:
    """What of the scores file at ``path`` a file about to replace it lacks (``kept`` tells which
    items it holds), by config and length, e.g. "14 of its 16 items (facts 2k: 2 of 2; rules_en:
    all 12 items)"; None when nothing, or when there is no file (nothing to lose). Every front end
    that writes a baseline refuses such a narrowing unless it is asked for; a file there that
    cannot be read is refused whatever is asked (``UnknownLoss``): what it holds is unknown, and
    it may be the real baseline out of reach (a Git LFS pointer) or made by a newer release."""
    if not Path(path).is_file():
        return None
    try:
        old = held_items(path)
    except FileProblem as exc:
        remedy = f"{exc.remedy}, or " if exc.remedy else ""
        raise UnknownLoss(path, f"cannot tell what replacing the file there would drop: it cannot be read "
                                f"({exc.problem}); {remedy}remove it first if it really is to be replaced") from None
    lost = [key for key in old if not kept(key)]
    if not lost:
        return None
    held = Counter((config, length) for config, length, _ in old)
    gone = Counter((config, length) for config, length, _ in lost)
    parts = []
    for config in dict.fromkeys(c for c, _ in gone):
        lengths = [n for c, n in held if c == config]
        if all(gone[config, n] == held[config, n] for n in lengths):
            parts.append(f"{config}: all {sum(held[config, n] for n in lengths)} items")
        else:
            parts.extend(f"{config} {n}: {gone[config, n]} of {held[config, n]}" for n in lengths if (config, n) in gone)
    return f"{len(lost)} of its {len(old)} items ({'; '.join(parts)})"


def scores_body(body: Any, path: str | os.PathLike, what: str) -> dict[str, Any]:
    """The JSON read from ``path`` when it is a scores file of a version this release reads, every
    field of the type the format gives it; else one line (``FileProblem``)."""
    name = f"{what} {path}"
    if isinstance(body, dict) and body.get("format") != FORMAT and RESULTS_KEYS <= set(body):
        raise FileProblem(name, "a results JSON (longctx score --out, pytest --longctx-out), not a scores file",
                          "give a scores file: one longctx score --save_scores wrote, or a baseline")
    if not isinstance(body, dict) or body.get("format") != FORMAT:
        raise FileProblem(name, "not a pytest-longctx scores file", REPLACE)
    version = body.get("version")
    if isinstance(version, int) and not isinstance(version, bool) and version > max(READS):
        raise FileProblem(name, f"format version {version}, written by a newer pytest-longctx (this one reads "
                                f"{' and '.join(map(str, READS))})", UPGRADE, UPGRADE)
    if version not in READS:
        raise FileProblem(name, f"format version {version}, this pytest-longctx reads {' and '.join(map(str, READS))}",
                          REPLACE)
    return checked_body(body, name, REPLACE)


def checked_scores(body: Any, path: str | os.PathLike, what: str) -> ScoresFile:
    """A scores file from the JSON read from ``path``, its format, version, types and drift
    blocks checked (its values may be NaN: a candidate's are its own failures)."""
    scores = scores_from_json(scores_body(body, path, what), str(path))
    check_drift_blocks(scores, what, RECREATE)
    return scores


def check_drift_blocks(scores: ScoresFile, what: str, fix: str) -> None:
    """Every item's drift block decodes, over as many reads as its targets and control reads
    have values: a damaged one is one line naming the file and item."""
    for config, length, item_id, item in scores.items():
        if item.drift:
            try:
                found = Block.decode(item.drift)
                reads = len(_values(item))
                if len(found.at) != reads:
                    raise ValueError(f"{len(found.at)} reads, its targets and control reads have {reads}")
            except (KeyError, TypeError, ValueError) as exc:  # binascii.Error is a ValueError
                raise LongctxError(f"{what} {scores.path}: {config}/{length}/{item_id}: its drift block is damaged "
                                   f"({type(exc).__name__}: {exc}); {fix}") from None


def _values(item: ItemScores) -> list[Any]:
    return [v for record in (*item.targets, *item.controls) for v in values(record)]


def scores_from_json(body: dict[str, Any], path: str | None = None) -> ScoresFile:
    """A scores file from its JSON body (``mode``, ``meta``, ``scores``, optional ``rows``
    and ``sets``), as a scores file or a results JSON holds it; KeyError/TypeError when
    malformed (``checked_body`` says where)."""
    scores = {
        config: {
            length: {i: ItemScores.from_json(s) for i, s in by_item.items()}
            for length, by_item in by_length.items()
        }
        for config, by_length in body["scores"].items()
    }
    return ScoresFile(mode=body["mode"], meta=dict(body["meta"]), scores=scores, rows=body.get("rows"),
                      sets=body.get("sets"), path=path)


def checked_body(body: dict[str, Any], name: str, fix: str) -> dict[str, Any]:
    """``body`` (a scores file's, or a results JSON's, whose ``scores`` are optional) when every
    field has the type a scores file gives it, else one line: ``name``, the item and field,
    what is there, ``fix``."""
    try:
        check_body(body, body.get("format") == FORMAT)
    except Malformed as exc:
        raise FileProblem(name, f"malformed: {exc}", fix) from None
    return body


def _finite(value: Any) -> bool:
    return value is not None and math.isfinite(value)


def check_judgeable(scores: ScoresFile, name: str | None, fix: str) -> ScoresFile:
    """``scores`` when it can judge a candidate, as a baseline or reference must: every
    target's and control read's values finite, its drift blocks' log-probabilities too, a
    drift block for every item with reads when any item has one, and something scored in
    every config/length. Else one line: ``name`` (when given), the item and field, ``fix``.
    Both paths use it: what is read as a baseline, and what is about to be written as one."""

    def refuse(where: str, problem: str) -> LongctxError:
        return LongctxError(f"{name + ': ' if name else ''}{where}: {problem}; {fix}")

    with_drift = scores.has_drift
    for config, by_length in scores.scores.items():
        for length, by_item in by_length.items():
            for item_id, item in by_item.items():
                where = f"{config}/{length}/{item_id}"
                for field_name in ("targets", "controls"):
                    for n, record in enumerate(getattr(item, field_name)):
                        if not all(map(_finite, values(record))):
                            kind = "'logprobs'" if "logprobs" in record else "'score_without'/'score_with'"
                            raise refuse(where, f"{field_name}[{n}] {kind}: not finite (NaN, infinite or null), so it "
                                                "cannot judge a candidate there")
                if with_drift and _values(item) and not (item.drift and "ids" in item.drift):
                    raise refuse(where, "has no drift block ('drift' with 'ids') where the other items have one")
                lps = Block.decode(item.drift).lps if item.drift and "lps" in item.drift else None
                for r, row in enumerate(lps or []):
                    if any(math.isnan(v) or v == math.inf for v in row):
                        raise refuse(where, f"its drift block's 'lps' at read {r} is NaN or infinite, not a "
                                            "log-probability")
            if not any(is_scored(r) for item in by_item.values() for r in item.targets):
                raise refuse(f"{config}/{length}", f"nothing scored in its {len(by_item)} item(s) (every target "
                                                   "unaligned or not finite): it cannot judge a candidate")
    for row, value in (scores.rows or {}).items():
        if value is not None and not math.isfinite(value):
            raise refuse(f"'rows' {row!r}", f"{value}, not a number")
    return scores


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
    check_coverage(reference, needed, what)


def check_coverage(reference: ScoresFile, needed: dict[tuple[str, str, str], str], what: str = "reference scores") -> None:
    """Refuse a reference that lacks some of the ``needed`` items (item -> fingerprint), or holds one
    scored on other data: one line, saying how many of each config and length it lacks and how many it
    holds (a baseline made with a smaller --limit), or which item is stale. It needs no model: the gate
    checks it before anything is loaded."""
    name = f"{what} {reference.path or ''}".strip()
    lacking = [key for key in needed if reference.scores.get(key[0], {}).get(key[1], {}).get(key[2]) is None]
    if lacking:
        parts = []
        for config, length in dict.fromkeys((c, n) for c, n, _ in lacking):
            count = sum(1 for c, n, _ in lacking if (c, n) == (config, length))
            wanted = sum(1 for c, n, _ in needed if (c, n) == (config, length))
            held = len(reference.scores.get(config, {}).get(length, {}))
            parts.append(f"{config} {length}: {count} of the {wanted} selected, it holds {held}")
        raise LongctxError(f"{name}: has no scores for {'/'.join(lacking[0])}"
                           + (f" and {len(lacking) - 1} more" if len(lacking) > 1 else "") + f" ({'; '.join(parts)}); "
                           "select what it was made on (the same or a narrower --sets, --lengths, --limit), or recreate it "
                           "on this selection")
    for (config, length, item_id), fingerprint in needed.items():
        stored = reference.scores[config][length][item_id]
        if stored.fingerprint != fingerprint:
            raise LongctxError(
                f"{name}: {config}/{length}/{item_id} was scored on different data (item fingerprint "
                f"{stored.fingerprint} vs {fingerprint} now); it is stale: recreate it on this data"
            )
