"""The sessions a compressor is measured on: the faithfulness config of a benchmark
folder (``builtin``, ``<dir>/faithfulness/<split>-*.parquet``), or the faithfulness
dataset in its own layout (``<dir>/data/<split>-*.parquet``, ``<dir>/<split>.jsonl``),
or one ``.jsonl``/``.parquet`` file; a hub id is downloaded as the other data is."""
from __future__ import annotations

from pathlib import Path

from pytest_longctx.data.lengths import sorted_lengths
from pytest_longctx.data.load import SPLIT_FILE, Dataset, load_dataset, read_split, resolve_source, split_files
from pytest_longctx.data.records import FAITHFULNESS, FaithfulnessItem
from pytest_longctx.errors import LongctxError
from pytest_longctx.parse import check_limit


def load_sessions(data: str, limit: int | None = None) -> Dataset:
    """The faithfulness items of ``data`` (every split; ``limit``: the first N of each)."""
    check_limit(limit)
    path = Path(data).expanduser()
    if path.is_file():
        if not SPLIT_FILE.fullmatch(path.name):
            raise LongctxError(f"--data {data}: expected a .jsonl or .parquet file of sessions, or a folder")
        return Dataset(source=data, configs={FAITHFULNESS: {path.stem: read_split(FAITHFULNESS, [path], limit)}},
                       files={(FAITHFULNESS, path.stem): str(path)})
    root = resolve_source(data, lengths=[])
    if (root / FAITHFULNESS).is_dir() or (root / "data" / FAITHFULNESS).is_dir():
        dataset = load_dataset(root, sets=[FAITHFULNESS], limit=limit)  # the folder: builtin is built by now
        dataset.source = data
        return dataset
    splits = split_files(root / "data", root)  # a folder that is the faithfulness dataset itself
    if not splits:
        raise LongctxError(f"--data {data}: no sessions found (expected {root}/{FAITHFULNESS}/<split>-*.parquet, "
                           f"{root}/data/<split>-*.parquet or {root}/<split>.jsonl)")
    dataset = Dataset(source=data)
    for split in sorted_lengths(list(splits)):
        dataset.configs.setdefault(FAITHFULNESS, {})[split] = read_split(FAITHFULNESS, splits[split], limit)
        dataset.files[(FAITHFULNESS, split)] = ", ".join(str(p) for p in splits[split])
    return dataset


def sessions(dataset: Dataset) -> list[tuple[str, FaithfulnessItem]]:
    """(split, item) of every session, in file order."""
    found = []
    for _, split, item in dataset.items():
        assert isinstance(item, FaithfulnessItem)  # load_sessions reads the faithfulness config only
        found.append((split, item))
    return found
