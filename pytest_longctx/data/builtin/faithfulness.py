"""The faithfulness config (docs/metrics.md#faithfulness-of-context-compressors): synthetic agent sessions, each with one planted
service-configuration fact and a later probe that needs it.

A session is a system prompt and 13 to 29 messages of agent work on one of the shipped
code projects: files read with a tool (real source files), the same file read again
later, background pages fetched (real Wikipedia paragraphs), test runs, small
clean-up turns and task shifts. The fact sits early, mid-way or recently, either as a
message of its own (``statement``) or inside a longer message or a notes file
(``buried``). Items cycle through every probe type x depth x placement, so any prefix
of the first ``SESSION_ITEMS`` covers them evenly; every third of them is from the
low-surprisal suite.

The ``TOOL_HEAVY_ITEMS`` after them are the tool-heavy suite: the same kind of session
with two or three large tool outputs (``tool_outputs``: an HTML page, a JSON response, a
log, a verbose test run, a file listing; 2k to 15k tokens), the fact buried inside one
of them, early, mid-way or recently; they cycle through probe type x depth, and the
kind of output that holds the fact rotates. Appended after the others, they change no
earlier item.
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Callable, TypeVar

from pytest_longctx.data.builtin import tool_outputs
from pytest_longctx.data.builtin.faithfulness_facts import STANDARD, SUITE_FACTS, PlantedFact
from pytest_longctx.data.builtin.sourcing import BUILDER_LICENSE, BUILDER_SOURCE
from pytest_longctx.data.builtin.text import WIKIPEDIA_SOURCE, Article, projects, wikipedia_articles
from pytest_longctx.data.builtin.workspace import Workspace
from pytest_longctx.data.records import DEPTHS, FACT_PLACEMENTS, PROBE_TYPES

SESSION_ITEMS = 300  # the standard and low-surprisal suites
TOOL_HEAVY_ITEMS = 48
DEFAULT_ITEMS = SESSION_ITEMS + TOOL_HEAVY_ITEMS
# tokens of a tool-heavy session's large outputs (log-uniform in between): the one that
# holds the fact, and the others
HOLDER_TOKENS = (2200, 15000)
OTHER_TOKENS = (2200, 6000)
SPLIT = "train"  # the published set's one split; the builtin data names it the same
# All 12 probe type x depth x placement combinations, ordered so that any 6 in a row
# hold every probe type x depth pair and any 4 in a row both placements.
COMBOS = tuple((PROBE_TYPES[i % 2], DEPTHS[i % 3], FACT_PLACEMENTS[i // 2 % 2]) for i in range(12))
# where the fact goes, as a share of the session's blocks
DEPTH_RANGE = {"early": (0.0, 0.2), "mid": (0.4, 0.6), "recent": (0.85, 1.0)}
MAX_PAGE_CHARS = 700
T = TypeVar("T")

SYSTEM_PROMPTS = (
    "You are a terse engineering assistant.",
    "You are a coding agent working in the user's repository. Keep answers short.",
    "You are a careful software engineer. Explain briefly, then act.",
)
CHORES = (
    "the test fixtures", "the CI config", "the build script", "the changelog", "the type hints",
    "the logging format", "the docstrings", "the import order", "the error messages", "the dev container",
)
TASKS = (
    "add a retry around the HTTP client", "speed up the slow integration test", "clean up the CLI help text",
    "write a migration for the new column", "fix the flaky timezone test", "split the settings module in two",
)
LEADS = (
    "Tests are green and the linter is quiet.", "I went through the module and wired up the handler.",
    "The refactor is in; nothing user-facing moved.", "I checked the deployment notes while I was at it.",
)
TRAILS = (
    "Next I will tidy the fixtures.", "Nothing else changed in this pass.",
    "I left a comment where the old code was.", "The docs build still passes.",
)
NOTES = (
    "Run the formatter before committing.", "Keep pull requests small and focused.",
    "The staging data is reset every release.", "Ask in the team channel before renaming modules.",
    "Benchmarks live in the perf folder.", "Feature flags are removed once fully rolled out.",
)


@dataclass
class Session:
    """Messages being built, and the real texts they show."""

    rng: random.Random
    avoid: re.Pattern[str]  # the fact's pattern: no filler may contain it
    messages: list[dict]
    code_files: list[str]
    articles: list[str]

    def say(self, role: str, content: str, name: str | None = None) -> dict:
        return {"role": role, "content": content, "name": name}


def _page(article: Article, rng: random.Random) -> str:
    """One paragraph of the article, cut at a sentence end near MAX_PAGE_CHARS."""
    text = rng.choice(article.paragraphs)
    if len(text) <= MAX_PAGE_CHARS:
        return text
    cut = text.rfind(". ", 0, MAX_PAGE_CHARS)
    return text[: cut + 1] if cut > 0 else text[:MAX_PAGE_CHARS]


def _clean(session: Session, candidates: list[tuple[T, str]]) -> tuple[T, str]:
    """The first (source, text) whose text is not empty and does not contain the fact's value."""
    for source, text in candidates:
        if text.strip() and not session.avoid.search(text):
            return source, text
    raise ValueError("every candidate text contains the planted value")  # not reached with the shipped sources


