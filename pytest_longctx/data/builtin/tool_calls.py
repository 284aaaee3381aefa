"""The tool_calls config: agent sessions whose tools (JSON definitions) and documented
shell commands are given in the system prompt and must be called correctly much later."""
from __future__ import annotations

import random
from dataclasses import dataclass

from pytest_longctx.data.builtin.chat import CALL_FORMAT, Doc, Mark, add_call, close_turn, open_turn, tool_json
from pytest_longctx.data.builtin.conversation import CutSession, grow_and_cut, token_span
from pytest_longctx.data.builtin.documents import Documents
from pytest_longctx.data.builtin.fit import CutError, Encoding, SegmentEncoder
from pytest_longctx.data.builtin.plan import Plan
from pytest_longctx.data.builtin.shell import ACTIONS
from pytest_longctx.data.builtin.sourcing import SourceUse, source_records
from pytest_longctx.data.builtin.text import CodeFile, projects
from pytest_longctx.data.builtin.workspace import Observation, Workspace
from pytest_longctx.data.records import FAR_TOKENS
from pytest_longctx.errors import LongctxError

ATTEMPTS = 8
SHELL_WEIGHT = 3  # agents use the shell more than any other tool


@dataclass(frozen=True)
class ParamSpec:
    role: str
    names: tuple[str, ...]
    type: str
    description: str
    required: bool


@dataclass(frozen=True)
class ToolSpec:
    role: str
    names: tuple[str, ...]
    description: str
    params: tuple[ParamSpec, ...]


TOOLS = (
    ToolSpec(
        "read",
        ("read_file", "view_file", "open_file", "show_file"),
        "Show the lines of a file of the repository, numbered.",
        (
            ParamSpec("path", ("path", "file_path", "filename"), "string", "The file, relative to the repository root.", True),
            ParamSpec("start", ("start_line", "from_line", "first_line"), "integer", "First line to show (1-based).", False),
            ParamSpec("end", ("end_line", "to_line", "last_line"), "integer", "Last line to show.", False),
        ),
    ),
    ToolSpec(
        "search",
        ("search_code", "grep_repo", "find_text", "code_search"),
        "Search the repository for a literal string and list the matching lines.",
        (
            ParamSpec("pattern", ("pattern", "query", "needle"), "string", "The text to look for.", True),
            ParamSpec("path", ("path", "directory", "root"), "string", "Where to search; defaults to the whole repository.", False),
        ),
    ),
    ToolSpec(
        "shell",
        ("run_shell", "bash", "execute_command", "terminal"),
        "Run a shell command in the repository and return its output.",
        (
            ParamSpec("command", ("command", "cmd", "script"), "string", "The command line to run.", True),
            ParamSpec("timeout", ("timeout", "timeout_s", "max_seconds"), "integer", "Seconds before the command is stopped.", False),
        ),
    ),
    ToolSpec(
        "list",
        ("list_dir", "list_files", "ls_directory"),
        "List the entries of a directory.",
        (
            ParamSpec("path", ("path", "dir", "folder"), "string", "The directory to list.", True),
            ParamSpec("depth", ("depth", "max_depth", "levels"), "integer", "How many levels to descend.", False),
        ),
    ),
    ToolSpec(
        "edit",
        ("edit_file", "replace_in_file", "apply_edit", "str_replace"),
        "Replace one exact piece of text in a file.",
        (
            ParamSpec("path", ("path", "file_path", "target_file"), "string", "The file to change.", True),
            ParamSpec("old", ("old_text", "old_str", "search"), "string", "The exact text to replace; it must occur once.", True),
            ParamSpec("new", ("new_text", "new_str", "replacement"), "string", "The text to put in its place.", True),
        ),
    ),
    ToolSpec(
        "tests",
        ("run_tests", "pytest_run", "test_runner"),
        "Run tests of the repository with pytest.",
        (
            ParamSpec("target", ("target", "tests", "test_path"), "string", "A test file or node id.", True),
            ParamSpec("keyword", ("keyword", "k", "select"), "string", "Only run tests whose names match this expression.", False),
        ),
    ),
    ToolSpec(
        "note",
        ("write_note", "save_note", "record_finding"),
        "Keep a note for the final report.",
        (
            ParamSpec("title", ("title", "heading", "topic"), "string", "A short title.", True),
            ParamSpec("body", ("body", "text", "details"), "string", "What you found.", True),
        ),
    ),
)


