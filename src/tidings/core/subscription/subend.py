"""The subend: one subscription's delivery point at the subscriber's broker.

A subend delivers every matching event once, in tick order. It tracks `position`: every tick at or
below it has been either delivered or found not to match. It is in one of two modes:

- live: the broker's fan-out hands it each event as the event becomes durable (`position` then
  trails the pubend's durable tail);
- catching up: it reads the pubend log (ReadLog / LogRead) from `position` towards the durable tail.
  This is how a subscription starts in the past, and where a slow subscriber goes when its
  connection's output queue fills: the broker stops queueing events for it (bounded memory) and it
  reads them back from the log once the connection drains. When a read reaches the durable tail it
  turns live again. A read is issued only while the connection is not blocked, and one at a time.

Ticks the log released (retention) before the subend read them become an explicit GAP message,
never a silent skip (except for a subend started at "the oldest retained event", whose first read
begins wherever the log now begins). A bounded subend (`end` set, e.g. a Spark partition) never goes live: it reads
up to `end` (at most the durable tail when it was created) and sends END. A bulk one (READ) is a bounded
subend that sends the matching records as logged, many to a RECORDS frame, for the reader to decode
in one go.

Spans. A bulk read whose reader takes them (READ `spans`), without a filter, by an identity that
could subscribe to every channel, may be answered with the log's own bytes instead (SPAN): runs of
whole records cut at the log's sparse index, so the broker reads no record, tests no channel and
checks no checksum; the reader does all three, in its own process (for Spark, in parallel tasks,
where the broker would do them one record after another for every task). Spans carry every
channel, so the broker sends them only while the pattern kept at least one in
SPAN_RECORDS_PER_KEPT_MAX (4) of the records its reads have tested so far: the first read
(SPAN_SAMPLE_BYTES) is always record by record, and a narrow pattern stays so, until the share its
later reads keep passes that. (The reader's work per record, in C and in parallel tasks, is a
fraction of the broker's in Python, one record after another for every reader: a reader given four
records per kept one still costs less than the broker testing them; a narrower pattern would ship
too many bytes.) Events sent in spans
are not counted as delivered: the broker did not look at them.

A catch-up read tests each record's channel against the pattern without decoding the record when
there is no filter: the channel's bytes are read in place (core/event.py) and the answer is kept
per channel, at most CHANNELS_CACHED_MAX of them per subend (channels repeat).

Other pubends' events reach subends through the reliability node (reliability/node.py), which
hands over each tree's records in delivery order, exactly once, below the doubt horizon
(`DeliverRecords`); `RemoteDelivery` picks each subend's share. A record that does not name the pubend
whose stream carried it is a peer's error: counted and dropped, never delivered.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import msgpack

from tidings.core.channels import pattern_matches
from tidings.core.effects import Effect, ReadLog, Send
from tidings.core.event import ATTRIBUTES, CHANNEL, own_record_prefix, record_channel_bytes, record_routing_fields
from tidings.core.filters import Filter
from tidings.core.inputs import LogState
from tidings.core.wire import messages

if TYPE_CHECKING:
    from tidings.core.reliability.node import DeliverRecords

CHANNELS_CACHED_MAX = 256
SPAN_SAMPLE_BYTES = 64 * 1024  # the first read of a READ that may get spans: its records tested one by one
SPAN_RECORDS_PER_KEPT_MAX = 4  # spans while the pattern keeps at least one record in this many


class Subend:
    __slots__ = ("bulk", "channels", "conn", "durable", "end", "filter", "from_oldest", "kept", "key", "live",
                 "pattern", "position", "reading", "registration", "silenced", "spans", "sub", "tested", "total")

    def __init__(self, key: int, conn: int, sub: int, pattern: str, flt: Filter | None,
                 position: int, end: int | None, from_oldest: bool = False, total: bool = False,
                 bulk: bool = False, spans: bool = False) -> None:
        self.key = key
        self.conn = conn
        self.sub = sub
        self.pattern = pattern
        self.filter = flt
        self.position = position
        self.end = end
        self.from_oldest = from_oldest  # started at "the oldest retained": its first read skips released ticks
        self.live = False
        self.reading: int | None = None  # the `through` of the read in flight
        self.total = total  # total order: the reliability node delivers every pubend's events
        self.durable = False  # its client holds a checkpoint token, advanced by SILENCE
        self.silenced: dict[str, int] = {}  # the positions the last SILENCE (or SUBSCRIBED) gave
        self.registration: int | None = None  # a durable one's, at this broker (core/durable/registrations.py)
        self.bulk = bulk  # a READ: RECORDS frames, not EVENTS
        self.spans = spans and bulk and flt is None  # it may be answered with SPAN frames (see above)
        self.tested = self.kept = 0  # records its reads tested against the pattern, and those it kept
        self.channels: dict[bytes, bool] = {}  # whether a channel (its bytes) matches the pattern

    def _keeps(self, record: bytes, prefix: bytes) -> bool:
        """Whether a record of this broker's log (its records begin with `prefix`) matches."""
        if self.filter is None:
            raw = record_channel_bytes(record, prefix)
            if raw is not None:
                hit = self.channels.get(raw)
                if hit is None:
                    if len(self.channels) >= CHANNELS_CACHED_MAX:
                        self.channels.clear()
                    hit = self.channels[raw] = pattern_matches(self.pattern, raw.decode())
                return hit
        fields = msgpack.unpackb(record)
        return self.matches(fields[CHANNEL], fields[ATTRIBUTES])

    def matches(self, channel: str, attributes: dict[str, Any]) -> bool:
        if not pattern_matches(self.pattern, channel):
            return False
        return self.filter is None or self.filter.matches(attributes)

    def silence(self, positions: dict[str, int]) -> list[Effect]:
        """A durable subscription's SILENCE: the positions that moved since the last one."""
        moved = [[p, t] for p, t in sorted(positions.items()) if t > self.silenced.get(p, -1)]
        if not moved:
            return []
        self.silenced.update(positions)
        return [Send(self.conn, messages.silence(self.sub, moved))]

    def go_live(self, synced_tick: int) -> None:
        assert self.end is None and self.reading is None
        self.position = max(self.position, synced_tick)
        self.live = True

    def fall_behind(self, synced_tick: int) -> None:
        """The connection blocked: everything up to the durable tail was already queued to it."""
        if self.live:
            self.position = max(self.position, synced_tick)
            self.live = False

    def _target(self, synced_tick: int) -> int:
        return synced_tick if self.end is None else min(self.end, synced_tick)

    def next_read(self, synced_tick: int, max_bytes: int) -> list[Effect]:
        """Start the next catch-up read if one is due."""
        if self.live or self.reading is not None:
            return []
        self.reading = self._target(synced_tick)
        span = self.spans and self.tested > 0 and SPAN_RECORDS_PER_KEPT_MAX * self.kept >= self.tested
        if self.spans and not self.tested:  # a first read only measures the pattern's share
            max_bytes = min(max_bytes, SPAN_SAMPLE_BYTES)
        return [ReadLog(self.key, self.position, self.reading, max_bytes, span)]

    def status(self, synced_tick: int) -> dict[str, Any]:
        """What `tidings status` and the dashboard show: pattern, filter, mode and lag in ticks: how
        far `position` trails what it has yet to read of this broker's log (0 when live: the fan-out
        hands it each event as it becomes durable; None under total order, which the reliability
        node delivers)."""
        mode = ("total order" if self.total else "live" if self.live
                else "bounded" if self.end is not None else "catching up")
        lag = None if self.total else 0 if self.live else max(0, self._target(synced_tick) - self.position)
        return {"sub": self.sub, "pattern": self.pattern, "filter": None if self.filter is None else self.filter.text,
                "mode": mode, "position": self.position, "lag_ticks": lag}

    def caught_up(self, synced_tick: int) -> bool:
        return self.position >= self._target(synced_tick)

    def on_read(self, records: list[tuple[int, bytes]], log: LogState, pubend: str,
                span: tuple[int, bytes] | None = None) -> tuple[list[Effect], int]:
        """Deliver what the read in flight of `pubend`'s log returned (its records, or a span of the
        log: LogRead); also returns how many events it delivered (a span's are not counted)."""
        through = self.reading
        assert through is not None and not self.live
        self.reading = None
        out: list[Effect] = []
        if log.released_through > self.position:
            if not self.from_oldest:
                out.append(Send(self.conn, messages.gap(self.sub, self.position, log.released_through, pubend)))
            self.position = log.released_through
        self.from_oldest = False
        if span is not None:
            covered, blob = span
            if covered > self.position:
                if blob:
                    out.append(Send(self.conn, messages.span(self.sub, self.position, covered, blob)))
                self.position = covered
            return out, 0
        batch: list[bytes] = []
        position = self.position
        prefix = own_record_prefix(pubend)
        keeps = self._keeps
        for tick, record in records:
            if tick <= position:
                continue
            if keeps(record, prefix):
                batch.append(record)
            position = tick
        self.tested += len(records)
        self.kept += len(batch)
        if batch:
            frames = messages.records_frames if self.bulk else messages.events_frames
            out.extend(Send(self.conn, frame) for frame in frames(self.sub, batch))
        if not records:  # an empty answer means nothing is left up to `through`
            position = max(position, through)
        self.position = position
        return out, len(batch)


class RemoteDelivery:
    """Other pubends' events for local subends, with the counts `status()` reports."""

    __slots__ = ("events_delivered", "records_rejected")

    def __init__(self) -> None:
        self.events_delivered = 0
        self.records_rejected = 0  # malformed records in knowledge from peers

    def fan(self, deliver: DeliverRecords, subends: Mapping[int, Subend]) -> dict[int, list[bytes]]:
        """The records of `deliver` each of its subends (`deliver.keys`, those still in `subends`)
        gets: those matching its pattern and filter, in delivery order."""
        fan: dict[int, list[bytes]] = {}
        for pubend, record in zip(deliver.pubends, deliver.records, strict=True):
            fields = record_routing_fields(record)
            if fields is None or fields.pubend != pubend:
                self.records_rejected += 1
                continue
            channel, attributes = fields.channel, fields.attributes
            for key in deliver.keys:
                s = subends.get(key)
                if s is not None and s.matches(channel, attributes):
                    fan.setdefault(key, []).append(record)
                    self.events_delivered += 1
        return fan
