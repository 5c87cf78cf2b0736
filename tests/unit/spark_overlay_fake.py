"""A broker of a fake overlay for the data source's Spark-free tests: its pubend, its address, the
members its leaf set names, its log and how much of it retention released; and the RECORDS frames
a broker answers a bulk read with, from events."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import msgpack

from tidings.core.errors import GapError
from tidings.core.event import Event
from tidings.core.wire.messages import Records

FRAME_EVENTS = 7  # events per RECORDS frame of a fake broker: a range spans several frames


def records_of(events: list[Event]) -> Records:
    """A RECORDS frame of `events`, as a broker sends them: their records as logged."""
    return Records(1, len(events), msgpack.packb([[e.pubend, e.tick, e.channel, e.attributes, e.service,
                                                   e.instance, e.payload] for e in events]))


def as_records(events: Iterable[Event]) -> Iterator[Records]:
    """`events` (a fake read, which may raise GapError) as a bulk read's RECORDS frames: those
    before a gap come first, then the GapError."""
    chunk: list[Event] = []
    try:
        for event in events:
            chunk.append(event)
            if len(chunk) == FRAME_EVENTS:
                yield records_of(chunk)
                chunk = []
    except GapError:
        if chunk:
            yield records_of(chunk)
        raise
    if chunk:
        yield records_of(chunk)


class BulkReads:
    """A fake client's bulk read (READ/RECORDS): its `read` (events, perhaps a GapError) as the
    RECORDS frames a broker sends."""

    def read(self, pattern: str, *, filter: str | None = None, after: int = 0,
             end: int | None = None) -> Iterator[Event]:
        raise NotImplementedError

    def read_records(self, pattern: str, *, filter: str | None = None, after: int = 0,
                     end: int, spans: bool = False) -> Iterator[Records]:  # RECORDS answer a reader of spans too
        return as_records(self.read(pattern, filter=filter, after=after, end=end))


@dataclass
class FakeBroker:
    pubend: str
    address: str
    leaf_set: list[str]
    events: list[Event] = field(default_factory=list)
    released_through: int = 0

    def publish(self, tick: int, channel: str = "load/h1") -> Event:
        event = Event(self.pubend, tick, channel, {"n": tick}, "test", "pub", b"")
        self.events.append(event)
        return event