@dataclass(frozen=True)
class CommandSpec:
    name: str
    usage: str  # "{file}", "{name}" filled with workspace values
    description: str


COMMANDS = (
    CommandSpec("lintkit", "lintkit --fix {file}", "run the project's linters on a file; --fix rewrites what can be fixed automatically"),
    CommandSpec("typegate", "typegate {file}", "type-check one file against the stubs in typings/"),
    CommandSpec("covmerge", "covmerge --out coverage.json", "merge the coverage data of all test runs into one report"),
    CommandSpec("fixturegen", "fixturegen {name}", "write a test fixture skeleton for a function to tests/fixtures/"),
    CommandSpec("apidiff", "apidiff v{version}", "list the public names that changed since a released version"),
    CommandSpec("relnotes", "relnotes --since v{version}", "draft release notes from the commit messages since a tag"),
    CommandSpec("depscan", "depscan --strict", "check the pinned dependencies for known problems"),
    CommandSpec("benchcmp", "benchcmp main HEAD", "compare the benchmark results of two revisions"),
    CommandSpec("docbuild", "docbuild --strict", "build the documentation; --strict fails on warnings"),
    CommandSpec("snapcheck", "snapcheck {test}", "re-run a test and compare its output with the stored snapshot"),
)


@dataclass(frozen=True)
class Tool:
    spec: ToolSpec
    name: str
    params: dict[str, str]  # role -> chosen parameter name

    @property
    def id(self) -> str:
        return f"tool:{self.name}"


