"""Find and read the benchmark's configs: builtin, a local folder in the Hugging Face
layout (Parquet or JSONL), or a hub id."""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Sequence

from pytest_longctx.data.builtin.cache import builtin_dir
from pytest_longctx.data.lengths import sorted_lengths
from pytest_longctx.data.records import ALL_CONFIGS, FAITHFULNESS, Item, ItemKey
from pytest_longctx.data.schema import ID_COLUMNS, check_columns, parse_item
from pytest_longctx.errors import DataError, LongctxError
from pytest_longctx.parse import check_limit

HUB_ID = re.compile(r"^[\w.-]+/[\w.-]+$")
SPLIT_FILE = re.compile(r"(\w+?)(-\d{5}-of-\d{5})?\.(parquet|jsonl)")  # group 1: the split's name


@dataclass
class Dataset:
    """The selected items: ``configs[config][length]`` -> items, in file order. (A config's
    metrics, elsewhere, are its "sets"; here are its items.)"""

    source: str
    configs: dict[str, dict[str, list[Item]]] = field(default_factory=dict)
    files: dict[tuple[str, str], str] = field(default_factory=dict)

    def items(self) -> Iterator[tuple[str, str, Item]]:
        for config, by_length in self.configs.items():
            for length, items in by_length.items():
                for item in items:
                    yield config, length, item

    def select(self, keys: set[ItemKey], keep: set[tuple[str, str]] | frozenset[tuple[str, str]] = frozenset()) -> Dataset:
        """The items whose (config, length, id) is in ``keys``, in the same order; the sets (config, length) in
        ``keep`` are there even when none of their items is chosen."""
        chosen = Dataset(source=self.source, files=self.files)
        for config, by_length in self.configs.items():
            for length, items in by_length.items():
                picked = [item for item in items if (config, length, item.id) in keys]
                if picked or (config, length) in keep:
                    chosen.configs.setdefault(config, {})[length] = picked
        return chosen

    def item(self, key: ItemKey) -> Item:
        """The item ``key`` names (KeyError when the selection has none)."""
        config, length, item_id = key
        found = next((item for item in self.configs.get(config, {}).get(length, ()) if item.id == item_id), None)
        if found is None:
            raise KeyError(key)
        return found

    @property
    def lengths(self) -> list[str]:
        return sorted_lengths([length for by_length in self.configs.values() for length in by_length])


def split_files(*folders: Path) -> dict[str, list[Path]]:
    """Split name -> its files (``<split>.parquet``, ``<split>-00000-of-00001.parquet``,
    ``<split>.jsonl``), in the first of ``folders`` that holds any."""
    for folder in folders:
        found: dict[str, list[Path]] = {}
        for path in sorted(folder.iterdir()) if folder.is_dir() else ():
            match = SPLIT_FILE.fullmatch(path.name)
            if match:
                found.setdefault(match.group(1), []).append(path)
        if found:
            return found
    return {}


def _table_rows(path: Path, limit: int | None) -> Iterator[dict[str, Any]]:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception as exc:  # pyarrow raises several types for a damaged file
        raise DataError(f"{path}: not a readable Parquet file ({exc}); rebuild or re-download it") from None
    if limit is not None:
        table = table.slice(0, limit)
    id_columns = [c for c in ID_COLUMNS if c in table.column_names]
    plain = table.drop_columns(id_columns).to_pylist()
    arrays = {c: table.column(c).combine_chunks() for c in id_columns}
    for n, row in enumerate(plain):
        for column, array in arrays.items():
            row[column] = None if not array[n].is_valid else array[n].values.to_numpy(zero_copy_only=False)
        yield row


def _jsonl_rows(path: Path, limit: int | None) -> Iterator[dict[str, Any]]:
    with open(path, encoding="utf-8") as handle:
        count = 0
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            if limit is not None and count >= limit:
                return
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataError(f"{path}, line {number}: not valid JSON ({exc.msg})") from None
            if not isinstance(row, dict):
                raise DataError(f"{path}, line {number}: expected one JSON object per line")
            count += 1
            yield row


def _columns(path: Path) -> list[str] | None:
    if path.suffix != ".parquet":
        return None
    import pyarrow.parquet as pq

    try:
        return pq.read_schema(path).names
    except Exception as exc:
        raise DataError(f"{path}: not a readable Parquet file ({exc}); rebuild or re-download it") from None


