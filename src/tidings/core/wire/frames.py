"""Framing: a 4-byte big-endian body length, then a msgpack body.

`FrameDecoder` is sans-IO: `push` whatever bytes arrived, then `pull` the complete bodies one at a
time, or `take` them all (`feed` does push and take). The length limit is read at each `pull`, so
a connection can raise it once its handshake is done and the frames behind the HELLO are judged
by the limit of the state they arrive in; `frames` pulls one at a time while the limit may still
rise, and takes the rest at once after (the fast path of an open connection). A length over the
limit is fatal for the stream (the peer may be sending garbage, and we will not buffer it): `pull`
then returns None (`take` stops), sets `failure` (a ProtocolError with `fatal=True`) and drops
everything held; the caller answers the failure and closes. The buffer grows only with the bytes
that arrived, never by a declared length, so what a connection pins is what it sent: `held_bytes`.
Whole frames not pulled yet (a connection the broker holds unread, core/broker/connection.py) stay there
as bytes; the frame not yet whole, `partial_bytes`, is what the broker charges to its global budget
for partial frames (`PartialFrames` below).

`PartialFrames` is that budget: the bytes every connection holds in a partial frame, against
`partial_frames_bytes_max`, and each such connection's progress deadline (a partial frame must
keep arriving: no byte for `frame_progress_timeout_ns` and the connection is overdue). It is pure
bookkeeping; the broker decides what an overdue or over-budget connection gets (docs/security.md).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

from tidings.core.deadlines import Alarm, Deadlines
from tidings.core.errors import FRAME_TOO_LARGE, ProtocolError
from tidings.core.wire.held import HeldBytes

HEADER = struct.Struct(">I")
HEADER_BYTES = HEADER.size


def frame(body: bytes) -> bytes:
    return HEADER.pack(len(body)) + body


class FrameDecoder(HeldBytes[ProtocolError]):
    """Split a byte stream into frame bodies; holds the bytes not yet pulled (at most one partial
    frame once every complete one is pulled). While `final` is False (a handshake may still raise
    the limit) `frames` hands out one frame at a time; after, all complete frames at once."""

    __slots__ = ("final", "frame_bytes_max", "limit_name")

    def __init__(self, frame_bytes_max: int, limit_name: str = "frame_bytes_max", final: bool = True) -> None:
        self.frame_bytes_max = frame_bytes_max
        self.limit_name = limit_name  # named in the failure: which limit the frame broke
        self.final = final
        super().__init__()

    def limit(self, frame_bytes_max: int, limit_name: str, final: bool = True) -> None:
        """Judge the frames pulled from now on by `frame_bytes_max` (e.g. after the handshake)."""
        self.frame_bytes_max = frame_bytes_max
        self.limit_name = limit_name
        self.final = final

    @property
    def partial_bytes(self) -> int:
        """The bytes held of a frame not yet whole, behind the whole frames not pulled yet (a held
        connection's, core/broker/connection.py): what counts against the budget for partial frames."""
        buf = self._buffer
        pos = self._pos
        end = len(buf)
        while end - pos >= HEADER_BYTES:
            (length,) = HEADER.unpack_from(buf, pos)
            stop = pos + HEADER_BYTES + length
            if stop > end:
                break
            pos = stop
        return end - pos

    def _too_large(self, length: int) -> None:
        self.clear()
        self.failure = ProtocolError(
            FRAME_TOO_LARGE, f"frame of {length} bytes exceeds {self.limit_name}={self.frame_bytes_max}", fatal=True)

    def pull(self) -> bytes | None:
        """The next complete frame body, or None (then see `failure`)."""
        buf = self._buffer
        pos = self._pos
        if self.failure is not None or len(buf) - pos < HEADER_BYTES:
            return None
        (length,) = HEADER.unpack_from(buf, pos)
        if length > self.frame_bytes_max:
            self._too_large(length)
            return None
        stop = pos + HEADER_BYTES + length
        if stop > len(buf):
            return None
        self._pos = stop
        self.held_bytes = len(buf) - stop
        return bytes(buf[pos + HEADER_BYTES:stop])

    def take(self) -> list[bytes]:
        """Every complete frame body held, judged by the current limit; see `failure` afterwards."""
        if self.failure is not None:
            return []
        buf = self._buffer
        out: list[bytes] = []
        pos = self._pos
        end = len(buf)
        limit = self.frame_bytes_max
        while end - pos >= HEADER_BYTES:
            (length,) = HEADER.unpack_from(buf, pos)
            if length > limit:
                self._too_large(length)
                return out
            stop = pos + HEADER_BYTES + length
            if stop > end:
                break
            out.append(bytes(buf[pos + HEADER_BYTES:stop]))
            pos = stop
        if pos:
            del buf[:pos]
        self._pos = 0
        self.held_bytes = len(buf)
        return out

    def frames(self) -> Iterator[bytes]:
        """The complete frames held, each pulled only once the one before was handled while the
        limit is not final (so a frame behind a HELLO meets the limit the HELLO set)."""
        while not self.final:
            body = self.pull()
            if body is None:
                return
            yield body
        yield from self.take()

    def feed(self, data: bytes) -> list[bytes]:
        """`push(data)`, then every complete frame body; see `failure` afterwards."""
        self.push(data)
        return self.take()


class PartialFrames:
    """The bytes held in partial frames by every connection, against one budget, with each
    holder's progress deadline. One timer entry per holder, moved on only when it fires (bytes
    arriving just note the time), so a stream of small reads costs no timer churn."""

    __slots__ = ("bytes_max", "deadlines", "held", "held_bytes", "progress_at", "progress_ns", "refused_total")

    def __init__(self, bytes_max: int, progress_ns: int, alarm: Alarm | None = None) -> None:
        """`alarm`: the broker's earliest deadline (core/deadlines.py), told when a deadline moves."""
        self.bytes_max = bytes_max
        self.progress_ns = progress_ns
        self.held: dict[int, int] = {}  # conn -> bytes its decoder holds (only connections holding some)
        self.progress_at: dict[int, int] = {}  # conn -> when bytes last arrived while it held some
        self.held_bytes = 0
        self.deadlines: Deadlines[int] = Deadlines(alarm)
        self.refused_total = 0  # connections refused for the budget or for no progress

    def update(self, now: int, conn: int, held: int) -> bool:
        """Bytes arrived on `conn`, whose decoder now holds `held`: False when that growth would
        take the total past the budget (the caller closes the connection, then `forget`s it)."""
        before = self.held.get(conn, 0)
        if held > before and self.held_bytes - before + held > self.bytes_max:
            self.refused_total += 1
            return False
        if held:
            self.held_bytes += held - before
            self.held[conn] = held
            self.progress_at[conn] = now  # bytes arrived: the frame moves on
            if conn not in self.deadlines:
                self.deadlines.set(conn, now + self.progress_ns)
        elif before:
            self.forget(conn)
        return True

    def forget(self, conn: int) -> None:
        self.held_bytes -= self.held.pop(conn, 0)
        self.progress_at.pop(conn, None)
        self.deadlines.cancel(conn)

    def wait(self, now: int, conn: int) -> None:
        """`conn` is not read by our choice (backpressure), or read again just now: its frame could
        not move until now; it has `progress_ns` from now."""
        self.progress_at[conn] = now
        self.deadlines.set(conn, now + self.progress_ns)

    def overdue(self, now: int) -> list[int]:
        """The connections whose partial frame got no byte within `progress_ns`, earliest first."""
        out: list[int] = []
        for conn in self.deadlines.pop_due(now):
            due = self.progress_at[conn] + self.progress_ns
            if due <= now:
                out.append(conn)
            else:
                self.deadlines.set(conn, due)
        return out

    def next_deadline(self) -> int | None:
        return self.deadlines.next_deadline()
