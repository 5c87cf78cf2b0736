"""The subscription index of a subscriber's broker (SHB): which subscriptions want this event?

Matching runs in two stages, as in Gryphon and GES: first the channel, then the content.

1. Channel. Subscriptions are grouped by pattern, one group per distinct pattern; the groups hang
   in a topic trie (`topic_trie.py`) that finds the groups matching a channel.
2. Content. The groups matching a channel make its *plan*, cached per channel (channels repeat: a
   monitoring feed publishes the same few thousand channels over and over), at most
   `channel_cache_entries_max` of them, evicted first-in first-out. A plan holds the unfiltered
   keys of every group, the (key, predicate) pairs of the *small* groups (at most
   `scan_entries_max` filters: cheaper to run outright than to probe), and the attribute tables
   (`attribute_index.py`) of the others. The *wide* groups of a channel (at least
   `merge_entries_min` filters) share one merged table set, so that an event costs one probe per
   attribute name however many wide patterns match its channel; the groups in between (*narrow*:
   a few filters on a pattern few channels match, like `nodes/h17/#`) keep a table set each, which
   merging would copy into the plan of every channel they match.

Table sets are made when a plan first needs them and shared by every plan that names the same
groups (channels `nodes/h1/load` and `nodes/h2/load` share the merged tables of `nodes/+/load`,
`nodes/#` and `#`). They are live: adding or removing a filter files or unfiles it in every table
set of its group, and evicts no plan. A plan is evicted only when its *layout* changes: a pattern
that matches the channel appears or goes, a group changes size class (small, narrow, wide), a
group gains its first or loses its last unfiltered key, or a small group's filters change. A table
set no cached plan holds is kept idle for the next plan that names the same groups, and dropped
oldest first to make room when a table set is made: the filings (entry x access) of all table
sets must then fit within `(1 + merged_filings_ratio_max)` times the index's own filings plus a
slack, those of merged sets within `merged_filings_ratio_max` times plus the slack (a single
group's set is made regardless; live sets grow and shrink with their groups between two checks).
When a new merged set would not fit, the plan reuses the merged sets already made of some of its
wide groups, and one table set for each of the others.

Invariants: every subscription key is in exactly one group, the group of its pattern; a group and
its trie node exist exactly while the group is non-empty; a cached plan lists the groups that
match its channel, and its table sets hold each of its non-small groups exactly once; each table
set holds exactly the entries of its groups, each group lists exactly the table sets that hold it,
and `refs` counts the cached plans holding a table set (idle exactly when zero);
`channel in group.cached_channels` iff the group is in the channel's cached plan. `match` returns
keys in ascending order, and equals the brute force
`[k for k in sorted(subs) if pattern_matches(p_k, channel) and (f_k is None or f_k.matches(a))]`.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from tidings.core.channels import pattern_matches, validate_pattern
from tidings.core.filters.attribute_index import AttributeTables, Entry
from tidings.core.filters.cover import cover_of
from tidings.core.filters.parser import Filter
from tidings.core.filters.predicate import Predicate
from tidings.core.filters.topic_trie import TopicTrie

CHANNEL_CACHE_ENTRIES_MAX = 4096
SCAN_ENTRIES_MAX = 6            # a group this small runs every predicate instead of probing
MERGE_ENTRIES_MIN = 64          # a group this large shares merged tables with the other wide ones
MERGED_FILINGS_RATIO_MAX = 1.5  # merged table sets' filings, per filing of the index
TABLE_FILINGS_SLACK = 4096      # filings allowed beyond the ratio, for small indexes

SMALL, NARROW, WIDE = 0, 1, 2   # a group's size class


class _Group:
    """The subscriptions of one pattern: unfiltered keys, and filtered entries."""

    __slots__ = ("cached_channels", "entries", "filings", "gid", "tables", "unfiltered")

    def __init__(self, gid: int) -> None:
        self.gid = gid
        self.unfiltered: dict[int, None] = {}
        self.entries: dict[int, Entry] = {}
        self.filings = 0
        self.tables: list[AttributeTables] = []      # the table sets holding its entries
        self.cached_channels: dict[str, None] = {}   # the channels whose cached plans name it

    def __len__(self) -> int:
        return len(self.unfiltered) + len(self.entries)


@dataclass(frozen=True, slots=True)
class _Plan:
    """How to match one channel (see the module docstring)."""

    groups: tuple[_Group, ...]                  # every group whose pattern matches
    unfiltered: tuple[dict[int, None], ...]
    checked: tuple[tuple[int, Predicate], ...]  # the entries of the small groups
    tables: tuple[AttributeTables, ...]         # the table sets of the others


class SubscriptionIndex:
    """Subscriptions (key, pattern, filter) and the events each one wants."""

    def __init__(
        self,
        *,
        scan_entries_max: int = SCAN_ENTRIES_MAX,
        merge_entries_min: int = MERGE_ENTRIES_MIN,
        channel_cache_entries_max: int = CHANNEL_CACHE_ENTRIES_MAX,
        merged_filings_ratio_max: float = MERGED_FILINGS_RATIO_MAX,
        table_filings_slack: int = TABLE_FILINGS_SLACK,
    ) -> None:
        self._scan_entries_max = scan_entries_max
        self._merge_entries_min = merge_entries_min
        self._cache_entries_max = channel_cache_entries_max
        self._merged_ratio = merged_filings_ratio_max
        self._slack = table_filings_slack
        self._subscriptions: dict[int, tuple[str, Filter | None]] = {}
        self._groups: dict[str, _Group] = {}
        self._by_gid: dict[int, _Group] = {}
        self._next_gid = 0
        self._trie: TopicTrie[_Group] = TopicTrie()
        self._cache: OrderedDict[str, _Plan] = OrderedDict()
        self._tables: dict[tuple[int, ...], AttributeTables] = {}
        self._idle: dict[tuple[int, ...], None] = {}     # tables no cached plan holds, oldest first
        self._filings = 0           # of the entries, once each
        self._table_filings = 0     # of all table sets
        self._merged_filings = 0    # of the table sets of more than one group

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
            group = self._groups[pattern] = self._by_gid[self._next_gid] = _Group(self._next_gid)
            self._next_gid += 1
            self._trie.insert(pattern, group)
            for channel in [c for c in self._cache if pattern_matches(pattern, c)]:
                self._evict(channel)
        before = self._layout(group)
        if flt is None:
            group.unfiltered[key] = None
        else:
            entry = Entry(key, flt.predicate, cover_of(flt.ast))
            group.entries[key] = entry
            self._count(group, entry, 1)
            for tables in group.tables:
                tables.file(entry)
        after = self._layout(group)
        if before != after or (flt is not None and after[0] == SMALL):
            self._evict_group(group)
        self._subscriptions[key] = (pattern, flt)

    def remove(self, key: int) -> None:
        """Remove subscription `key`; KeyError if absent."""
        pattern, flt = self._subscriptions.pop(key)
        group = self._groups[pattern]
        before = self._layout(group)
        if flt is None:
            del group.unfiltered[key]
        else:
            entry = group.entries.pop(key)
            self._count(group, entry, -1)
            for tables in group.tables:
                tables.unfile(entry)
        if before != self._layout(group) or (flt is not None and before[0] == SMALL) or not len(group):
            self._evict_group(group)
        if not len(group):
            for tables in list(group.tables):
                assert not tables.refs
                self._drop(tables)
            del self._groups[pattern]
            del self._by_gid[group.gid]
            self._trie.delete(pattern)

    def subscription(self, key: int) -> tuple[str, Filter | None]:
        """The (pattern, filter) of subscription `key`; KeyError if absent."""
        return self._subscriptions[key]

    @property
    def channels_cached(self) -> int:
        """How many channels' plans the cache holds (at most channel_cache_entries_max)."""
        return len(self._cache)

    def stats(self) -> dict[str, int]:
        """Sizes, for benchmarks and metrics: groups, table sets (merged: of several groups, idle:
        held by no cached plan), and filings (entry x access) of the entries and of the tables."""
        return {
            "groups": len(self._groups),
            "tables": len(self._tables),
            "tables_merged": sum(len(key) > 1 for key in self._tables),
            "tables_idle": len(self._idle),
            "filings": self._filings,
            "table_filings": self._table_filings,
            "merged_filings": self._merged_filings,
        }

    def match(self, channel: str, attributes: Mapping[str, object]) -> list[int]:
        """Keys, ascending, whose pattern matches the (valid) `channel` and whose filter matches."""
        plan = self._cache.get(channel)
        if plan is None:
            plan = self._build_plan(channel)
            self._remember(channel, plan)
        out: list[int] = []
        for keys in plan.unfiltered:
            out += keys
        for key, predicate in plan.checked:
            if predicate(attributes):
                out.append(key)
        dedupe = False
        for tables in plan.tables:
            if not tables.collect(attributes, out):
                return self._match_slowly(plan, attributes)
            if tables.multi:
                dedupe = True
        if dedupe and len(out) > 1:
            return sorted(set(out))
        out.sort()
        return out

    def _match_slowly(self, plan: _Plan, attributes: Mapping[str, object]) -> list[int]:
        """`match` for an event with a value the tables cannot order (a subclass of str, int or
        float): every predicate of the plan's table sets runs."""
        out = [key for keys in plan.unfiltered for key in keys]
        out.extend(key for key, predicate in plan.checked if predicate(attributes))
        for tables in plan.tables:
            for gid in tables.keys:
                out.extend(e.key for e in self._by_gid[gid].entries.values() if e.predicate(attributes))
        out.sort()
        return out

    # -- plans and their cache --------------------------------------------------------------------

    def _layout(self, group: _Group) -> tuple[int, bool]:
        entries = len(group.entries)
        size = SMALL if entries <= self._scan_entries_max else NARROW if entries < self._merge_entries_min else WIDE
        return size, bool(group.unfiltered)

    def _build_plan(self, channel: str) -> _Plan:
        """The plan of `channel`, its table sets acquired (refs counted) for it."""
        groups = tuple(self._trie.matching(channel))
        sizes = [self._layout(group)[0] for group in groups]
        narrow = [group for group, size in zip(groups, sizes, strict=True) if size == NARROW]
        wide = sorted((group for group, size in zip(groups, sizes, strict=True) if size == WIDE),
                      key=lambda g: g.gid)
        tables = [self._acquire((group,)) for group in narrow]
        key = tuple(group.gid for group in wide)
        if len(wide) == 1 or key in self._tables or (wide and self._room(key, sum(g.filings for g in wide), True)):
            tables.append(self._acquire(tuple(wide)))
        elif wide:
            tables += self._reuse(wide)
        return _Plan(
            groups=groups,
            unfiltered=tuple(group.unfiltered for group in groups if group.unfiltered),
            checked=tuple((e.key, e.predicate) for group, size in zip(groups, sizes, strict=True) if size == SMALL
                          for e in group.entries.values()),
            tables=tuple(tables),
        )

    def _reuse(self, wide: list[_Group]) -> list[AttributeTables]:
        """Table sets for `wide` when a new merged one does not fit: the merged ones already made
        of some of them, largest first, and one of each group left."""
        wanted = {group.gid for group in wide}
        candidates = {t.keys: t for g in wide for t in g.tables if len(t.keys) > 1 and wanted.issuperset(t.keys)}
        chosen: list[AttributeTables] = []
        for key in sorted(candidates, key=lambda k: (-len(k), k)):
            if wanted.issuperset(key):
                chosen.append(self._acquire(tuple(self._by_gid[gid] for gid in key)))
                wanted.difference_update(key)
        return chosen + [self._acquire((group,)) for group in wide if group.gid in wanted]

    def _acquire(self, groups: tuple[_Group, ...]) -> AttributeTables:
        key = tuple(group.gid for group in groups)
        tables = self._tables.get(key)
        if tables is None:
            filings = sum(group.filings for group in groups)
            self._room(key, filings, len(key) > 1)
            tables = self._tables[key] = AttributeTables(key)
            for group in groups:
                for entry in group.entries.values():
                    tables.file(entry)
                group.tables.append(tables)
            self._table_filings += filings
            self._merged_filings += filings if len(key) > 1 else 0
        elif not tables.refs:
            del self._idle[key]
        tables.refs += 1
        return tables

    def _room(self, key: tuple[int, ...], filings: int, merged: bool) -> bool:
        """Make room for a new table set of `filings` by dropping idle ones, oldest first; whether
        it fits (a single group's set is made even when it does not)."""
        merged_max = self._merged_ratio * self._filings + self._slack
        total_max = merged_max + self._filings

        def fits() -> bool:
            return (self._table_filings + filings <= total_max
                    and (not merged or self._merged_filings + filings <= merged_max))

        for idle in list(self._idle):
            if fits():
                break
            if idle != key:
                self._drop(self._tables[idle])
        return fits()

    def _release(self, tables: tuple[AttributeTables, ...]) -> None:
        for t in tables:
            t.refs -= 1
            if not t.refs:
                self._idle[t.keys] = None

    def _drop(self, tables: AttributeTables) -> None:
        del self._tables[tables.keys]
        del self._idle[tables.keys]
        for gid in tables.keys:
            self._by_gid[gid].tables.remove(tables)
        self._table_filings -= tables.filings
        self._merged_filings -= tables.filings if len(tables.keys) > 1 else 0

    def _count(self, group: _Group, entry: Entry, sign: int) -> None:
        filings = sign * entry.filings
        group.filings += filings
        self._filings += filings
        for tables in group.tables:
            self._table_filings += filings
            self._merged_filings += filings if len(tables.keys) > 1 else 0

    def _remember(self, channel: str, plan: _Plan) -> None:
        if self._cache_entries_max <= 0:
            self._release(plan.tables)  # used once, right away, and dropped only by a later build
            return
        if len(self._cache) >= self._cache_entries_max:
            self._evict(next(iter(self._cache)))
        self._cache[channel] = plan
        for group in plan.groups:
            group.cached_channels[channel] = None

    def _evict(self, channel: str) -> None:
        plan = self._cache.pop(channel)
        for group in plan.groups:
            del group.cached_channels[channel]
        self._release(plan.tables)

    def _evict_group(self, group: _Group) -> None:
        for channel in list(group.cached_channels):
            self._evict(channel)

    def check(self) -> None:
        """Assert the invariants (the tests call it after every change; see the module docstring)."""
        holds: dict[tuple[int, ...], int] = {}
        for channel, plan in self._cache.items():
            groups = tuple(self._trie.matching(channel))
            assert plan.groups == groups, channel
            sizes = [self._layout(group)[0] for group in groups]
            assert plan.unfiltered == tuple(g.unfiltered for g in groups if g.unfiltered)
            assert plan.checked == tuple((e.key, e.predicate) for g, s in zip(groups, sizes, strict=True) if s == SMALL
                                         for e in g.entries.values())
            held = sorted(gid for t in plan.tables for gid in t.keys)
            assert held == sorted(g.gid for g, s in zip(groups, sizes, strict=True) if s != SMALL), channel
            for t in plan.tables:
                assert self._tables[t.keys] is t
                holds[t.keys] = holds.get(t.keys, 0) + 1
        for group in self._groups.values():
            holders = [c for c, plan in self._cache.items() if any(g is group for g in plan.groups)]
            assert sorted(group.cached_channels) == sorted(holders)
            assert all(self._tables[t.keys] is t and group.gid in t.keys for t in group.tables)
        for key, tables in self._tables.items():
            assert tables.refs == holds.get(key, 0) and (key in self._idle) == (tables.refs == 0)
            fresh = AttributeTables(key)
            for gid in key:
                assert any(t is tables for t in self._by_gid[gid].tables)
                for entry in self._by_gid[gid].entries.values():
                    fresh.file(entry)
            assert fresh.state() == tables.state(), key
        assert self._filings == sum(g.filings for g in self._groups.values())
        assert self._table_filings == sum(t.filings for t in self._tables.values())
        assert self._merged_filings == sum(t.filings for k, t in self._tables.items() if len(k) > 1)
        assert self._subscriptions or (not self._groups and self._trie.is_empty() and not self._tables)
