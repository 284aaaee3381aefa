"""Shell commands the simulated agent runs, each with its observation.

An action knows where its parts start (``slots``: ``start`` = the command word and
named argument positions), so a rule can point at the place it governs."""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Callable

from pytest_longctx.data.builtin.workspace import Observation, Workspace


@dataclass(frozen=True)
class ShellAction:
    kind: str
    command: str
    output: Observation
    thought: str
    slots: dict[str, int] = field(default_factory=dict)  # slot -> char offset in command


def _slots(command: str, **anchors: str) -> dict[str, int]:
    """``start`` plus the offset of each anchor (the first occurrence of its text)."""
    out = {"start": 0}
    for slot, anchor in anchors.items():
        out[slot] = command.index(anchor)
    return out


def search(ws: Workspace, rng: random.Random) -> ShellAction:
    name = ws.pick_name()
    command = f'grep -rn "{name}" {ws.package}/'
    thought = rng.choice(
        [f"Let me find where `{name}` is used.", f"I'll search the package for `{name}`.", f"Where else does `{name}` appear?"]
    )
    return ShellAction("search", command, ws.grep(name), thought, _slots(command, flag=" -rn"))


def find(ws: Workspace, rng: random.Random) -> ShellAction:
    command = f'find {ws.package} -name "*.py"'
    thought = rng.choice(
        ["Let me see which modules the package has.", "First, an overview of the Python files.", "I want the list of source files again."]
    )
    return ShellAction("find", command, ws.paths(), thought, _slots(command))


def read(ws: Workspace, rng: random.Random) -> ShellAction:
    file = ws.pick_file(small=True)
    command = f"cat {file.path}"
    thought = rng.choice([f"Let me read `{file.path}`.", f"`{file.path}` is short; I'll look at all of it.", f"I'll open `{file.path}`."])
    return ShellAction("read", command, ws.show(file), thought, _slots(command, path=f" {file.path}"))


def view(ws: Workspace, rng: random.Random) -> ShellAction:
    file = ws.pick_file(small=False)
    first, last = ws.window(file, rng.randint(30, 90))
    command = f"sed -n '{first},{last}p' {file.path}"
    thought = rng.choice(
        [
            f"Let me look at lines {first} to {last} of `{file.path}`.",
            f"The relevant part of `{file.path}` should start around line {first}.",
        ]
    )
    return ShellAction("view", command, ws.show(file, first=first, last=last), thought, _slots(command))


def listing(ws: Workspace, rng: random.Random) -> ShellAction:
    command = f"ls -la {ws.package}/"
    return ShellAction(
        "list",
        command,
        ws.listing(long=True),
        rng.choice(["What is in the package directory?", "Let me check the package layout."]),
        _slots(command),
    )


def count(ws: Workspace, rng: random.Random) -> ShellAction:
    command = f"wc -l {ws.package}/*.py"
    return ShellAction(
        "count", command, ws.line_counts(), rng.choice(["How big are the modules?", "Let me see how long each module is."]), _slots(command)
    )


def test(ws: Workspace, rng: random.Random) -> ShellAction:
    file = ws.pick_file()
    path = ws.test_path(file)
    command = f"python -m pytest {path} -q"
    thought = rng.choice([f"Let me run the tests for `{file.path}`.", "Now I'll run the tests again.", f"Running `{path}` to check."])
    return ShellAction("test", command, ws.test_run(file), thought, _slots(command, args=f" {path}"))


def install(ws: Workspace, rng: random.Random) -> ShellAction:
    command = "pip install -e ."
    output = Observation(
        f"Obtaining file:///workspace/{ws.project}\n  Installing build dependencies ... done\n"
        "  Checking if build backend supports build_editable ... done\n"
        f"Building wheels for collected packages: {ws.project}\nSuccessfully installed {ws.project}-{ws.version}",
        (),
    )
    return ShellAction(
        "install",
        command,
        output,
        rng.choice(["I'll reinstall the package in editable mode.", "The package needs to be installed again after the change."]),
        _slots(command, flag=" -e"),
    )


def script(ws: Workspace, rng: random.Random) -> ShellAction:
    name = ws.pick_name()
    module = ws.package
    command = f'python -c "import {module}; print({module}.__file__)"'
    output = Observation(f"/workspace/{ws.project}/{module}/__init__.py", ())
    return ShellAction(
        "script",
        command,
        output,
        rng.choice(
            [
                f"Let me check which copy of `{module}` is imported.",
                f"Is the installed `{module}` the one I am editing? (`{name}` changed.)",
            ]
        ),
        _slots(command),
    )


