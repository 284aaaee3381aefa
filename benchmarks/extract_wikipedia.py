"""Extract plain prose from a MediaWiki XML dump into the builder's Wikipedia source.

Run once when the source changes; the package ships the result and never needs this
script (or the dump) at run time:

    python benchmarks/extract_wikipedia.py DUMP.xml.bz2 pytest_longctx/data/builtin/sources/wikipedia/articles.jsonl.gz

The input is the shortened English Wikipedia dump in the test data of the gensim wheel
(``gensim/test/test_data/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2``).
Only main-namespace articles that are not redirects are kept; templates, tables,
references, files, lists and headings are dropped, links are replaced by their label,
and only paragraphs of real prose (several sentences, no leftover markup) stay.
"""
from __future__ import annotations

import bz2
import gzip
import html
import json
import re
import sys
import xml.etree.ElementTree as ET

MIN_PARAGRAPH_CHARS = 300
MIN_ARTICLE_CHARS = 3000

COMMENT = re.compile(r"<!--.*?-->", re.S)
REF = re.compile(r"<ref[^>/]*/>|<ref[^>]*>.*?</ref>", re.S | re.I)
TAG = re.compile(r"</?[a-zA-Z][^>]*>")
TABLE = re.compile(r"\{\|.*?\|\}", re.S)
FILE_LINK = re.compile(r"\[\[(?:File|Image|Category|[a-z]{2,3}(?:-[a-z]+)?):", re.I)
LINK = re.compile(r"\[\[(?:[^\[\]|]*\|)?([^\[\]]*)\]\]")
EXTERNAL = re.compile(r"\[https?://[^\s\]]+(?: ([^\]]*))?\]")
QUOTES = re.compile(r"'{2,}")
SPACES = re.compile(r"[ \t]{2,}")
SPACE_BEFORE_PUNCT = re.compile(r" +([,.;:])")
EMPTY_PARENS = re.compile(r"\(\s*[,;]?\s*\)")


def drop_nested(text: str, start: str, end: str) -> str:
    """Remove balanced ``start ... end`` groups (templates nest, regexes cannot)."""
    out, depth, i = [], 0, 0
    while i < len(text):
        if text.startswith(start, i):
            depth += 1
            i += len(start)
        elif depth and text.startswith(end, i):
            depth -= 1
            i += len(end)
        else:
            if not depth:
                out.append(text[i])
            i += 1
    return "".join(out)


def drop_file_links(text: str) -> str:
    """Remove ``[[File:...]]`` links, whose captions may hold nested links."""
    while True:
        match = FILE_LINK.search(text)
        if not match:
            return text
        depth, i = 0, match.start()
        while i < len(text):
            if text.startswith("[[", i):
                depth, i = depth + 1, i + 2
            elif text.startswith("]]", i):
                depth, i = depth - 1, i + 2
                if depth == 0:
                    break
            else:
                i += 1
        text = text[: match.start()] + text[i:]


def clean(wikitext: str) -> list[str]:
    text = html.unescape(wikitext)
    text = COMMENT.sub("", text)
    text = REF.sub("", text)
    text = drop_nested(text, "{{", "}}")
    text = TABLE.sub("", text)
    text = drop_file_links(text)
    text = LINK.sub(r"\1", text)
    text = EXTERNAL.sub(lambda m: m.group(1) or "", text)
    text = TAG.sub("", text)
    text = QUOTES.sub("", text)
    paragraphs = []
    for block in re.split(r"\n\s*\n", text):
        lines = [line.strip() for line in block.splitlines()]
        if any(line[:1] in "=*#:;|!{" for line in lines if line):
            continue
        para = " ".join(line for line in lines if line)
        para = EMPTY_PARENS.sub("", SPACES.sub(" ", para))
        para = SPACE_BEFORE_PUNCT.sub(r"\1", para).strip()
        if len(para) < MIN_PARAGRAPH_CHARS or para.count(". ") < 2:
            continue
        if any(mark in para for mark in ("[[", "]]", "{{", "}}", "|", "http", "&")):
            continue
        paragraphs.append(para)
    return paragraphs


def articles(path: str):
    with bz2.open(path, "rb") as handle:
        for _, elem in ET.iterparse(handle):
            if not elem.tag.endswith("}page"):
                continue
            ns = elem.findtext("{*}ns")
            title = elem.findtext("{*}title") or ""
            page_id = elem.findtext("{*}id")
            revision = elem.find("{*}revision")
            text = revision.findtext("{*}text") if revision is not None else ""
            rev_id = revision.findtext("{*}id") if revision is not None else None
            redirect = elem.find("{*}redirect") is not None
            elem.clear()
            if ns != "0" or redirect or not text or text.lstrip().upper().startswith("#REDIRECT"):
                continue
            paragraphs = clean(text)
            if sum(len(p) for p in paragraphs) >= MIN_ARTICLE_CHARS:
                yield {"title": title, "page_id": int(page_id), "revision": int(rev_id), "paragraphs": paragraphs}


def main(src: str, dst: str) -> None:
    kept = list(articles(src))
    with open(dst, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as out:
        for article in kept:
            out.write((json.dumps(article, ensure_ascii=False) + "\n").encode("utf-8"))
    chars = sum(len(p) for a in kept for p in a["paragraphs"])
    print(f"{len(kept)} articles, {chars} characters -> {dst}", file=sys.stderr)


if __name__ == "__main__":
    main(*sys.argv[1:3])
