"""Filter summaries: what the subscriptions below a child of a tree want, for filtering on forwarders.

Theory of operation. A summary is a set of (pattern, filter text) entries, "" standing for no
filter, or EVERYTHING (None): the interest of every subscription in a subtree, merged. It may be
imprecise (match more than the subscriptions below do) but never less: `merge` only unions,
drops an entry that another entry of the same pattern without a filter already covers, and
gives up to EVERYTHING when a part is EVERYTHING, when `#` without a filter is present, or when
the merged summary would exceed its byte limit (pattern and filter text bytes). A forwarder turns
a data tick whose record no entry matches into silence for that child (istream.py).

`covers(wide, narrow)` is a sound under-approximation of "every event `narrow` matches, `wide`
matches": each entry of `narrow` is in `wide`, or `wide` has its pattern without a filter. A
summary that is not covered by the previous one is a widening (node.py: the hard part).

On the wire (SUMMARY, and the join's extra): None, or [[pattern, filter], ...]; `decode` checks
every pattern and parses every filter, so a bad summary is a bad message from that peer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from tidings.core.channels import pattern_matches, validate_pattern
from tidings.core.errors import BAD_MESSAGE, ProtocolError, TidingsError
from tidings.core.filters import parse_filter

SUMMARY_ENTRIES_MAX = 1024  # entries in one summary on the wire

Predicate = Callable[[Mapping[str, object]], bool]


class Summary:
    """A merged set of (pattern, filter text) entries; compiled once, on first match."""

    __slots__ = ("_compiled", "entries")

    def __init__(self, entries: frozenset[tuple[str, str]]) -> None:
        self.entries = entries
        self._compiled: list[tuple[str, Predicate | None]] | None = None

    def matches(self, channel: str, attributes: Mapping[str, object]) -> bool:
        if self._compiled is None:
            self._compiled = [(p, parse_filter(f).predicate if f else None) for p, f in sorted(self.entries)]
        return any(pattern_matches(p, channel) and (f is None or f(attributes)) for p, f in self._compiled)

    def __eq__(self, other: object) -> bool:
        return other is self or (isinstance(other, Summary) and other.entries == self.entries)

    def __hash__(self) -> int:
        return hash(self.entries)

    def __repr__(self) -> str:
        return f"Summary({sorted(self.entries)!r})"

    def to_wire(self) -> list[list[str]]:
        return [[p, f] for p, f in sorted(self.entries)]


EVERYTHING: Summary | None = None


def whole_tree(summary: Summary | None, tree: str) -> bool:
    """`summary` matches every event of `tree`: it is EVERYTHING, or holds the tree's own name (its
    pattern) without a filter, which every channel published to the tree matches. A forwarder then
    sends the child every record without looking at any (the common case, and the costly one)."""
    return summary is None or (tree, "") in summary.entries


def _size(entries: Iterable[tuple[str, str]]) -> int:
    return sum(len(p.encode("utf-8", "surrogatepass")) + len(f.encode("utf-8", "surrogatepass")) for p, f in entries)


def merge(parts: Iterable[Summary | None], bytes_max: int) -> Summary | None:
    """The union of `parts`, EVERYTHING if one is, or past `bytes_max` bytes of entries."""
    entries: set[tuple[str, str]] = set()
    for part in parts:
        if part is None:
            return EVERYTHING
        entries |= part.entries
    if ("#", "") in entries:
        return EVERYTHING
    unfiltered = {p for p, f in entries if not f}
    kept = frozenset((p, f) for p, f in entries if not f or p not in unfiltered)
    if _size(kept) > bytes_max or len(kept) > SUMMARY_ENTRIES_MAX:
        return EVERYTHING
    return Summary(kept)


class MergeCounts:
    """`merge` of a multiset of parts, kept as they come and go: what a tree's interest is made of
    (interest.py), thousands of local subscriptions among them, each a part of one entry.

    Each entry is counted over the parts holding it; the entries `merge` keeps (all but the filtered
    ones whose pattern is also there without a filter) are kept as a set with their size, so a part
    that comes or goes costs its own entries, and only an entry that appears or disappears changes
    the merged summary. `merged` builds it (at most SUMMARY_ENTRIES_MAX entries) once per change
    and limit and hands out the same object until the next change, so comparing it with the one
    sent is cheap (`Summary.__eq__`, `covers`: identity first). Equal to `merge` of the parts
    present, for every sequence of adds and removes (tests/unit/test_summaries.py).
    """

    __slots__ = ("_counts", "_everything", "_filters", "_kept", "_kept_bytes", "_merged")

    def __init__(self) -> None:
        self._counts: dict[tuple[str, str], int] = {}  # entry -> parts holding it
        self._everything = 0  # parts that are EVERYTHING
        self._filters: dict[str, set[str]] = {}  # pattern -> filter texts of its entries with a filter
        self._kept: set[tuple[str, str]] = set()  # the entries `merge` keeps
        self._kept_bytes = 0
        self._merged: dict[int, Summary | None] = {}  # bytes_max -> the merged summary, until a change

    def add(self, part: Summary | None) -> None:
        if part is None:
            self._everything += 1
            if self._everything == 1:
                self._merged.clear()
            return
        for entry in part.entries:
            count = self._counts.get(entry, 0)
            self._counts[entry] = count + 1
            if not count:
                self._appeared(entry)

    def remove(self, part: Summary | None) -> None:
        """`part`, added before, is no longer one."""
        if part is None:
            self._everything -= 1
            if not self._everything:
                self._merged.clear()
            return
        for entry in part.entries:
            count = self._counts[entry] - 1
            if count:
                self._counts[entry] = count
            else:
                del self._counts[entry]
                self._disappeared(entry)

    def merged(self, bytes_max: int) -> Summary | None:
        """`merge` of the parts present, within `bytes_max`."""
        if bytes_max in self._merged:
            return self._merged[bytes_max]
        if (self._everything or ("#", "") in self._counts or self._kept_bytes > bytes_max
                or len(self._kept) > SUMMARY_ENTRIES_MAX):
            summary = EVERYTHING
        else:
            summary = Summary(frozenset(self._kept))
        self._merged[bytes_max] = summary
        return summary

    def _appeared(self, entry: tuple[str, str]) -> None:
        self._merged.clear()
        pattern, filter_text = entry
        if not filter_text:  # covers the pattern's filtered entries: they are not kept
            for other in self._filters.get(pattern, ()):
                self._unkeep((pattern, other))
            self._keep(entry)
            return
        self._filters.setdefault(pattern, set()).add(filter_text)
        if (pattern, "") not in self._counts:
            self._keep(entry)

    def _disappeared(self, entry: tuple[str, str]) -> None:
        self._merged.clear()
        pattern, filter_text = entry
        if not filter_text:
            self._unkeep(entry)
            for other in self._filters.get(pattern, ()):
                self._keep((pattern, other))
            return
        filters = self._filters[pattern]
        filters.discard(filter_text)
        if not filters:
            del self._filters[pattern]
        if (pattern, "") not in self._counts:
            self._unkeep(entry)

    def _keep(self, entry: tuple[str, str]) -> None:
        self._kept.add(entry)
        self._kept_bytes += _size((entry,))

    def _unkeep(self, entry: tuple[str, str]) -> None:
        self._kept.remove(entry)
        self._kept_bytes -= _size((entry,))


def covers(wide: Summary | None, narrow: Summary | None) -> bool:
    """Every event `narrow` matches, `wide` matches (sound: False when unsure)."""
    if wide is None or wide is narrow:
        return True
    if narrow is None:
        return False
    return all(e in wide.entries or (e[0], "") in wide.entries for e in narrow.entries)


def of_subscription(pattern: str, filter_text: str, bytes_max: int) -> Summary | None:
    return merge([Summary(frozenset({(pattern, filter_text)}))], bytes_max)


def to_wire(summary: Summary | None) -> list[list[str]] | None:
    return None if summary is None else summary.to_wire()


def decode(value: Any) -> Summary | None:
    """A summary from a peer; ProtocolError (bad-message) if malformed."""
    if value is None:
        return EVERYTHING
    if type(value) is not list or len(value) > SUMMARY_ENTRIES_MAX:
        raise ProtocolError(BAD_MESSAGE, f"a summary is null or a list of at most {SUMMARY_ENTRIES_MAX} entries")
    entries = set()
    for entry in value:
        if type(entry) is not list or len(entry) != 2 or type(entry[0]) is not str or type(entry[1]) is not str:
            raise ProtocolError(BAD_MESSAGE, "a summary entry is [pattern, filter]")
        try:
            validate_pattern(entry[0])
            if entry[1]:
                parse_filter(entry[1])
        except TidingsError as exc:
            raise ProtocolError(BAD_MESSAGE, f"a summary entry is not valid: {exc}") from None
        entries.add((entry[0], entry[1]))
    return Summary(frozenset(entries))
