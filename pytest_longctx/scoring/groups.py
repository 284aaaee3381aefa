"""A selection's items as the engine reads them, for a reading that takes them a part at a time: which items are
read together (``Groups.of``: items whose sequences share more than the prefix every item begins with), what
reading a group of them forwards (``cost``), and what reading them all at once forwards (``whole``).

The engine runs a selection as one prefix tree: the prefix every request begins with, then one branch per
distinct continuation. Two items whose requests meet in a branch (a rules session's items, with and without
their rule line; a request two items share) forward that branch's tokens once when read together, and again
when read apart. Items of different groups share the common prefix alone, which the engine keeps across runs
(``SharedPrefix``): so reading the groups one at a time forwards what reading them at once does, and reading
some of them less."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from pytest_longctx.data.records import ItemKey
from pytest_longctx.scoring import prefix_tree
from pytest_longctx.scoring.engine import PRESSED, TREE, SharedPrefix, collect
from pytest_longctx.scoring.reads import ItemReads


def _key(plan: ItemReads) -> ItemKey:
    return plan.config, plan.length, plan.item.id


@dataclass
class Groups:
    """The items of a selection (``plans``), the group of each (read together), and the prefix they all share."""

    plans: dict[ItemKey, ItemReads]
    group: dict[ItemKey, int]
    shared: SharedPrefix | None
    how: str  # how the engine reads the backend (engine.how_read): a prefix tree, each request whole, or pressed

    @classmethod
    def of(cls, plans: Sequence[ItemReads], how: str = TREE) -> Groups:
        """The groups of ``plans``: items joined where a request of each lies in one branch below the prefix they
        all share (read each whole, items share nothing; under a KV-cache press, those of one context share it)."""
        keys = [_key(p) for p in plans]
        parent = list(range(len(plans)))

        def find(n: int) -> int:
            while parent[n] != n:
                parent[n] = parent[parent[n]]
                n = parent[n]
            return n

        def join(a: int, b: int) -> None:
            parent[find(a)] = find(b)

        requests, _ = collect(plans, how == PRESSED)
        for request in requests:  # one request of several items: the same tokens
            members = sorted(request.items)
            for other in members[1:]:
                join(other, members[0])
        if requests and how == PRESSED:
            owners: dict[bytes, int] = {}
            for request in requests:
                first = min(request.items)
                join(first, owners.setdefault(request.ids[: request.context].tobytes(), first))
        elif requests and how == TREE:
            root, paths = prefix_tree.build([r.ids for r in requests])
            below = 1 if len(root.children) == 1 else 0  # the branches start under the shared prefix's node
            owner: dict[int, int] = {}
            for request, path in zip(requests, paths):
                if len(path) > below:  # a request that ends inside the shared prefix joins no branch
                    first = min(request.items)
                    join(first, owner.setdefault(id(path[below]), first))
        return cls(dict(zip(keys, plans)), {key: find(n) for n, key in enumerate(keys)},
                   SharedPrefix.of(plans) if how == TREE else None, how)

    def cost(self, keys: Sequence[ItemKey], first: bool) -> int:
        """The tokens reading these items together forwards, after ``first``: the unit's first read, which also
        forwards the prefix every item shares (later reads start after it)."""
        requests, _ = collect([self.plans[key] for key in keys], self.how == PRESSED)
        if not requests:
            return 0
        if self.how == PRESSED:  # each context compressed once, its questions a tree after it
            contexts: dict[bytes, int] = {}
            questions: dict[bytes, list[np.ndarray]] = {}
            for request in requests:
                context = request.ids[: request.context].tobytes()
                contexts[context] = request.context
                questions.setdefault(context, []).append(request.ids[request.context:])
            return sum(contexts[c] + prefix_tree.total_tokens(prefix_tree.build(questions[c])[0]) for c in contexts)
        if self.how != TREE:
            return sum(len(r.ids) for r in requests)
        root, _ = prefix_tree.build([r.ids for r in requests])
        kept = len(self.shared.ids) if self.shared is not None else 0
        return prefix_tree.total_tokens(root) - (0 if first else kept)

    def whole(self, keys: Sequence[ItemKey]) -> int:
        """The tokens reading all these items at once forwards (what a full read of them forwards)."""
        return self.cost(keys, True)
