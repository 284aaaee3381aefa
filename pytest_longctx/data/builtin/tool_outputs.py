"""Large tool outputs for the tool-heavy agent sessions: a fetched HTML page, a JSON API
response, an application log, a verbose test run and a file listing, each grown to a
given number of Qwen3.5 tokens from the shipped real texts (Wikipedia paragraphs, the
code projects' files, paths and definitions), with the markup, timestamps and numbers
written by the builder. A fact sentence can be buried inside any of them but the
listing: as a paragraph of the page, a field of the response, a log line, or a line of
a test's captured output. No other text of an output matches the fact's pattern."""
from __future__ import annotations

import itertools
import json
import random
import re
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Callable, Iterator

from pytest_longctx.data.builtin.text import Article
from pytest_longctx.data.builtin.workspace import DEFINITION, Workspace
from pytest_longctx.data.qwen import qwen35_tokenizer

KINDS = ("html", "json", "logs", "tests", "listing")
HOLDERS = ("html", "json", "logs", "tests")  # the kinds a fact can be buried in
SENTENCE = re.compile(r"(?<=[.!?])\s+")
LEVELS = ("DEBUG", "INFO", "INFO", "INFO", "WARNING")
BATCH = 64


@dataclass
class Output:
    kind: str
    text: str
    command: str  # what the agent ran to get it
    tool: str  # the tool message's name
    articles: tuple[str, ...] = ()
    files: tuple[str, ...] = ()


def tokens(text: str) -> int:
    return len(qwen35_tokenizer()(text, add_special_tokens=False)["input_ids"])


