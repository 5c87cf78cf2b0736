"""The cursor: where one subscription of a client is, and where it goes on after a move.

Theory of operation. A **durable** subscription (docs/durable.md) has two checkpoints
(core/durable/checkpoint.py). `checkpoint` follows what the application has *taken*: it is the
token the application stores, and what it acknowledges (RELEASE). `received` follows every item
that *arrived*, taken or still buffered in the client (the blocking client's own buffer
included): a move or a failover resumes after it, so that the new broker starts where the buffers
end and nothing comes twice or is lost. Both move with each event, with each GAP that names its
pubend, and with SILENCE markers, which travel in line with the events (a SILENCE moves the token
only once the events before it were taken) and are never shown to the application.

The automatic ack (Client's `auto_ack`): each time the application asks for more (`taking()`),
what it had taken before is done with; `ack_due()` gives that checkpoint when it was not
acknowledged yet, and the driver sends RELEASE on the roaming machine's AUTO_ACK deadline.

A **plain** subscription has no token, but it has what it received: the newest tick from each
pubend (`seen`), and the newest tick of all with the time it arrived (`now`, the driver's clock).
After a move or a failover it subscribes again *after a tick* (START_AFTER, one tick for every
pubend, as the wire has it), chosen so that nothing published in the move window is missed:

- each pubend it heard from resumes after the last tick it received from it (`seen`), so an
  event that was still on its way to the old broker comes from the new one;
- a pubend it never heard from has no position: its start is by time, the newest tick it
  received from any pubend (or its start, SUBSCRIBED's position) less the clock-skew allowance
  (as a subscription that starts now reaches back for other brokers' events,
  core/subscription/start.py). An event of that pubend that had not come yet reached the old
  broker after the newest one that came (its broker sends in the order events reach it) and within
  the allowance of its publishing, so it is after that tick, even when the old broker held back a
  backlog for a subscriber that read slowly;
- no pubend pulls the start further back than `reach_back_ns` before the present (the newest tick
  received plus the time since it arrived, up to the moment the old connection stopped serving:
  `lost`, or the resume itself while the old connection still serves during a move): one heard
  from long ago (a rare match) would otherwise have the new broker replay everything since.

The new broker delivers from the lowest of these, and the cursor drops every event at or below
what it received from its pubend (`arrived`, across the move and while the old connection still
delivers beside the new one), and the part of a GAP it knows it had (`gap`). So the move is exactly
once while the events are still in the publishers' logs (a GAP says when they were not), the
client had fallen no more than `reach_back_ns` behind, and the events of a pubend it had not heard
from reached the old broker within the allowance of their publishing. A total-order subscription
starts now and nowhere else: it resumes from now, with the same dropping. A plain subscription
moved before its first SUBSCRIBED starts now.

`resume()` gives the start of the new SUBSCRIBE after a move. Pure data, no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple, TypeVar

from tidings.core import defaults
from tidings.core.durable.checkpoint import Checkpoint
from tidings.core.errors import TidingsError
from tidings.core.event import Event
from tidings.core.units import SECOND_NS, ns_to_us
from tidings.core.wire import messages

REACH_BACK_NS = 60 * SECOND_NS  # a moved plain subscription restarts at most this far back for any pubend


@dataclass(frozen=True, slots=True)
class Gap:
    """Events of `pubend` after tick `after` up to tick `through` may have matched but were released
    before this subscription read them (a durable subscription's token moves past them)."""

    after: int
    through: int
    pubend: str | None = None


class Silence(NamedTuple):
    """A SILENCE for a durable subscription, in line with its events: applied, never returned."""

    positions: dict[str, int]


Item = Event | Gap | Silence  # what a subscription's buffer holds (a bulk read's buffer holds RECORDS instead)
Shown = TypeVar("Shown")
# a checkpoint as the wire has it: [default, [[pubend, tick], ...]] (core/durable/checkpoint.py)
Wire = list[object]


def silence_of(msg: messages.Silence) -> Silence:
    """The well-formed positions of a SILENCE (a malformed pair is ignored)."""
    return Silence({p[0]: p[1] for p in msg.positions
                    if type(p) is list and len(p) == 2 and type(p[0]) is str and type(p[1]) is int})


def advance(checkpoint: Checkpoint | None, items: Sequence[Shown | Silence]) -> list[Shown]:
    """Apply `items` (as the application takes them) to a durable subscription's `checkpoint`;
    the items without the SILENCE markers."""
    if checkpoint is None:
        return [item for item in items if not isinstance(item, Silence)]  # (a plain one gets none)
    out: list[Shown] = []
    for item in items:
        if isinstance(item, Silence):
            checkpoint.silence(item.positions)
            continue
        if isinstance(item, Event):
            checkpoint.delivered(item.pubend, item.tick)
        elif isinstance(item, Gap) and item.pubend is not None:
            checkpoint.delivered(item.pubend, item.through)
        out.append(item)
    return out


class Resume(NamedTuple):
    """Where a subscription starts again: the SUBSCRIBE's start (START_NOW, or a tick to start
    after), its positions (durable) and its home."""

    start: str | int
    positions: list[list[str | int]] | None = None
    home: list[str | int] | None = None


def _copy(checkpoint: Checkpoint) -> Checkpoint:
    return Checkpoint(checkpoint.default, dict(checkpoint.positions), checkpoint.home)


class Cursor:
    __slots__ = ("_acked", "_clock", "_cut_at", "_done", "_floors", "_moved", "checkpoint",
                 "clock_skew_allowance_ns", "reach_back_ns", "received", "seen", "total_order")

    def __init__(self, total_order: bool = False,
                 clock_skew_allowance_ns: int = defaults.CLOCK_SKEW_ALLOWANCE_NS,
                 reach_back_ns: int = REACH_BACK_NS) -> None:
        self.checkpoint: Checkpoint | None = None  # durable: after the items the application took
        self.received: Checkpoint | None = None  # durable: after every item received
        self.total_order = total_order  # plain, in total order: it resumes from now
        self.clock_skew_allowance_ns = clock_skew_allowance_ns  # as the brokers' (docs/configuration.md)
        self.reach_back_ns = reach_back_ns
        self.seen: dict[str, int] = {}  # plain: the newest tick received per pubend
        self._clock: tuple[int, int] | None = None  # plain: the newest tick received (or started at), and when
        self._cut_at: int | None = None  # plain: when the connection stopped serving, before a resume
        self._moved = False  # plain: it resumed once; what it had comes again and is dropped
        # plain, after a move: the part of a GAP at or below these is what it had (or presumes it had)
        self._floors: tuple[dict[str, int], int] = ({}, -1)
        self._done: Wire | None = None  # durable: the checkpoint when the application last asked for more
        self._acked: Wire | None = None  # durable: the checkpoint last acknowledged

    @property
    def durable(self) -> bool:
        return self.checkpoint is not None

    def confirmed(self, wire: Wire | None, position: int | None = None, now: int = 0) -> None:
        """The first SUBSCRIBED: a durable subscription's start (`wire`, its checkpoint as sent),
        released already at its broker; a plain one's `position` (its broker's clock when it starts
        now), at `now`. TidingsError when the broker's checkpoint is malformed."""
        if wire is None:
            if position is not None and self._clock is None:
                self._clock = (position, now)
            return
        self.checkpoint = Checkpoint.from_wire(wire)
        self._acked = self.checkpoint.to_wire()[:2]
        self.received = _copy(self.checkpoint)

    def rehomed(self, wire: Wire | None) -> None:
        """A SUBSCRIBED after a move: the durable subscription's new home (a malformed one is ignored)."""
        if wire is None or self.checkpoint is None:
            return
        try:
            home = Checkpoint.from_wire(wire).home
        except TidingsError:
            return
        self.checkpoint.home = home
        if self.received is not None:
            self.received.home = home

    def arrived(self, events: list[Event], now: int = 0) -> list[Event]:
        """Events that arrived at `now`: a plain subscription drops, once it moved, those it had."""
        if self.checkpoint is not None:
            return events
        seen = self.seen
        if self._moved:
            events = [e for e in events if e.tick > seen.get(e.pubend, -1)]
        newest = -1
        for e in events:
            seen[e.pubend] = e.tick
            newest = max(newest, e.tick)
        if newest >= 0 and (self._clock is None or newest > self._clock[0]):
            self._clock = (newest, now)
        return events

    def gap(self, gap: Gap) -> Gap | None:
        """A GAP that arrived: after a move, a plain subscription keeps only the part of it above
        what it had from that pubend (None: nothing)."""
        if self.checkpoint is not None or not self._moved or gap.pubend is None:
            return gap
        floors, default = self._floors
        floor = floors.get(gap.pubend, default)
        if gap.through <= floor:
            return None
        return gap if gap.after >= floor else Gap(floor, gap.through, gap.pubend)

    def received_items(self, items: Sequence[Item]) -> None:
        """Items (events, Gap and Silence markers) were put in the client's buffer."""
        if self.received is not None:
            advance(self.received, items)

    def taking(self) -> None:
        """The application asks for more: what it took before is done with (the automatic ack's)."""
        if self.checkpoint is not None:
            self._done = self.checkpoint.to_wire()[:2]

    def taken(self, items: Sequence[Shown | Silence]) -> list[Shown]:
        """The application takes `items`: the token moves; they are returned without SILENCE markers."""
        return advance(self.checkpoint, items)

    def ack_due(self) -> Wire | None:
        """The checkpoint to acknowledge automatically, when it moved since the last ack."""
        return self._done if self._done is not None and self._done != self._acked else None

    def acked(self, wire: Wire) -> None:
        """`wire` ([default, positions]) was acknowledged (RELEASE)."""
        self._acked = wire

    def rewind(self, checkpoint: Checkpoint) -> None:
        """The application goes back to an older token of this subscription (it lost its later
        state): both checkpoints are that token; what came after it must come again."""
        self.checkpoint = checkpoint
        self.received = _copy(checkpoint)

    def lost(self, now: int) -> None:
        """The connection stopped serving at `now` (lost, or dropped): a plain resume counts the
        present from here, not from when the next broker answers."""
        if self._cut_at is None:
            self._cut_at = now

    def resume(self, now: int = 0) -> Resume:
        """After a move, at `now`: a durable subscription after every item received; a plain one
        after the tick that misses nothing (above), dropping what it had."""
        if self.checkpoint is None:
            return Resume(self._plain_start(now))
        after = _copy(self.received or self.checkpoint)
        positions: list[list[str | int]] = [[p, t] for p, t in sorted(after.positions.items())]
        return Resume(after.default, positions, None if after.home is None else list(after.home))

    def _plain_start(self, now: int) -> str | int:
        self._moved = True
        cut, self._cut_at = self._cut_at, None
        clock = self._clock
        if clock is None or self.total_order:
            return messages.START_NOW
        tick, at = clock
        present = tick + ns_to_us(max(0, (now if cut is None else min(cut, now)) - at))  # (a tick is a microsecond)
        reach = present - ns_to_us(self.reach_back_ns)
        by_time = max(reach, tick - ns_to_us(self.clock_skew_allowance_ns))
        floors = {p: max(t, reach) for p, t in self.seen.items()}
        self._floors = (floors, by_time)
        return max(0, min([by_time, *floors.values()]))
