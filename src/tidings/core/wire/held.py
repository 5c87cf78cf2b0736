"""The bytes a stream decoder holds: what arrived and is not yet pulled as a whole unit.

Both decoders of the broker's listeners (core/wire/frames.py `FrameDecoder` for tidings' frames,
core/mqtt/codec.py `PacketDecoder` for MQTT packets) keep their input the same way: `push` appends
what arrived, after dropping the prefix already pulled (`_pos`), so the buffer holds at most what
the peer sent and never grows by a length the peer declared. `held_bytes` is kept as a field as the
buffer changes (the reading machines and the peer links read it after every read). Once `failure`
is set the stream is refused: `push` ignores what comes after and `clear` has freed what was held.
"""

from __future__ import annotations

from typing import Generic, TypeVar

F = TypeVar("F")  # what a refused stream's failure is (each protocol's own error)


class HeldBytes(Generic[F]):
    __slots__ = ("_buffer", "_pos", "failure", "held_bytes")

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._pos = 0  # bytes of _buffer already pulled
        self.held_bytes = 0  # received and not yet pulled
        self.failure: F | None = None

    def clear(self) -> None:
        """Drop what is held (the connection is closing: its bytes are freed now, not at its loss)."""
        self._buffer = bytearray()
        self._pos = self.held_bytes = 0

    def push(self, data: bytes) -> None:
        if self.failure is not None:
            return
        if self._pos:
            del self._buffer[:self._pos]
            self._pos = 0
        self._buffer += data
        self.held_bytes = len(self._buffer)
