"""A tree's retransmission window: the nack answers its root has not acknowledged yet.

Theory of operation. A log read returns in microseconds what a subscriber's broker takes tens of
milliseconds to deliver; read back to back, a million-tick answer would overrun the peer link's
bounded queue and the brokers' bounded caches, whose drops are gaps nacked (and read) again. So
each tree's answers keep at most `retransmit_window_bytes` of records (reads in flight counted at
`read_bytes_max`) beyond what its root has acknowledged since the first of them was read; the
reads (nack_answers.py) ask `room` before each goes.

The window holds (last tick, record bytes) of each answer sent, oldest first, and the reads out.
An ACK of the root past an answer's last tick takes it off (`ack`). The root acks only what all
below it have, so this is end to end; a root whose consumer went back for the answer acks its
progress from there, below the stream's earlier acks: such an ack does not move the window, and
marks it held. A nack from a tick means what was sent past it was lost, or waits at the root
behind that range: it no longer counts as in flight (`lost_after`).

A window that ACKs came for without moving it for `retransmit_wait_ns` starts again empty:
another consumer of the tree holds the root's ack point below the answer, and its ACKs say nothing
of it (the answer then goes on a window per wait, never stalls); one that no ACK came for in
STALLED_WAITS times that starts again too (the root may be gone). A root that is only slow (its
subscriber's connection full) sends no ack, and so waits the longer (`restart_if_stalled`).
"""

from __future__ import annotations

from dataclasses import dataclass

STALLED_WAITS = 10  # a window no ack came for this many retransmit_wait_ns starts again


@dataclass(slots=True)
class RetransmitWindow:
    """A tree's nack answers in flight: (last tick, record bytes) of each answer its root has not
    acknowledged yet, oldest first, the reads out, and when the root last acknowledged more."""

    acked: int
    acked_ns: int
    sent: list[tuple[int, int]]
    bytes: int = 0
    reading: int = 0  # reads of the tree out (each may return read_bytes_max)
    held_ns: int | None = None  # when an ack came that did not move the window, since it last moved

    def ack(self, now: int, through: int) -> None:
        if through <= self.acked:  # (the root's acks are its ack point: lower while a catchup is below it)
            if self.held_ns is None:
                self.held_ns = now
            return
        self.acked, self.acked_ns, self.held_ns = through, now, None
        done = 0
        for tick, size in self.sent:
            if tick > through:
                break
            done += 1
            self.bytes -= size
        del self.sent[:done]

    def lost_after(self, tick: int) -> None:
        """The root nacked from `tick`: what was sent past it is not in flight any more."""
        kept = [(t, size) for t, size in self.sent if t <= tick]
        self.sent, self.bytes = kept, sum(size for _, size in kept)

    def answered(self, through: int, size: int) -> None:
        """An answer of `size` record bytes through `through` was sent."""
        if through > self.acked:
            self.sent.append((through, size))
            self.bytes += size

    def room(self, read_bytes_max: int, window_bytes_max: int) -> bool:
        """Another read (of up to `read_bytes_max`) may go."""
        return self.bytes + self.reading * read_bytes_max < window_bytes_max

    def restart_if_stalled(self, now: int, wait_ns: int) -> bool:
        """Start again empty when the root's acks came without moving the window for `wait_ns`, or
        none came for STALLED_WAITS times that."""
        stalled = now - self.acked_ns
        held = self.held_ns is not None and now - self.held_ns >= wait_ns
        if self.sent and stalled >= wait_ns and (held or stalled >= STALLED_WAITS * wait_ns):
            self.sent, self.bytes, self.acked_ns, self.held_ns = [], 0, now, None
            return True
        return False
