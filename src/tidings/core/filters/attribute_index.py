"""The filters of the subscriptions to one channel pattern, indexed by their access predicates.

Each filtered subscription is an *entry* filed under every access predicate of its cover
(`cover.py`), in the *slot* of the predicate's attribute name:

    Equal        slot.equal[key] -> B             one dict probe per event value
    Equal+Range  slot.refined[key] -> {.. T ..}   that probe, then a bisect of each T
    Prefix       slot.prefixes[len(p)][p] -> B    one probe per distinct prefix length
    Prefix+Range slot.refined_prefixes[len(p)][p] -> {.. T ..}
    Range        slot.ranges[name, op, strings] -> T     one bisect
    Present      slot.present -> B                every event carrying the name

A bucket B maps subscription key -> check: the entry's cover residual, compiled, or None when
the cover is exact and a hit is a match. A T holds the distinct thresholds of one (name, op,
strings or numbers) sorted, each with its bucket: `a > t` holds for the thresholds below the
event's value, a prefix of the list found by one bisect; `a < t` a suffix. Entries without a
cover sit in `scan` and are checked for every event.

`hit_buckets` probes, for each attribute name, the slots of that name in *several* groups at
once (the subscription index merges the slots of all the groups matching a channel), so an event
value is fetched and classified once per name, not once per group. The loop is written out flat
because in CPython a call costs as much as a dict probe.

Invariants: an entry is filed under each of its accesses exactly once and nowhere else; no
empty bucket, threshold, table or slot is kept; buckets iterate in filing order, so results come
out in a deterministic order. The probes only narrow the candidates, so matching through them
equals running every predicate; an event value whose type is a subclass of str/int/float, or a
NaN (neither is ever on the wire), makes `hit_buckets` ask for exactly that instead.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Mapping
from math import isnan
from typing import Any

from tidings.core.filters.cover import (
    FALSE_KEY,
    TRUE_KEY,
    Access,
    Cover,
    Equal,
    Prefix,
    Present,
    Range,
    cover_of,
)
from tidings.core.filters.parser import Filter
from tidings.core.filters.predicate import NO_KIND, Predicate, compile_node, value_kind

_MISSING = object()

Bucket = dict[int, Predicate | None]      # subscription key -> check (None: a hit is a match)
Probes = tuple[tuple[str, tuple["Slot", ...]], ...]


class Entry:
    __slots__ = ("check", "cover", "key", "predicate")

    def __init__(self, key: int, predicate: Predicate, cover: Cover | None) -> None:
        self.key = key
        self.predicate = predicate
        self.cover = cover
        self.check: Predicate | None = None
        if cover is not None and cover.residual is not None:
            self.check = compile_node(cover.residual)


class _Thresholds:
    """The range accesses of one (name, op, strings): distinct thresholds, sorted, with buckets.

    For a value v the hits are `buckets[:i]` if `below` else `buckets[i:]`, i = bisect(values, v):
    `a > t` holds for t < v (bisect_left, below), `a >= t` for t <= v (bisect_right, below),
    `a < t` for t > v (bisect_right, above), `a <= t` for t >= v (bisect_left, above).
    """

    __slots__ = ("below", "bisect", "buckets", "name", "op", "strings", "values")

    def __init__(self, name: str, op: str, strings: bool) -> None:
        self.name = name
        self.op = op
        self.strings = strings
        self.below = op in (">", ">=")
        self.bisect = bisect_left if op in (">", "<=") else bisect_right
        self.values: list[Any] = []      # all numbers or all strings
        self.buckets: list[Bucket] = []

    def file(self, threshold: object, entry: Entry) -> None:
        i = bisect_left(self.values, threshold)
        if i < len(self.values) and self.values[i] == threshold:
            self.buckets[i][entry.key] = entry.check
        else:
            self.values.insert(i, threshold)
            self.buckets.insert(i, {entry.key: entry.check})

    def unfile(self, threshold: object, key: int) -> None:
        i = bisect_left(self.values, threshold)
        assert self.values[i] == threshold, "unfiling an unknown threshold"
        bucket = self.buckets[i]
        del bucket[key]
        if not bucket:
            del self.values[i]
            del self.buckets[i]


RangeKey = tuple[str, str, bool]        # (name, op, thresholds are strings)


def _file_range(ranges: dict[RangeKey, _Thresholds], access: Range, entry: Entry) -> None:
    where = (access.name, access.op, isinstance(access.threshold, str))
    thresholds = ranges.get(where)
    if thresholds is None:
        thresholds = ranges[where] = _Thresholds(*where)
    thresholds.file(access.threshold, entry)


def _unfile_range(ranges: dict[RangeKey, _Thresholds], access: Range, key: int) -> None:
    where = (access.name, access.op, isinstance(access.threshold, str))
    ranges[where].unfile(access.threshold, key)
    if not ranges[where].values:
        del ranges[where]


class Slot:
    """Every access on one attribute name."""

    __slots__ = ("equal", "filings", "prefixes", "present", "ranges", "refined", "refined_prefixes")

    def __init__(self) -> None:
        self.equal: dict[object, Bucket] = {}
        self.refined: dict[object, dict[RangeKey, _Thresholds]] = {}   # equal, then a range
        self.prefixes: dict[int, dict[str, Bucket]] = {}
        self.refined_prefixes: dict[int, dict[str, dict[RangeKey, _Thresholds]]] = {}
        self.ranges: dict[RangeKey, _Thresholds] = {}                   # on this name
        self.present: Bucket = {}
        self.filings = 0

    def file(self, access: Access, entry: Entry) -> None:
        self.filings += 1
        if isinstance(access, Equal):
            if access.refine is None:
                self.equal.setdefault(access.key, {})[entry.key] = entry.check
            else:
                _file_range(self.refined.setdefault(access.key, {}), access.refine, entry)
        elif isinstance(access, Prefix):
            if access.refine is None:
                table = self.prefixes.setdefault(len(access.prefix), {})
                table.setdefault(access.prefix, {})[entry.key] = entry.check
            else:
                refined = self.refined_prefixes.setdefault(len(access.prefix), {})
                _file_range(refined.setdefault(access.prefix, {}), access.refine, entry)
        elif isinstance(access, Present):
            self.present[entry.key] = entry.check
        else:
            _file_range(self.ranges, access, entry)

    def unfile(self, access: Access, key: int) -> None:
        self.filings -= 1
        if isinstance(access, Equal):
            if access.refine is None:
                _drop(self.equal, access.key, key)
            else:
                refined = self.refined[access.key]
                _unfile_range(refined, access.refine, key)
                if not refined:
                    del self.refined[access.key]
        elif isinstance(access, Prefix):
            length = len(access.prefix)
            if access.refine is None:
                _drop(self.prefixes[length], access.prefix, key)
                if not self.prefixes[length]:
                    del self.prefixes[length]
            else:
                ranges = self.refined_prefixes[length][access.prefix]
                _unfile_range(ranges, access.refine, key)
                if not ranges:
                    del self.refined_prefixes[length][access.prefix]
                if not self.refined_prefixes[length]:
                    del self.refined_prefixes[length]
        elif isinstance(access, Present):
            del self.present[key]
        else:
            _unfile_range(self.ranges, access, key)


def _drop(table: dict[Any, Bucket], where: object, key: int) -> None:
    bucket = table[where]
    del bucket[key]
    if not bucket:
        del table[where]


_NO_KEY = object()      # the key of a value of no kind: in no table


def hit_buckets(probes: Probes, attributes: Mapping[str, object], buckets: list[Bucket]) -> bool:
    """Add to `buckets` those that `attributes` hit in the slots of `probes`, a list of (name,
    slots of that name in several groups); False when a value needs the slow path instead."""
    for name, slots in probes:
        v = attributes.get(name, _MISSING)
        if v is _MISSING:
            continue
        t = type(v)
        if t is str or t is int or (t is float and not isnan(v)):  # type: ignore[arg-type]
            key = v                             # its own key, and ordered
        elif t is bool:
            key = TRUE_KEY if v else FALSE_KEY
        elif value_kind(v) == NO_KIND:
            key = _NO_KEY
        else:
            return False
        for slot in slots:
            if slot.present:
                buckets.append(slot.present)
            bucket = slot.equal.get(key)
            if bucket:
                buckets.append(bucket)
            if slot.refined:
                refined = slot.refined.get(key)
                if refined and not _range_buckets(refined.values(), attributes, buckets):
                    return False
            if (slot.ranges or slot.prefixes or slot.refined_prefixes) and key is v and not _ordered_buckets(
                    slot, v, attributes, buckets):
                return False
    return True


def _ordered_buckets(slot: Slot, v: Any, attributes: Mapping[str, object], buckets: list[Bucket]) -> bool:
    """The hits of the ranges and prefixes of `slot` for its attribute's value `v`."""
    strings = type(v) is str
    for th in slot.ranges.values():
        if th.strings is strings:
            i = th.bisect(th.values, v)
            buckets += th.buckets[:i] if th.below else th.buckets[i:]
    return not strings or _prefix_buckets(slot, v, attributes, buckets)


