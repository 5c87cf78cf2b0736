"""Attribute tables: the filters of one or more subscription groups, merged by attribute name.

Each filtered subscription is an *entry* filed under every access predicate of its cover
(`cover.py`), in the *slot* of the predicate's attribute name. A table set (`AttributeTables`)
holds the entries of one group (one channel pattern) or of several: the subscription index merges
the large groups matching a channel into one table set, so that an event costs one probe per
attribute name, whatever the number of patterns it matches.

    Equal        slot.equal[key] -> H                   one dict probe per event value
    Equal+Range  slot.equal[key] -> H, H.refined -> T   that probe, then a bisect of each T
    Prefix       slot.prefixes[len(p)][p] -> H          one probe per distinct prefix length
    Range        slot.numbers / slot.strings -> T       one bisect per (op, exact)
    Present      slot.present -> H                      every event carrying the name

A hit set H holds the keys whose hit is a match (`exact`: the cover is exact, added to the
answer in one `list +=`), the keys still to verify with their cover residual, compiled
(`checked`), and the range refinements (`refined`, by (name, op, strings, exact)). A T holds the
distinct thresholds of one (name, op, strings or numbers, exact or checked) sorted, each with its
bucket: `a > t` holds for the thresholds below the event's value, a prefix of the list found by
one bisect; `a < t` a suffix. Entries without a cover sit in `scan` and run for every event.

Invariants: an entry is filed under each of its accesses exactly once per table set and nowhere
else in it; no empty bucket, threshold list, hit set or slot is kept; `probes` lists the slots,
in the order their names were first filed. The probes only narrow the candidates, so collecting
through them equals running every predicate; an event value whose type is a subclass of
str/int/float (never on the wire) makes `collect` return False and the caller run the predicates
instead. A NaN is in no table and orders with nothing, so every probe skips it. A key reached
through two accesses is collected twice when `multi` > 0 (the caller deduplicates).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tidings.core.filters.cover import (
    FALSE_KEY,
    TRUE_KEY,
    Cover,
    Equal,
    Prefix,
    Present,
    Range,
)
from tidings.core.filters.predicate import NO_KIND, Predicate, compile_node, value_kind

_MISSING = object()
_NO_KEY = object()      # the key of a value of no kind: in no table

Bucket = dict[int, Any]                 # subscription key -> check (all None in an exact T)
RangeKey = tuple[str, str, bool, bool]  # (name, op, thresholds are strings, exact)


class Entry:
    """One filtered subscription: its predicate, its cover, and the cover's residual compiled."""

    __slots__ = ("check", "cover", "key", "predicate")

    def __init__(self, key: int, predicate: Predicate, cover: Cover | None) -> None:
        self.key = key
        self.predicate = predicate
        self.cover = cover
        self.check: Predicate | None = None
        if cover is not None and cover.residual is not None:
            self.check = compile_node(cover.residual)

    @property
    def filings(self) -> int:
        """How many places one table set files it in."""
        return 1 if self.cover is None else len(self.cover.accesses)


class Thresholds:
    """The range accesses of one RangeKey: distinct thresholds, sorted, with buckets.

    For a value v the hits are `buckets[:i]` if `below` else `buckets[i:]`, i = bisect(values, v):
    `a > t` holds for t < v (bisect_left, below), `a >= t` for t <= v (bisect_right, below),
    `a < t` for t > v (bisect_right, above), `a <= t` for t >= v (bisect_left, above).
    `probe` holds what `collect` needs in one tuple (the lists are shared, so it stays current).
    """

    __slots__ = ("buckets", "probe", "values")

    def __init__(self, name: str, op: str, strings: bool, exact: bool) -> None:
        self.values: list[Any] = []      # all numbers or all strings
        self.buckets: list[Bucket] = []
        bisect = bisect_left if op in (">", "<=") else bisect_right
        self.probe: RangeProbe = (name, strings, exact, op in (">", ">="), bisect, self.values, self.buckets)

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

    def state(self) -> object:
        return self.values, self.buckets


# (name, strings, exact, below, bisect, values, buckets): a Thresholds as `collect` reads it
RangeProbe = tuple[str, bool, bool, bool, Callable[[Sequence[Any], Any], int], Sequence[Any], list[Bucket]]


