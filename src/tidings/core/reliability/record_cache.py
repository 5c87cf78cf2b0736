"""An input stream's bounded cache of the records of its D ticks.

Theory of operation. An `Istream` (istream.py) keeps the record of each D tick a consumer may still
be sent: a child that has not acknowledged it, a local subscription that has not been handed it. A
record arrives once (or again, as a nack's answer) and is taken into the cache only past the lowest
tick a consumer still wants (`add`); it leaves when every consumer is past it, or, past
`cache_bytes_max`, oldest arrival first (`bound`). The cache is an optimisation, never the only copy:
a consumer that needs a record the cache dropped has that tick forgotten back to Q by its stream,
which nacks it like any gap.

The cache is bounded only once the consumers were sent what arrived (the stream calls `bound` after
its push): bounding before would drop a retransmission larger than the cache before the consumer
that asked for it got it, and it would be asked for again and again.

Filtering by a child's summary (interest.py) needs each record's channel and attributes: they are
decoded once, the first time a summary asks (`matches`), and kept beside the record until it leaves.

Invariants: `size_bytes` is the sum of the cached records' lengths; after `bound`, at most
`cache_bytes_max` bytes are cached and the oldest arrival left is of a tick some consumer still
wants; every decoded entry is of a cached tick.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence

from tidings.core.event import record_routing_fields
from tidings.core.reliability.summary import Summary

_drain = deque[None](maxlen=0).extend  # runs an iterator to its end, keeping nothing


class _Arrived:
    """One arrival's ticks (ascending), those from `at` on still cached, `size` bytes of them."""

    __slots__ = ("at", "size", "ticks")

    def __init__(self, ticks: Sequence[int], size: int) -> None:
        self.ticks, self.at, self.size = ticks, 0, size


class RecordCache:
    __slots__ = ("_bytes", "_fields", "_newest", "_order", "_records", "bytes_max", "evicted")

    def __init__(self, bytes_max: int) -> None:
        self.bytes_max = bytes_max  # cache_bytes_max: records kept past what the consumers still want
        # the records by tick in a plain dict (a batch goes in at about half an OrderedDict's cost per
        # record), their arrival order beside it, one entry per arrival (a batch): the oldest is found
        # at the deque's front, where a dict's first key is found past every slot already deleted
        # from its front (18-20 us an eviction, measured), and an arrival nobody wants any more
        # leaves in one step. A tick is in an arrival's `ticks[at:]` exactly while it is in `_records`.
        self._records: dict[int, bytes] = {}
        self._order: deque[_Arrived] = deque()
        self._newest = -1  # at least every cached tick: a batch past it is first-time news
        self._bytes = 0
        self._fields: dict[int, tuple[str, Mapping[str, object]] | None] = {}  # decoded (channel, attributes)
        self.evicted = 0  # records dropped past bytes_max while a consumer still wanted them (nacked if needed)

    @property
    def records(self) -> Mapping[int, bytes]:
        """The cached records by tick, read only (in arrival order)."""
        return self._records

    @property
    def size_bytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._records)

    def __contains__(self, tick: int) -> bool:
        return tick in self._records

    def items(self) -> list[tuple[int, bytes]]:
        """The records the cache holds, (tick, record), in its order: oldest arrival first."""
        return list(self._records.items())  # (a dict keeps insertion order, and nothing is re-inserted)

    def add(self, ticks: Sequence[int], records: Sequence[bytes], wanted: int) -> int | None:
        """The records of D ticks `ticks` (ascending) arrived: keep those after `wanted` (the lowest
        tick a consumer still wants) that are not cached yet. Returns their bytes when every one was
        kept (first-time news), else None."""
        if not ticks:
            return 0
        cache = self._records
        if ticks[0] > wanted and (ticks[0] > self._newest or not any(map(cache.__contains__, ticks))):
            cache.update(zip(ticks, records, strict=True))  # first-time news: all in, in one call
            added = sum(map(len, records))
            self._order.append(_Arrived(ticks, added))
            self._bytes += added
            self._newest = max(self._newest, ticks[-1])
            return added
        kept: list[int] = []
        size = 0
        for tick, record in zip(ticks, records, strict=True):
            if tick > wanted and tick not in cache:
                cache[tick] = record
                kept.append(tick)
                size += len(record)
        if kept:
            self._order.append(_Arrived(kept, size))
            self._bytes += size
        self._newest = max(self._newest, ticks[-1])
        return None

    def bound(self, wanted: int) -> None:
        """Drop what nobody needs (ticks at or before `wanted`), then, past the byte limit, the oldest
        records (their ticks stay known to the stream; a consumer that still needs one gets it
        through a nack)."""
        cache = self._records
        if not cache:
            return
        # every consumer past all of it (a child acked all it was sent): O(1), `_newest` bounds the
        # cached ticks (arrival order is mostly tick order; a retransmission may append older ticks)
        if self._newest <= wanted:
            cache.clear()
            self._order.clear()
            self._fields.clear()
            self._bytes = 0
            return
        size, size_max, fields, order = self._bytes, self.bytes_max, self._fields, self._order
        while order:
            arrived = order[0]
            ticks = arrived.ticks
            if ticks[-1] <= wanted:  # nobody wants any of it: it leaves in one step
                order.popleft()
                size -= arrived.size
                left = ticks[arrived.at:] if arrived.at else ticks
                _drain(map(cache.__delitem__, left))  # (a loop in C)
                if fields:
                    for tick in left:
                        fields.pop(tick, None)
                continue
            oldest = ticks[arrived.at]
            if oldest > wanted and size <= size_max:
                break
            gone = len(cache.pop(oldest))
            size -= gone
            arrived.size -= gone
            arrived.at += 1
            if arrived.at == len(ticks):
                order.popleft()
            if oldest > wanted:
                self.evicted += 1
            if fields:
                fields.pop(oldest, None)
        self._bytes = size

    def matches(self, summary: Summary, tick: int, record: bytes) -> bool:
        """The summary matches the record of `tick`; a record that does not decode goes on (the
        subscriber's broker rejects it), never silenced."""
        if tick in self._fields:
            fields = self._fields[tick]
        else:
            routing = record_routing_fields(record)
            fields = self._fields[tick] = None if routing is None else (routing.channel, routing.attributes)
        return fields is None or summary.matches(*fields)


__all__ = ["RecordCache"]
