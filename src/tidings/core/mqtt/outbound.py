"""QoS 1 deliveries to one MQTT client: packet identifiers and the in-flight window (MQTT 4.3.2, 4.9).

A QoS 1 PUBLISH the broker sends takes a free packet identifier (1..65535) and stays in flight until
the client's PUBACK; at most the client's Receive Maximum are in flight (5.0 CONNECT property,
65,535 for a 3.1.1 client), and the rest wait in order, at most `queued_max` (past it the client
reads too slowly to be served: the session closes it, quota exceeded). A plain data structure: the
session (core/mqtt/session.py) encodes and sends what `offer` and `acked` return.
"""

from __future__ import annotations

from collections import deque

from tidings.core.mqtt import packets as p

PACKET_IDS = 65535


class Outbound:
    __slots__ = ("inflight", "next_id", "queued", "queued_max", "receive_maximum")

    def __init__(self, receive_maximum: int, queued_max: int) -> None:
        self.receive_maximum = receive_maximum
        self.queued_max = queued_max
        self.inflight: dict[int, p.Publish] = {}  # packet id -> the PUBLISH sent, its PUBACK awaited
        self.queued: deque[p.Publish] = deque()
        self.next_id = 0

    def offer(self, publish: p.Publish) -> p.Publish | None:
        """The QoS 1 `publish` with its packet id, to send now; None when it waits its turn."""
        if len(self.inflight) < self.receive_maximum:
            return self._number(publish)
        self.queued.append(publish)
        return None

    @property
    def overflowing(self) -> bool:
        return len(self.queued) > self.queued_max

    def acked(self, packet_id: int) -> list[p.Publish]:
        """The client's PUBACK: what may go now that the window has room."""
        if self.inflight.pop(packet_id, None) is None:
            return []
        out = []
        while self.queued and len(self.inflight) < self.receive_maximum:
            out.append(self._number(self.queued.popleft()))
        return out

    def _number(self, publish: p.Publish) -> p.Publish:
        assert len(self.inflight) < PACKET_IDS
        packet_id = self.next_id
        while True:
            packet_id = packet_id % PACKET_IDS + 1
            if packet_id not in self.inflight:
                break
        self.next_id = packet_id
        numbered = p.Publish(publish.topic, publish.payload, publish.qos, publish.retain, publish.dup, packet_id,
                             publish.properties)
        self.inflight[packet_id] = numbered
        return numbered
