"""The filters of the subscriptions to one channel pattern, indexed by their access predicates.

Each filtered subscription is an *entry* filed under every access predicate of its cover
(`cover.py`), in the *slot* of the predicate's attribute name:

    Equal        slot.equal[key] -> B             one dict probe per event value
    Equal+Range  slot.refined[key] -> {.. T ..}   that probe, then a bisect of each T
    Prefix       slot.prefixes[len(p)][p] -> B    one probe per distinct prefix length
    Range        slot.ranges[op, strings] -> T    one bisect of T
    Present      slot.present -> B                every event carrying the name

A bucket B maps subscription key -> check: the entry's cover residual, compiled, or None when
the cover is exact and a hit is a match. A T holds the distinct thresholds of one (name, op,
strings or numbers) sorted, each with its bucket: `a > t` holds for the thresholds below the
event's value, a prefix of the list found by one bisect; `a < t` a suffix.

To match an event, probe the slots of the names the event and the group share, and run the check
of each hit as it comes (entries whose cover could be hit twice are deduplicated). Entries
without a cover sit in `scan` and are checked for every event. A group with at most
`scan_entries_max` entries skips the probes and runs every predicate: for a handful of entries
that is cheaper. The hot loop is written out flat, without helper calls per bucket, because in
CPython a call costs as much as a dict probe.

Invariants: an entry is filed under each of its accesses exactly once and nowhere else; no
empty bucket, threshold, table or slot is kept; buckets iterate in filing order, so results come
out in a deterministic order. The probes only narrow the candidates, so the result equals
running every predicate; an event value whose type is a subclass of str/int/float, or a NaN
(neither is ever on the wire), falls back to exactly that.
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


class _Entry:
    __slots__ = ("check", "cover", "key", "predicate")

    def __init__(self, key: int, predicate: Predicate, cover: Cover | None) -> None:
        self.key = key
        self.predicate = predicate
        self.cover = cover
        self.check: Predicate | None = None
        if cover is not None and cover.residual is not None:
            self.check = compile_node(cover.residual)


class _Thresholds:
    """The range accesses of one (name, op, strings): distinct thresholds, sorted, with buckets."""

    __slots__ = ("buckets", "name", "op", "strings", "values")

    def __init__(self, name: str, op: str, strings: bool) -> None:
        self.name = name
        self.op = op
        self.strings = strings
        self.values: list[Any] = []      # all numbers or all strings
        self.buckets: list[Bucket] = []

    def file(self, threshold: object, entry: _Entry) -> None:
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

    def hit_buckets(self, v: object) -> list[Bucket]:
        """The buckets whose `name op threshold` holds for the comparable, non-NaN value `v`."""
        op = self.op
        if op == ">":
            return self.buckets[:bisect_left(self.values, v)]
        if op == ">=":
            return self.buckets[:bisect_right(self.values, v)]
        if op == "<":
            return self.buckets[bisect_right(self.values, v):]
        return self.buckets[bisect_left(self.values, v):]


RangeKey = tuple[str, str, bool]        # (name, op, thresholds are strings)


def _file_range(ranges: dict[RangeKey, _Thresholds], access: Range, entry: _Entry) -> None:
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


class _Slot:
    """Every access on one attribute name."""

    __slots__ = ("equal", "filings", "prefixes", "present", "ranges", "refined")

    def __init__(self) -> None:
        self.equal: dict[object, Bucket] = {}
        self.refined: dict[object, dict[RangeKey, _Thresholds]] = {}   # equal, then a range
        self.prefixes: dict[int, dict[str, Bucket]] = {}
        self.ranges: dict[RangeKey, _Thresholds] = {}                   # on this name
        self.present: Bucket = {}
        self.filings = 0

    def file(self, access: Access, entry: _Entry) -> None:
        self.filings += 1
        if isinstance(access, Equal):
            if access.refine is None:
                self.equal.setdefault(access.key, {})[entry.key] = entry.check
            else:
                _file_range(self.refined.setdefault(access.key, {}), access.refine, entry)
        elif isinstance(access, Prefix):
            table = self.prefixes.setdefault(len(access.prefix), {})
            table.setdefault(access.prefix, {})[entry.key] = entry.check
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
            table = self.prefixes[len(access.prefix)]
            _drop(table, access.prefix, key)
            if not table:
                del self.prefixes[len(access.prefix)]
        elif isinstance(access, Present):
            del self.present[key]
        else:
            _unfile_range(self.ranges, access, key)


def _drop(table: dict[Any, Bucket], where: object, key: int) -> None:
    bucket = table[where]
    del bucket[key]
    if not bucket:
        del table[where]


def _hit_buckets(slot: _Slot, v: object, attributes: Mapping[str, object], buckets: list[Bucket]) -> bool:
    """Add the buckets of `slot` that its attribute's value `v` hits; False: take the slow path."""
    if slot.present:
        buckets.append(slot.present)
    t = type(v)
    if t is str:
        for length, table in slot.prefixes.items():
            bucket = table.get(v[:length])  # type: ignore[index]
            if bucket:
                buckets.append(bucket)
        key = v
    elif t is int or (t is float and not isnan(v)):  # type: ignore[arg-type]
        key = v
    elif t is bool:
        key = TRUE_KEY if v else FALSE_KEY
    else:
        return value_kind(v) == NO_KIND      # of no kind: only `present` can hit
    bucket = slot.equal.get(key)
    if bucket:
        buckets.append(bucket)
    if slot.refined:
        refined = slot.refined.get(key)
        if refined and not _range_buckets(refined.values(), attributes, buckets):
            return False
    if slot.ranges and t is not bool:
        _own_range_buckets(slot.ranges.values(), v, t is str, buckets)
    return True


