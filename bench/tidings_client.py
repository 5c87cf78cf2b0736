"""A lean tidings load client written against docs/protocol.md, on raw sockets.

It reuses the project's own wire helpers (frame encoders, FrameDecoder, decode_broker_message) so
that it speaks exactly what the broker expects, and keeps the hot paths cheap:

* a publisher sends PUBLISH frames that each carry a batch of events, and keeps several frames in
  flight (the window is counted in events); the broker answers each frame with one ACK listing one
  tick per event once the batch is on disk (after fsync);
* a subscriber that only counts does not decode events: an EVENTS body is
  ``[18, id, [event, ...]]``, so the number of events is the msgpack array header after the id;
  only a latency run decodes the records to read the send stamp in each payload.
"""

from __future__ import annotations

import contextlib
import struct
from typing import Any

import msgpack

from netutil import connect_loopback
from tidings.core.wire import messages
from tidings.core.wire.frames import FrameDecoder

FRAME_BYTES_MAX = 64 << 20
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")


def _read_message(sock: Any, decoder: FrameDecoder, pending: list[bytes]) -> Any:
    while not pending:
        data = sock.recv(1 << 16)
        if not data:
            raise ConnectionError("connection closed by the broker")
        pending.extend(decoder.feed(data))
    return messages.decode_broker_message(pending.pop(0))


class TidingsConnection:
    """The control path: HELLO/WELCOME and SUBSCRIBE/SUBSCRIBED."""

    def __init__(self, port: int, instance: str) -> None:
        self.sock = connect_loopback(port)
        self.decoder = FrameDecoder(FRAME_BYTES_MAX)
        self.pending: list[bytes] = []  # frame bodies read past the control message we waited for
        self.sock.sendall(messages.hello("tidings-bench", instance))
        reply = _read_message(self.sock, self.decoder, self.pending)
        if not isinstance(reply, messages.Welcome):
            raise ConnectionError(f"expected WELCOME, got {reply!r}")
        self.info = reply.info

    def subscribe(self, sub: int, pattern: str) -> None:
        self.sock.sendall(messages.subscribe(
            messages.Subscribe(sub, pattern, None, messages.START_NOW, 0, None)))
        while True:
            reply = _read_message(self.sock, self.decoder, self.pending)
            if isinstance(reply, messages.Subscribed) and reply.sub == sub:
                return
            if isinstance(reply, messages.Error):
                raise ConnectionError(f"SUBSCRIBE refused: {reply.code} {reply.message}")

    def leftover(self) -> bytes:
        """Frames already read during the handshake, re-framed so a data-path parser can take them."""
        out = b"".join(_U32.pack(len(b)) + b for b in self.pending)
        self.pending.clear()
        return out

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


class PublishBuilder:
    """build(count, payload) -> one PUBLISH frame with `count` events; sequence numbers advance."""

    def __init__(self, channel: str) -> None:
        self.channel = channel
        self.seq = 0
        self._attributes: dict[str, Any] = {}

    def build(self, count: int, payload: bytes) -> bytes:
        event = [self.channel, self._attributes, payload]
        frame = messages.publish(self.seq, [event] * count)
        self.seq += count
        return frame


class AckCounter:
    """Counts events acknowledged as durable; rejected events and ERRORs are tallied apart.
    With `want_seqs`, records each ACK's first sequence number (for ack latency)."""

    def __init__(self, want_seqs: bool = False) -> None:
        self._decoder = FrameDecoder(FRAME_BYTES_MAX)
        self.errors = 0
        self.rejected = 0
        self.error_samples: list[str] = []
        self.want_seqs = want_seqs
        self.acked_seqs: list[tuple[int, int]] = []  # (first seq, events)

    def feed(self, data: bytes) -> tuple[int, bytes | None]:
        acked = 0
        for body in self._decoder.feed(data):
            msg = messages.decode_broker_message(body)
            if isinstance(msg, messages.Ack):
                good = sum(1 for t in msg.ticks if t is not None)
                acked += good
                self.rejected += len(msg.ticks) - good
                if self.want_seqs:
                    self.acked_seqs.append((msg.seq, len(msg.ticks)))
            elif isinstance(msg, messages.Error):
                self.errors += 1
                if len(self.error_samples) < 5:
                    self.error_samples.append(f"{msg.code}: {msg.message}")
        return acked, None


def _count_events(body: bytes) -> int | None:
    """Number of events in an EVENTS body without decoding them; None if it is something else."""
    if len(body) < 4 or body[0] != 0x93 or body[1] != messages.EVENTS:
        return None
    pos = 2
    tag = body[pos]  # the subscription id: a positive fixint or uint 8/16/32
    pos += 1 if tag < 0x80 else {0xCC: 2, 0xCD: 3, 0xCE: 5}.get(tag, 0)
    if pos == 2:
        return None
    tag = body[pos]
    if tag & 0xF0 == 0x90:
        return tag & 0x0F
    if tag == 0xDC:
        return int(_U16.unpack_from(body, pos + 1)[0])
    if tag == 0xDD:
        return int(_U32.unpack_from(body, pos + 1)[0])
    return None


class EventsCounter:
    """Subscriber side: counts delivered events; with `want_stamps`, decodes the records and
    collects the 8-byte perf_counter_ns stamp at the start of each payload."""

    def __init__(self, want_stamps: bool = False) -> None:
        self._decoder = FrameDecoder(FRAME_BYTES_MAX)
        self.want_stamps = want_stamps
        self.stamps: list[int] = []
        self.errors: list[str] = []

    def feed(self, data: bytes) -> tuple[int, bytes | None]:
        count = 0
        for body in self._decoder.feed(data):
            n = _count_events(body)
            if n is not None and not self.want_stamps:
                count += n
                continue
            msg = msgpack.unpackb(body)
            if msg[0] == messages.EVENTS:
                count += len(msg[2])
                self.stamps.extend(int.from_bytes(record[6][:8], "big") for record in msg[2])
            elif msg[0] in (messages.ERROR, messages.GAP, messages.END) and len(self.errors) < 5:
                self.errors.append(repr(msg)[:200])
        return count, None
