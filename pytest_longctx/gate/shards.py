"""A selection split into shards (``--longctx-shard K/N``): which items each shard
reads (``split``), and what a shard knows of the whole selection it is a part of (``ShardPart``).

Every shard plans the whole selection, as an unsharded run does: each unit's items, the groups the engine reads
together (items that share more than the prefix every item of the unit begins with) and what reading each group
forwards. That plan is the same in every shard, and the split is made from it alone, so every shard makes the same
split without asking the others. A group is never split (its items share a prefix, read once), and the groups are
dealt in reading order (the order of their first item in ``reading_order``), each to the shard that has the fewest
tokens so far (the first such shard on a tie): every shard gets a fair part of every set, early and late items alike,
and about as many tokens as the others.

Each shard reads its own items with the unit's shared prefix run once and each group's branch after it, as an
unsharded run reads them: its figures are the unsharded run's to the last bit. Under ``exact`` a shard reads its
items in the global order and stops where the checks are settled by what it knows, its own items read and every
other shard's unread (``Reading``'s ``only``): with less known than the unsharded run at every step, it settles no
check sooner, so it reads every item of its part that the unsharded run reads, and perhaps more. Under
``confident`` a test's path depends on every earlier item, which a shard cannot see, so a shard reads every item of
its part that a check counts."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from pytest_longctx.data.records import ItemKey
from pytest_longctx.gate.sequential.checks import reading_order
from pytest_longctx.options.table import Sequential
from pytest_longctx.parse import Shard
from pytest_longctx.scoring.groups import Groups


@dataclass(frozen=True)
class UnitPlan:
    """One unit's needed items as the engine reads them, without the plans: each item's group, what reading a whole
    group forwards after the prefix every item shares (``costs``), and that prefix's tokens (``shared``: forwarded by
    the first read of the unit). A merge replays a sequential reading from it (``cost`` and ``whole`` as ``Groups``
    gives them for whole groups) without the model's tokenizer."""

    group: dict[ItemKey, int]
    costs: dict[int, int]
    shared: int

    @classmethod
    def of(cls, groups: Groups) -> UnitPlan:
        members: dict[int, list[ItemKey]] = {}
        for key, number in groups.group.items():
            members.setdefault(number, []).append(key)
        costs = {number: groups.cost(sorted(keys), False) for number, keys in members.items()}
        shared = len(groups.shared.ids) if groups.shared is not None else 0
        return cls(dict(groups.group), costs, shared)

    def members(self) -> dict[int, list[ItemKey]]:
        found: dict[int, list[ItemKey]] = {}
        for key, number in self.group.items():
            found.setdefault(number, []).append(key)
        return found

    def cost(self, keys: Sequence[ItemKey], first: bool) -> int:
        """What reading ``keys`` together forwards (``first``: the unit's first read, which runs the shared prefix
        too); ``keys`` are whole groups, as sequential reading reads them."""
        numbers = {self.group[key] for key in keys}
        members = self.members()
        partial = [n for n in numbers if not set(members[n]) <= set(keys)]
        if partial:
            raise ValueError(f"{'/'.join(members[partial[0]][0])}: its group is read in part, which no reading does")
        return sum(self.costs[n] for n in numbers) + (self.shared if first and keys else 0)

    def whole(self, keys: Sequence[ItemKey]) -> int:
        """What reading ``keys`` (whole groups) at once forwards."""
        return self.cost(keys, True)

    def to_json(self) -> dict[str, Any]:
        return {"groups": [[*key, number] for key, number in self.group.items()],
                "costs": [[number, tokens] for number, tokens in sorted(self.costs.items())],
                "shared": self.shared}

    @classmethod
    def from_json(cls, found: Mapping[str, Any]) -> UnitPlan:
        return cls({(str(c), str(n), str(i)): int(g) for c, n, i, g in found["groups"]},
                   {int(number): int(tokens) for number, tokens in found["costs"]}, int(found["shared"]))


def split(units: Mapping[str, UnitPlan], count: int) -> dict[ItemKey, int]:
    """Item -> the shard (1 to ``count``) that reads it: the groups of every unit in reading order, the units taken
    in turn by name, each group to the shard with the fewest tokens so far (the lowest number on a tie)."""
    queues = []
    for unit in sorted(units):
        plan = units[unit]
        rank = {key: n for n, key in enumerate(reading_order(plan.group))}
        # (the group's tokens, its items) in the order of its first item; a group of no tokens still takes a turn
        groups = [(max(plan.costs[number], 1), keys) for number, keys in plan.members().items()]
        queues.append(sorted(groups, key=lambda group: min(rank[key] for key in group[1])))
    load = [0] * count
    shard_of: dict[ItemKey, int] = {}
    for turn in range(max(map(len, queues), default=0)):
        for queue in queues:
            if turn < len(queue):
                tokens, keys = queue[turn]
                chosen = min(range(count), key=lambda n: (load[n], n))
                load[chosen] += tokens
                shard_of.update((key, chosen + 1) for key in keys)
    return shard_of


def reading_mode(mode: Sequential) -> Sequential:
    """How a shard reads its part under ``mode``: ``exact``'s bounds hold on a part (what a shard knows is less than
    the unsharded run knows), a confident test's path does not, so a shard then reads every counted item."""
    return Sequential.OFF if mode == Sequential.CONFIDENT else mode


@dataclass
class ShardPart:
    """A shard's side of a run: which shard it is, the plan of every unit of the whole selection, and the split."""

    shard: Shard
    units: dict[str, UnitPlan] = field(default_factory=dict)
    shard_of: dict[ItemKey, int] | None = None  # made once every needed unit is planned

    def plan(self, groups: Mapping[str, Groups], needed: Mapping[str, Iterable[ItemKey]]) -> None:
        """Make the split once every needed unit is planned (a unit that cannot be read has no groups: its tests fail
        in every shard, and no merge judges without them)."""
        if self.shard_of is not None:
            return
        self.units = {unit: UnitPlan.of(groups[unit]) for unit in needed if unit in groups}
        self.shard_of = split(self.units, self.shard.count)

    def mine(self, key: ItemKey) -> bool:
        return self.shard_of is not None and self.shard_of.get(key) == self.shard.index

    def slice(self, keys: Iterable[ItemKey]) -> set[ItemKey]:
        return {key for key in keys if self.mine(key)}

    def elsewhere(self, kind: str, key: ItemKey | None) -> str | None:
        """Why a test is not judged in this shard (an item another shard reads; a row or cell, which needs every
        shard), or None for an item of its own."""
        if kind == "item" and key is not None and self.mine(key):
            return None
        if kind == "item" and key is not None and self.shard_of is not None and key in self.shard_of:
            return (f"shard {self.shard_of[key]}/{self.shard.count} reads it (this is shard {self.shard}): judged by "
                    "longctx merge over every shard")
        return f"judged over every shard by longctx merge (this is shard {self.shard}, which read its part)"

    def to_json(self) -> dict[str, Any]:
        return {"shard": str(self.shard), "units": {unit: plan.to_json() for unit, plan in self.units.items()},
                "shard_of": None if self.shard_of is None else [[*key, n] for key, n in self.shard_of.items()]}

    def absorb(self, found: Mapping[str, Any]) -> None:
        """A worker's plan and split (pytest-xdist: the controller plans nothing itself)."""
        if self.shard_of is None and found["shard_of"] is not None:
            self.units = {unit: UnitPlan.from_json(plan) for unit, plan in found["units"].items()}
            self.shard_of = {(str(c), str(n), str(i)): int(k) for c, n, i, k in found["shard_of"]}