def commit(ws: Workspace, rng: random.Random) -> ShellAction:
    name = ws.pick_name()
    message = rng.choice([f"Fix {name} for empty input", f"Handle missing values in {name}", f"Add a test for {name}"])
    command = f'git commit -am "{message}"'
    output = Observation(
        f"[fix-{name.lower().strip('_')} {ws.commit_hash()}] {message}\n"
        f" 1 file changed, {rng.randint(1, 9)} insertions(+), {rng.randint(0, 4)} deletions(-)",
        (),
    )
    return ShellAction(
        "commit", command, output, rng.choice(["I'll commit this step.", "Time to commit the change."]), _slots(command, flag=" -am")
    )


def push(ws: Workspace, rng: random.Random) -> ShellAction:
    branch = f"fix-{ws.pick_name().lower().strip('_')}"
    command = f"git push origin {branch}"
    output = Observation(f"To example.org:{ws.project}.git\n * [new branch]      {branch} -> {branch}", ())
    return ShellAction(
        "push", command, output, rng.choice(["Let me push the branch.", "I'll push what I have so far."]), _slots(command, remote=" origin")
    )


def branch(ws: Workspace, rng: random.Random) -> ShellAction:
    name = f"fix/{ws.pick_name().lower().strip('_')}"
    command = f"git checkout -b {name}"
    return ShellAction(
        "branch",
        command,
        Observation(f"Switched to a new branch '{name}'", ()),
        "I'll do this on its own branch.",
        _slots(command, name=f" {name}"),
    )


def diff(ws: Workspace, rng: random.Random) -> ShellAction:
    file = ws.pick_file()
    command = f"git diff main -- {file.path}"
    return ShellAction(
        "diff",
        command,
        ws.diff(file),
        rng.choice(["Let me review my change.", "What differs from the main branch now?"]),
        _slots(command, base=" main"),
    )


def tox(ws: Workspace, rng: random.Random) -> ShellAction:
    env = rng.choice(["py311", "py312", "lint"])
    command = f"tox -e {env} > /tmp/tox-{env}.log 2>&1; tail -n 3 /tmp/tox-{env}.log"
    output = Observation(
        f"  {env}: OK ({rng.uniform(3, 40):.2f}={rng.uniform(1, 3):.2f}+{rng.uniform(2, 30):.2f} seconds)\n  congratulations :)", ()
    )
    return ShellAction(
        "tox",
        command,
        output,
        rng.choice(["Let me run the full tox environment and keep its log.", f"I'll run tox for {env} in the background log."]),
        _slots(command, logpath=" /tmp"),
    )


def backup(ws: Workspace, rng: random.Random) -> ShellAction:
    file = ws.pick_file()
    base = file.path.rsplit("/", 1)[-1]
    command = f"cp {file.path} /tmp/{base}.bak"
    return ShellAction(
        "backup",
        command,
        Observation("", ()),
        rng.choice([f"Before editing I'll keep a copy of `{file.path}`.", "A backup first, in case the edit goes wrong."]),
        _slots(command, args=f" {file.path}", dest=" /tmp"),
    )


def status(ws: Workspace, rng: random.Random) -> ShellAction:
    file = ws.pick_file()
    command = "git status --short"
    return ShellAction(
        "status", command, Observation(f" M {file.path}\n?? {ws.test_path(file)}", ()), "Which files have I touched?", _slots(command)
    )


def log(ws: Workspace, rng: random.Random) -> ShellAction:
    names = [ws.pick_name() for _ in range(4)]
    lines = [f"{ws.commit_hash()} {rng.choice(['Refactor', 'Fix', 'Document', 'Test'])} {n}" for n in names]
    command = "git log --oneline -4"
    return ShellAction("log", command, Observation("\n".join(lines), ()), "Let me look at the recent history.", _slots(command))


ACTIONS: dict[str, Callable[[Workspace, random.Random], ShellAction]] = {
    "search": search,
    "find": find,
    "read": read,
    "view": view,
    "list": listing,
    "count": count,
    "test": test,
    "install": install,
    "script": script,
    "commit": commit,
    "push": push,
    "branch": branch,
    "diff": diff,
    "tox": tox,
    "backup": backup,
    "status": status,
    "log": log,
}
