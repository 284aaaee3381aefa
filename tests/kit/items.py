"""Small hand-built benchmark items of every config, written as the published files are.

Texts are a few hundred tokens of seeded filler around the parts that matter, so tests
run in seconds; the ``qwen_*`` fields are filled in with the Qwen3.5 tokenizer.
"""
from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

WORDS = (
    "the river valley town market bridge winter harvest council school railway station north "
    "museum library garden castle church forest harbour mill road village county century trade"
).split()


def filler(rng: random.Random, words: int) -> str:
    """``words`` words drawn by ``rng`` from ``WORDS``, as capitalised sentences of 6 to 12 words."""
    sentences, left = [], words
    while left > 0:
        n = min(left, rng.randint(6, 12))
        sentence = " ".join(rng.choice(WORDS) for _ in range(n))
        sentences.append(sentence[0].upper() + sentence[1:] + ".")
        left -= n
    return " ".join(sentences)


class Text:
    """Builds a text piece by piece and remembers the span of marked pieces."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.length = 0

    def add(self, piece: str) -> tuple[int, int]:
        """Append ``piece``; its (start, end) characters in the text."""
        start = self.length
        self.parts.append(piece)
        self.length += len(piece)
        return start, self.length

    @property
    def text(self) -> str:
        """The pieces added so far, joined."""
        return "".join(self.parts)


def fact_row(item_id: str, seed: int, n_facts: int = 3, gap: int = 40) -> dict[str, Any]:
    """A facts item: ``n_facts`` booked flights among ``gap`` words of filler each, then a question for each."""
    rng = random.Random(seed)
    names = ["Fiona", "Tomas", "Greta", "Ilse", "Marek", "Oskar"]
    t = Text()
    facts = []
    for n in range(n_facts):
        t.add(filler(rng, gap) + " ")
        number = str(rng.randint(10000, 99999))
        fact = f"{names[n]} booked flight {number}."
        facts.append((names[n], number, fact, t.add(fact)))
        t.add(" ")
    t.add(filler(rng, gap))
    targets = []
    for name, number, fact, fact_char in facts:
        t.add(f" Which flight did {name} book? Flight")
        answer_char = t.add(f" {number}.")
        targets.append({"answer_char": list(answer_char), "answer": f" {number}.", "fact_char": list(fact_char),
                        "fact": fact, "distance_tokens": 0})
    return {"id": item_id, "text": t.text, "targets": targets, "source": {"articles": ["Test"]}}


def tool_row(item_id: str, seed: int) -> dict[str, Any]:
    """A tool-call item: an agent session in ChatML whose targets are the tool's name and parameter (far), the
    call's next token and a documented command (near), and one that starts inside a word."""
    rng = random.Random(seed)
    t = Text()
    t.add("<|im_start|>system\nYou are an agent.\n<tools>\n")
    definition = '{"name": "read_file", "parameters": {"path": {"type": "string"}}}'
    def_char = t.add(definition)
    t.add("\n</tools>\nDocumented commands: `")
    command_char = t.add("lsx")
    t.add("` lists files.<|im_end|>\n")
    t.add("<|im_start|>user\n" + filler(rng, 60) + "<|im_end|>\n<|im_start|>assistant\n<tool_call>\n<function=")
    name_char = t.add("read_file")
    t.add(">\n<parameter=")
    param_char = t.add("path")
    t.add(">\nsrc/app.py\n")
    next_char = t.add("</parameter")
    t.add(">\n</function>\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n" + filler(rng, 40)
          + "\n</tool_response><|im_end|>\n<|im_start|>assistant\nRunning:")
    cmd_char = t.add(" lsx")
    t.add(" -l\n" + filler(rng, 20))
    # A target that starts inside a word: unaligned under any sensible tokenizer.
    inner_char = (name_char[0] + 1, name_char[0] + 4)
    targets = [
        {
            "char": list(name_char),
            "target": "read",
            "kind": "name",
            "far": True,
            "fresh": True,
            "definition_id": "t0",
            "distance_tokens": 600,
        },
        {
            "char": list(param_char),
            "target": "path",
            "kind": "param",
            "far": True,
            "fresh": False,
            "definition_id": "t0",
            "distance_tokens": 600,
        },
        {
            "char": list(next_char),
            "target": "</",
            "kind": "next",
            "far": False,
            "fresh": False,
            "definition_id": "t0",
            "distance_tokens": 100,
        },
        {
            "char": list(cmd_char),
            "target": " lsx",
            "kind": "command",
            "far": False,
            "fresh": False,
            "definition_id": "c0",
            "distance_tokens": 90,
        },
        {
            "char": list(inner_char),
            "target": "ead",
            "kind": "name",
            "far": True,
            "fresh": True,
            "definition_id": "t0",
            "distance_tokens": 600,
        },
    ]
    return {
        "id": item_id,
        "text": t.text,
        "definitions": [
            {"id": "t0", "name": "read_file", "kind": "tool", "char": list(def_char), "text": definition},
            {"id": "c0", "name": "lsx", "kind": "command", "char": list(command_char), "text": "lsx"},
        ],
        "targets": targets,
    }