def _range_key(access: Range, entry: Entry) -> RangeKey:
    return access.name, access.op, isinstance(access.threshold, str), entry.check is None


def _file_range(ranges: dict[RangeKey, Thresholds], access: Range, entry: Entry) -> bool:
    """File; True when a new threshold list was made."""
    where = _range_key(access, entry)
    thresholds = ranges.get(where)
    made = thresholds is None
    if thresholds is None:
        thresholds = ranges[where] = Thresholds(*where)
    thresholds.file(access.threshold, entry)
    return made


def _unfile_range(ranges: dict[RangeKey, Thresholds], access: Range, entry: Entry) -> bool:
    """Unfile; True when the threshold list went."""
    where = _range_key(access, entry)
    ranges[where].unfile(access.threshold, entry.key)
    if ranges[where].values:
        return False
    del ranges[where]
    return True


class Hits:
    """What one probe reaches: keys that match, keys to verify, and range refinements."""

    __slots__ = ("checked", "exact", "ranges", "refined")

    def __init__(self) -> None:
        self.exact: dict[int, None] = {}
        self.checked: dict[int, Predicate] = {}
        self.refined: dict[RangeKey, Thresholds] = {}
        self.ranges: tuple[RangeProbe, ...] = ()     # the probes of `refined`

    def file(self, entry: Entry, refine: Range | None) -> None:
        if refine is not None:
            if _file_range(self.refined, refine, entry):
                self.ranges = tuple(t.probe for t in self.refined.values())
        elif entry.check is None:
            self.exact[entry.key] = None
        else:
            self.checked[entry.key] = entry.check

    def unfile(self, entry: Entry, refine: Range | None) -> bool:
        """Remove the entry; True when nothing is left."""
        if refine is not None:
            if _unfile_range(self.refined, refine, entry):
                self.ranges = tuple(t.probe for t in self.refined.values())
        elif entry.check is None:
            del self.exact[entry.key]
        else:
            del self.checked[entry.key]
        return not (self.exact or self.checked or self.refined)

    def state(self) -> object:
        assert self.ranges == tuple(t.probe for t in self.refined.values())
        return self.exact, self.checked, {k: t.state() for k, t in self.refined.items()}


def _file_hits(table: dict[Any, Hits], where: object, entry: Entry, refine: Range | None) -> None:
    hits = table.get(where)
    if hits is None:
        hits = table[where] = Hits()
    hits.file(entry, refine)


def _unfile_hits(table: dict[Any, Hits], where: object, entry: Entry, refine: Range | None) -> None:
    if table[where].unfile(entry, refine):
        del table[where]


class Slot:
    """Every access on one attribute name, in one table set."""

    __slots__ = ("equal", "filings", "numbers", "prefixes", "present", "strings")

    def __init__(self) -> None:
        self.equal: dict[object, Hits] = {}
        self.prefixes: dict[int, dict[str, Hits]] = {}      # by the prefix's length
        self.numbers: dict[RangeKey, Thresholds] = {}       # ranges over numbers on this name
        self.strings: dict[RangeKey, Thresholds] = {}       # ... over strings
        self.present: Hits | None = None
        self.filings = 0

    def shape(self) -> tuple[bool, int, int, int, bool]:
        """What the table set's probes list of this slot."""
        return bool(self.equal), len(self.prefixes), len(self.numbers), len(self.strings), self.present is None

    def file(self, access: Equal | Prefix | Range | Present, entry: Entry) -> None:
        self.filings += 1
        if isinstance(access, Equal):
            _file_hits(self.equal, access.key, entry, access.refine)
        elif isinstance(access, Prefix):
            table = self.prefixes.setdefault(len(access.prefix), {})
            _file_hits(table, access.prefix, entry, access.refine)
        elif isinstance(access, Present):
            if self.present is None:
                self.present = Hits()
            self.present.file(entry, None)
        else:
            _file_range(self.strings if isinstance(access.threshold, str) else self.numbers, access, entry)

    def unfile(self, access: Equal | Prefix | Range | Present, entry: Entry) -> None:
        self.filings -= 1
        if isinstance(access, Equal):
            _unfile_hits(self.equal, access.key, entry, access.refine)
        elif isinstance(access, Prefix):
            length = len(access.prefix)
            _unfile_hits(self.prefixes[length], access.prefix, entry, access.refine)
            if not self.prefixes[length]:
                del self.prefixes[length]
        elif isinstance(access, Present):
            assert self.present is not None
            if self.present.unfile(entry, None):
                self.present = None
        else:
            _unfile_range(self.strings if isinstance(access.threshold, str) else self.numbers, access, entry)

    def state(self) -> object:
        return (
            {k: h.state() for k, h in self.equal.items()},
            {n: {p: h.state() for p, h in t.items()} for n, t in self.prefixes.items()},
            {k: t.state() for k, t in self.numbers.items()},
            {k: t.state() for k, t in self.strings.items()},
            None if self.present is None else self.present.state(),
            self.filings,
        )


