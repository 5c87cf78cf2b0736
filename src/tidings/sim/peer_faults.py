"""Faults on the messages between brokers: loss, duplication, reordering, and stalls.

Theory of operation. The simulated network is TCP: bytes arrive in order and whole until a reset.
Guaranteed delivery must also survive what TCP does not show: a message lost with a connection that
was replaced, one sent twice after a retry, two that overtake each other on different paths. A
`PeerFaults` sits between a broker core and its peer connections and applies these to whole frames
of the tree and reliability protocols (Scribe, knowledge, ACK, NACK), drawing from its own seeded
stream; frames of the link and of Pastry pass untouched, so the overlay stays up and the faults land
where the delivery protocol has to repair them. A frame picked for reordering is held back and sent
after the next frame on the same connection (or dropped if none follows: a late loss).

A stalled broker (`stalled = True`) sends nothing to its peers at all, keep-alives included, while
it goes on accepting what they send, like a hung host; its neighbours time it out. A partition is
`cut`: the addresses of the brokers on the other side, to which nothing arrives until it heals.
As TCP would, the connections stay up and what is written to them waits: `heal()` empties the set
and returns, per connection, the bytes held meanwhile, for the runtime to send in order (a lost
segment is retransmitted, not dropped; only the frames picked for loss above are lost).
"""

from __future__ import annotations

import random

import msgpack

from tidings.core.wire.frames import HEADER, HEADER_BYTES
from tidings.core.wire.types import Layer


class PeerFaults:
    def __init__(self, rng: random.Random, loss: float = 0.0, duplication: float = 0.0,
                 reordering: float = 0.0) -> None:
        self.rng = rng
        self.loss = loss
        self.duplication = duplication
        self.reordering = reordering
        self.stalled = False
        self.cut: set[str] = set()
        self._held_cut: dict[int, list[bytes]] = {}  # connection -> bytes written across the cut
        self._held: dict[int, bytes] = {}  # connection -> a frame held back for reordering
        self.lost = 0
        self.duplicated = 0
        self.reordered = 0

    def filter(self, conn: int, data: bytes, address: str | None = None) -> bytes:
        """What actually leaves on `conn` (to the broker at `address`) of the frames in `data`."""
        if self.stalled:
            return b""
        if address in self.cut or conn in self._held_cut:
            self._held_cut.setdefault(conn, []).append(self._faulted(conn, data))
            return b""
        return self._faulted(conn, data)

    def heal(self) -> dict[int, bytes]:
        """The partition is over: the bytes held per connection, to be sent now, in order."""
        self.cut = set()
        held, self._held_cut = self._held_cut, {}
        return {conn: b"".join(chunks) for conn, chunks in held.items()}

    def _faulted(self, conn: int, data: bytes) -> bytes:
        out: list[bytes] = []
        for frame in _frames(data):
            if not _faultable(frame):
                out.append(frame)
                continue
            draw = self.rng.random()
            if draw < self.loss:
                self.lost += 1
                continue
            held = self._held.pop(conn, None)
            if draw < self.loss + self.reordering and held is None:
                self._held[conn] = frame
                self.reordered += 1
                continue
            out.append(frame)
            if held is not None:
                out.append(held)
            if draw > 1.0 - self.duplication:
                out.append(frame)
                self.duplicated += 1
        return b"".join(out)

    def crashed(self) -> None:
        """The broker crashed: what it held on its connections dies with them (its connection
        numbers start again after the restart)."""
        self._held.clear()
        self._held_cut.clear()


def _frames(data: bytes) -> list[bytes]:
    frames = []
    pos = 0
    while pos < len(data):
        (length,) = HEADER.unpack_from(data, pos)
        end = pos + HEADER_BYTES + length
        frames.append(data[pos:end])
        pos = end
    return frames


def _faultable(frame: bytes) -> bool:
    unpacker = msgpack.Unpacker()
    unpacker.feed(frame[HEADER_BYTES:HEADER_BYTES + 16])
    try:
        if unpacker.read_array_header() < 1:
            return False
        kind = unpacker.unpack()
    except (msgpack.OutOfData, msgpack.ExtraData, ValueError):
        return False
    return type(kind) is int and (kind in Layer.MULTICAST or kind in Layer.RELIABILITY)