def _own_range_buckets(ranges: Any, v: object, strings: bool, buckets: list[Bucket]) -> None:
    for thresholds in ranges:
        if thresholds.strings is strings:
            buckets += thresholds.hit_buckets(v)


def _range_buckets(ranges: Any, attributes: Mapping[str, object], buckets: list[Bucket]) -> bool:
    """Add the hit buckets of `ranges` (on any names) for `attributes`; False: slow path."""
    for thresholds in ranges:
        v = attributes.get(thresholds.name, _MISSING)
        t = type(v)
        if t is str:
            if thresholds.strings:
                buckets += thresholds.hit_buckets(v)
        elif t is int or (t is float and not isnan(v)):  # type: ignore[arg-type]
            if not thresholds.strings:
                buckets += thresholds.hit_buckets(v)
        elif t is not bool and v is not _MISSING and value_kind(v) != NO_KIND:
            return False
    return True


class AttributeIndex:
    """The subscriptions of one pattern: unfiltered keys, and filtered entries by access."""

    __slots__ = ("_entries", "_multi", "_scan", "_slots", "unfiltered")

    def __init__(self) -> None:
        self.unfiltered: dict[int, None] = {}
        self._entries: dict[int, _Entry] = {}
        self._scan: dict[int, _Entry] = {}
        self._slots: dict[str, _Slot] = {}
        self._multi = 0     # entries one event may reach through two accesses: dedupe needed

    def __len__(self) -> int:
        return len(self.unfiltered) + len(self._entries)

    def add(self, key: int, flt: Filter | None) -> None:
        assert key not in self.unfiltered and key not in self._entries
        if flt is None:
            self.unfiltered[key] = None
            return
        cover = cover_of(flt.ast)
        entry = _Entry(key, flt.predicate, cover)
        self._entries[key] = entry
        if cover is None:
            self._scan[key] = entry
            return
        if not cover.hits_at_most_once:
            self._multi += 1
        for access in cover.accesses:
            slot = self._slots.get(access.name)
            if slot is None:
                slot = _Slot()
                self._slots[access.name] = slot
            slot.file(access, entry)

    def remove(self, key: int) -> None:
        if key in self.unfiltered:
            del self.unfiltered[key]
            return
        entry = self._entries.pop(key)
        cover = entry.cover
        if cover is None:
            del self._scan[key]
            return
        if not cover.hits_at_most_once:
            self._multi -= 1
        for access in cover.accesses:
            slot = self._slots[access.name]
            slot.unfile(access, key)
            if not slot.filings:
                del self._slots[access.name]

    def collect(self, attributes: Mapping[str, object], out: list[int], scan_entries_max: int) -> None:
        """Append to `out` the keys whose filter matches `attributes` (in no particular order)."""
        if self.unfiltered:
            out.extend(self.unfiltered)
        entries = self._entries
        if len(entries) > scan_entries_max:
            found = self._probe_all(attributes)
            if found is not None:
                out.extend(dict.fromkeys(found) if self._multi else found)
                return
        for entry in entries.values():
            if entry.predicate(attributes):
                out.append(entry.key)

    def _probe_all(self, attributes: Mapping[str, object]) -> list[int] | None:
        """The keys matching `attributes`, found through the slots; None: take the slow path."""
        buckets: list[Bucket] = []
        slots = self._slots
        if len(slots) < len(attributes):
            for name, slot in slots.items():
                v = attributes.get(name, _MISSING)
                if v is not _MISSING and not _hit_buckets(slot, v, attributes, buckets):
                    return None
        else:
            for name, v in attributes.items():
                match = slots.get(name)
                if match is not None and not _hit_buckets(match, v, attributes, buckets):
                    return None
        found = [entry.key for entry in self._scan.values() if entry.predicate(attributes)]
        for bucket in buckets:
            for key, check in bucket.items():
                if check is None or check(attributes):
                    found.append(key)
        return found
