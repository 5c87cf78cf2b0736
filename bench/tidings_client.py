"""A lean tidings load client written against docs/protocol.md, on raw sockets.

It reuses the project's own wire helpers (frame encoders, FrameDecoder, decode_broker_message) so
that it speaks exactly what the broker expects, and keeps the hot paths cheap:

* a publisher sends PUBLISH frames that each carry a batch of events, and keeps several frames in
  flight (the window is counted in events); the broker answers each frame with one ACK listing one
  tick per event once the batch is on disk (after fsync);
* a subscriber that only counts does not decode events: an EVENTS body is
  ``[18, id, [event, ...]]``, so the number of events is the msgpack array header after the id;
  only a latency run decodes the records to read the send stamp in each payload.

With a credential the handshake is the real SCRAM exchange, made by `tidings.core.session.
ClientSession` (HELLO with a nonce, AUTH answering the CHALLENGE, the broker's signature checked in
WELCOME). With a CA file the connection is TLS: the ssl socket is wrapped in `TlsSocket`, whose
recv() also takes what the TLS layer already decrypted (`pending()`), so the loads' select() on
the raw descriptor never waits for bytes that have in fact already arrived.
"""

from __future__ import annotations

import contextlib
import os
import ssl
import struct
import time
from pathlib import Path
from typing import Any

import msgpack

from netutil import LOOPBACK, connect_loopback
from tidings.aio.tls import client_context
from tidings.core.auth.credentials import NONCE_BYTES, parse_credential
from tidings.core.session.client_session import ClientSession
from tidings.core.wire import decoders, messages
from tidings.core.wire.frames import FrameDecoder
from tidings.core.wire.types import ClientType

FRAME_BYTES_MAX = 64 << 20
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")


def _read_frame(sock: Any, decoder: FrameDecoder, pending: list[bytes]) -> bytes:
    while not pending:
        data = sock.recv(1 << 16)
        if not data:
            raise ConnectionError("connection closed by the broker")
        pending.extend(decoder.feed(data))
    return pending.pop(0)


def _read_message(sock: Any, decoder: FrameDecoder, pending: list[bytes]) -> Any:
    return decoders.decode_broker_message(_read_frame(sock, decoder, pending))


class TlsSocket:
    """An ssl socket whose recv() returns everything already decrypted: after reading from the
    socket it drains `pending()`, so no data waits inside the TLS layer while select() reports the
    raw descriptor idle. Everything else (sendall, fileno, close) is the ssl socket's."""

    def __init__(self, sock: ssl.SSLSocket) -> None:
        self._sock = sock

    def recv(self, size: int) -> bytes:
        data = self._sock.recv(size)
        if not data:
            return data
        parts = [data]
        while self._sock.pending():
            parts.append(self._sock.recv(self._sock.pending()))
        return b"".join(parts)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


def connect(port: int, tls_ca: str | None) -> Any:
    """A loopback connection, TLS when `tls_ca` (the CA the broker's certificate must chain to)."""
    sock = connect_loopback(port)
    if tls_ca is None:
        return sock
    return TlsSocket(client_context(Path(tls_ca)).wrap_socket(sock, server_hostname=LOOPBACK))


class TidingsConnection:
    """The control path: HELLO (CHALLENGE/AUTH with a credential) WELCOME, SUBSCRIBE/SUBSCRIBED.

    `credential` is NAME:SECRET (then NAME is the service); `tls_ca` turns TLS on."""

    def __init__(self, port: int, instance: str, credential: str | None = None,
                 tls_ca: str | None = None) -> None:
        self.sock = connect(port, tls_ca)
        self.decoder = FrameDecoder(FRAME_BYTES_MAX)
        self.pending: list[bytes] = []  # frame bodies read past the control message we waited for
        session = ClientSession("tidings-bench", instance,
                                None if credential is None else parse_credential(credential),
                                os.urandom(NONCE_BYTES))
        self.sock.sendall(session.hello())
        while True:
            body = _read_frame(self.sock, self.decoder, self.pending)
            # the session checks the frame (and, authenticated, the broker's signature in WELCOME)
            (reply,) = session.receive(_U32.pack(len(body)) + body)
            if isinstance(reply, messages.Challenge):
                self.sock.sendall(session.answer(reply))
            elif isinstance(reply, messages.Welcome):
                break
            else:
                raise ConnectionError(f"expected WELCOME, got {reply!r}")
        self.info = reply.info
        self._session = session
        every_ns = session.renew_interval_ns  # a third of the broker's lease on subscriptions
        self._renew_every_s = None if every_ns is None else every_ns / 1e9
        self._renew_at = time.monotonic() + (self._renew_every_s or 0.0)

    def renew_lease(self) -> None:
        """RENEW the broker's lease on this connection's subscriptions when a third of it has passed
        since the last one (as tidings.client does): without it a subscriber that only reads, for
        longer than the lease (a long catch-up), loses its subscription. Call it from the read loop."""
        if self._renew_every_s is not None and time.monotonic() >= self._renew_at:
            self.sock.sendall(self._session.renew())
            self._renew_at = time.monotonic() + self._renew_every_s

    def subscribe(self, sub: int, pattern: str, checkpoint: list[Any] | None = None,
                  durable: bool = False) -> list[Any] | None:
        """SUBSCRIBE from now, or durably (`durable`, or from a `checkpoint` as SUBSCRIBED gave
        it: [default, positions, home]); returns the durable subscription's checkpoint."""
        if checkpoint is not None:
            home = checkpoint[2] if len(checkpoint) > 2 else None
            msg = messages.Subscribe(sub, pattern, None, messages.START_AFTER, checkpoint[0], None,
                                     messages.ORDER_PUBLISHER, checkpoint[1], home)
        else:
            msg = messages.Subscribe(sub, pattern, None, messages.START_NOW, 0, None, messages.ORDER_PUBLISHER,
                                     [] if durable else None)
        self.sock.sendall(messages.subscribe(msg))
        while True:
            reply = _read_message(self.sock, self.decoder, self.pending)
            if isinstance(reply, messages.Subscribed) and reply.sub == sub:
                return reply.checkpoint
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
            msg = decoders.decode_broker_message(body)
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
    if len(body) < 4 or body[0] != 0x93 or body[1] != ClientType.EVENTS:
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
            if msg[0] == ClientType.EVENTS:
                count += len(msg[2])
                self.stamps.extend(int.from_bytes(record[6][:8], "big") for record in msg[2])
            elif msg[0] in (ClientType.ERROR, ClientType.GAP, ClientType.END) and len(self.errors) < 5:
                self.errors.append(repr(msg)[:200])
        return count, None
