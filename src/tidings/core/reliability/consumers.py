"""The consumers of an input stream: where each one is, from which the stream derives its points.

Theory of operation (Gryphon exactly-once, §3; release, §4). Downstream of an `Istream`
(istream.py) are its `Consumer`s: the broker's children in the tree (output streams, keyed by the
child's address), its local subscriptions (keyed by subscription key) and, on a tree with durable
registrations, the persistent filtering subsystem (a negative key). Each consumer has a
`sent_through`: every tick up to it has been sent to that consumer (or is before its `start`). A
child also has an `acked_through` (what it acknowledged), and from its last ack a
`released_through` and a `delivered_through` (what every durable subscription below it released,
what every subscriber below it that keeps up has). A consumer sent back (a catchup, a child's nack)
lowers its positions (`back_to`), so the stream sends again from there. A child's *complete* nack
(messages.Nack.complete) names every tick of its span it lacks: it is sent back to the first, and
`asked` holds the ranges named, `asked_through` where it was before: up to there it is sent those
ranges only (`ask`), and then goes on as before.

From these positions the stream (istream.py) derives its points: it acknowledges upstream the
smallest tick every consumer has acknowledged (children) or been sent (local subscriptions), never
past its horizon (`Istream.ack_point`); beside each ack go the release point and the delivered point
(`Istream.release_points`, release.py): the smallest tick released below, and the smallest
delivered below, from each child's last ack (a child that has not acked yet holds them at 0), never
past the ack point; and it caches records only after the lowest tick some consumer still wants: a
child's unacknowledged ticks, a local subscription's unsent ones. Those loops stay in the stream,
over this plain data, so that they run in one module.

Invariants: an ack never sets `acked_through` above max(`sent_through`, horizon) at that moment; a
move back leaves `acked_through` and `start` at most the new `sent_through`.
"""

from __future__ import annotations

from dataclasses import dataclass, field


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
    local: bool = field(init=False)  # a local subscription's (an int key), not a child's
    asked: tuple[tuple[int, int], ...] = ()  # a child's complete nack: up to asked_through, only these
    asked_through: int = 0

    def __post_init__(self) -> None:
        self.local = type(self.key) is int

    def back_to(self, position: int) -> None:
        """The consumer lacks the ticks after `position`: they are sent again (and wanted)."""
        self.asked = ()
        self.sent_through = position
        self.acked_through = min(self.acked_through, position)
        self.start = min(self.start, position)

    def ask(self, ranges: tuple[tuple[int, int], ...]) -> None:
        """The child lacks `ranges` and nothing else of their span: it is sent those again, then
        goes on from where it was (it nacks what else it lacks); what an earlier such nack asked
        for past them is still sent."""
        last = ranges[-1][1]
        later = tuple((max(lo, last), hi) for lo, hi in self.asked if hi > last)  # an earlier one's, still to send
        through = max(self.sent_through, last, self.asked_through if self.asked else 0)
        self.back_to(ranges[0][0])
        self.asked, self.asked_through = ranges + later, through

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


__all__ = ["Consumer"]
