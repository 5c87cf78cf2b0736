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

A **plain** subscription resumes from "now" after a move (core/session/roaming.py says when a
client with plain subscriptions may move at all). The cursor remembers the newest tick it
received from each pubend (`seen`), and after a move drops what the new broker sends at or below
it (`floor`): what came from the old broker does not come twice.

`resume()` gives the start of the new SUBSCRIBE after a move. Pure data, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from tidings.core.durable.checkpoint import Checkpoint
from tidings.core.errors import TidingsError
from tidings.core.event import Event
from tidings.core.wire import messages


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


def silence_of(msg: messages.Silence) -> Silence:
    """The well-formed positions of a SILENCE (a malformed pair is ignored)."""
    return Silence({p[0]: p[1] for p in msg.positions
                    if type(p) is list and len(p) == 2 and type(p[0]) is str and type(p[1]) is int})


def advance(checkpoint: Checkpoint | None, items: list[Any]) -> list[Any]:
    """Apply `items` (as the application takes them) to a durable subscription's `checkpoint`;
    the items without the SILENCE markers."""
    if checkpoint is None:
        return items
    out: list[Any] = []
    for item in items:
        if type(item) is Silence:
            checkpoint.silence(item.positions)
            continue
        if type(item) is Event:
            checkpoint.delivered(item.pubend, item.tick)
        elif type(item) is Gap and item.pubend is not None:
            checkpoint.delivered(item.pubend, item.through)
        out.append(item)
    return out


class Resume(NamedTuple):
    """Where a subscription starts again: the SUBSCRIBE's start, positions and home."""

    start: str | int
    positions: list[Any] | None = None
    home: list[Any] | None = None


def _copy(checkpoint: Checkpoint) -> Checkpoint:
    return Checkpoint(checkpoint.default, dict(checkpoint.positions), checkpoint.home)


class Cursor:
    __slots__ = ("_acked", "_done", "_floor", "checkpoint", "received", "seen")

    def __init__(self) -> None:
        self.checkpoint: Checkpoint | None = None  # durable: after the items the application took
        self.received: Checkpoint | None = None  # durable: after every item received
        self.seen: dict[str, int] = {}  # plain: the newest tick received per pubend
        self._floor: dict[str, int] | None = None  # plain, after a move: `seen` then
        self._done: list[Any] | None = None  # durable: the checkpoint when the application last asked for more
        self._acked: list[Any] | None = None  # durable: the checkpoint last acknowledged

    @property
    def durable(self) -> bool:
        return self.checkpoint is not None

    def confirmed(self, wire: list[Any] | None) -> None:
        """The first SUBSCRIBED: a durable subscription's start (`wire`, its checkpoint as sent),
        released already at its broker. TidingsError when the broker's checkpoint is malformed."""
        if wire is None:
            return
        self.checkpoint = Checkpoint.from_wire(wire)
        self._acked = self.checkpoint.to_wire()[:2]
        self.received = _copy(self.checkpoint)

    def rehomed(self, wire: list[Any] | None) -> None:
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

    def arrived(self, events: list[Event]) -> list[Event]:
        """Events that arrived: a plain subscription drops those a move would repeat."""
        if self.checkpoint is None:
            floor = self._floor
            if floor:
                events = [e for e in events if e.tick > floor.get(e.pubend, -1)]
            seen = self.seen
            for e in events:
                seen[e.pubend] = e.tick
        return events

    def received_items(self, items: list[Any]) -> None:
        """Items (events, Gap and Silence markers) were put in the client's buffer."""
        if self.received is not None:
            advance(self.received, items)

    def taking(self) -> None:
        """The application asks for more: what it took before is done with (the automatic ack's)."""
        if self.checkpoint is not None:
            self._done = self.checkpoint.to_wire()[:2]

    def taken(self, items: list[Any]) -> list[Any]:
        """The application takes `items`: the token moves; they are returned without SILENCE markers."""
        return advance(self.checkpoint, items)

    def ack_due(self) -> list[Any] | None:
        """The checkpoint to acknowledge automatically, when it moved since the last ack."""
        return self._done if self._done is not None and self._done != self._acked else None

    def acked(self, wire: list[Any]) -> None:
        """`wire` ([default, positions]) was acknowledged (RELEASE)."""
        self._acked = wire

    def rewind(self, checkpoint: Checkpoint) -> None:
        """The application goes back to an older token of this subscription (it lost its later
        state): both checkpoints are that token; what came after it must come again."""
        self.checkpoint = checkpoint
        self.received = _copy(checkpoint)

    def resume(self) -> Resume:
        """After a move: a durable subscription after every item received; a plain one from now,
        dropping what it saw already."""
        if self.checkpoint is None:
            self._floor = dict(self.seen)
            return Resume(messages.START_NOW)
        after = _copy(self.received or self.checkpoint)
        return Resume(after.default, after.to_wire()[1], None if after.home is None else list(after.home))