def _blocks(session: Session, workspace: Workspace, count: int) -> list[list[dict]]:
    """``count`` blocks of agent work (a block is one to three messages)."""
    rng = session.rng
    read_before: list[tuple[str, str]] = []
    blocks = []
    for n in range(count):
        kind = rng.choice(("read", "read", "fetch", "test", "chore", "chore", "shift", "reread"))
        if kind == "reread" and not read_before:
            kind = "read"
        if kind == "read":
            shown = []
            for _ in range(8):
                file = workspace.pick_file(small=False)
                first, last = workspace.window(file, rng.randint(8, 18))
                shown.append((file.path, workspace.show(file, first=first, last=last).text))
            path, text = _clean(session, shown)
            read_before.append((path, text))
            session.code_files.append(path)
            blocks.append([session.say("assistant", f"Reading {path}."), session.say("tool", text, "read_file")])
        elif kind == "reread":
            path, text = rng.choice(read_before)
            blocks.append([session.say("assistant", f"Re-reading {path} to check the change."),
                           session.say("tool", text, "read_file")])
        elif kind == "fetch":
            article, page = _clean(session, [(a, _page(a, rng)) for a in rng.sample(wikipedia_articles(), 6)])
            session.articles.append(article.title)
            blocks.append([session.say("assistant", f"Fetching the background page on {article.title}."),
                           session.say("tool", page, "fetch_url")])
        elif kind == "test":
            file = workspace.pick_file()
            _, output = _clean(session, [(None, workspace.test_run(file).text) for _ in range(4)])
            blocks.append([session.say("assistant", "Running the tests."), session.say("tool", output, "bash")])
        elif kind == "chore":
            chore = rng.choice(CHORES)
            blocks.append([session.say("user", f"Small one: tidy {chore} while you are there (round {n})."),
                           session.say("assistant", f"Done: {chore} tidied; behaviour unchanged.")])
        else:
            task = rng.choice(TASKS)
            blocks.append([session.say("user", f"New task: {task}."),
                           session.say("assistant", f"Understood, switching to: {task}.")])
    return blocks


def _fact_block(session: Session, fact: PlantedFact, placement: str) -> list[dict]:
    rng = session.rng
    if placement == "statement":
        return [session.say(rng.choice(("assistant", "user")), fact.fact)]
    if rng.random() < 0.5:
        return [session.say("assistant", f"{rng.choice(LEADS)} {fact.fact} {rng.choice(TRAILS)}")]
    notes = rng.sample(NOTES, 4)
    notes.insert(rng.randint(1, 3), fact.fact)
    return [session.say("assistant", "Reading docs/ops-notes.md."),
            session.say("tool", "# Ops notes\n\n" + "\n".join(f"- {note}" for note in notes), "read_file")]


def _sources(session: Session, workspace: Workspace, others: tuple[Workspace, ...] = ()) -> list[dict]:
    found = []
    for other in others:  # projects a file listing shows beside the session's own
        found.append({"name": other.source_name, "kind": "code", "license": other.license, "revision": other.version,
                      "documents": sorted(f.path for f in other.files)})
    if session.code_files:
        found.append({"name": workspace.source_name, "kind": "code", "license": workspace.license, "revision": workspace.version,
                      "documents": sorted(set(session.code_files))})
    if session.articles:
        found.append({"name": WIKIPEDIA_SOURCE["name"], "kind": "text", "license": WIKIPEDIA_SOURCE["license"],
                      "revision": WIKIPEDIA_SOURCE["revision"], "documents": sorted(set(session.articles))})
    found.append({"name": BUILDER_SOURCE, "kind": "generated", "license": BUILDER_LICENSE, "revision": "", "documents": []})
    return found


