"""A lean NATS client for load generation: core PUB/SUB/MSG/PING and the few JetStream calls.

Same rule as mqtt_client: the broker must be the bottleneck, so

* publishers send batches of ``PUB`` lines as one bytes object;
* a core subscriber that only counts looks for the fixed ``MSG <subject> <sid> <size>`` line with
  ``bytes.count`` instead of parsing (the filler payload cannot contain it), and answers PINGs;
* JetStream deliveries carry a reply subject that must be acked, so that path parses, but answers a
  whole read with one send.

JetStream is driven through its request/reply API: ``$JS.API.STREAM.CREATE.<name>`` with a JSON
config, an acknowledged publish is a ``PUB subject reply-inbox`` answered on the inbox with
``{"stream": ..., "seq": n}`` once the stream stored it, and a push consumer delivers on its deliver
subject with a per-message reply subject that takes ``+ACK`` (an empty message does too).
"""

from __future__ import annotations

import contextlib
import itertools
import json
from collections.abc import Callable
from typing import Any

from netutil import connect_loopback

CRLF = b"\r\n"
_inbox_ids = itertools.count(1)


class NatsConnection:
    """The control path of one connection: INFO/CONNECT, SUB, flush, JetStream requests."""

    def __init__(self, port: int, name: str) -> None:
        self.sock = connect_loopback(port)
        self._buf = b""
        info = self._line()
        if not info.startswith(b"INFO "):
            raise ConnectionError(f"expected INFO, got {info[:80]!r}")
        options = {"verbose": False, "pedantic": False, "protocol": 1, "headers": True,
                   "no_responders": True, "name": name, "lang": "tidings-bench", "version": "1"}
        self.sock.sendall(b"CONNECT " + json.dumps(options).encode() + CRLF)
        self.flush()

    def _fill(self) -> None:
        chunk = self.sock.recv(1 << 16)
        if not chunk:
            raise ConnectionError("connection closed by the broker")
        self._buf += chunk

    def _line(self) -> bytes:
        while CRLF not in self._buf:
            self._fill()
        line, self._buf = self._buf.split(CRLF, 1)
        return line

    def _control(self, line: bytes) -> None:
        if line == b"PING":
            self.sock.sendall(b"PONG\r\n")
        elif line.startswith(b"-ERR"):
            raise ConnectionError(line.decode(errors="replace"))

    def flush(self) -> None:
        """PING and wait for the PONG: everything sent before has been processed."""
        self.sock.sendall(b"PING\r\n")
        while (line := self._line()) != b"PONG":
            self._control(line)

    def sub(self, subject: str, sid: int) -> None:
        self.sock.sendall(f"SUB {subject} {sid}\r\n".encode())
        self.flush()

    def request(self, subject: str, body: Any, timeout_s: float = 10.0) -> dict[str, Any]:
        """One request/reply round trip with a JSON answer (JetStream's admin API)."""
        inbox = f"_INBOX.tbadm.{next(_inbox_ids)}"
        sid = 900_000 + next(_inbox_ids)
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.sock.settimeout(timeout_s)
        self.sock.sendall(f"SUB {inbox} {sid}\r\nPUB {subject} {inbox} {len(data)}\r\n".encode()
                          + data + CRLF)
        while True:
            line = self._line()
            if line.startswith((b"MSG ", b"HMSG ")):
                fields = line.split()
                size = int(fields[-1])
                while len(self._buf) < size + 2:
                    self._fill()
                payload, self._buf = self._buf[:size], self._buf[size + 2 :]
                if line.startswith(b"HMSG "):
                    payload = payload[int(fields[-2]) :]
                self.sock.sendall(f"UNSUB {sid}\r\n".encode())
                return json.loads(payload) if payload else {}
            self._control(line)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


def publish_builder(subject: str, reply: str | None) -> Callable[[int, bytes], bytes]:
    """build(count, payload) -> `count` PUB commands as one bytes object."""

    def build(count: int, payload: bytes) -> bytes:
        head = f"PUB {subject} {reply} {len(payload)}\r\n" if reply else f"PUB {subject} {len(payload)}\r\n"
        return (head.encode() + payload + CRLF) * count

    return build


class MsgCounter:
    """Counts core deliveries by their fixed MSG line; answers the server's PINGs."""

    def __init__(self, subject: str, sid: int, payload_bytes: int) -> None:
        self.marker = f"MSG {subject} {sid} {payload_bytes}\r\n".encode()
        self._tail = b""

    def feed(self, data: bytes) -> tuple[int, bytes | None]:
        buf = self._tail + data
        self._tail = buf[-(len(self.marker) - 1):]
        pongs = b"PONG\r\n" * buf.count(b"PING\r\n") if b"PING\r\n" in data else None
        return buf.count(self.marker), pongs


