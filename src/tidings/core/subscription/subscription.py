"""The subscription: one machine per local subscription at the broker that serves it (Gryphon's subend).

Theory of operation. A subscription delivers every matching event once, in tick order per pubend.
It keeps a position map `{pubend: tick}`: every tick of that pubend at or below its entry has been
delivered to it or found not to match. The broker's own pubend is one entry like the others; its
records come from this broker's log (catching up) or from its fan-out as they become durable
(live), other pubends' from the trees (reliability/node.py), and all of them enter through the one
`deliver` function, which frames them and moves the map.

Its mode (`Mode`) moves only as the table `MOVES` says, on the causes the broker reports:

    CATCHING_UP --caught up--> LIVE --blocked--> BLOCKED --drained--> CATCHING_UP
    CATCHING_UP --blocked--> BLOCKED
    any open mode --end--> ENDED,  --left--> AWAY

- catching up: it reads this broker's log (ReadLog / LogRead) from its position towards the durable
  tail. This is how a subscription starts in the past. A read is issued only while its connection
  is not blocked, and one at a time. A read that reaches the durable tail turns it live;
- live: the fan-out hands it each of its own pubend's events as the event becomes durable (its
  position then trails the durable tail), the trees the other pubends' as the reliability node
  delivers them. A total-order subscription is live from the start: the reliability node merges
  every pubend's events for it, this broker's own included (reliability/node.py `_merge`);
- blocked: its connection's send queue passed its high-water mark; the broker stops queueing events
  for it (bounded memory) and, once the connection drains, it catches up from the log;
- ended: a bounded one reached its end (END), or it was unsubscribed, refused, expired, or its log
  became unreadable; away: its connection went (or it was unsubscribed without `forget`) while its
  durable registration holds its place (core/durable/registrations.py).

Ticks the log released (retention) before the subscription read them become an explicit GAP
message, never a silent skip (except for one started at "the oldest retained event", whose first read
begins wherever the log now begins). A bounded subscription (`end` set, e.g. a Spark partition)
never goes live: it reads up to `end` (at most the durable tail when it was created) and sends END.
A bulk one (READ) is a bounded subscription that sends the matching records as logged, many to a
RECORDS frame, for the reader to decode in one go.

Spans. A bulk read whose reader takes them (READ `spans`), without a filter, by an identity that
could subscribe to every channel, may be answered with the log's own bytes instead (SPAN): runs of
whole records cut at the log's sparse index, so the broker reads no record, tests no channel and
checks no checksum; the reader does all three, in its own process (for Spark, in parallel tasks,
where the broker would do them one record after another for every task). Spans carry every
channel, so the broker sends them only while the pattern kept at least one in
SPAN_RECORDS_PER_KEPT_MAX (4) of the records its reads have tested so far: the first read
(SPAN_SAMPLE_BYTES) is always record by record, and a narrow pattern stays so, until the share its
later reads keep passes that. Events sent in spans are not counted as delivered: the broker did not
look at them.

A catch-up read tests each record's channel against the pattern without decoding the record when
there is no filter: the channel's bytes are read in place (core/event.py) and the answer is kept
per channel, at most CHANNELS_CACHED_MAX of them per subscription (channels repeat).

Durable binding. A durable subscription (its client holds a checkpoint token) is bound to its
registration (`bind`, from core/durable/subscriptions.py's outcome) and its SILENCE moves the
client's checkpoint up to its position map (`silence`); the durable machines never touch it.

Invariants: no entry of the position map goes back; a mode changes only by `MOVES`; once ENDED or
AWAY nothing is delivered.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from operator import itemgetter
from typing import Any, NamedTuple

import msgpack

from tidings.core.channels import pattern_matches
from tidings.core.effects import Effect, ReadLog, Send
from tidings.core.event import ATTRIBUTES, CHANNEL, own_record_prefix, record_channel_bytes
from tidings.core.filters import Filter
from tidings.core.inputs import LogState
from tidings.core.states import Moves
from tidings.core.wire import messages

CHANNELS_CACHED_MAX = 256
SPAN_SAMPLE_BYTES = 64 * 1024  # the first read of a READ that may get spans: its records tested one by one
SPAN_RECORDS_PER_KEPT_MAX = 4  # spans while the pattern keeps at least one record in this many


class Mode(StrEnum):
    CATCHING_UP = "catching up"
    LIVE = "live"
    BLOCKED = "blocked"
    ENDED = "ended"
    AWAY = "away"


class Cause(StrEnum):
    CAUGHT_UP = "caught up"  # a read reached the durable tail (total order: at once)
    BLOCKED = "blocked"  # the connection's send queue passed its high-water mark
    DRAINED = "drained"  # and drained again
    END = "end"  # END reached, unsubscribed, refused, expired, log unreadable
    LEFT = "left"  # the connection went and the durable registration holds its place


OPEN = (Mode.CATCHING_UP, Mode.LIVE, Mode.BLOCKED)
MOVES: Moves[Mode, Cause] = Moves("subscription", {
    (Mode.CATCHING_UP, Cause.CAUGHT_UP): Mode.LIVE,
    (Mode.CATCHING_UP, Cause.BLOCKED): Mode.BLOCKED,
    (Mode.LIVE, Cause.BLOCKED): Mode.BLOCKED,
    (Mode.BLOCKED, Cause.DRAINED): Mode.CATCHING_UP,
    **{(mode, Cause.END): Mode.ENDED for mode in OPEN},
    **{(mode, Cause.LEFT): Mode.AWAY for mode in OPEN},
})


class Taken(NamedTuple):
    """A subscription's share of other pubends' records from the trees (`Subscription.take`)."""

    first: int  # the index, among the records offered, of its first one
    delivered: int  # how many it took
    effects: list[Effect]  # their frames


class Subscription:
    __slots__ = ("bulk", "channels", "conn", "durable", "end", "filter", "from_oldest", "kept", "key", "mode",
                 "own", "pattern", "positions", "reading", "registration", "silenced", "spans", "sub", "tested",
                 "total")

    def __init__(self, key: int, conn: int, sub: int, own: str, pattern: str, flt: Filter | None,
                 position: int, end: int | None, from_oldest: bool = False, total: bool = False,
                 bulk: bool = False, spans: bool = False) -> None:
        """Subscription `sub` of connection `conn` (broker-wide `key`), of this broker's pubend
        `own` from `position` (other pubends: the trees attach it at its start)."""
        self.key = key
        self.conn = conn
        self.sub = sub
        self.own = own
        self.pattern = pattern
        self.filter = flt
        self.positions: dict[str, int] = {own: position}
        self.end = end
        self.from_oldest = from_oldest  # started at "the oldest retained": its first read skips released ticks
        self.mode = Mode.CATCHING_UP
        self.reading: int | None = None  # the `through` of the read in flight
        self.total = total  # total order: the reliability node delivers every pubend's events
        self.durable = False  # its client holds a checkpoint token, advanced by SILENCE
        self.silenced: dict[str, int] = {}  # the positions the last SILENCE (or SUBSCRIBED) gave
        self.registration: int | None = None  # a durable one's, at this broker (core/durable/registrations.py)
        self.bulk = bulk  # a READ: RECORDS frames, not EVENTS
        self.spans = spans and bulk and flt is None  # it may be answered with SPAN frames (see above)
        self.tested = self.kept = 0  # records its reads tested against the pattern, and those it kept
        self.channels: dict[bytes, bool] = {}  # whether a channel (its bytes) matches the pattern

    # ---- the mode --------------------------------------------------------------------------------

    def _move(self, cause: Cause) -> None:
        self.mode = MOVES.next(self.mode, cause)

    @property
    def live(self) -> bool:
        return self.mode is Mode.LIVE

    @property
    def position(self) -> int:
        """Its own pubend's entry of the position map."""
        return self.positions[self.own]

    def _target(self, synced_tick: int) -> int:
        return synced_tick if self.end is None else min(self.end, synced_tick)

    def caught_up(self, synced_tick: int) -> bool:
        return self.position >= self._target(synced_tick)

    def advance(self, synced_tick: int, blocked: bool, read_bytes_max: int) -> tuple[list[Effect], bool]:
        """Move on (not live): finish (END, and True: the broker drops it), turn live, or read the
        log further; nothing while its connection is `blocked` (SendDrained brings it back here)."""
        if self.mode is Mode.BLOCKED and not blocked:
            self._move(Cause.DRAINED)
        if self.mode is not Mode.CATCHING_UP and self.mode is not Mode.BLOCKED:
            return [], False
        if self.total:  # the reliability node delivers all of it, this broker's own events included
            if self.mode is Mode.CATCHING_UP:
                self._move(Cause.CAUGHT_UP)
            return [], False
        caught_up = self.caught_up(synced_tick)
        if caught_up and self.end is not None:
            self._move(Cause.END)
            return [Send(self.conn, messages.end(self.sub, self.end))], True
        if blocked:
            if self.mode is Mode.CATCHING_UP:
                self._move(Cause.BLOCKED)
            return [], False
        if caught_up:
            assert self.reading is None
            self.positions[self.own] = max(self.position, synced_tick)
            self._move(Cause.CAUGHT_UP)
            return [], False
        return self._next_read(synced_tick, read_bytes_max), False

    def blocked(self, synced_tick: int) -> None:
        """The connection blocked: a live one had everything up to the durable tail queued to it."""
        if self.mode is Mode.LIVE:
            if not self.total:
                self.positions[self.own] = max(self.position, synced_tick)
            self._move(Cause.BLOCKED)
        elif self.mode is Mode.CATCHING_UP:
            self._move(Cause.BLOCKED)

    def close(self, away: bool) -> None:
        """It ends (`away`: its durable registration holds its place while its subscriber is away)."""
        if self.mode in OPEN:
            self._move(Cause.LEFT if away else Cause.END)

    # ---- delivery --------------------------------------------------------------------------------

    def deliver(self, records: list[bytes], pubend: str | None = None, through: int | None = None,
                framed: dict[tuple[int, int], list[bytes]] | None = None, size: int | None = None) -> list[Effect]:
        """Its records (in order; each matched already), framed for its client; `through`: every
        tick of `pubend` up to it was delivered or found not to match. `framed`: the EVENTS frames
        already made in this fan-out, by the identity of their list of records and the sub id, for
        subscriptions handed the same list (the bytes are the same: encoded once); the caller keeps
        every list it hands over with `framed` alive as long as `framed` is used, so that no id is
        reused. `size`: the records' bytes, when the caller counted them (an EVENTS frame's length)."""
        assert self.mode in OPEN
        if pubend is not None and through is not None and through > self.positions.get(pubend, -1):
            self.positions[pubend] = through
        if not records:
            return []
        if self.bulk:
            return [Send(self.conn, frame) for frame in messages.records_frames(self.sub, records)]
        if framed is None:
            return [Send(self.conn, frame) for frame in messages.events_frames(self.sub, records, size)]
        made = (id(records), self.sub)
        frames = framed.get(made)
        if frames is None:
            frames = framed[made] = messages.events_frames(self.sub, records, size)
        return [Send(self.conn, frame) for frame in frames]

    def fresh(self, ticks: list[int], records: list[bytes]) -> list[bytes]:
        """Its share of a run of its own pubend's events that just became durable, each matched
        already (`ticks` ascending, one per record): when live, those past its position (`records`
        itself when that is all of them: not to be changed); else none (it reads them from the log)."""
        if self.mode is not Mode.LIVE:
            return []
        position = self.positions[self.own]
        if ticks[0] > position:
            return records
        return [record for tick, record in zip(ticks, records, strict=True) if tick > position]

    def take(self, routed: list[tuple[str, dict[str, Any]]], records: list[bytes],
             framed: dict[tuple[int, int], list[bytes]] | None = None) -> Taken | None:
        """Its share of other pubends' records from the trees, in delivery order, each checked
        already (`routed`: its channel and attributes): those matching its pattern and filter,
        framed; None if none. All of them are framed as `records` itself, through `framed` (the
        caller keeps that list alive, so its identity is its own); a part, a list of its own."""
        pattern, flt = self.pattern, self.filter  # (self.matches, without a call per record)
        if flt is None and len(routed) > 1:  # the pattern alone decides: once per channel of the batch
            channels = set(map(itemgetter(0), routed))
            hits = {channel for channel in channels if pattern_matches(pattern, channel)}
            if len(hits) == len(channels):
                return Taken(0, len(records), self.deliver(records, framed=framed)) if hits else None
            picked = [i for i, (channel, _) in enumerate(routed) if channel in hits]
        else:
            picked = [i for i, (channel, attributes) in enumerate(routed)
                      if pattern_matches(pattern, channel) and (flt is None or flt.matches(attributes))]
        if not picked:
            return None
        if len(picked) == len(records):
            return Taken(0, len(records), self.deliver(records, framed=framed))
        return Taken(picked[0], len(picked), self.deliver([records[i] for i in picked]))

    def passed(self, positions: Mapping[str, int]) -> None:
        """The trees handed it (delivered or found not to match) other pubends' ticks up to these."""
        own = self.own
        mine = self.positions
        for pubend, tick in positions.items():
            if pubend != own and tick > mine.get(pubend, -1):
                mine[pubend] = tick

    def lost(self, pubend: str, after: int, through: int) -> list[Effect]:
        """Ticks (after, through] of another pubend were released before the trees gave them to it:
        a GAP, never a silent skip."""
        if pubend != self.own and through > self.positions.get(pubend, -1):
            self.positions[pubend] = through
        return [Send(self.conn, messages.gap(self.sub, after, through, pubend))]

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

    def _next_read(self, synced_tick: int, max_bytes: int) -> list[Effect]:
        """Start the next catch-up read if one is due."""
        if self.reading is not None:
            return []
        self.reading = self._target(synced_tick)
        span = self.spans and self.tested > 0 and SPAN_RECORDS_PER_KEPT_MAX * self.kept >= self.tested
        if self.spans and not self.tested:  # a first read only measures the pattern's share
            max_bytes = min(max_bytes, SPAN_SAMPLE_BYTES)
        return [ReadLog(self.key, self.position, self.reading, max_bytes, span)]

    def on_read(self, records: list[tuple[int, bytes]], log: LogState,
                span: tuple[int, bytes] | None = None) -> tuple[list[Effect], int]:
        """Deliver what the read in flight of its own pubend's log returned (its records, or a span
        of the log: LogRead); also returns how many events it delivered (a span's are not counted)."""
        through = self.reading
        assert through is not None and self.mode in (Mode.CATCHING_UP, Mode.BLOCKED)
        self.reading = None
        out: list[Effect] = []
        own = self.own
        if log.released_through > self.position:
            if not self.from_oldest:
                out.append(Send(self.conn, messages.gap(self.sub, self.position, log.released_through, own)))
            self.positions[own] = log.released_through
        self.from_oldest = False
        if span is not None:
            covered, blob = span
            if covered > self.position:
                if blob:
                    out.append(Send(self.conn, messages.span(self.sub, self.position, covered, blob)))
                self.positions[own] = covered
            return out, 0
        batch: list[bytes] = []
        position = self.position
        prefix = own_record_prefix(own)
        keeps = self._keeps
        for tick, record in records:
            if tick <= position:
                continue
            if keeps(record, prefix):
                batch.append(record)
            position = tick
        self.tested += len(records)
        self.kept += len(batch)
        if not records:  # an empty answer means nothing is left up to `through`
            position = max(position, through)
        out += self.deliver(batch, own, position)
        return out, len(batch)

    # ---- durable binding -------------------------------------------------------------------------

    def bind(self, registration: int | None, positions: Mapping[str, int]) -> None:
        """It is durable, from the checkpoint `positions` its SUBSCRIBED gave, held by
        `registration` at this broker (None outside an overlay)."""
        self.durable = True
        self.silenced = dict(positions)
        self.registration = registration

    def unbind(self) -> None:
        """Its registration ended here (it resumed elsewhere while still connected here): served,
        not held."""
        self.registration = None

    def silence(self, synced_tick: int) -> list[Effect]:
        """A durable subscription's SILENCE: its checkpoint moves up to its position map (its own
        pubend's at the durable tail when live); only the positions that moved since the last one."""
        positions = dict(self.positions)
        if self.mode is Mode.LIVE:
            positions[self.own] = max(self.position, synced_tick)
        moved = [[p, t] for p, t in sorted(positions.items()) if t > self.silenced.get(p, -1)]
        if not moved:
            return []
        self.silenced.update(positions)
        return [Send(self.conn, messages.silence(self.sub, moved))]

    # ---- observation -----------------------------------------------------------------------------

    def status(self, synced_tick: int) -> dict[str, Any]:
        """What `tidings status` and the dashboard show: pattern, filter, mode and lag in ticks: how
        far its own pubend's position trails what it has yet to read of this broker's log (0 when
        live; None under total order, which the reliability node delivers)."""
        mode = ("total order" if self.total else "bounded" if self.end is not None and self.mode is not Mode.BLOCKED
                else str(self.mode))
        lag = None if self.total else 0 if self.live else max(0, self._target(synced_tick) - self.position)
        return {"sub": self.sub, "pattern": self.pattern, "filter": None if self.filter is None else self.filter.text,
                "mode": mode, "position": self.position, "lag_ticks": lag}