def _grow(units: Iterator[str], size: int, avoid: re.Pattern[str], rng: random.Random, fact: str | None,
          separator: str = "\n") -> list[str]:
    """Units taken in order (those matching ``avoid`` skipped) until they hold about ``size``
    tokens, with ``fact`` (already made a unit) put at a random place in their middle.
    Units are counted BATCH at a time (one tokenizer call)."""
    kept: list[str] = []
    count = 0
    while count < size:
        batch = [unit for unit in itertools.islice(units, BATCH) if not avoid.search(unit)]
        if not batch:
            break
        for unit, ids in zip(batch, qwen35_tokenizer()([u + separator for u in batch], add_special_tokens=False)["input_ids"]):
            kept.append(unit)
            count += len(ids)
            if count >= size:
                break
    if fact is not None:
        kept.insert(rng.randint(len(kept) // 5, max(len(kept) // 5, len(kept) * 4 // 5)), fact)
    return kept


def _sentences(articles: list[Article]) -> Iterator[tuple[str, str]]:
    """(article title, sentence) through the articles, paragraph by paragraph, for ever."""
    while True:
        for article in articles:
            for paragraph in article.paragraphs:
                for sentence in SENTENCE.split(paragraph):
                    if len(sentence) > 20:
                        yield article.title, sentence


def _slug(title: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", title).strip("_")


def html_page(rng: random.Random, articles: list[Article], size: int, avoid: re.Pattern[str], fact: str | None) -> Output:
    main, related = articles[0], articles[1:]

    def units() -> Iterator[str]:
        for article in articles:
            if article is not main:
                yield f'<h2 id="{_slug(article.title)}">{article.title}</h2>'
            for paragraph in article.paragraphs:
                words = paragraph.split(" ")
                at = rng.randrange(len(words))
                linked = related[rng.randrange(len(related))].title if related else article.title
                words[at] = f'<a href="/wiki/{_slug(linked)}" title="{linked}">{words[at]}</a>'
                yield f"<p>{' '.join(words)}</p>"
            links = "".join(f"<li><a href=/wiki/{_slug(a.title)}>{a.title}</a></li>" for a in articles)
            yield f'<div class="navbox" role="navigation"><ul>{links}</ul></div>'
        while True:  # past the articles' end: the page's references list
            yield f'<li class="citation">{rng.choice(articles).title}, retrieved {rng.randint(2009, 2016)}.</li>'

    head = [
        "<!DOCTYPE html>", f'<html lang="en"><head><meta charset="utf-8"><title>{main.title} - Wikipedia</title>',
        '<link rel="stylesheet" href="/w/load.php?modules=site.styles&amp;only=styles">',
        '<script>document.documentElement.className="client-js";window.RLCONF={"wgPageName":"' + _slug(main.title) + '"};</script>',
        f'</head><body class="mediawiki skin-vector"><div id="content"><h1 id="firstHeading">{main.title}</h1>',
    ]
    body = _grow(units(), size - tokens("\n".join(head)), avoid, rng, f"<p>{fact}</p>" if fact else None)
    page = "\n".join(head + body + ["</div></body></html>"])
    return Output("html", page, f"https://en.wikipedia.org/wiki/{_slug(main.title)}", "fetch_url",
                  articles=tuple(a.title for a in articles))


def json_response(rng: random.Random, articles: list[Article], size: int, avoid: re.Pattern[str], fact: str | None) -> Output:
    sentences = _sentences(articles)

    def units() -> Iterator[str]:
        for n in range(10**6):
            title, text = next(sentences)
            yield _record(n, title, text)

    def _record(n: int, title: str, text: str) -> str:
        entry = {"id": 1000 + n, "title": title, "url": f"https://en.wikipedia.org/wiki/{_slug(title)}",
                 "snippet": text, "score": round(rng.uniform(0.2, 9.9), 3), "lang": "en",
                 "tags": rng.sample(["history", "science", "culture", "reference", "geography", "biography"], 2)}
        return json.dumps(entry, ensure_ascii=False)

    planted = _record(999, "Internal note", fact) if fact else None
    records = _grow(units(), size, avoid, rng, planted, separator=",\n    ")
    text = '{\n  "status": "ok",\n  "total": ' + str(len(records)) + ',\n  "results": [\n    ' + ",\n    ".join(records) + "\n  ]\n}"
    json.loads(text)  # a real JSON document
    return Output("json", text, "GET /api/search?q=background&limit=500", "http_get", articles=tuple(a.title for a in articles))


def _clock(rng: random.Random) -> Callable[[], str]:
    state = {"s": rng.randint(8 * 3600, 12 * 3600), "day": rng.randint(1, 28)}

    def now() -> str:
        state["s"] += rng.choice((0, 0, 1, 1, 2, 5))
        s = state["s"]
        return f"2024-03-{state['day']:02d}T{s // 3600:02d}:{s // 60 % 60:02d}:{s % 60:02d}.{rng.randint(0, 999):03d}Z"

    return now


def log_lines(rng: random.Random, workspace: Workspace, size: int, avoid: re.Pattern[str], fact: str | None) -> Output:
    now, modules = _clock(rng), sorted({PurePosixPath(f.path).with_suffix("").as_posix().replace("/", ".") for f in workspace.code})
    code_lines = [line.strip() for f in workspace.code for line in f.lines if len(line.strip()) > 12]

    def units() -> Iterator[str]:
        while True:
            level, module, name = rng.choice(LEVELS), rng.choice(modules), workspace.pick_name()
            worker = f"worker-{rng.randint(1, 8)}"
            message = rng.choice((
                f"calling {name} ({rng.randint(1, 900)} ms)", f"cache miss for {name}; loading",
                f"request {rng.getrandbits(32):08x} handled by {name} in {rng.randint(2, 400)} ms",
                f"retrying {name} (attempt {rng.randint(2, 5)} of 5)", f"{name} returned {rng.randint(0, 500)} rows",
            ))
            yield f"{now()} {level:<7} [{worker}] {module}: {message}"
            if level == "WARNING" and rng.random() < 0.3:
                yield f"{now()} ERROR   [{worker}] {module}: unhandled exception in {name}"
                yield "Traceback (most recent call last):"
                for _ in range(rng.randint(2, 4)):
                    path = rng.choice(workspace.code).path
                    yield f'  File "/srv/app/{path}", line {rng.randint(10, 900)}, in {workspace.pick_name()}'
                    yield f"    {rng.choice(code_lines)}"
                yield f"RuntimeError: {name} failed"

    planted = f"{now()} INFO    [main] {modules[0]}.settings: {fact}" if fact else None
    return Output("logs", "\n".join(_grow(units(), size, avoid, rng, planted)), "kubectl logs deploy/api --since=24h", "bash")


def pytest_output(rng: random.Random, workspace: Workspace, size: int, avoid: re.Pattern[str], fact: str | None) -> Output:
    cases = [(workspace.test_path(f), m.group(1).lstrip("_").lower()) for f in workspace.code for m in DEFINITION.finditer(f.text)]
    code_lines = [line for f in workspace.code for line in f.lines if line.strip()]

    def units() -> Iterator[str]:
        n = 0
        while True:
            path, name = cases[n % len(cases)]
            params = f"[{n // len(cases)}]" if n >= len(cases) else ""
            outcome = "FAILED" if rng.random() < 0.04 else ("SKIPPED" if rng.random() < 0.05 else "PASSED")
            yield f"{path}::test_{name}{params} {outcome} [{min(99, n % 100):>3}%]"
            if outcome == "FAILED":
                start = rng.randrange(max(1, len(code_lines) - 6))
                yield "\n".join(["_" * 20 + f" test_{name}{params} " + "_" * 20,
                                 *(f"    {line}" for line in code_lines[start:start + 5]),
                                 f"E       AssertionError: unexpected result from {name}",
                                 f"{path}:{rng.randint(12, 400)}: AssertionError"])
            n += 1

    head = ["============================= test session starts ==============================",
            "platform linux -- Python 3.11.9, pytest-8.3.2, pluggy-1.5.0 -- /srv/app/.venv/bin/python",
            f"rootdir: /srv/app/{workspace.project}", "collecting ... collected many items", ""]
    planted = ("----------------------------- Captured stdout call -----------------------------\n" + fact) if fact else None
    body = _grow(units(), size - tokens("\n".join(head)), avoid, rng, planted)
    return Output("tests", "\n".join(head + body), "pytest -v -rA", "bash")


def file_listing(rng: random.Random, workspaces: list[Workspace], size: int, avoid: re.Pattern[str]) -> Output:
    def units() -> Iterator[str]:
        while True:
            for ws in workspaces:
                for f in ws.files:
                    path = PurePosixPath(f.path)
                    size_bytes = len(f.text.encode())
                    stamp = f"2024-0{rng.randint(1, 9)}-{rng.randint(10, 28)} {rng.randint(10, 23)}:{rng.randint(10, 59)}"
                    for where in (f"./{path}", f"./build/lib/{path}", f"./.venv/lib/python3.11/site-packages/{path}"):
                        yield f"-rw-r--r-- 1 dev dev {size_bytes:>8} {stamp} {where}"
                    if path.suffix == ".py":
                        cached = path.parent / "__pycache__" / f"{path.stem}.cpython-311.pyc"
                        yield f"-rw-r--r-- 1 dev dev {size_bytes * 2 // 3:>8} {stamp} ./{cached}"

    return Output("listing", "\n".join(_grow(units(), size, avoid, rng, None)), "find . -type f -exec ls -l {} +", "bash",
                  files=tuple(sorted({f.path for ws in workspaces for f in ws.files})))
