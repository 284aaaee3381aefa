"""The facts config: fact sentences planted in real Wikipedia text and asked for again
thousands of tokens later ("Which flight did Fiona book? Fiona booked flight 48213.")."""
from __future__ import annotations

import bisect
import random
import re
from dataclasses import dataclass

from pytest_longctx.data.builtin.fit import SegmentEncoder
from pytest_longctx.data.builtin.plan import Plan
from pytest_longctx.data.builtin.sourcing import SourceUse, source_records
from pytest_longctx.data.builtin.text import WIKIPEDIA_SOURCE, Article, wikipedia_articles

NAMES = (
    "Fiona", "Marcus", "Leila", "Tomas", "Greta", "Nikhil", "Olga", "Bruno", "Hana", "Desmond",
    "Ines", "Rafael", "Yuki", "Carmen", "Anton", "Priya", "Jonas", "Maeve", "Viktor", "Selma",
    "Dmitri", "Lucia", "Kwame", "Ingrid", "Pavel", "Noor", "Emil", "Rosa", "Tariq", "Astrid",
    "Felix", "Amara", "Oskar", "Zofia", "Henrik", "Mira", "Julian", "Sanna", "Omar", "Clara",
)
# (fact sentence, question, the start of the answer sentence); {name} and {number} filled in
OBJECTS = (
    ("{name} booked flight {number}.", "Which flight did {name} book?", "{name} booked flight"),
    ("{name} was given locker {number}.", "Which locker was {name} given?", "{name} was given locker"),
    ("{name} reserved room {number}.", "Which room did {name} reserve?", "{name} reserved room"),
    ("{name} ordered spare part {number}.", "Which spare part did {name} order?", "{name} ordered spare part"),
    ("{name} wrote down the code {number}.", "What code did {name} write down?", "{name} wrote down the code"),
    ("{name} drove truck {number}.", "Which truck did {name} drive?", "{name} drove truck"),
    ("{name} filed report {number}.", "Which report did {name} file?", "{name} filed report"),
    ("{name} took ticket {number}.", "Which ticket did {name} take?", "{name} took ticket"),
    ("{name} borrowed library book {number}.", "Which library book did {name} borrow?", "{name} borrowed library book"),
    ("{name} shipped parcel {number}.", "Which parcel did {name} ship?", "{name} shipped parcel"),
    ("{name} signed contract {number}.", "Which contract did {name} sign?", "{name} signed contract"),
    ("{name} was assigned badge {number}.", "Which badge was {name} assigned?", "{name} was assigned badge"),
)
SENTENCE_START = re.compile(r"(?<=[a-z0-9)][.!?] )(?=[A-Z])")


@dataclass(frozen=True)
class Planted:
    fact: str
    query: str  # the question and the start of the answer sentence, up to the answer
    answer: str  # " 48213."


def _plants(rng: random.Random, count: int, text: str) -> list[Planted]:
    names = rng.sample(NAMES, count)
    objects = rng.sample(OBJECTS, count)
    numbers: list[int] = []
    while len(numbers) < count:
        number = rng.randint(10000, 99999)
        if number not in numbers and str(number) not in text:
            numbers.append(number)
    return [
        Planted(
            fact=fact.format(name=name, number=number),
            query=f"{question.format(name=name)} {start.format(name=name)}",
            answer=f" {number}.",
        )
        for name, number, (fact, question, start) in zip(names, numbers, objects)
    ]


def _base_text(articles: list[Article]) -> str:
    return "\n\n".join(a.title + "\n\n" + "\n\n".join(a.paragraphs) for a in articles)


def _slots(rng: random.Random, count: int, lo: float, hi: float) -> list[float]:
    width = (hi - lo) / count
    return [lo + width * (n + rng.uniform(0.15, 0.85)) for n in range(count)]


def build_facts(plan: Plan, seed: int, encoder: SegmentEncoder) -> list[dict]:
    articles = list(wikipedia_articles())
    sizes = dict(zip(articles, map(len, encoder.encode_many([_base_text([a]) for a in articles]))))
    order = articles[:]
    random.Random(f"{seed}:facts:{plan.length}:articles").shuffle(order)
    rows, cursor = [], 0
    for index in range(plan.fact_items):
        rng = random.Random(f"{seed}:facts:{plan.length}:{index}")
        chosen: list[Article] = []
        while sum(sizes[a] for a in chosen) < plan.n_tokens * 1.05:
            if cursor == len(order):
                cursor = 0  # the source is reused from the start only if a length needs more text than it has
            chosen.append(order[cursor])
            cursor += 1
        rows.append(_item(plan, rng, chosen, encoder, f"facts-{plan.length}-{index:02d}"))
    return rows


