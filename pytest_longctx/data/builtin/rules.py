"""The rules configs: agent sessions that run shell commands, with one rule line added
to the system prompt or to a later user message; targets are the places, far after
the rule, where the session's own action differs from what the rule implies.

One generator serves all three languages: the sessions (text_without_rule) are the
same in rules_en, rules_cs and rules_de; only the rule line differs (``rule_texts``)."""
from __future__ import annotations

import random
import re
from dataclasses import dataclass

from pytest_longctx.data.builtin.chat import CALL_FORMAT, Doc, add_call, close_turn, open_turn, tool_json
from pytest_longctx.data.builtin.conversation import CutSession, estimated_tokens, grow_and_cut, token_span
from pytest_longctx.data.builtin.documents import Documents, session_tokens
from pytest_longctx.data.builtin.fit import CutError, Encoding, SegmentEncoder
from pytest_longctx.data.builtin.plan import Plan
from pytest_longctx.data.builtin.rule_texts import LANGS, RULES, Rule
from pytest_longctx.data.builtin.shell import ACTIONS
from pytest_longctx.data.builtin.sourcing import SourceUse, source_records
from pytest_longctx.data.builtin.text import projects
from pytest_longctx.data.builtin.workspace import Workspace
from pytest_longctx.data.records import FAMILIES, FAR_TOKENS, PLACEMENTS
from pytest_longctx.errors import LongctxError

SHELL_TOOL = "bash"
# Governed actions stay this many (estimated) tokens away from where a rule may stand,
# so the first governed action after a rule is a far target.
QUIET_TOKENS = 650
FOLLOW_UP_AT = 0.3  # the later user message, as a share of the session
ATTEMPTS = 12


@dataclass(frozen=True)
class Occurrence:
    kind: str
    slot: str
    char: int  # in text_without_rule


class RuleSession:
    def __init__(self, ws: Workspace, rng: random.Random, rules: list[Rule], n_tokens: int):
        self.ws, self.rng, self.rules = ws, rng, rules
        self.governed = sorted({kind for rule in rules for kind, _ in rule.governs})
        self.fillers = sorted(k for k in ACTIONS if k not in self.governed)
        self.follow_up_at = FOLLOW_UP_AT * n_tokens
        self.doc = Doc()
        self.code = SourceUse(ws.source_name, "code", ws.license, ws.version)
        self.occurrences: list[Occurrence] = []
        self.quiet_until = 0.0
        self.cycle: list[str] = []
        self.governed_next = False
        self.insert_at: dict[str, int] = {}
        self._open()

    def _open(self) -> None:
        doc, ws = self.doc, self.ws
        open_turn(doc, "system")
        doc.add(f"You are a coding agent working in the repository /workspace/{ws.project}, a checkout of {ws.project}. "
                "You act through the shell tool; keep explanations short.\n\n# Tools\n\n<tools>\n")
        doc.add(tool_json(SHELL_TOOL, "Run a shell command in the repository and return its output.",
                          [("command", "string", "The command line to run.")], ["command"]))
        doc.add(f"\n</tools>\n\n{CALL_FORMAT}\n")
        self.insert_at["system"] = doc.length
        close_turn(doc)
        open_turn(doc, "user")
        name = self.ws.pick_name()
        doc.add(f"In {ws.project}, `{name}` gives wrong results for some inputs. Please find out why, fix it, run the tests "
                "and commit the fix on a new branch.")
        close_turn(doc)
        self.quiet_until = estimated_tokens(doc) + QUIET_TOKENS

    def _follow_up(self) -> None:
        doc = self.doc
        open_turn(doc, "user")
        name = self.ws.pick_name()
        doc.add(self.rng.choice([
            f"Thanks, that helps. While you are at it, please also check how `{name}` handles empty input; the reviewers asked about it.\n",
            f"Good progress. Before you finish, look at `{name}` as well, I suspect the same problem there.\n",
            f"Thanks for the update. Please keep going, and also make sure the tests around `{name}` still pass.\n",
        ]))
        self.insert_at["user"] = doc.length
        close_turn(doc)
        self.quiet_until = estimated_tokens(doc) + QUIET_TOKENS

    def turn(self) -> None:
        if "user" not in self.insert_at and estimated_tokens(self.doc) >= self.follow_up_at:
            self._follow_up()
        kind = self._next_kind()
        action = ACTIONS[kind](self.ws, self.rng)
        doc = self.doc
        open_turn(doc, "assistant")
        doc.add(action.thought + "\n\n")
        values = add_call(doc, SHELL_TOOL, [("command", action.command)], f"tool:{SHELL_TOOL}")
        for slot, offset in action.slots.items():
            self.occurrences.append(Occurrence(kind, slot, values["command"] + offset))
        close_turn(doc)
        open_turn(doc, "user")
        doc.add("<tool_response>\n")
        start, end = doc.add(action.output.text)
        for path in action.output.files:
            self.code.add(path, start, end)
        doc.add("\n</tool_response>")
        close_turn(doc)

    def _next_kind(self) -> str:
        if estimated_tokens(self.doc) < self.quiet_until:
            return self.rng.choice(self.fillers)
        self.governed_next = not self.governed_next
        if not self.governed_next:
            return self.rng.choice(self.fillers)
        if not self.cycle:
            self.cycle = self.rng.sample(self.governed, len(self.governed))
        return self.cycle.pop()


def _pick_rules(rng: random.Random) -> list[tuple[Rule, str]]:
    """Two different rules per family, one for each placement."""
    chosen = []
    for family in FAMILIES:
        pool = [r for r in RULES if r.family == family]
        for rule, placement in zip(rng.sample(pool, 2), PLACEMENTS):
            chosen.append((rule, placement))
    return chosen