def item_plan(index: int) -> tuple[str, PlantedFact, tuple[str, str, str]]:
    """(suite, fact, (probe type, depth, placement)) of item ``index``: every third item
    is low-surprisal; within a suite the combos cycle and the facts rotate across them."""
    if index % 3 == 2:
        suite, within = "low_surprisal", index // 3
    else:
        suite, within = "standard", index // 3 * 2 + index % 3
    facts = SUITE_FACTS[suite]
    return suite, facts[(within + within // len(COMBOS)) % len(facts)], COMBOS[within % len(COMBOS)]


def build_item(index: int, seed: int) -> dict:
    suite, fact, (probe_type, depth, placement) = item_plan(index)
    rng = random.Random(f"{seed}:faithfulness:{index}")
    session = Session(rng, re.compile(fact.required, re.IGNORECASE), [], [], [])
    name = rng.choice(sorted(projects()))
    workspace = Workspace(name, projects()[name], rng)
    blocks = _blocks(session, workspace, rng.randint(7, 12))
    row = _row(index, session, blocks, lambda: _fact_block(session, fact, placement), fact, probe_type, depth, placement, suite)
    return {**row, "sources": _sources(session, workspace)}


def _row(index: int, session: Session, blocks: list[list[dict]], fact_block: Callable[[], list[dict]], fact: PlantedFact,
         probe_type: str, depth: str, placement: str, suite: str) -> dict:
    """The item's fields but its sources: the block ``fact_block()`` makes put among the
    others where ``depth`` says, after a system prompt, and a probe of ``probe_type``."""
    rng = session.rng
    low, high = DEPTH_RANGE[depth]
    at = min(len(blocks), int(round(rng.uniform(low, high) * len(blocks))))
    blocks.insert(at, fact_block())
    messages = [session.say("system", rng.choice(SYSTEM_PROMPTS))] + [m for block in blocks for m in block]
    return {
        "id": f"s{index:04d}",
        "messages": messages,
        "probe": rng.choice(fact.verbatim if probe_type == "verbatim" else fact.paraphrase),
        "probe_type": probe_type,
        "required_facts": [fact.required],
        "depth": depth,
        "placement": placement,
        "concept": fact.concept,
        "suite": suite,
    }


def tool_heavy_plan(index: int) -> tuple[PlantedFact, str, str, str]:
    """(fact, probe type, depth, the kind of output holding the fact) of tool-heavy item ``index``."""
    within = index - SESSION_ITEMS
    combo = (PROBE_TYPES[within % 2], DEPTHS[within % 3])
    return STANDARD[within % len(STANDARD)], *combo, tool_outputs.HOLDERS[within // 6 % len(tool_outputs.HOLDERS)]


def _log_uniform(rng: random.Random, bounds: tuple[int, int]) -> int:
    low, high = bounds
    return int(round(low * (high / low) ** rng.random()))


def _large_output(session: Session, workspace: Workspace, kind: str, size: int, fact: str | None,
                  others: list[Workspace]) -> list[dict]:
    """The assistant's call and the tool message with a large output of ``kind``."""
    rng = session.rng
    pool = [a for a in wikipedia_articles() if not session.avoid.search(a.title)]
    articles = rng.sample(pool, 8)
    if kind == "html":
        output = tool_outputs.html_page(rng, articles, size, session.avoid, fact)
    elif kind == "json":
        output = tool_outputs.json_response(rng, articles, size, session.avoid, fact)
    elif kind == "logs":
        output = tool_outputs.log_lines(rng, workspace, size, session.avoid, fact)
    elif kind == "tests":
        output = tool_outputs.pytest_output(rng, workspace, size, session.avoid, fact)
    else:
        output = tool_outputs.file_listing(rng, [workspace, *others], size, session.avoid)
    session.articles.extend(output.articles)
    return [session.say("assistant", f"Running {output.command}." if output.tool == "bash" else f"Fetching {output.command}."),
            session.say("tool", output.text, output.tool)]


def build_tool_heavy_item(index: int, seed: int) -> dict:
    fact, probe_type, depth, holder = tool_heavy_plan(index)
    rng = random.Random(f"{seed}:faithfulness-tool-heavy:{index}")
    session = Session(rng, re.compile(fact.required, re.IGNORECASE), [], [], [])
    names = sorted(projects())
    name = rng.choice(names)
    workspace = Workspace(name, projects()[name], rng)
    others = [Workspace(n, projects()[n], rng) for n in rng.sample([n for n in names if n != name], 2)]
    blocks = _blocks(session, workspace, rng.randint(5, 9))
    kinds = [k for k in tool_outputs.KINDS if k != holder]
    for kind in rng.sample(kinds, rng.randint(1, 2)):
        blocks.insert(rng.randint(0, len(blocks)), _large_output(session, workspace, kind, _log_uniform(rng, OTHER_TOKENS), None,
                                                                 others))
    row = _row(index, session, blocks,
               lambda: _large_output(session, workspace, holder, _log_uniform(rng, HOLDER_TOKENS), fact.fact, others),
               fact, probe_type, depth, "buried", "tool_heavy")
    listed = tuple(others) if any(m["content"].startswith("-rw-") for m in row["messages"] if m["role"] == "tool") else ()
    return {**row, "sources": _sources(session, workspace, listed)}


def build_faithfulness(seed: int, limit: int | None = None) -> list[dict]:
    """The rows of the faithfulness split: ``DEFAULT_ITEMS`` items, or the first ``limit``."""
    count = DEFAULT_ITEMS if limit is None else min(limit, DEFAULT_ITEMS)
    return [build_item(index, seed) if index < SESSION_ITEMS else build_tool_heavy_item(index, seed) for index in range(count)]
