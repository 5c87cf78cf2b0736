"""A raw MQTT client for the MQTT tests: our own codec on a socket, packet by packet, every wait
with a deadline."""

import socket
import time

from tidings.core.mqtt import packets as p
from tidings.core.mqtt.codec import PacketDecoder
from tidings.core.mqtt.encode import encode
from tidings.core.mqtt.properties import Properties

WAIT_S = 15.0


class Raw:
    """An MQTT client of our codec on a socket: packets out, packets back within a deadline."""

    def __init__(self, address: str, version: int, client_id: str, connect: bool = True) -> None:
        """Connected in a persistent session (`connect=False`: the socket alone, nothing sent)."""
        host, port = address.rsplit(":", 1)
        self.version = version
        self.sock = socket.create_connection((host, int(port)), timeout=WAIT_S)
        self.decoder = PacketDecoder(1 << 24, version)
        self.inbox: list[p.Packet] = []
        if not connect:
            return
        props = Properties(session_expiry_interval_s=3600) if version == 5 else Properties()
        self.send(p.Connect(version, client_id, False, 30, properties=props))
        connack = self.expect(1)[0]
        assert isinstance(connack, p.Connack) and connack.reason_code == 0, connack

    def send(self, *packets: p.Packet) -> None:
        self.sock.sendall(b"".join(encode(packet, self.version) for packet in packets))

    def expect(self, count: int) -> list[p.Packet]:
        """The next `count` packets."""
        deadline = time.monotonic() + WAIT_S
        while len(self.inbox) < count:
            self.sock.settimeout(max(deadline - time.monotonic(), 0.01))
            data = self.sock.recv(65536)
            assert data, f"closed with {self.inbox} of {count} packets"
            self.inbox += self.decoder.feed(data)
        out, self.inbox = self.inbox[:count], self.inbox[count:]
        return out

    def close(self) -> None:
        self.sock.close()

    def closed(self) -> bool:
        """Whether the broker closes the connection (within the deadline) with nothing more sent."""
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            self.sock.settimeout(max(deadline - time.monotonic(), 0.01))
            try:
                data = self.sock.recv(65536)
            except ConnectionResetError:
                return not self.inbox
            if not data:
                return not self.inbox
            self.inbox += self.decoder.feed(data)
        return False