RULES = {
    "substitution": ("Use rg instead of grep for every search.", " grep", " rg"),
    "redirect": ("Write all logs to /tmp/out instead of the project folder.", " cat", " tee"),
    "required": ("Always run ls before cat.", " cat", " ls"),
}


def rules_rows(config: str, context_id: str, seed: int) -> list[dict[str, Any]]:
    """One session, one item per (family, placement); targets after a long stretch."""
    rng = random.Random(seed)
    head = "<|im_start|>system\nYou are a shell agent. Be brief."
    user_turn = "<|im_end|>\n<|im_start|>user\nPlease look at the project." + " " + filler(rng, 20)
    body_parts = ["<|im_end|>\n<|im_start|>assistant\n" + filler(rng, 50)]
    actions = []
    for n in range(2):
        body_parts.append("\nNow run:")
        actions.append(len("".join(body_parts)))
        body_parts.append(f" grep -n item{n} notes.txt\n" + filler(rng, 30))
    body = "".join(body_parts) + "<|im_end|>\n"
    rows = []
    for family, (rule, _original, expected) in RULES.items():
        for placement in ("system", "user"):
            without = head + user_turn + body
            cut = len(head) if placement == "system" else len(head + user_turn)
            line = "\n" + rule
            with_rule = without[:cut] + line + without[cut:]
            offset = len(head + user_turn)
            targets = []
            for n, at in enumerate(actions):
                w0 = offset + at
                targets.append(
                    {
                        "char_without_rule": [w0, w0 + len(" grep")],
                        "char_with_rule": [w0 + len(line), w0 + len(line) + len(" grep")],
                        "expected_text": expected,
                        "original_text": " grep",
                        "distance_tokens": 700,
                        "first": n == 0,
                        "mentioned": False,
                    }
                )
            rows.append(
                {
                    "id": f"{context_id}-{family}-{placement}",
                    "context_id": context_id,
                    "text_without_rule": without,
                    "text_with_rule": with_rule,
                    "rule": rule,
                    "rule_char": [cut + 1, cut + len(line)],
                    "family": family,
                    "placement": placement,
                    "lang": config.removeprefix("rules_"),
                    "targets": targets,
                }
            )
    return rows


def add_qwen_fields(config: str, row: dict[str, Any], tokenizer: Any) -> dict[str, Any]:
    """Fill in the stored Qwen3.5 ids and target token positions from the offsets."""

    def encode(text: str) -> tuple[list[int], dict[int, int]]:
        enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        return enc["input_ids"], {start: i for i, (start, _) in reversed(list(enumerate(enc["offset_mapping"])))}

    if config.startswith("rules"):
        ids_w, starts_w = encode(row["text_without_rule"])
        ids_r, starts_r = encode(row["text_with_rule"])
        row["qwen_ids_without_rule"], row["qwen_ids_with_rule"] = ids_w, ids_r
        for t in row["targets"]:
            t["qwen_pos_without_rule"] = starts_w[t["char_without_rule"][0]]
            t["qwen_pos_with_rule"] = starts_r[t["char_with_rule"][0]]
            t["qwen_expected_id"] = tokenizer(t["expected_text"], add_special_tokens=False)["input_ids"][0]
        return row
    ids, starts = encode(row["text"])
    row["qwen_ids"] = ids
    for t in row["targets"]:
        if config == "facts":
            first = starts[t["answer_char"][0]]
            last = max(i for s, i in starts.items() if s < t["answer_char"][1])
            t["qwen_answer_pos"] = [first, last + 1]
        else:
            t["qwen_pos"] = starts.get(t["char"][0], starts[max(s for s in starts if s <= t["char"][0])])
    return row


def write_split(folder: Path, config: str, split: str, rows: list[dict[str, Any]], fmt: str = "parquet") -> Path:
    """``rows`` written as ``folder/config``'s ``split`` as the published files are (parquet, or ``fmt`` jsonl); the file."""
    target = folder / config
    target.mkdir(parents=True, exist_ok=True)
    if fmt == "jsonl":
        path = target / f"{split}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    else:
        path = target / f"{split}-00000-of-00001.parquet"
        pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def build_rows(tokenizer: Any, lengths: tuple[str, ...] = ("2k",)) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """Every config at every length: 2 facts items, 2 tool items, 2 rules contexts x 6 items."""
    out: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for n_length, length in enumerate(lengths):
        base = 100 * n_length
        out[("facts", length)] = [fact_row(f"f{base + i}", base + i) for i in range(2)]
        out[("tool_calls", length)] = [tool_row(f"t{base + i}", base + i) for i in range(2)]
        for config in ("rules_en", "rules_cs", "rules_de"):
            out[(config, length)] = [r for c in range(2) for r in rules_rows(config, f"c{base + c}", base + c)]
    return {key: [add_qwen_fields(key[0], row, tokenizer) for row in rows] for key, rows in out.items()}
