"""The sessions a compressor is measured on: the faithfulness config of a benchmark
folder (``builtin``, ``<dir>/faithfulness/<split>-*.parquet``), or the faithfulness
dataset in its own layout (``<dir>/data/<split>-*.parquet``, ``<dir>/<split>.jsonl``),
or one ``.jsonl``/``.parquet`` file; a hub id is downloaded as the other data is."""
from __future__ import annotations

import re
from pathlib import Path

from pytest_longctx.data.load import Dataset, load_dataset, read_split, resolve_source, sorted_lengths
from pytest_longctx.data.records import FAITHFULNESS, FaithfulnessItem
from pytest_longctx.errors import LongctxError

SPLIT_FILE = re.compile(r"(\w+?)(-\d{5}-of-\d{5})?\.(parquet|jsonl)")


def _own_layout(root: Path) -> dict[str, list[Path]]:
    """Split -> files of a folder that is the faithfulness dataset itself."""
    for folder in (root / "data", root):
        found: dict[str, list[Path]] = {}
        for path in sorted(folder.glob("*")) if folder.is_dir() else ():
            match = SPLIT_FILE.fullmatch(path.name)
            if match:
                found.setdefault(match.group(1), []).append(path)
        if found:
            return found
    return {}


def load_sessions(data: str, limit: int | None = None) -> Dataset:
    """The faithfulness items of ``data`` (every split; ``limit``: the first N of each)."""
    if limit is not None and limit < 1:
        raise LongctxError(f"--limit {limit}: must be at least 1")
    path = Path(data).expanduser()
    if path.is_file():
        if not SPLIT_FILE.fullmatch(path.name):
            raise LongctxError(f"--data {data}: expected a .jsonl or .parquet file of sessions, or a folder")
        return Dataset(source=data, sets={FAITHFULNESS: {path.stem: read_split(FAITHFULNESS, [path], limit)}},
                       files={(FAITHFULNESS, path.stem): str(path)})
    root = resolve_source(data, lengths=[])
    if (root / FAITHFULNESS).is_dir() or (root / "data" / FAITHFULNESS).is_dir():
        dataset = load_dataset(root, sets=[FAITHFULNESS], limit=limit)  # the folder: builtin is built by now
        dataset.source = data
        return dataset
    splits = _own_layout(root)
    if not splits:
        raise LongctxError(f"--data {data}: no sessions found (expected {root}/{FAITHFULNESS}/<split>-*.parquet, "
                           f"{root}/data/<split>-*.parquet or {root}/<split>.jsonl)")
    dataset = Dataset(source=data)
    for split in sorted_lengths(list(splits)):
        dataset.sets.setdefault(FAITHFULNESS, {})[split] = read_split(FAITHFULNESS, splits[split], limit)
        dataset.files[(FAITHFULNESS, split)] = ", ".join(str(p) for p in splits[split])
    return dataset


def sessions(dataset: Dataset) -> list[tuple[str, FaithfulnessItem]]:
    """(split, item) of every session, in file order."""
    found = []
    for _, split, item in dataset.items():
        assert isinstance(item, FaithfulnessItem)  # load_sessions reads the faithfulness config only
        found.append((split, item))
    return found
