"""Channels onto Scribe trees (DESIGN.md §2).

Scribe multicasts per tree, not per pattern, so the broker needs a mapping in which every matching
(pattern, channel) pair meets in at least one tree. A subscription joins exactly one tree: the exact
channel's tree when its pattern has no wildcard, else the prefix tree of its longest literal prefix
(`a/+/c` joins `a/#`, `+/x` joins `#`, `a/b/#` joins `a/b/#`). A publish on `a/b/c` therefore goes to
the exact tree `a/b/c` and to every prefix tree of the channel: `a/b/c/#` (since `#` also matches
zero segments, `a/b/c/#` matches `a/b/c`), `a/b/#`, `a/#` and `#`. Correctness is the invariant
"pattern_matches(P, C) implies subscription_tree(P) in publish_trees(C)"; the rest of a pattern and
its content filter are tested in the network and at the subscriber's broker.

A tree's key is the Pastry key of its name; the rendez-vous point of the tree is the live node
numerically closest to that key.
"""

from __future__ import annotations

from tidings.core.overlay.node_id import node_id_from

MULTI_LEVEL = "#"
SINGLE_LEVEL = "+"


def publish_trees(channel: str) -> list[str]:
    """The trees a publish on the (valid) `channel` goes to: the exact tree first, then the prefix
    trees from the longest (`a/b/c/#`) to the root tree `#`."""
    segments = channel.split("/")
    trees = [channel]
    trees.extend("/".join([*segments[:n], MULTI_LEVEL]) for n in range(len(segments), -1, -1))
    return trees


def subscription_tree(pattern: str) -> str:
    """The one tree a subscription with the (valid) `pattern` joins."""
    segments = pattern.split("/")
    literal: list[str] = []
    for segment in segments:
        if segment in (SINGLE_LEVEL, MULTI_LEVEL):
            return "/".join([*literal, MULTI_LEVEL])
        literal.append(segment)
    return pattern


def tree_key(name: str) -> int:
    """The Pastry key of a tree: its rendez-vous point is the live node numerically closest to it."""
    return node_id_from("tree:" + name)
