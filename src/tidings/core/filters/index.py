"""The subscription index of a subscriber's broker (SHB): which subscriptions want this event?

Matching runs in two stages, as in Gryphon and GES: first the channel, then the content.

1. Channel. Subscriptions are grouped by pattern: one `AttributeIndex` per distinct pattern.
   The groups hang in a topic trie over pattern segments; a node has literal children, one `+`
   child, and may end a pattern here (`exact`) or with `#` here (`rest`). Walking the trie along
   a channel's segments visits only branches that can match, so the cost follows the channel's
   depth and the number of matching patterns, not the number of patterns.
2. Content. The walk's groups become the channel's *plan*: the unfiltered keys of every group;
   the (key, predicate) pairs of the small groups, which are cheaper to test outright; and, for
   the other groups, their scan entries and their slots merged by attribute name, so that
   `attribute_index.hit_buckets` fetches each event value once and probes every group's tables
   for it. Only the filters an access predicate leads to are checked (`cover.py`), never every
   filter.

Plans are cached per channel (channels repeat: a monitoring feed publishes the same few thousand
channels over and over), at most `channel_cache_entries_max` of them, evicted first-in first-out.
Each group remembers the cached channels whose plans include it. A plan copies a group's
*layout* (small or not, and then its entries; its slots; whether it has unfiltered keys or scan
entries; whether it needs deduplication), so a change of layout evicts that group's channels; a
new pattern evicts the cached channels it matches, a removed pattern its group's channels. Adding
a filter to a large group usually changes no layout and evicts nothing: the plan holds the live
tables.

Invariants: every subscription key is in exactly one group, the group of its pattern; a group and
its trie node exist exactly while the group is non-empty; a cached plan is the plan that would be
built now, and `channel in group.cached_channels` iff the group is in the channel's cached plan.
`match` returns keys in ascending order, and equals the brute force
`[k for k in sorted(subs) if pattern_matches(p_k, channel) and (f_k is None or f_k.matches(a))]`.
The `$` rule of `pattern_matches` holds: a pattern starting with a wildcard does not match a
channel whose first segment starts with `$`.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from tidings.core.channels import pattern_matches, validate_pattern
from tidings.core.filters.attribute_index import AttributeIndex, Bucket, Entry, Probes, Slot, hit_buckets
from tidings.core.filters.parser import Filter
from tidings.core.filters.predicate import Predicate

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


@dataclass(frozen=True, slots=True)
class _Plan:
    """How to match one channel (see the module docstring)."""

    groups: tuple[AttributeIndex, ...]          # every group whose pattern matches
    unfiltered: tuple[dict[int, None], ...]
    checked: tuple[tuple[int, Predicate], ...]  # the entries of the small groups
    probed: tuple[AttributeIndex, ...]          # the other groups
    scans: tuple[dict[int, Entry], ...]         # their entries without access predicates
    probes: Probes                              # their slots, by attribute name
    dedupe: bool


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
        self._cache: OrderedDict[str, _Plan] = OrderedDict()

    def __len__(self) -> int:
        return len(self._subscriptions)

    def __contains__(self, key: object) -> bool:
        return key in self._subscriptions

    def __iter__(self) -> Iterator[int]:
        """The subscription keys, in the order they were added."""
        return iter(self._subscriptions)

    def add(self, key: int, pattern: str, flt: Filter | None) -> None:
        """Add subscription `key`; ValueError if the key is present, ChannelError if `pattern` is bad."""
        if key in self._subscriptions:
            raise ValueError(f"subscription {key} is already in the index")
        validate_pattern(pattern)
        group = self._groups.get(pattern)
        if group is None:
            group = self._groups[pattern] = AttributeIndex(self._scan_entries_max)
            self._insert(pattern, group)
            for channel in [c for c in self._cache if pattern_matches(pattern, c)]:
                self._evict(channel)
        if group.add(key, flt):
            self._evict_group(group)
        self._subscriptions[key] = (pattern, flt)

    def remove(self, key: int) -> None:
        """Remove subscription `key`; KeyError if absent."""
        pattern, _ = self._subscriptions.pop(key)
        group = self._groups[pattern]
        if group.remove(key) or not len(group):
            self._evict_group(group)
        if not len(group):
            del self._groups[pattern]
            self._delete(pattern)

    def subscription(self, key: int) -> tuple[str, Filter | None]:
        """The (pattern, filter) of subscription `key`; KeyError if absent."""
        return self._subscriptions[key]

    @property
    def channels_cached(self) -> int:
        """How many channels' plans the cache holds (at most channel_cache_entries_max)."""
        return len(self._cache)

    def check(self) -> None:
        """Assert the invariants (the tests call it after every change): each cached plan is the
        plan built now, each group knows exactly the channels whose cached plans hold it, and an
        index without subscriptions keeps no group and no trie node."""
        for channel, plan in self._cache.items():
            assert plan == self._build_plan(channel), channel
        for group in self._groups.values():
            holders = [c for c, plan in self._cache.items() if any(g is group for g in plan.groups)]
            assert sorted(group.cached_channels) == sorted(holders)
        assert self._subscriptions or (not self._groups and self._root.is_empty())

    def match(self, channel: str, attributes: Mapping[str, object]) -> list[int]:
        """Keys, ascending, whose pattern matches the (valid) `channel` and whose filter matches."""
        plan = self._cache.get(channel)
        if plan is None:
            plan = self._build_plan(channel)
            self._remember(channel, plan)
        out: list[int] = []
        for keys in plan.unfiltered:
            out.extend(keys)
        for key, predicate in plan.checked:
            if predicate(attributes):
                out.append(key)
        if not plan.probed:
            out.sort()
            return out
        buckets: list[Bucket] = []
        if not hit_buckets(plan.probes, attributes, buckets):
            for group in plan.probed:
                out.extend(key for key, predicate in group.entries() if predicate(attributes))
            out.sort()
            return out
        start = len(out)
        for scan in plan.scans:
            out.extend(entry.key for entry in scan.values() if entry.predicate(attributes))
        for bucket in buckets:
            for key, check in bucket.items():
                if check is None or check(attributes):
                    out.append(key)
        if plan.dedupe:
            out[start:] = dict.fromkeys(out[start:])
        out.sort()
        return out

    # -- plans and their cache --------------------------------------------------------------------

    def _build_plan(self, channel: str) -> _Plan:
        groups = self._groups_matching(channel)
        probed = tuple(group for group in groups if not group.small)
        merged: dict[str, list[Slot]] = {}
        for group in probed:
            for name, slot in group.slots():
                merged.setdefault(name, []).append(slot)
        return _Plan(
            groups=groups,
            unfiltered=tuple(group.unfiltered for group in groups if group.unfiltered),
            checked=tuple(pair for group in groups if group.small for pair in group.entries()),
            probed=probed,
            scans=tuple(group.scan for group in probed if group.scan),
            probes=tuple((name, tuple(slots)) for name, slots in merged.items()),
            dedupe=any(group.needs_dedupe for group in probed),
        )

    def _remember(self, channel: str, plan: _Plan) -> None:
        if self._cache_entries_max <= 0:
            return
        if len(self._cache) >= self._cache_entries_max:
            self._evict(next(iter(self._cache)))
        self._cache[channel] = plan
        for group in plan.groups:
            group.cached_channels[channel] = None

    def _evict(self, channel: str) -> None:
        for group in self._cache.pop(channel).groups:
            del group.cached_channels[channel]

    def _evict_group(self, group: AttributeIndex) -> None:
        for channel in list(group.cached_channels):
            self._evict(channel)

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
