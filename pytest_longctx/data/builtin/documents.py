"""The further documents that follow an agent session (the card: "one long session
followed by further documents"): Wikipedia articles and source files of other projects,
in the pretraining markup (``<|repo_name|>``, ``<|file_sep|>``). They hold no targets; a
session fills half of a long text, the documents the rest."""
from __future__ import annotations

import random

from pytest_longctx.data.builtin.chat import Doc
from pytest_longctx.data.builtin.sourcing import SourceUse
from pytest_longctx.data.builtin.text import WIKIPEDIA_SOURCE, CodeFile, code_files, wikipedia_articles

SESSION_SHARE = 0.5
SHORTEST_TAIL = 2049  # texts this short (2k) are one session, with no documents


def session_tokens(n_tokens: int) -> int:
    """How much of a text of ``n_tokens`` the session takes."""
    return n_tokens if n_tokens <= SHORTEST_TAIL else int(n_tokens * SESSION_SHARE)


class Documents:
    """Appends documents to a text, alternating prose and code, in a seeded order."""

    def __init__(self, doc: Doc, rng: random.Random, session_project: str):
        self.doc = doc
        self.articles = list(wikipedia_articles())
        self.files = [f for f in code_files() if f.project != session_project and f.text.strip()]
        rng.shuffle(self.articles)
        rng.shuffle(self.files)
        self.prose = SourceUse(WIKIPEDIA_SOURCE["name"], "text", WIKIPEDIA_SOURCE["license"], WIKIPEDIA_SOURCE["revision"])
        self.code: dict[str, SourceUse] = {}
        self.count = 0

    def add(self) -> None:
        if self.count % 2 == 0:
            article = self.articles[(self.count // 2) % len(self.articles)]
            start, end = self.doc.add(article.title + "\n\n" + "\n\n".join(article.paragraphs) + "\n\n")
            self.prose.add(article.title, start, end)
        else:
            self._add_file(self.files[(self.count // 2) % len(self.files)])
        self.count += 1

    def _add_file(self, file: CodeFile) -> None:
        self.doc.add(f"<|repo_name|>{file.project}\n<|file_sep|>{file.path}\n")
        start, end = self.doc.add(file.text.rstrip("\n") + "\n\n")
        use = self.code.setdefault(file.project, SourceUse(f"{file.project} {file.version}", "code", file.license, file.version))
        use.add(file.path, start, end)

    def uses(self) -> list[SourceUse]:
        return [self.prose, *(self.code[p] for p in sorted(self.code))]