class JsPubAckCounter:
    """Publisher side of acknowledged JetStream publishes: counts the {"stream":..,"seq":n} acks
    (each arrives as a MSG on our inbox) and the error replies among them."""

    def __init__(self, inbox: str) -> None:
        self.marker = f"MSG {inbox} ".encode()
        self._tail = b""
        self.errors = 0

    def feed(self, data: bytes) -> tuple[int, bytes | None]:
        buf = self._tail + data
        keep = len(self.marker) + 8
        acks = buf.count(self.marker) - self._tail.count(self.marker)
        self.errors += buf.count(b'"error"') - self._tail.count(b'"error"')
        self._tail = buf[-keep:]
        return acks, (b"PONG\r\n" if b"PING\r\n" in data else None)


class MsgParser:
    """Parses MSG/HMSG frames; acks JetStream deliveries (those with a reply subject) when `ack`;
    collects the 8-byte perf_counter_ns stamp at the start of each payload when `want_stamps`.
    Status-only messages (heartbeats, flow control: HMSG without body) are not counted."""

    def __init__(self, ack: bool = False, want_stamps: bool = False) -> None:
        self._buf = b""
        self.ack = ack
        self.want_stamps = want_stamps
        self.stamps: list[int] = []

    def feed(self, data: bytes) -> tuple[int, bytes | None]:
        buf = self._buf + data if self._buf else data
        end = len(buf)
        pos = count = 0
        out = []
        while True:
            eol = buf.find(CRLF, pos)
            if eol < 0:
                break
            first = buf[pos]
            if first in (77, 72):  # b"M" MSG, b"H" HMSG
                fields = buf[pos:eol].split(b" ")
                has_headers = first == 72
                size = int(fields[-1])
                stop = eol + 2 + size + 2
                if stop > end:
                    break
                reply = fields[3] if len(fields) == (6 if has_headers else 5) else None
                body = eol + 2 + (int(fields[-2]) if has_headers else 0)
                if body < eol + 2 + size:
                    count += 1
                    if self.want_stamps:
                        self.stamps.append(int.from_bytes(buf[body : body + 8], "big"))
                if reply is not None and self.ack:
                    out.append(b"PUB " + reply + b" 0\r\n\r\n")
                pos = stop
            else:
                line = buf[pos:eol]
                if line == b"PING":
                    out.append(b"PONG\r\n")
                elif line.startswith(b"-ERR"):
                    raise ConnectionError(line.decode(errors="replace"))
                pos = eol + 2
        self._buf = buf[pos:]
        return count, b"".join(out) if out else None


def js_create_stream(port: int, stream: str, subject: str) -> None:
    """A file-storage stream on `subject`, replacing any older stream of that name."""
    conn = NatsConnection(port, "tidings-bench-admin")
    try:
        conn.request(f"$JS.API.STREAM.DELETE.{stream}", b"")
        config = {"name": stream, "subjects": [subject], "storage": "file", "retention": "limits",
                  "discard": "old", "num_replicas": 1, "max_msgs": -1, "max_bytes": -1}
        reply = conn.request(f"$JS.API.STREAM.CREATE.{stream}", config)
        if "error" in reply:
            raise RuntimeError(f"JetStream stream create failed: {reply['error']}")
    finally:
        conn.close()


def js_create_push_consumer(port: int, stream: str, durable: str, deliver_subject: str) -> None:
    """A durable push consumer with explicit per-message acks."""
    conn = NatsConnection(port, "tidings-bench-admin")
    try:
        config = {"durable_name": durable, "deliver_subject": deliver_subject, "ack_policy": "explicit",
                  "deliver_policy": "all", "ack_wait": 30_000_000_000, "max_deliver": -1}
        reply = conn.request(f"$JS.API.CONSUMER.DURABLE.CREATE.{stream}.{durable}",
                             {"stream_name": stream, "config": config})
        if "error" in reply:
            raise RuntimeError(f"JetStream consumer create failed: {reply['error']}")
    finally:
        conn.close()


def js_delete_stream(port: int, stream: str) -> None:
    try:
        conn = NatsConnection(port, "tidings-bench-admin")
        conn.request(f"$JS.API.STREAM.DELETE.{stream}", b"")
        conn.close()
    except (OSError, ConnectionError):
        pass
