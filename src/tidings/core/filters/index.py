"""The subscription index of a subscriber's broker (SHB): which subscriptions want this event?

Matching runs in two stages, as in Gryphon and GES: first the channel, then the content.

1. Channel. Subscriptions are grouped by pattern: one `AttributeIndex` per distinct pattern.
   The groups hang in a topic trie over pattern segments; a node has literal children, one `+`
   child, and may end a pattern here (`exact`) or with `#` here (`rest`). Walking the trie along
   a channel's segments visits only branches that can match, so the cost follows the channel's
   depth and the number of matching patterns, not the number of patterns. The walk's result, the
   tuple of matching groups, is cached per channel (channels repeat: a monitoring feed publishes
   the same few thousand channels over and over). The cache holds at most
   `channel_cache_entries_max` channels, evicted first-in first-out, and is emptied whenever a
   pattern appears or disappears (adding a subscription to an existing pattern keeps it valid:
   the cached groups are the live objects).
2. Content. Within each matching group the attribute index (`attribute_index.py`) finds the
   candidates through the filters' access predicates (`cover.py`) and verifies them with their
   compiled predicates, so an event is tested against the few filters that can match it, never
   against every filter.

Invariants: every subscription key is in exactly one group, the group of its pattern; a group and
its trie node exist exactly while the group is non-empty; a cached entry is the tuple the trie
walk returns now. `match` returns keys in ascending order, and equals the brute force
`[k for k in sorted(subs) if pattern_matches(p_k, channel) and (f_k is None or f_k.matches(a))]`.
The `$` rule of `pattern_matches` holds: a pattern starting with a wildcard does not match a
channel whose first segment starts with `$`.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping

from tidings.core.channels import validate_pattern
from tidings.core.filters.attribute_index import AttributeIndex
from tidings.core.filters.parser import Filter

CHANNEL_CACHE_ENTRIES_MAX = 4096
SCAN_ENTRIES_MAX = 6            # a group this small runs every predicate instead of probing


class _TrieNode:
    __slots__ = ("children", "exact", "plus", "rest")

    def __init__(self) -> None:
        self.children: dict[str, _TrieNode] = {}
        self.plus: _TrieNode | None = None
        self.exact: AttributeIndex | None = None   # the pattern ends at this node
        self.rest: AttributeIndex | None = None    # the pattern's `#` stands at this node

    def is_empty(self) -> bool:
        return not self.children and self.plus is None and self.exact is None and self.rest is None


class SubscriptionIndex:
    """Subscriptions (key, pattern, filter) and the events each one wants."""

    def __init__(
        self,
        *,
        scan_entries_max: int = SCAN_ENTRIES_MAX,
        channel_cache_entries_max: int = CHANNEL_CACHE_ENTRIES_MAX,
    ) -> None:
        self._scan_entries_max = scan_entries_max
        self._cache_entries_max = channel_cache_entries_max
        self._subscriptions: dict[int, tuple[str, Filter | None]] = {}
        self._groups: dict[str, AttributeIndex] = {}
        self._root = _TrieNode()
        self._cache: OrderedDict[str, tuple[AttributeIndex, ...]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._subscriptions)

    def __contains__(self, key: object) -> bool:
        return key in self._subscriptions

    def add(self, key: int, pattern: str, flt: Filter | None) -> None:
        """Add subscription `key`; ValueError if the key is present, ChannelError if `pattern` is bad."""
        if key in self._subscriptions:
            raise ValueError(f"subscription {key} is already in the index")
        validate_pattern(pattern)
        group = self._groups.get(pattern)
        if group is None:
            group = self._groups[pattern] = AttributeIndex()
            self._insert(pattern, group)
            self._cache.clear()
        group.add(key, flt)
        self._subscriptions[key] = (pattern, flt)

    def remove(self, key: int) -> None:
        """Remove subscription `key`; KeyError if absent."""
        pattern, _ = self._subscriptions.pop(key)
        group = self._groups[pattern]
        group.remove(key)
        if not len(group):
            del self._groups[pattern]
            self._delete(pattern)
            self._cache.clear()

    def match(self, channel: str, attributes: Mapping[str, object]) -> list[int]:
        """Keys, ascending, whose pattern matches the (valid) `channel` and whose filter matches."""
        groups = self._cache.get(channel)
        if groups is None:
            groups = self._groups_matching(channel)
            if self._cache_entries_max > 0:
                if len(self._cache) >= self._cache_entries_max:
                    self._cache.popitem(last=False)
                self._cache[channel] = groups
        out: list[int] = []
        scan_max = self._scan_entries_max
        for group in groups:
            group.collect(attributes, out, scan_max)
        out.sort()
        return out

    def subscription(self, key: int) -> tuple[str, Filter | None]:
        """The (pattern, filter) of subscription `key`; KeyError if absent."""
        return self._subscriptions[key]

    # -- the topic trie ------------------------------------------------------------------------------

    def _insert(self, pattern: str, group: AttributeIndex) -> None:
        node = self._root
        for segment in pattern.split("/"):
            if segment == "#":
                assert node.rest is None
                node.rest = group
                return
            if segment == "+":
                if node.plus is None:
                    node.plus = _TrieNode()
                node = node.plus
            else:
                child = node.children.get(segment)
                if child is None:
                    child = node.children[segment] = _TrieNode()
                node = child
        assert node.exact is None
        node.exact = group

    def _delete(self, pattern: str) -> None:
        path: list[tuple[_TrieNode, str]] = []   # (parent, segment leading to the child)
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

    def _groups_matching(self, channel: str) -> tuple[AttributeIndex, ...]:
        segments = channel.split("/")
        depth = len(segments)
        system = channel.startswith("$")     # wildcards at the first level skip `$` channels
        found: list[AttributeIndex] = []
        stack: list[tuple[_TrieNode, int]] = [(self._root, 0)]
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
        return tuple(found)
