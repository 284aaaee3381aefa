"""How many items each config gets at each length (the published card's counts at
8k and 32k), decided before any text is built so that tests can check it cheaply."""
from __future__ import annotations

from dataclasses import dataclass

from pytest_longctx.data.lengths import length_tokens

DEFAULT_LENGTHS = ("2k", "8k", "32k")
DEFAULT_SEED = 0  # longctx build --seed: the same seed gives the same bytes
SESSIONS = 16
RULE_SLOTS = 6  # 3 families x 2 placements: the candidate items of one session
# rules items per length: the card's 82 (8k) and 84 (32k); a 2k session has room for
# few governed actions 512 tokens after a rule, so it carries 3, and so does any session
# shorter than 8k; a longer one carries 5.
RULE_ITEMS = {"2k": 48, "8k": 82, "32k": 84}
SHORT_SESSION_TOKENS = 8192
FACT_ITEMS = {"8k": 8, "32k": 7}
FACTS_PER_ITEM = 8


@dataclass(frozen=True)
class Plan:
    length: str
    n_tokens: int  # every text has n_tokens tokens: the length plus one
    fact_items: int
    facts_per_item: int
    tool_items: int
    rule_items: tuple[int, ...]  # items per session


def plan(length: str, limit: int | None = None) -> Plan:
    """Counts for one length; ``limit`` keeps at most that many items (facts,
    tool_calls) or sessions (rules) per config, for quick builds."""
    tokens = length_tokens(length)
    total = RULE_ITEMS.get(length, RULE_ITEMS["2k"] if tokens < SHORT_SESSION_TOKENS else SESSIONS * 5)
    base, extra = divmod(total, SESSIONS)
    per_session = tuple(base + (1 if n < extra else 0) for n in range(SESSIONS))
    if max(per_session) > RULE_SLOTS:
        raise ValueError(f"{length}: {total} rules items do not fit {SESSIONS} sessions")
    cap = (lambda n: n) if limit is None else (lambda n: min(n, limit))
    return Plan(
        length=length,
        n_tokens=tokens + 1,
        fact_items=cap(FACT_ITEMS.get(length, 8)),
        facts_per_item=FACTS_PER_ITEM,
        tool_items=cap(SESSIONS),
        rule_items=per_session[: cap(SESSIONS)],
    )