def _row_count(path: Path) -> int:
    import pyarrow.parquet as pq

    return pq.read_metadata(path).num_rows


def read_split(config: str, files: list[Path], limit: int | None = None) -> list[Item]:
    """Validated items of one config and split, in file order (the first ``limit``)."""
    items: list[Item] = []
    for path in files:
        left = None if limit is None else limit - len(items)
        if left == 0:
            break
        columns = _columns(path)
        if columns is not None and _row_count(path):  # an empty file is reported below, not as missing columns
            check_columns(config, columns, str(path))
        rows = _table_rows(path, left) if path.suffix == ".parquet" else _jsonl_rows(path, left)
        for number, row in enumerate(rows):
            if columns is None:
                check_columns(config, list(row), f"{path}, row {number}")
            items.append(parse_item(config, row, f"{path}, row {number}"))
    if not items and limit != 0:
        match = SPLIT_FILE.fullmatch(files[0].name)
        split = match.group(1) if match else files[0].stem
        raise DataError(f"{', '.join(str(p) for p in files)}: split {split} of {config} holds no items; "
                        "remove the empty file or write the split's items into it")
    seen: set[str] = set()
    for item in items:
        if item.id in seen:
            raise DataError(f"{files[0].parent}: item id {item.id!r} occurs twice in split; ids must be unique")
        seen.add(item.id)
    return items


def resolve_source(data: str, lengths: Sequence[str] | None = None) -> Path:
    """A local folder for ``builtin`` (built on first use, only the lengths asked for), a
    path, or a hub id (downloaded when possible)."""
    if data == "builtin":
        return builtin_dir(lengths)
    path = Path(data).expanduser()
    if path.exists():
        if not path.is_dir():
            raise LongctxError(f"--data {data}: expected a folder in the Hugging Face layout (<dir>/<config>/<split>.parquet)")
        return path
    if not HUB_ID.match(data):
        raise LongctxError(f"--data {data}: no such folder; give 'builtin', a local folder or a hub dataset id")
    return _download(data)


def _download(repo_id: str) -> Path:
    local_form = "a local copy: --data ./longctx-agent-bench (folders <config>/<split>-*.parquet)"
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise LongctxError(
            f"--data {repo_id}: huggingface_hub is not installed (pip install huggingface_hub), or pass {local_form}"
        ) from None
    try:
        return Path(snapshot_download(repo_id, repo_type="dataset"))
    except Exception as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise LongctxError(f"--data {repo_id}: cannot download it ({reason}); offline, pass {local_form}") from None


def load_dataset(
    data: str | os.PathLike,
    sets: Sequence[str] | None = None,
    lengths: Sequence[str] | None = None,
    limit: int | None = None,
) -> Dataset:
    """Read the selected configs and lengths; ``limit`` keeps the first N items of each.
    The faithfulness config's splits are not lengths: all of them are read."""
    root = resolve_source(str(data), lengths)
    wanted = list(sets) if sets else list(ALL_CONFIGS)
    unknown = [s for s in wanted if s not in ALL_CONFIGS]
    if unknown:
        raise LongctxError(f"--sets: unknown config {', '.join(unknown)}; known: {', '.join(ALL_CONFIGS)}")
    check_limit(limit)
    dataset = Dataset(source=str(data))
    available: set[str] = set()
    found = False
    for config in wanted:
        splits = split_files(root / config, root / "data" / config)
        if not splits and sets:
            raise LongctxError(f"{root}: no files for config {config} (expected {root}/{config}/<split>-*.parquet)")
        found = found or bool(splits)
        if config != FAITHFULNESS:
            available.update(splits)
        for length in sorted_lengths(lengths) if lengths and config != FAITHFULNESS else sorted_lengths(list(splits)):
            if length in splits:
                dataset.files[(config, length)] = ", ".join(str(p) for p in splits[length])
                dataset.configs.setdefault(config, {})[length] = read_split(config, splits[length], limit)
    if not found:
        raise LongctxError(f"{root}: no benchmark files found for {', '.join(wanted)} (expected <config>/<split>-*.parquet)")
    missing = [n for n in lengths or () if n not in available] if wanted != [FAITHFULNESS] else []
    if missing:
        raise LongctxError(f"--lengths: {root} has no split {', '.join(missing)} (has {', '.join(sorted_lengths(list(available)))})")
    return dataset