class AttributeTables:
    """The entries of a tuple of groups (`keys`, their ids), merged by attribute name.

    It only stores and probes; the subscription index decides which groups share a table set,
    files and unfiles their entries, and counts the plans holding it (`refs`). The probes are
    flat tuples by kind, rebuilt when a slot's shape changes, so that `collect` runs one tight
    loop per kind: equalities, number ranges, string ranges, prefixes, presence.
    """

    __slots__ = ("equal", "filings", "keys", "multi", "numbers", "prefixes", "present", "refs", "scan",
                 "slots", "strings")

    def __init__(self, keys: tuple[int, ...]) -> None:
        self.keys = keys
        self.slots: dict[str, Slot] = {}
        self.scan: dict[int, Predicate] = {}        # filtered entries without a cover
        self.multi = 0      # entries one event may reach through two accesses: dedupe needed
        self.filings = 0
        self.refs = 0       # cached plans holding these tables
        self.equal: tuple[tuple[str, dict[object, Hits]], ...] = ()
        self.numbers: tuple[RangeProbe, ...] = ()
        self.strings: tuple[RangeProbe, ...] = ()
        self.prefixes: tuple[tuple[str, int, dict[str, Hits]], ...] = ()
        self.present: tuple[tuple[str, Hits], ...] = ()

    def file(self, entry: Entry) -> None:
        cover = entry.cover
        self.filings += entry.filings
        if cover is None:
            self.scan[entry.key] = entry.predicate
            return
        self.multi += not cover.hits_at_most_once
        reshaped = False
        for access in cover.accesses:
            slot = self.slots.get(access.name)
            if slot is None:
                slot = self.slots[access.name] = Slot()
            shape = slot.shape()
            slot.file(access, entry)
            reshaped = reshaped or shape != slot.shape()
        if reshaped:
            self._reprobe()

    def unfile(self, entry: Entry) -> None:
        cover = entry.cover
        self.filings -= entry.filings
        if cover is None:
            del self.scan[entry.key]
            return
        self.multi -= not cover.hits_at_most_once
        reshaped = False
        for access in cover.accesses:
            slot = self.slots[access.name]
            shape = slot.shape()
            slot.unfile(access, entry)
            reshaped = reshaped or shape != slot.shape()
            if not slot.filings:
                del self.slots[access.name]
        if reshaped:
            self._reprobe()

    def _reprobe(self) -> None:
        slots = self.slots.items()
        self.equal = tuple((name, slot.equal) for name, slot in slots if slot.equal)
        self.numbers = tuple(t.probe for _, slot in slots for t in slot.numbers.values())
        self.strings = tuple(t.probe for _, slot in slots for t in slot.strings.values())
        self.prefixes = tuple((name, n, table) for name, slot in slots for n, table in slot.prefixes.items())
        self.present = tuple((name, slot.present) for name, slot in slots if slot.present is not None)

    def state(self) -> object:
        """Everything filed, comparable with `==` (for the index's invariant checks)."""
        probes = self.equal, self.numbers, self.strings, self.prefixes, self.present
        self._reprobe()
        assert probes == (self.equal, self.numbers, self.strings, self.prefixes, self.present)
        return {n: s.state() for n, s in self.slots.items()}, self.scan, self.multi, self.filings

    def collect(self, attributes: Mapping[str, object], out: list[int]) -> bool:
        """Append to `out` the keys whose filters match `attributes` (a key reached twice twice
        when `multi`); False, with `out` partly extended, when a value needs the slow path."""
        for k, check in self.scan.items():
            if check(attributes):
                out.append(k)
        for name, hits in self.present:
            if name in attributes:
                out += hits.exact
                for k, check in hits.checked.items():
                    if check(attributes):
                        out.append(k)
        if self.equal and not _equalities(self.equal, attributes, out):
            return False
        if self.numbers and not _numbers(self.numbers, attributes, out):
            return False
        return not (self.strings or self.prefixes) or _strings(self, attributes, out)


