"""The channel stage of matching: a trie over channel pattern segments.

A node has literal children, one `+` child, and may end a pattern here (`exact`) or with `#` here
(`rest`). Walking the trie along a channel's segments visits only branches that can match, so the
cost follows the channel's depth and the number of matching patterns, not the number of patterns.
The `$` rule of `pattern_matches` holds: a pattern starting with a wildcard does not match a
channel whose first segment starts with `$`.

Invariants: each value sits at the node of its pattern; a node exists exactly while a value sits
at it or below it.
"""

from __future__ import annotations

from typing import Generic, TypeVar

V = TypeVar("V")


class _Node(Generic[V]):
    __slots__ = ("children", "exact", "plus", "rest")

    def __init__(self) -> None:
        self.children: dict[str, _Node[V]] = {}
        self.plus: _Node[V] | None = None
        self.exact: V | None = None   # the pattern ends at this node
        self.rest: V | None = None    # the pattern's `#` stands at this node

    def is_empty(self) -> bool:
        return not self.children and self.plus is None and self.exact is None and self.rest is None


class TopicTrie(Generic[V]):
    """One value per (valid) channel pattern; `matching(channel)` finds those whose pattern matches."""

    def __init__(self) -> None:
        self._root: _Node[V] = _Node()

    def is_empty(self) -> bool:
        return self._root.is_empty()

    def insert(self, pattern: str, value: V) -> None:
        node = self._root
        for segment in pattern.split("/"):
            if segment == "#":
                assert node.rest is None
                node.rest = value
                return
            if segment == "+":
                if node.plus is None:
                    node.plus = _Node()
                node = node.plus
            else:
                child = node.children.get(segment)
                if child is None:
                    child = node.children[segment] = _Node()
                node = child
        assert node.exact is None
        node.exact = value

    def delete(self, pattern: str) -> None:
        path: list[tuple[_Node[V], str]] = []   # (parent, segment leading to the child)
        node = self._root
        for segment in pattern.split("/"):
            if segment == "#":
                node.rest = None
                break
            path.append((node, segment))
            child = node.plus if segment == "+" else node.children[segment]
            assert child is not None
            node = child
        else:
            node.exact = None
        # Prune the nodes left empty, deepest first.
        for parent, segment in reversed(path):
            child = parent.plus if segment == "+" else parent.children[segment]
            assert child is not None
            if not child.is_empty():
                break
            if segment == "+":
                parent.plus = None
            else:
                del parent.children[segment]

    def matching(self, channel: str) -> list[V]:
        """The values whose pattern matches `channel`, in the walk's (deterministic) order."""
        segments = channel.split("/")
        depth = len(segments)
        system = channel.startswith("$")     # wildcards at the first level skip `$` channels
        found: list[V] = []
        stack: list[tuple[_Node[V], int]] = [(self._root, 0)]
        while stack:
            node, i = stack.pop()
            wildcards = i > 0 or not system
            if node.rest is not None and wildcards:
                found.append(node.rest)     # `#` also matches zero remaining segments
            if i == depth:
                if node.exact is not None:
                    found.append(node.exact)
                continue
            if node.plus is not None and wildcards:
                stack.append((node.plus, i + 1))
            child = node.children.get(segments[i])
            if child is not None:
                stack.append((child, i + 1))
        return found