class ToolSession:
    """One agent session with randomly named tools and a few documented commands."""

    def __init__(self, ws: Workspace, rng: random.Random):
        self.ws, self.rng = ws, rng
        specs = [t for t in TOOLS if t.role in ("read", "search", "shell")] + rng.sample(
            [t for t in TOOLS if t.role not in ("read", "search", "shell")], 3
        )
        rng.shuffle(specs)
        self.tools = {s.role: Tool(s, rng.choice(s.names), {p.role: rng.choice(p.names) for p in s.params}) for s in specs}
        self.commands = rng.sample(COMMANDS, 5)
        self.doc = Doc()
        self.code = SourceUse(ws.source_name, "code", ws.license, ws.version)
        self._system()

    def _system(self) -> None:
        doc, ws = self.doc, self.ws
        open_turn(doc, "system")
        doc.add(
            f"You are a software engineering agent working in the repository of {ws.project} at /workspace/{ws.project}. "
            "Work step by step with the tools below and keep your messages short.\n\n# Tools\n\n<tools>\n"
        )
        for tool in self.tools.values():
            params = [(tool.params[p.role], p.type, p.description) for p in tool.spec.params]
            required = [tool.params[p.role] for p in tool.spec.params if p.required]
            doc.add(tool_json(tool.name, tool.spec.description, params, required), "definition", id=tool.id, name=tool.name, kind="tool")
            doc.add("\n")
        shell = self.tools["shell"].name
        doc.add(f"</tools>\n\n{CALL_FORMAT}\n\n# Project commands\n\nThe repository has its own commands; run them through {shell}:\n")
        for command in self.commands:
            doc.add(
                f"- {self._usage(command)}: {command.description}.",
                "definition",
                id=f"command:{command.name}",
                name=command.name,
                kind="command",
            )
            doc.add("\n")
        close_turn(doc)
        open_turn(doc, "user")
        name = ws.pick_name()
        doc.add(
            f"Users report that `{name}` in {ws.project} misbehaves on edge cases. Find the cause, fix it, add a test and "
            "check the change with the project's own commands before you finish."
        )
        close_turn(doc)

    def _usage(self, command: CommandSpec) -> str:
        file = self.ws.pick_file()
        return command.usage.format(file=file.path, name=self.ws.pick_name(), version=self.ws.version, test=self.ws.test_path(file))

    def turn(self) -> None:
        roles = list(self.tools)
        role = self.rng.choices(roles, [SHELL_WEIGHT if r == "shell" else 1 for r in roles])[0]
        thought, args, observation, command = self._step(role)
        doc = self.doc
        open_turn(doc, "assistant")
        doc.add(thought + "\n\n")
        tool = self.tools[role]
        call_start = doc.length
        values = add_call(doc, tool.name, args, tool.id)
        if command is not None:
            value_at = values[tool.params["command"]]
            doc.mark("target", value_at, value_at + len(command.name), kind="command", definition_id=f"command:{command.name}")
            doc.mark("call", call_start, doc.length, definition_id=f"command:{command.name}")
        close_turn(doc)
        open_turn(doc, "user")
        doc.add("<tool_response>\n")
        start, end = doc.add(observation.text)
        if observation.files:
            for path in observation.files:
                self.code.add(path, start, end)
        doc.add("\n</tool_response>")
        close_turn(doc)

    def _step(self, role: str) -> tuple[str, list[tuple[str, str]], Observation, CommandSpec | None]:
        ws, rng, p = self.ws, self.rng, self.tools[role].params
        if role == "read":
            file = ws.pick_file()
            first, last = ws.window(file, rng.randint(30, 110))
            args = [(p["path"], file.path)]
            if rng.random() < 0.7:
                args += [(p["start"], str(first)), (p["end"], str(last))]
            else:
                first, last = 1, min(len(file.lines), 90)
            return f"Let me read `{file.path}`.", args, ws.show(file, numbered=True, first=first, last=last), None
        if role == "search":
            name = ws.pick_name()
            args = [(p["pattern"], name)] + ([(p["path"], ws.package)] if rng.random() < 0.5 else [])
            return f"Where is `{name}` used?", args, ws.grep(name), None
        if role == "shell":
            timeout = [(p["timeout"], str(rng.choice([60, 120, 300])))] if rng.random() < 0.3 else []
            if rng.random() < 0.5:
                command = rng.choice(self.commands)
                line = self._usage(command)
                return f"I'll run `{command.name}` now.", [(p["command"], line)] + timeout, self._command_output(command), command
            action = ACTIONS[rng.choice(["search", "find", "view", "list", "count", "status", "log", "diff"])](ws, rng)
            return action.thought, [(p["command"], action.command)] + timeout, action.output, None
        if role == "list":
            args = [(p["path"], ws.package)] + ([(p["depth"], "1")] if rng.random() < 0.4 else [])
            return "What does the package contain?", args, ws.listing(long=False), None
        if role == "edit":
            file = ws.pick_file()
            first, _ = ws.window(file, 1)
            old = file.lines[first - 1]
            new = old.rstrip() + "  # handles the empty case"
            return (
                f"I'll adjust line {first} of `{file.path}`.",
                [(p["path"], file.path), (p["old"], old), (p["new"], new)],
                Observation(f"Edited {file.path}: 1 replacement at line {first}.", ()),
                None,
            )
        if role == "tests":
            file = ws.pick_file()
            args = [(p["target"], ws.test_path(file))] + ([(p["keyword"], ws.pick_name().lower())] if rng.random() < 0.4 else [])
            return "Let me run the tests.", args, ws.test_run(file), None
        name = ws.pick_name()
        return (
            "I'll note what I found so far.",
            [
                (p["title"], f"{name} and empty input"),
                (p["body"], f"`{name}` does not check for empty input before it is used; the fix adds the check."),
            ],
            Observation("Note saved.", ()),
            None,
        )

    def _command_output(self, command: CommandSpec) -> Observation:
        ws, rng = self.ws, self.rng
        file = ws.pick_file()
        long_lines = [(n, line) for n, line in enumerate(file.lines, 1) if len(line) > 70][:6]
        if command.name in ("lintkit", "typegate") and long_lines:
            code = "E501" if command.name == "lintkit" else "error"
            lines = [
                f"{file.path}:{n}:{min(len(line), 79)}: {code} {'line too long' if code == 'E501' else 'incompatible type in assignment'}"
                for n, line in long_lines
            ]
            return Observation("\n".join(lines + [f"Found {len(lines)} problems."]), ())
        if command.name == "apidiff":
            names = sorted({ws.pick_name() for _ in range(5)})
            return Observation("\n".join(f"{rng.choice('+-~')} {ws.package}.{n}" for n in names), ())
        if command.name == "snapcheck":
            return ws.test_run(file)
        return Observation(f"{command.name}: done in {rng.uniform(0.3, 9.0):.1f}s, no problems found.", ())


