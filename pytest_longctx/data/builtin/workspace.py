"""A project the simulated agent works on: real files of one shipped code source, and
the observations its commands would show (file contents, search hits, listings),
plus the plainly synthetic outputs of tests, git and builds."""
from __future__ import annotations

import random
import re
from dataclasses import dataclass
from pathlib import PurePosixPath

from pytest_longctx.data.builtin.text import CodeFile

DEFINITION = re.compile(r"^[ \t]*(?:async\s+)?(?:def|class)\s+([A-Za-z_]\w{3,})", re.M)
MAX_CAT_CHARS = 2400


@dataclass(frozen=True)
class Observation:
    text: str
    files: tuple[str, ...]  # paths of the real files the text shows


class Workspace:
    def __init__(self, project: str, files: list[CodeFile], rng: random.Random):
        self.project = project
        self.files = files
        self.code = [f for f in files if f.path.endswith(".py") and f.text.strip()]
        self.version = files[0].version
        self.license = files[0].license
        self.rng = rng
        self.names = sorted({m.group(1) for f in self.code for m in DEFINITION.finditer(f.text)})
        self.package = PurePosixPath(self.code[0].path).parts[0]

    @property
    def source_name(self) -> str:
        return f"{self.project} {self.version}"

    def pick_file(self, small: bool | None = None) -> CodeFile:
        pool = self.code
        if small is not None:
            fitting = [f for f in pool if (len(f.text) <= MAX_CAT_CHARS) == small]
            pool = fitting or pool
        return self.rng.choice(pool)

    def pick_name(self) -> str:
        return self.rng.choice(self.names)

    def test_path(self, file: CodeFile) -> str:
        return f"tests/test_{PurePosixPath(file.path).stem.lstrip('_')}.py"

    def show(self, file: CodeFile, numbered: bool = False, first: int = 1, last: int | None = None) -> Observation:
        lines = file.lines[first - 1 : last]
        if numbered:
            lines = [f"{first + n:>6}\t{line}" for n, line in enumerate(lines)]
        return Observation("\n".join(lines), (file.path,))

    def window(self, file: CodeFile, size: int) -> tuple[int, int]:
        """A 1-based line range of about ``size`` lines that starts at a definition."""
        total = len(file.lines)
        starts = [file.text.count("\n", 0, m.start()) + 1 for m in DEFINITION.finditer(file.text)] or [1]
        first = self.rng.choice(starts)
        return first, min(total, first + size - 1)

    def grep(self, name: str, limit: int = 24) -> Observation:
        hits, used = [], []
        for f in self.code:
            found = [f"{f.path}:{n}:{line.rstrip()}" for n, line in enumerate(f.lines, 1) if name in line]
            if found:
                used.append(f.path)
                hits.extend(found)
        shown = hits[:limit]
        if len(hits) > limit:
            shown.append(f"[{len(hits) - limit} more matches]")
        return Observation("\n".join(shown), tuple(used))

    def listing(self, long: bool) -> Observation:
        entries = sorted({PurePosixPath(f.path).relative_to(self.package).parts[0] for f in self.code})
        if not long:
            return Observation("  ".join(entries), ())
        lines = [f"total {len(entries) * 8}"]
        for entry in entries:
            size = sum(len(f.text.encode()) for f in self.code if PurePosixPath(f.path).relative_to(self.package).parts[0] == entry)
            kind = "drwxr-xr-x" if "." not in entry else "-rw-r--r--"
            day = self.rng.randint(1, 28)
            lines.append(f"{kind} 1 dev dev {size:>7} Mar {day:>2} 10:{self.rng.randint(10, 59)} {entry}")
        return Observation("\n".join(lines), ())

    def paths(self) -> Observation:
        return Observation("\n".join(f"./{f.path}" for f in self.code), ())

    def line_counts(self) -> Observation:
        counts = [(len(f.lines), f.path) for f in self.code]
        lines = [f"{n:>6} {path}" for n, path in counts] + [f"{sum(n for n, _ in counts):>6} total"]
        return Observation("\n".join(lines), ())

    def test_run(self, file: CodeFile) -> Observation:
        names = [m.group(1) for m in DEFINITION.finditer(file.text)][:12] or ["module"]
        path = self.test_path(file)
        passed = self.rng.randint(len(names), 3 * len(names) + 4)
        failed = self.rng.random() < 0.35
        dots = "." * min(passed, 60) + ("F" if failed else "")
        lines = [f"{path} {dots}"]
        if failed:
            name = self.rng.choice(names)
            lines += [
                "",
                "=================================== FAILURES ===================================",
                f"_____________________________ test_{name.lstrip('_').lower()} _____________________________",
                f"E       AssertionError: unexpected result from {name}",
                f"{path}:{self.rng.randint(12, 240)}: AssertionError",
                f"FAILED {path}::test_{name.lstrip('_').lower()} - AssertionError",
                f"1 failed, {passed} passed in {self.rng.uniform(0.2, 4.0):.2f}s",
            ]
        else:
            lines.append(f"{passed} passed in {self.rng.uniform(0.2, 4.0):.2f}s")
        return Observation("\n".join(lines), ())

    def commit_hash(self) -> str:
        return "".join(self.rng.choice("0123456789abcdef") for _ in range(7))

    def diff(self, file: CodeFile) -> Observation:
        first, last = self.window(file, 7)
        old = file.lines[first - 1 : last]
        if not old:
            return Observation("", ())
        changed = self.rng.randrange(len(old))
        lines = [
            f"diff --git a/{file.path} b/{file.path}",
            f"--- a/{file.path}",
            f"+++ b/{file.path}",
            f"@@ -{first},{len(old)} +{first},{len(old) + 1} @@",
        ]
        for n, line in enumerate(old):
            if n == changed:
                lines += [f"-{line}", f"+{line.rstrip()}  # checked", f"+{' ' * (len(line) - len(line.lstrip()))}# see the issue"]
            else:
                lines.append(f" {line}")
        return Observation("\n".join(lines), (file.path,))