def _item(plan: Plan, rng: random.Random, articles: list[Article], encoder: SegmentEncoder, item_id: str) -> dict:
    base = _base_text(articles)
    base_encoding = encoder.encode(base)
    starts = [m.start() for m in SENTENCE_START.finditer(base)]
    count = plan.facts_per_item
    plants = _plants(rng, count, base)
    fact_at = _slots(rng, count, 0.03, 0.46)
    query_at = _slots(rng, count, 0.54, 0.9)
    query_order = rng.sample(range(count), count)
    sentences = [p.fact for p in plants] + [p.query + p.answer for p in plants]
    planted_tokens = sum(len(e) + 1 for e in encoder.encode_many(sentences))
    room = plan.n_tokens - planted_tokens  # base-text tokens in the final text
    inserts: list[tuple[int, str, str, int]] = []  # (char, kind, sentence, plant)
    for n in range(count):
        for kind, where in (("fact", fact_at[n]), ("query", query_at[query_order.index(n)])):
            token = int(where * room)
            char = int(base_encoding.starts[min(token, len(base_encoding) - 1)])
            at = starts[min(bisect.bisect_left(starts, char), len(starts) - 1)]
            sentence = plants[n].fact if kind == "fact" else plants[n].query + plants[n].answer
            inserts.append((at, kind, sentence, n))
    inserts.sort(key=lambda i: (i[0], i[1] == "query", i[3]))
    pieces, spans, pos = [], {}, 0
    length = 0
    for at, kind, sentence, n in inserts:
        pieces.append(base[pos:at])
        length += at - pos
        spans[(kind, n)] = (length, length + len(sentence))
        pieces.append(sentence + " ")
        length += len(sentence) + 1
        pos = at
    pieces.append(base[pos:])
    full = "".join(pieces)
    text, encoding = encoder.fit(full, plan.n_tokens)
    wiki = SourceUse(WIKIPEDIA_SOURCE["name"], "text", WIKIPEDIA_SOURCE["license"], WIKIPEDIA_SOURCE["revision"])
    used_titles: list[str] = []
    offset = 0
    for article in articles:
        size = len(article.title) + 2 + len("\n\n".join(article.paragraphs))
        if offset < len(base) and _shift(offset, inserts) < len(text):
            used_titles.append(article.title)
            wiki.add(article.title, _shift(offset, inserts), min(_shift(offset + size, inserts), len(text)))
        offset += size + 2
    planted = [spans[key] for key in spans]
    wiki.ranges = _minus(wiki.ranges, planted)
    targets = []
    for n, plant in enumerate(plants):
        fact_span, query_span = spans[("fact", n)], spans[("query", n)]
        answer_char = (query_span[1] - len(plant.answer), query_span[1])
        if answer_char[1] > len(text) or text[answer_char[0] : answer_char[1]] != plant.answer:
            raise AssertionError(f"{item_id}: query {n} was cut off; the base text is too short")
        if not encoding.starts_at(answer_char[0]):
            raise AssertionError(f"{item_id}: answer {n} does not start on a token boundary")
        first = encoding.before(answer_char[0])
        end = encoding.covering(answer_char[1] - 1) + 1
        targets.append(
            {
                "answer_char": list(answer_char),
                "answer": plant.answer,
                "fact_char": list(fact_span),
                "fact": plant.fact,
                "distance_tokens": first - encoding.before(fact_span[1]),
                "qwen_answer_pos": [first, end],
            }
        )
    targets.sort(key=lambda t: t["answer_char"][0])
    return {
        "id": item_id,
        "text": text,
        "targets": targets,
        "source": {**WIKIPEDIA_SOURCE, "articles": used_titles},
        "sources": source_records([wiki], encoding),
        "qwen_ids": encoding.ids,
    }


def _shift(char: int, inserts: list[tuple[int, str, str, int]]) -> int:
    """Where a character of the base text ends up after the insertions."""
    return char + sum(len(sentence) + 1 for at, _, sentence, _ in inserts if at <= char)


def _minus(ranges: list[tuple[int, int]], holes: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out = []
    for start, end in ranges:
        cuts = sorted(h for h in holes if h[0] < end and h[1] > start)
        for lo, hi in cuts:
            if lo > start:
                out.append((start, lo))
            start = max(start, hi + 1)
        if end > start:
            out.append((start, end))
    return out