def mention_pattern(word: str) -> re.Pattern[str]:
    return re.compile(r"(?<![\w./-])" + re.escape(word) + r"(?![\w-])")


@dataclass
class Candidate:
    rule: Rule
    placement: str
    targets: dict[str, list[dict]]  # lang -> targets
    texts: dict[str, tuple[str, Encoding, tuple[int, int]]]  # lang -> (text_with_rule, encoding, rule_char)


def _candidate(rule: Rule, placement: str, session: RuleSession, cut: CutSession, encoder: SegmentEncoder) -> Candidate | None:
    at = session.insert_at.get(placement)
    if at is None or at >= len(cut.text):
        return None
    without, enc = cut.text, cut.encoding
    governed = [o for o in session.occurrences if (o.kind, o.slot) in rule.governs and o.char >= at]
    first_char = governed[0].char if governed else None
    lines = {lang: rule.text(lang) for lang in LANGS}
    try:
        fitted = {lang: encoder.fit(without[:at] + line + without[at:], len(enc)) for lang, line in lines.items()}
    except CutError:
        return None  # the rule would need a cut the tokenizer cannot make; another rule takes its place
    texts, targets = {}, {}
    for lang, line in lines.items():
        with_text, with_enc = fitted[lang]
        rule_char = (at, at + len(line))
        rule_end = with_enc.before(rule_char[1])
        found = []
        for occ in governed:
            shifted = occ.char + len(line)
            if shifted >= len(with_text) or not enc.starts_at(occ.char) or not with_enc.starts_at(shifted):
                continue
            pos_without, start, end = token_span(enc, occ.char)
            pos_with, _, with_end = token_span(with_enc, shifted)
            if with_end > len(with_text):
                continue
            distance = pos_with - rule_end
            if distance < FAR_TOKENS:
                continue
            original = without[start:end]
            expected = (" " if original.startswith(" ") else "") + rule.expected
            expected_id = int(encoder.encode(expected).ids[0])
            if expected_id == int(enc.ids[pos_without]):
                raise LongctxError(f"builder: rule {rule.id} implies {expected!r}, which starts like the original {original!r}")
            before = with_text[: rule_char[0]] + " " * len(line) + with_text[rule_char[1] : shifted]
            found.append({
                "char_without_rule": [start, end],
                "char_with_rule": [start + len(line), end + len(line)],
                "expected_text": expected,
                "original_text": original,
                "distance_tokens": distance,
                "first": occ.char == first_char,
                "mentioned": bool(mention_pattern(rule.expected).search(before)),
                "qwen_pos_without_rule": pos_without,
                "qwen_pos_with_rule": pos_with,
                "qwen_expected_id": expected_id,
            })
        texts[lang] = (with_text, with_enc, rule_char)
        targets[lang] = found
    if not all(targets.values()) or len({len(t) for t in targets.values()}) != 1:
        return None
    return Candidate(rule, placement, targets, texts)


def _session(
    plan: Plan, seed: int, index: int, encoder: SegmentEncoder, want: int
) -> tuple[RuleSession, Documents, CutSession, list[Candidate]]:
    project_files = projects()
    names = sorted(project_files)
    project = names[index % len(names)]
    for attempt in range(ATTEMPTS):
        rng = random.Random(f"{seed}:rules:{plan.length}:{index}:{attempt}")
        rules = _pick_rules(rng)
        session = RuleSession(Workspace(project, project_files[project], rng), rng, [r for r, _ in rules], session_tokens(plan.n_tokens))
        documents = Documents(session.doc, random.Random(f"{seed}:rules:{plan.length}:{index}:{attempt}:documents"), project)
        try:
            cut = grow_and_cut(session.doc, session.turn, plan.n_tokens, encoder, documents.add)
        except CutError:
            continue
        found = [c for rule, placement in rules if (c := _candidate(rule, placement, session, cut, encoder))]
        if len(found) >= want:
            order = sorted(range(len(found)), key=lambda n: (-len(found[n].targets["en"]), n))[:want]
            return session, documents, cut, [found[n] for n in sorted(order)]
    raise LongctxError(f"builder: rules session {index} at {plan.length} has fewer than {want} rules with far targets")


def build_rules(plan: Plan, seed: int, encoder: SegmentEncoder, langs: tuple[str, ...] = LANGS) -> dict[str, list[dict]]:
    """``rules_<lang>`` -> rows, for the requested languages."""
    rows: dict[str, list[dict]] = {f"rules_{lang}": [] for lang in langs}
    for index, want in enumerate(plan.rule_items):
        session, documents, cut, candidates = _session(plan, seed, index, encoder, want)
        context_id = f"rules-{plan.length}-s{index:02d}"
        for candidate in candidates:
            for lang in langs:
                with_text, with_enc, rule_char = candidate.texts[lang]
                rows[f"rules_{lang}"].append(
                    {
                        "id": f"rules_{lang}-{plan.length}-s{index:02d}-{candidate.rule.family}-{candidate.placement}",
                        "context_id": context_id,
                        "text_without_rule": cut.text,
                        "text_with_rule": with_text,
                        "rule": candidate.rule.text(lang),
                        "rule_char": list(rule_char),
                        "family": candidate.rule.family,
                        "placement": candidate.placement,
                        "lang": lang,
                        "targets": candidate.targets[lang],
                        "sources": source_records([session.code, *documents.uses()], cut.encoding),
                        "qwen_ids_without_rule": cut.encoding.ids,
                        "qwen_ids_with_rule": with_enc.ids,
                    }
                )
    return rows
