"""The consumers of an input stream and the points the stream derives from their positions.

Theory of operation (Gryphon exactly-once, §3; release, §4). Downstream of an `Istream`
(istream.py) are its `Consumer`s: the broker's children in the tree (output streams, keyed by the
child's address), its local subscriptions (keyed by subscription key) and, on a tree with durable
registrations, the persistent filtering subsystem (a negative key). Each consumer has a
`sent_through`: every tick up to it has been sent to that consumer (or is before its `start`). A
child also has an `acked_through` (what it acknowledged), and from its last ack a
`released_through` and a `delivered_through` (what every durable subscription below it released,
what every subscriber below it that keeps up has). A consumer sent back (a catchup, a child's nack)
lowers its positions (`back_to`), so the stream sends again from there.

Acks flow up: the stream acknowledges the smallest tick every consumer has acknowledged (children)
or been sent (local subscriptions), never past its horizon (`ack_point`). Beside each ack go the
release point and the delivered point (`release_points`, release.py): the smallest tick released
below, and the smallest delivered below, from each child's last ack (a child that has not acked
yet holds them at 0), never past the ack point, the release point never past the delivered point.
Records are cached only after the lowest tick some consumer still wants (`lowest_wanted`): a
child's unacknowledged ticks, a local subscription's unsent ones.

Invariants: an ack never sets `acked_through` above max(`sent_through`, horizon) at that moment; a
move back leaves `acked_through` and `start` at most the new `sent_through`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(slots=True)
class Consumer:
    """A child (`key` is its address) or a local subscription (`key` is its subscription key)."""

    key: str | int
    start: int  # ticks at or before this are not wanted
    sent_through: int
    acked_through: int
    blocked: bool = False  # a local subscription whose connection cannot take more now
    released_through: int = 0  # a child's: what every durable subscription below it released
    delivered_through: int = 0  # a child's: what every subscriber below it that keeps up has

    @property
    def local(self) -> bool:
        return type(self.key) is int

    def back_to(self, position: int) -> None:
        """The consumer lacks the ticks after `position`: they are sent again (and wanted)."""
        self.sent_through = position
        self.acked_through = min(self.acked_through, position)
        self.start = min(self.start, position)

    def acked(self, through: int, released: int, delivered: int, horizon: int) -> bool:
        """A child's ack; never past what it was sent or the stream's horizon. True when its
        `acked_through` moved."""
        ceiling = max(self.sent_through, horizon)
        self.released_through = min(released, ceiling)
        self.delivered_through = min(delivered, ceiling)
        if through > self.acked_through:
            self.acked_through = min(through, ceiling)
            return True
        return False


def lowest_wanted(consumers: Iterable[Consumer], otherwise: int) -> int:
    """Records at or before this are needed by no consumer (`otherwise` when there is none)."""
    return min((c.sent_through if c.local else min(c.sent_through, c.acked_through) for c in consumers),
               default=otherwise)


def ack_point(consumers: Iterable[Consumer], horizon: int) -> int:
    """The tick through which every consumer has what it needs (children's acks, local
    subscriptions' deliveries), at most the horizon."""
    point = horizon
    for c in consumers:
        point = min(point, c.sent_through if c.local else c.acked_through)
    return point


def release_points(consumers: Iterable[Consumer], point: int, held: int | None) -> tuple[int, int]:
    """(released, delivered) below the ack point `point`, from the children's last acks, with
    `held` (this broker's own durable subscriptions' smallest release, None when it hosts none)."""
    children = [c for c in consumers if not c.local]
    delivered = point
    for c in children:
        delivered = min(delivered, c.delivered_through)
    released = delivered if held is None else min(delivered, held)
    for c in children:
        released = min(released, c.released_through)
    return released, delivered


__all__ = ["Consumer", "ack_point", "lowest_wanted", "release_points"]
