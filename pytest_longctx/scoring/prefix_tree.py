"""The forward passes as a prefix tree: every distinct token prefix appears once.

Sequences (already cut after their last read) are sorted; neighbours' longest common
prefixes give a compressed trie whose nodes are token spans ``[start, end)`` shared by
every sequence below them. Running the tree depth first, each node continues from its
parent's cache, so the tokens forwarded are exactly the distinct prefix tokens.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(eq=False)
class Node:
    """A token span ``[start, end)`` shared by every sequence below it, with the reads wanted in it."""

    start: int
    end: int
    ids: np.ndarray  # a sequence that passes through this node (its tokens [start, end) are the node's)
    children: list[Node] = field(default_factory=list)
    reads: dict[int, set[int]] = field(default_factory=dict)  # prediction index -> token ids wanted
    results: dict[int, tuple] = field(default_factory=dict)  # index -> the engine's answer (top1, logprobs, top-k)
    ends: list[int] = field(default_factory=list)  # sequences that end at this node

    @property
    def tokens(self) -> int:
        return self.end - self.start


def common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    n = min(len(a), len(b))
    differ = np.flatnonzero(a[:n] != b[:n])
    return int(differ[0]) if len(differ) else n


def build(sequences: list[np.ndarray]) -> tuple[Node, list[list[Node]]]:
    """(root, path of nodes from the root for each sequence). Sequences must be distinct."""
    order = sorted(range(len(sequences)), key=lambda i: sequences[i].tolist())
    root = Node(0, 0, np.zeros(0, dtype=np.int64))
    stack = [root]  # the path of the previous sequence
    parent: dict[int, Node] = {}
    leaf: dict[int, Node] = {}
    previous: np.ndarray | None = None
    for index in order:
        ids = sequences[index]
        shared = 0 if previous is None else common_prefix(previous, ids)
        while len(stack) > 1 and stack[-1].start >= shared:
            stack.pop()
        top = stack[-1]
        if top.end > shared:  # the branch falls inside ``top``: split it there
            tail = Node(shared, top.end, top.ids, top.children, ends=top.ends)
            for child in tail.children:
                parent[id(child)] = tail
            for seq, node in leaf.items():
                if node is top:
                    leaf[seq] = tail
            top.end, top.children, top.ends = shared, [tail], []
            parent[id(tail)] = top
        node = Node(shared, len(ids), ids)  # sorted and distinct: never a prefix of the previous one
        top.children.append(node)
        parent[id(node)] = top
        stack.append(node)
        node.ends.append(index)
        leaf[index] = node
        previous = ids
    paths = []
    for index in range(len(sequences)):
        path, node = [], leaf[index]
        while node is not root:
            path.append(node)
            node = parent[id(node)]
        paths.append(path[::-1])
    return root, paths


def node_at(path: list[Node], index: int) -> Node:
    """The node of a path whose span holds prediction index ``index``."""
    for node in path:
        if node.start <= index < node.end:
            return node
    raise IndexError(f"prediction index {index} is beyond the sequence")


def total_tokens(root: Node) -> int:
    total, stack = 0, [root]
    while stack:
        node = stack.pop()
        total += node.tokens
        stack.extend(node.children)
    return total
