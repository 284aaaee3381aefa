"""The real texts the builder plants its tests in, shipped in ``sources/``.

* ``sources/wikipedia/articles.jsonl.gz``: prose paragraphs of English Wikipedia
  articles (CC BY-SA 3.0), extracted by ``benchmarks/extract_wikipedia.py``.
* ``sources/code/files.jsonl.gz``: real source files and READMEs of permissively
  licensed Python projects, collected by ``benchmarks/collect_code.py``.

Everything is NFC-normalised on load, so character offsets survive the tokenizer's
normaliser unchanged.
"""
from __future__ import annotations

import functools
import gzip
import json
import unicodedata
from dataclasses import dataclass
from pathlib import Path

SOURCES_DIR = Path(__file__).parent / "sources"
WIKIPEDIA_FILE = SOURCES_DIR / "wikipedia" / "articles.jsonl.gz"
CODE_FILE = SOURCES_DIR / "code" / "files.jsonl.gz"

WIKIPEDIA_SOURCE = {
    "name": "Wikipedia (English), shortened dump of April 2016",
    "license": "CC BY-SA 3.0",
    "revision": "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened",
}


@dataclass(frozen=True)
class Article:
    title: str
    revision: int
    paragraphs: tuple[str, ...]


@dataclass(frozen=True)
class CodeFile:
    project: str
    version: str
    license: str
    path: str
    text: str

    @property
    def lines(self) -> list[str]:
        return self.text.splitlines()


def _nfc(text: str) -> str:
    return unicodedata.normalize("NFC", text)


def _records(path: Path) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


@functools.lru_cache(maxsize=1)
def wikipedia_articles() -> tuple[Article, ...]:
    return tuple(
        Article(_nfc(r["title"]), int(r["revision"]), tuple(_nfc(p) for p in r["paragraphs"]))
        for r in _records(WIKIPEDIA_FILE)
    )


@functools.lru_cache(maxsize=1)
def code_files() -> tuple[CodeFile, ...]:
    return tuple(
        CodeFile(r["project"], r["version"], r["license"], r["path"], _nfc(r["text"]).replace("\t", "    "))
        for r in _records(CODE_FILE)
    )


def projects() -> dict[str, list[CodeFile]]:
    """Project name -> its files, README last."""
    out: dict[str, list[CodeFile]] = {}
    for f in code_files():
        out.setdefault(f.project, []).append(f)
    return out


def source_files() -> list[Path]:
    """Every shipped source file, for the builtin data's fingerprint."""
    return sorted(p for p in SOURCES_DIR.rglob("*") if p.is_file())