def _targets(marks: list[Mark], definitions: dict[str, Mark], calls: list[Mark], text: str, encoding: Encoding) -> list[dict]:
    call_tokens = [(m.data["definition_id"], encoding.before(m.start), encoding.before(m.end), m.start, m.end) for m in calls]
    out = []
    for mark in marks:
        if mark.start >= len(text):
            continue
        index, start, end = token_span(encoding, mark.start)
        if end > len(text):
            continue
        definition = definitions[mark.data["definition_id"]]
        distance = index - encoding.before(definition.end)
        far = distance >= FAR_TOKENS
        recent = any(
            d == definition.data["id"] and call_end > index - FAR_TOKENS and not (c_start <= mark.start < c_end)
            for d, _, call_end, c_start, c_end in call_tokens
            if c_start < mark.start
        )
        out.append(
            {
                "char": [start, end],
                "target": text[start:end],
                "kind": mark.data["kind"],
                "far": far,
                "fresh": far and not recent,
                "definition_id": definition.data["id"],
                "distance_tokens": distance,
                "qwen_pos": index,
            }
        )
    return out


def _session(files: list[CodeFile], seed: str, n_tokens: int, encoder: SegmentEncoder) -> tuple[ToolSession, Documents, CutSession]:
    for attempt in range(ATTEMPTS):
        rng = random.Random(f"{seed}:{attempt}")
        session = ToolSession(Workspace(files[0].project, files, rng), rng)
        documents = Documents(session.doc, random.Random(f"{seed}:{attempt}:documents"), files[0].project)
        try:
            return session, documents, grow_and_cut(session.doc, session.turn, n_tokens, encoder, documents.add)
        except CutError:
            continue
    raise LongctxError(f"builder: no tool_calls session {seed} could be cut to {n_tokens} tokens")


def build_tool_calls(plan: Plan, seed: int, encoder: SegmentEncoder) -> list[dict]:
    project_files = projects()
    names = sorted(project_files)
    rows = []
    for index in range(plan.tool_items):
        project = names[index % len(names)]
        session, documents, cut = _session(project_files[project], f"{seed}:tool_calls:{plan.length}:{index}", plan.n_tokens, encoder)
        definitions = {m.data["id"]: m for m in session.doc.tagged("definition")}
        targets = _targets(session.doc.tagged("target"), definitions, session.doc.tagged("call"), cut.text, cut.encoding)
        rows.append(
            {
                "id": f"tool_calls-{plan.length}-{index:02d}",
                "text": cut.text,
                "definitions": [
                    {
                        "id": m.data["id"],
                        "name": m.data["name"],
                        "kind": m.data["kind"],
                        "char": [m.start, m.end],
                        "text": cut.text[m.start : m.end],
                    }
                    for m in definitions.values()
                ],
                "targets": targets,
                "sources": source_records([session.code, *documents.uses()], cut.encoding),
                "qwen_ids": cut.encoding.ids,
            }
        )
    return rows
