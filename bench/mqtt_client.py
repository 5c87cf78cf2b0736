"""A lean MQTT 3.1.1 load client: just enough of the protocol to drive a broker hard.

The point is to spend as little client CPU per message as possible so that the broker, not the
client, limits the figures:

* publishers build whole batches of PUBLISH packets as one bytes object and send them with one call;
* a QoS 0 subscriber that only counts never parses packets: every delivery of the benchmark topic
  starts with the same fixed header and topic, so counting that prefix with ``bytes.count`` (in C)
  counts the messages; the payload is filler that cannot contain the prefix;
* a QoS 1 subscriber must answer every PUBLISH with a PUBACK, so it walks the packets, but with a
  fast path for the one packet shape the benchmark produces, and answers a whole read with one send.

Only what the benchmark needs is implemented: CONNECT/CONNACK, SUBSCRIBE/SUBACK, PUBLISH with QoS 0
and 1, PUBACK, DISCONNECT. Keep-alive is 0 (off), so no PINGREQ/PINGRESP traffic interferes.
"""

from __future__ import annotations

import contextlib
import socket
import struct

from netutil import connect_loopback, recv_exactly

CONNECT = 0x10
CONNACK = 0x20
PUBLISH = 0x30
PUBACK = 0x40
SUBSCRIBE = 0x82  # type 8 with the reserved flags 0b0010
SUBACK = 0x90
DISCONNECT = b"\xe0\x00"
PACKET_IDS = [struct.pack(">H", i) for i in range(65536)]


def remaining_length(n: int) -> bytes:
    """MQTT's variable-length integer: 7 bits a byte, high bit = more follows."""
    out = bytearray()
    while True:
        digit, n = n & 0x7F, n >> 7
        out.append(digit | 0x80 if n else digit)
        if not n:
            return bytes(out)


def utf8(s: str) -> bytes:
    b = s.encode()
    return struct.pack(">H", len(b)) + b


def read_packet(sock: socket.socket) -> tuple[int, bytes]:
    """One whole packet, blocking; used only on the control path (handshakes)."""
    first = recv_exactly(sock, 1)[0]
    length, shift = 0, 0
    while True:
        digit = recv_exactly(sock, 1)[0]
        length |= (digit & 0x7F) << shift
        shift += 7
        if not digit & 0x80:
            break
    return first, recv_exactly(sock, length) if length else b""


class MqttConnection:
    """The control path of one connection: CONNECT, SUBSCRIBE, DISCONNECT."""

    def __init__(self, port: int, client_id: str, clean: bool) -> None:
        self.sock = connect_loopback(port)
        variable = utf8("MQTT") + bytes([4, 0x02 if clean else 0x00]) + struct.pack(">H", 0)
        body = variable + utf8(client_id)
        self.sock.sendall(bytes([CONNECT]) + remaining_length(len(body)) + body)
        first, body = read_packet(self.sock)
        if first != CONNACK or len(body) != 2 or body[1] != 0:
            raise ConnectionError(f"CONNACK refused: {first:#x} {body!r}")

    def subscribe(self, topic: str, qos: int) -> int:
        body = PACKET_IDS[1] + utf8(topic) + bytes([qos])
        self.sock.sendall(bytes([SUBSCRIBE]) + remaining_length(len(body)) + body)
        while True:
            first, body = read_packet(self.sock)
            if first & 0xF0 == SUBACK:
                granted = body[2]
                if granted == 0x80:
                    raise ConnectionError(f"SUBSCRIBE {topic} refused")
                return granted

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.sendall(DISCONNECT)
        self.sock.close()


def forget_session(port: int, client_id: str) -> None:
    """Connect with clean_session=1 and leave: the broker drops whatever it kept for this id."""
    MqttConnection(port, client_id, clean=True).close()


class PublishBuilder:
    """Pre-encodes PUBLISH packets for one topic and one payload size."""

    def __init__(self, topic: str, qos: int, payload_bytes: int) -> None:
        self.qos = qos
        encoded_topic = utf8(topic)
        length = len(encoded_topic) + (2 if qos else 0) + payload_bytes
        self.prefix = bytes([PUBLISH | qos << 1]) + remaining_length(length) + encoded_topic
        self._next_id = 1

    def build(self, count: int, payload: bytes) -> bytes:
        if self.qos == 0:
            return (self.prefix + payload) * count
        parts = []
        pid = self._next_id
        for _ in range(count):
            parts.append(self.prefix + PACKET_IDS[pid] + payload)
            pid = pid + 1 if pid < 65535 else 1
        self._next_id = pid
        return b"".join(parts)


class PubackCounter:
    """Publisher side of QoS 1: every packet coming back is a 4-byte PUBACK."""

    def __init__(self) -> None:
        self._rest = b""

    def feed(self, data: bytes) -> tuple[int, bytes | None]:
        buf = self._rest + data if self._rest else data
        whole = len(buf) - len(buf) % 4
        self._rest = buf[whole:]
        return buf[0:whole:4].count(PUBACK), None


class Qos0Counter:
    """Counts deliveries by their fixed prefix (header + topic); no per-message Python."""

    def __init__(self, topic: str, payload_bytes: int) -> None:
        self.marker = PublishBuilder(topic, 0, payload_bytes).prefix
        self._tail = b""

    def feed(self, data: bytes) -> tuple[int, bytes | None]:
        buf = self._tail + data
        # keep less than one marker so a marker split across reads is counted exactly once
        self._tail = buf[-(len(self.marker) - 1):]
        return buf.count(self.marker), None


class PublishParser:
    """Walks incoming packets; answers QoS 1 deliveries with PUBACK; optionally collects the
    perf_counter_ns stamp a latency run puts in the first 8 payload bytes."""

    def __init__(self, want_stamps: bool = False) -> None:
        self._buf = b""
        self.want_stamps = want_stamps
        self.stamps: list[int] = []

    def feed(self, data: bytes) -> tuple[int, bytes | None]:
        buf = self._buf + data if self._buf else data
        end = len(buf)
        pos = count = 0
        acks = []
        while end - pos >= 2:
            first = buf[pos]
            length = buf[pos + 1]
            header = 2
            if length & 0x80:  # multi-byte remaining length
                length, shift, header = 0, 0, 1
                while True:
                    if pos + header >= end:
                        length = -1
                        break
                    digit = buf[pos + header]
                    length |= (digit & 0x7F) << shift
                    shift += 7
                    header += 1
                    if not digit & 0x80:
                        break
                if length < 0:
                    break
            stop = pos + header + length
            if stop > end:
                break
            if first & 0xF0 == PUBLISH:
                count += 1
                p = pos + header
                p += 2 + (buf[p] << 8 | buf[p + 1])
                if first & 0x06:  # QoS 1 (the benchmark never asks for 2)
                    acks.append(b"\x40\x02" + buf[p : p + 2])
                    p += 2
                if self.want_stamps:
                    self.stamps.append(int.from_bytes(buf[p : p + 8], "big"))
            pos = stop
        self._buf = buf[pos:]
        return count, b"".join(acks) if acks else None