def _prefix_buckets(slot: Slot, v: str, attributes: Mapping[str, object], buckets: list[Bucket]) -> bool:
    for length, table in slot.prefixes.items():
        bucket = table.get(v[:length])
        if bucket:
            buckets.append(bucket)
    for length, refined in slot.refined_prefixes.items():
        ranges = refined.get(v[:length])
        if ranges and not _range_buckets(ranges.values(), attributes, buckets):
            return False
    return True


def _range_buckets(ranges: Any, attributes: Mapping[str, object], buckets: list[Bucket]) -> bool:
    """Add the hit buckets of `ranges` (on any names) for `attributes`; False: slow path."""
    for th in ranges:
        v = attributes.get(th.name, _MISSING)
        t = type(v)
        if t is str or t is int or (t is float and not isnan(v)):  # type: ignore[arg-type]
            if th.strings is (t is str):
                i = th.bisect(th.values, v)
                buckets += th.buckets[:i] if th.below else th.buckets[i:]
        elif t is not bool and v is not _MISSING and value_kind(v) != NO_KIND:
            return False
    return True


class AttributeIndex:
    """The subscriptions of one pattern: unfiltered keys, and filtered entries by access.

    It only stores; the subscription index reads it into per-channel plans. `add` and `remove`
    return True when the *layout* a plan copies changed (see `SubscriptionIndex`): whether the
    group is small (and then any of its entries), its slot set, whether it has unfiltered keys,
    whether it has entries to scan, and whether it needs deduplication.
    """

    __slots__ = ("_entries", "_multi", "_scan_entries_max", "_slots", "cached_channels", "scan", "unfiltered")

    def __init__(self, scan_entries_max: int) -> None:
        self._scan_entries_max = scan_entries_max
        self.cached_channels: dict[str, None] = {}   # kept by the SubscriptionIndex
        self.unfiltered: dict[int, None] = {}
        self._entries: dict[int, Entry] = {}
        self.scan: dict[int, Entry] = {}        # filtered entries without a cover
        self._slots: dict[str, Slot] = {}
        self._multi = 0     # entries one event may reach through two accesses: dedupe needed

    def __len__(self) -> int:
        return len(self.unfiltered) + len(self._entries)

    @property
    def small(self) -> bool:
        """Small enough to run every predicate rather than probe."""
        return len(self._entries) <= self._scan_entries_max

    @property
    def needs_dedupe(self) -> bool:
        return self._multi > 0

    def entries(self) -> list[tuple[int, Predicate]]:
        return [(entry.key, entry.predicate) for entry in self._entries.values()]

    def slots(self) -> list[tuple[str, Slot]]:
        return list(self._slots.items())

    def add(self, key: int, flt: Filter | None) -> bool:
        assert key not in self.unfiltered and key not in self._entries
        if flt is None:
            self.unfiltered[key] = None
            return len(self.unfiltered) == 1
        before = self._layout()
        entry = Entry(key, flt.predicate, cover_of(flt.ast))
        self._entries[key] = entry
        if entry.cover is None:
            self.scan[key] = entry
        else:
            self._multi += not entry.cover.hits_at_most_once
            for access in entry.cover.accesses:
                slot = self._slots.get(access.name)
                if slot is None:
                    slot = Slot()
                    self._slots[access.name] = slot
                slot.file(access, entry)
        return before[0] or before != self._layout()

    def remove(self, key: int) -> bool:
        if key in self.unfiltered:
            del self.unfiltered[key]
            return not self.unfiltered
        before = self._layout()
        entry = self._entries.pop(key)
        if entry.cover is None:
            del self.scan[key]
        else:
            self._multi -= not entry.cover.hits_at_most_once
            for access in entry.cover.accesses:
                slot = self._slots[access.name]
                slot.unfile(access, key)
                if not slot.filings:
                    del self._slots[access.name]
        return before[0] or before != self._layout()

    def _layout(self) -> tuple[bool, int, bool, bool]:
        return self.small, len(self._slots), self._multi > 0, not self.scan
