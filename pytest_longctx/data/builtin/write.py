"""Rows -> Parquet in the Hugging Face layout, with fixed Arrow types so that the same
rows always give the same bytes."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pytest_longctx.data.records import config_kind
from pytest_longctx.data.schema import ID_COLUMNS
from pytest_longctx.paths import write_atomically

SPAN = pa.list_(pa.int32())
SOURCES = pa.list_(pa.struct([
    ("name", pa.string()), ("kind", pa.string()), ("license", pa.string()), ("revision", pa.string()),
    ("documents", pa.list_(pa.string())), ("tokens", pa.int32()),
]))
IDS = pa.list_(pa.int32())
MESSAGES = pa.list_(pa.struct([("role", pa.string()), ("content", pa.string()), ("name", pa.string())]))
SESSION_SOURCES = pa.list_(pa.struct([
    ("name", pa.string()), ("kind", pa.string()), ("license", pa.string()), ("revision", pa.string()),
    ("documents", pa.list_(pa.string())),
]))

SCHEMAS = {
    "facts": pa.schema(
        [
            ("id", pa.string()),
            ("text", pa.string()),
            (
                "targets",
                pa.list_(
                    pa.struct(
                        [
                            ("answer_char", SPAN),
                            ("answer", pa.string()),
                            ("fact_char", SPAN),
                            ("fact", pa.string()),
                            ("distance_tokens", pa.int32()),
                            ("qwen_answer_pos", SPAN),
                        ]
                    )
                ),
            ),
            (
                "source",
                pa.struct(
                    [("name", pa.string()), ("license", pa.string()), ("revision", pa.string()), ("articles", pa.list_(pa.string()))]
                ),
            ),
            ("sources", SOURCES),
            ("qwen_ids", IDS),
        ]
    ),
    "tool_calls": pa.schema(
        [
            ("id", pa.string()),
            ("text", pa.string()),
            (
                "definitions",
                pa.list_(
                    pa.struct([("id", pa.string()), ("name", pa.string()), ("kind", pa.string()), ("char", SPAN), ("text", pa.string())])
                ),
            ),
            (
                "targets",
                pa.list_(
                    pa.struct(
                        [
                            ("char", SPAN),
                            ("target", pa.string()),
                            ("kind", pa.string()),
                            ("far", pa.bool_()),
                            ("fresh", pa.bool_()),
                            ("definition_id", pa.string()),
                            ("distance_tokens", pa.int32()),
                            ("qwen_pos", pa.int32()),
                        ]
                    )
                ),
            ),
            ("sources", SOURCES),
            ("qwen_ids", IDS),
        ]
    ),
    "rules": pa.schema(
        [
            ("id", pa.string()),
            ("context_id", pa.string()),
            ("text_without_rule", pa.string()),
            ("text_with_rule", pa.string()),
            ("rule", pa.string()),
            ("rule_char", SPAN),
            ("family", pa.string()),
            ("placement", pa.string()),
            ("lang", pa.string()),
            (
                "targets",
                pa.list_(
                    pa.struct(
                        [
                            ("char_without_rule", SPAN),
                            ("char_with_rule", SPAN),
                            ("expected_text", pa.string()),
                            ("original_text", pa.string()),
                            ("distance_tokens", pa.int32()),
                            ("first", pa.bool_()),
                            ("mentioned", pa.bool_()),
                            ("qwen_pos_without_rule", pa.int32()),
                            ("qwen_pos_with_rule", pa.int32()),
                            ("qwen_expected_id", pa.int32()),
                        ]
                    )
                ),
            ),
            ("sources", SOURCES),
            ("qwen_ids_without_rule", IDS),
            ("qwen_ids_with_rule", IDS),
        ]
    ),
    "faithfulness": pa.schema(
        [
            ("id", pa.string()),
            ("messages", MESSAGES),
            ("probe", pa.string()),
            ("probe_type", pa.string()),
            ("required_facts", pa.list_(pa.string())),
            ("depth", pa.string()),
            ("placement", pa.string()),
            ("concept", pa.string()),
            ("suite", pa.string()),
            ("sources", SESSION_SOURCES),
        ]
    ),
}


def split_path(root: Path, config: str, length: str) -> Path:
    return root / config / f"{length}-00000-of-00001.parquet"


def _ids_column(arrays: list[np.ndarray]) -> pa.Array:
    offsets = np.zeros(len(arrays) + 1, dtype=np.int32)
    np.cumsum([len(a) for a in arrays], out=offsets[1:])
    values = np.concatenate(arrays).astype(np.int32) if arrays else np.zeros(0, np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values))


def write_split(root: Path, config: str, length: str, rows: list[dict]) -> Path:
    schema = SCHEMAS[config_kind(config)]
    columns = []
    for name in schema.names:
        if name in ID_COLUMNS:
            columns.append(_ids_column([np.asarray(r[name]) for r in rows]))
        else:
            columns.append(pa.array([r[name] for r in rows], type=schema.field(name).type))
    table = pa.Table.from_arrays(columns, schema=schema)
    return write_atomically(split_path(root, config, length), lambda partial: pq.write_table(table, partial, compression="zstd"))
