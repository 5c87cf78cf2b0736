"""The filters of the subscriptions to one channel pattern, indexed by their access predicates.

Each filtered subscription is an *entry* filed under every access predicate of its cover
(`cover.py`), in the *slot* of the predicate's attribute name:

    EQUAL   slot.equal[key][sub]               one dict probe per event value
    PREFIX  slot.prefixes[len(p)][p][sub]      one probe per distinct prefix length
    RANGE   slot.*_ranges[op] -> thresholds    sorted distinct thresholds, one bisect per op;
                                               the hits are a prefix or suffix of the buckets
    PRESENT slot.present[sub]                  every event carrying the name

Entries without a cover sit in `scan`: candidates for every event. To match an event, probe the
slots of the names the event and the index share, collect the candidates, and run each
candidate's check (its compiled predicate, or nothing when its cover is exact). A group with at
most `scan_entries_max` entries skips the probes and runs every predicate: below a handful of
entries that is cheaper than the probes.

Invariants: an entry is filed under each of its accesses exactly once and nowhere else; no
empty bucket, threshold, prefix table or slot is kept; buckets are dicts keyed by subscription key
in filing order, so candidates come out in a deterministic order. The probes only narrow the
candidates, so the result equals running every predicate; an event value whose type is a subclass
of str/int/float (never on the wire) falls back to exactly that.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Mapping

from tidings.core.filters.cover import (
    EQUAL,
    FALSE_KEY,
    PREFIX,
    PRESENT,
    TRUE_KEY,
    Access,
    Cover,
    cover_of,
)
from tidings.core.filters.parser import Filter
from tidings.core.filters.predicate import NO_KIND, STRING, Predicate, value_kind

_MISSING = object()


class _Entry:
    __slots__ = ("check", "cover", "key", "predicate")

    def __init__(self, key: int, predicate: Predicate, cover: Cover | None) -> None:
        self.key = key
        self.predicate = predicate
        self.cover = cover
        # None: a hit on the cover proves the match, no need to evaluate anything.
        self.check: Predicate | None = None if cover is not None and cover.exact else predicate


Bucket = dict[int, _Entry]


class _Thresholds:
    """Range accesses of one (attribute, kind, op): distinct thresholds, sorted, with buckets."""

    __slots__ = ("buckets", "values")

    def __init__(self) -> None:
        self.values: list[object] = []
        self.buckets: list[Bucket] = []

    def file(self, threshold: object, entry: _Entry) -> None:
        i = bisect_left(self.values, threshold)
        if i < len(self.values) and self.values[i] == threshold:
            self.buckets[i][entry.key] = entry
        else:
            self.values.insert(i, threshold)
            self.buckets.insert(i, {entry.key: entry})

    def unfile(self, threshold: object, key: int) -> None:
        i = bisect_left(self.values, threshold)
        assert self.values[i] == threshold, "unfiling an unknown threshold"
        bucket = self.buckets[i]
        del bucket[key]
        if not bucket:
            del self.values[i]
            del self.buckets[i]


def _collect_ranges(ranges: dict[str, _Thresholds], v: object, out: list[_Entry]) -> None:
    for op, th in ranges.items():
        # `a > t` holds for the thresholds t < v: a prefix of the sorted list; `a < t` a suffix.
        if op == ">":
            buckets = th.buckets[:bisect_left(th.values, v)]
        elif op == ">=":
            buckets = th.buckets[:bisect_right(th.values, v)]
        elif op == "<":
            buckets = th.buckets[bisect_right(th.values, v):]
        else:
            buckets = th.buckets[bisect_left(th.values, v):]
        for bucket in buckets:
            out.extend(bucket.values())


class _Slot:
    """Every access on one attribute name."""

    __slots__ = ("equal", "filings", "number_ranges", "prefixes", "present", "string_ranges")

    def __init__(self) -> None:
        self.equal: dict[object, Bucket] = {}
        self.prefixes: dict[int, dict[str, Bucket]] = {}
        self.number_ranges: dict[str, _Thresholds] = {}
        self.string_ranges: dict[str, _Thresholds] = {}
        self.present: Bucket = {}
        self.filings = 0

    def collect(self, v: object, out: list[_Entry]) -> bool:
        """Append the entries `v` hits; False when `v`'s type needs the slow path instead."""
        if self.present:
            out.extend(self.present.values())
        t = type(v)
        if t is str:
            bucket = self.equal.get(v)
            if bucket:
                out.extend(bucket.values())
            for length, table in self.prefixes.items():
                bucket = table.get(v[:length])  # type: ignore[index]
                if bucket:
                    out.extend(bucket.values())
            if self.string_ranges:
                _collect_ranges(self.string_ranges, v, out)
        elif t is int or t is float:
            bucket = self.equal.get(v)
            if bucket:
                out.extend(bucket.values())
            if self.number_ranges and v == v:  # NaN is in no range
                _collect_ranges(self.number_ranges, v, out)
        elif t is bool:
            bucket = self.equal.get(TRUE_KEY if v else FALSE_KEY)
            if bucket:
                out.extend(bucket.values())
        elif value_kind(v) != NO_KIND:
            return False
        return True

    def file(self, access: Access, entry: _Entry) -> None:
        self.filings += 1
        if access.kind == EQUAL:
            self.equal.setdefault(access.detail, {})[entry.key] = entry
        elif access.kind == PREFIX:
            prefix = str(access.detail)
            self.prefixes.setdefault(len(prefix), {}).setdefault(prefix, {})[entry.key] = entry
        elif access.kind == PRESENT:
            self.present[entry.key] = entry
        else:
            kind, op, threshold = access.detail  # type: ignore[misc]
            ranges = self.string_ranges if kind == STRING else self.number_ranges
            ranges.setdefault(op, _Thresholds()).file(threshold, entry)

    def unfile(self, access: Access, key: int) -> None:
        self.filings -= 1
        if access.kind == EQUAL:
            _drop(self.equal, access.detail, key)
        elif access.kind == PREFIX:
            prefix = str(access.detail)
            table = self.prefixes[len(prefix)]
            _drop(table, prefix, key)
            if not table:
                del self.prefixes[len(prefix)]
        elif access.kind == PRESENT:
            del self.present[key]
        else:
            kind, op, threshold = access.detail  # type: ignore[misc]
            ranges = self.string_ranges if kind == STRING else self.number_ranges
            ranges[op].unfile(threshold, key)
            if not ranges[op].values:
                del ranges[op]