# The probes below are flat loops, one per kind of access (in CPython a call costs as much as a
# dict probe); a range walk is the one call, `_ranged`. NaN (`v != v`) is in no table and orders
# with nothing: a probe skips it.

def _equalities(
    equal: tuple[tuple[str, dict[object, Hits]], ...], attributes: Mapping[str, object], out: list[int],
) -> bool:
    get = attributes.get
    for name, table in equal:
        v = get(name, _MISSING)
        t = type(v)
        if t is str or t is int or t is float:
            hits = table.get(v)
        elif t is bool:
            hits = table.get(TRUE_KEY if v else FALSE_KEY)
        elif v is _MISSING or value_kind(v) == NO_KIND:
            continue
        else:
            return False        # a subclass of str, int or float
        if hits is None:
            continue
        if hits.exact:
            out += hits.exact
        if hits.checked:
            for k, check in hits.checked.items():
                if check(attributes):
                    out.append(k)
        if hits.ranges and not _refined(hits.ranges, attributes, out):
            return False
    return True


def _numbers(numbers: tuple[RangeProbe, ...], attributes: Mapping[str, object], out: list[int]) -> bool:
    get = attributes.get
    for probe in numbers:
        v = get(probe[0], _MISSING)
        t = type(v)
        if t is not int and (t is not float or v != v):  # noqa: PLR0124
            if t is float or t is str or t is bool or v is _MISSING or value_kind(v) == NO_KIND:
                continue
            return False        # a subclass of int or float
        _ranged(probe, v, attributes, out)
    return True


def _strings(tables: AttributeTables, attributes: Mapping[str, object], out: list[int]) -> bool:
    """The string ranges and prefixes of `collect`."""
    for probe in tables.strings:
        v = attributes.get(probe[0], _MISSING)
        if type(v) is str:
            _ranged(probe, v, attributes, out)
        elif isinstance(v, str):
            return False
    for name, length, table in tables.prefixes:
        v = attributes.get(name, _MISSING)
        if type(v) is not str:
            if isinstance(v, str):
                return False
            continue
        hits = table.get(v[:length])
        if hits is not None:
            out += hits.exact
            for k, check in hits.checked.items():
                if check(attributes):
                    out.append(k)
            if hits.ranges and not _refined(hits.ranges, attributes, out):
                return False
    return True


def _ranged(probe: RangeProbe, v: Any, attributes: Mapping[str, object], out: list[int]) -> None:
    """The hits of one threshold list for the value `v`, of its kind and ordered."""
    _, _, exact, below, bisect, values, buckets = probe
    i = bisect(values, v)
    if exact:
        for bucket in buckets[:i] if below else buckets[i:]:
            out += bucket
    else:
        for bucket in buckets[:i] if below else buckets[i:]:
            for k, check in bucket.items():
                if check(attributes):
                    out.append(k)


def _refined(ranges: tuple[RangeProbe, ...], attributes: Mapping[str, object], out: list[int]) -> bool:
    """The hits of a hit set's refinements (ranges on any names); False: slow path."""
    for probe in ranges:
        w = attributes.get(probe[0], _MISSING)
        t = type(w)
        if t is str:
            if probe[1]:
                _ranged(probe, w, attributes, out)
        elif t is int or t is float:
            if not probe[1] and w == w:  # noqa: PLR0124 - NaN orders with nothing
                _ranged(probe, w, attributes, out)
        elif t is not bool and w is not _MISSING and value_kind(w) != NO_KIND:
            return False
    return True
