"""Framing: a 4-byte big-endian body length, then a msgpack body.

`FrameDecoder` is sans-IO: feed it whatever bytes arrived and it returns the complete bodies.
A length over `frame_bytes_max` is fatal for the stream (the peer may be sending garbage, and we will
not buffer it), so it raises a ProtocolError with `fatal=True`; the caller answers and closes.
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

    __slots__ = ("_buffer", "frame_bytes_max")

    def __init__(self, frame_bytes_max: int) -> None:
        self.frame_bytes_max = frame_bytes_max
        self._buffer = bytearray()

    @property
    def buffered_bytes(self) -> int:
        return len(self._buffer)

    def feed(self, data: bytes) -> list[bytes]:
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
                raise ProtocolError(
                    FRAME_TOO_LARGE, f"frame of {length} bytes exceeds frame_bytes_max={limit}", fatal=True
                )
            stop = pos + HEADER_BYTES + length
            if stop > end:
                break
            out.append(bytes(buf[pos + HEADER_BYTES : stop]))
            pos = stop
        if pos:
            del buf[:pos]
        return out