def _drop(table: dict[object, Bucket], where: object, key: int) -> None:
    bucket = table[where]
    del bucket[key]
    if not bucket:
        del table[where]


class AttributeIndex:
    """The subscriptions of one pattern: unfiltered keys, and filtered entries by access."""

    __slots__ = ("_entries", "_multi", "_scan", "_slots", "unfiltered")

    def __init__(self) -> None:
        self.unfiltered: dict[int, None] = {}
        self._entries: dict[int, _Entry] = {}
        self._scan: Bucket = {}
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
                slot = self._slots[access.name] = _Slot()
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
        if len(entries) <= scan_entries_max or not self._collect_candidates(attributes, out):
            for entry in entries.values():
                if entry.predicate(attributes):
                    out.append(entry.key)

    def _collect_candidates(self, attributes: Mapping[str, object], out: list[int]) -> bool:
        candidates: list[_Entry] = list(self._scan.values()) if self._scan else []
        slots = self._slots
        if len(slots) < len(attributes):
            for name, slot in slots.items():
                v = attributes.get(name, _MISSING)
                if v is not _MISSING and not slot.collect(v, candidates):
                    return False
        else:
            for name, v in attributes.items():
                slot = slots.get(name)
                if slot is not None and not slot.collect(v, candidates):
                    return False
        if self._multi:
            candidates = list(dict.fromkeys(candidates))
        for entry in candidates:
            check = entry.check
            if check is None or check(attributes):
                out.append(entry.key)
        return True
