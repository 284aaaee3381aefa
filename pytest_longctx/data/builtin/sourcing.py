"""``sources[]`` records: which source texts an item holds and how many of its
tokens each one gives."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from pytest_longctx.data.builtin.fit import Encoding

BUILDER_SOURCE = "pytest-longctx builder"
BUILDER_LICENSE = "CC BY 4.0"


@dataclass
class SourceUse:
    """One source of an item's text and the character ranges it fills."""

    name: str
    kind: str  # "text" (prose), "code" (source files) or "generated" (written by the builder)
    license: str
    revision: str
    documents: list[str] = field(default_factory=list)
    ranges: list[tuple[int, int]] = field(default_factory=list)

    def add(self, document: str | None, start: int, end: int) -> None:
        if document and document not in self.documents:
            self.documents.append(document)
        if end > start:
            self.ranges.append((start, end))


def source_records(uses: list[SourceUse], encoding: Encoding) -> list[dict]:
    """Records with each source's token count; tokens outside every range are the
    builder's own (markup, prompts, sentences it wrote)."""
    owner = np.full(len(encoding), -1, dtype=np.int64)
    for n, use in enumerate(uses):
        for start, end in use.ranges:
            lo, hi = encoding.before(start), encoding.before(end)
            owner[lo:hi] = n
    records = []
    for n, use in enumerate(uses):
        tokens = int((owner == n).sum())
        if tokens:
            records.append(
                {"name": use.name, "kind": use.kind, "license": use.license, "revision": use.revision,
                 "documents": list(use.documents), "tokens": tokens}
            )
    records.append(
        {"name": BUILDER_SOURCE, "kind": "generated", "license": BUILDER_LICENSE, "revision": "",
         "documents": [], "tokens": int((owner == -1).sum())}
    )
    return records
