"""A raw MQTT client for the MQTT tests: our own codec on a socket, packet by packet, every wait
with a deadline."""

from __future__ import annotations

import socket
import time
from typing import TYPE_CHECKING

from tidings.core.mqtt import packets as p
from tidings.core.mqtt.codec import PacketDecoder
from tidings.core.mqtt.encode import encode
from tidings.core.mqtt.properties import Properties

if TYPE_CHECKING:
    from tidings.testing import BrokerProcess

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


def qos2_held(broker: BrokerProcess, version: int, prefix: str) -> tuple[Raw, Raw, p.Publish, p.Publish]:
    """A persistent subscriber `{prefix}-sub` granted QoS 2 on `{prefix}/#` holding two QoS 2
    deliveries of `{prefix}-pub`: A past its PUBREC (the broker's PUBREL come), B unanswered. The
    subscriber, the publisher, A and B."""
    sub = Raw(broker.mqtt_address, version, f"{prefix}-sub")
    sub.send(p.Subscribe(1, (p.TopicFilter(f"{prefix}/#", 2),)))
    assert sub.expect(1) == [p.Suback(1, (2,))]
    pub = Raw(broker.mqtt_address, version, f"{prefix}-pub")
    pub.send(p.Publish(f"{prefix}/a", b"A", 2, packet_id=1), p.Publish(f"{prefix}/b", b"B", 2, packet_id=2))
    assert pub.expect(2) == [p.Pubrec(1), p.Pubrec(2)]
    a, b = sub.expect(2)  # (sent once their packet ids were saved)
    assert isinstance(a, p.Publish) and isinstance(b, p.Publish) and (a.payload, b.payload) == (b"A", b"B")
    assert not a.dup and not b.dup
    sub.send(p.Pubrec(a.packet_id))
    assert sub.expect(1) == [p.Pubrel(a.packet_id)]  # (sent once the PUBREC was saved)
    return sub, pub, a, b


def qos2_resumed(broker: BrokerProcess, version: int, prefix: str, a: p.Publish, b: p.Publish) -> None:
    """`qos2_held`'s subscriber back: PUBREL of A and B with DUP under their packet ids, both
    completed, then the next message published (natively) comes, and neither A nor B again."""
    from tidings import sync

    sub = Raw(broker.mqtt_address, version, f"{prefix}-sub")
    assert sub.expect(2) == [p.Pubrel(a.packet_id), p.Publish(f"{prefix}/b", b"B", 2, False, True, b.packet_id)]
    sub.send(p.Pubcomp(a.packet_id), p.Pubrec(b.packet_id))
    assert sub.expect(1) == [p.Pubrel(b.packet_id)]
    sub.send(p.Pubcomp(b.packet_id))
    with sync.connect(broker.address, service="native") as native:
        native.publish(f"{prefix}/end", b"end")
    [end] = sub.expect(1)  # the next message: A and B did not come again
    assert isinstance(end, p.Publish) and end.payload == b"end" and not end.dup
    sub.close()
