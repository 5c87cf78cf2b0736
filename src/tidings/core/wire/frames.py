"""Framing: a 4-byte big-endian body length, then a msgpack body.

`FrameDecoder` is sans-IO: feed it whatever bytes arrived and it returns the complete bodies.
A length over `frame_bytes_max` is fatal for the stream (the peer may be sending garbage, and we will
not buffer it): `feed` still returns the frames completed before it, then sets `failure` (a
ProtocolError with `fatal=True`) and ignores everything after; the caller handles the frames, then
answers the failure and closes.
"""

from __future__ import annotations

import struct

from tidings.core.errors import FRAME_TOO_LARGE, ProtocolError

HEADER = struct.Struct(">I")
HEADER_BYTES = HEADER.size


def frame(body: bytes) -> bytes:
    return HEADER.pack(len(body)) + body


class FrameDecoder:
    """Split a byte stream into frame bodies; holds at most one partial frame."""

    __slots__ = ("_buffer", "failure", "frame_bytes_max")

    def __init__(self, frame_bytes_max: int) -> None:
        self.frame_bytes_max = frame_bytes_max
        self._buffer = bytearray()
        self.failure: ProtocolError | None = None

    @property
    def buffered_bytes(self) -> int:
        return len(self._buffer)

    def feed(self, data: bytes) -> list[bytes]:
        if self.failure is not None:
            return []
        buf = self._buffer
        buf += data
        out: list[bytes] = []
        pos = 0
        end = len(buf)
        limit = self.frame_bytes_max
        while end - pos >= HEADER_BYTES:
            (length,) = HEADER.unpack_from(buf, pos)
            if length > limit:
                del buf[:]
                self.failure = ProtocolError(
                    FRAME_TOO_LARGE, f"frame of {length} bytes exceeds frame_bytes_max={limit}", fatal=True
                )
                return out
            stop = pos + HEADER_BYTES + length
            if stop > end:
                break
            out.append(bytes(buf[pos + HEADER_BYTES : stop]))
            pos = stop
        if pos:
            del buf[:pos]
        return out
