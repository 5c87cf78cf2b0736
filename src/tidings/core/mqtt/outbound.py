"""QoS 1 deliveries to one MQTT client: packet identifiers and the in-flight window (MQTT 4.3.2, 4.9).

A QoS 1 PUBLISH the broker sends takes a free packet identifier (1..65535) and stays in flight until
the client's PUBACK; at most the client's Receive Maximum are in flight (5.0 CONNECT property,
65,535 for a 3.1.1 client), and the rest wait in order, at most `queued_max` (past it the client
reads too slowly to be served: the session closes it, quota exceeded). Each delivery carries a tag of
its owner's (a persistent subscription's entry, core/mqtt/persistent.py), handed back with its PUBACK.
A plain data structure: the session encodes and sends what `offer` and `acked` return.
"""

from __future__ import annotations

from collections import deque
from typing import Generic, TypeVar

from tidings.core.mqtt import packets as p

PACKET_IDS = 65535
T = TypeVar("T")


class Outbound(Generic[T]):
    __slots__ = ("inflight", "next_id", "queued", "queued_max", "receive_maximum")

    def __init__(self, receive_maximum: int, queued_max: int) -> None:
        self.receive_maximum = receive_maximum
        self.queued_max = queued_max
        self.inflight: dict[int, tuple[p.Publish, T]] = {}  # packet id -> the PUBLISH sent, its PUBACK awaited
        self.queued: deque[tuple[p.Publish, T]] = deque()
        self.next_id = 0

    def offer(self, publish: p.Publish, tag: T) -> p.Publish | None:
        """The QoS 1 `publish` with its packet id, to send now; None when it waits its turn."""
        if len(self.inflight) < self.receive_maximum:
            return self._number(publish, tag)
        self.queued.append((publish, tag))
        return None

    @property
    def overflowing(self) -> bool:
        return len(self.queued) > self.queued_max

    def acked(self, packet_id: int) -> tuple[T | None, list[p.Publish]]:
        """The client's PUBACK: the delivery's tag (None: not in flight), and what may go now."""
        done = self.inflight.pop(packet_id, None)
        if done is None:
            return None, []
        out = []
        while self.queued and len(self.inflight) < self.receive_maximum:
            out.append(self._number(*self.queued.popleft()))
        return done[1], out

    def _number(self, publish: p.Publish, tag: T) -> p.Publish:
        assert len(self.inflight) < PACKET_IDS
        packet_id = self.next_id
        while True:
            packet_id = packet_id % PACKET_IDS + 1
            if packet_id not in self.inflight:
                break
        self.next_id = packet_id
        numbered = p.Publish(publish.topic, publish.payload, publish.qos, publish.retain, publish.dup, packet_id,
                             publish.properties)
        self.inflight[packet_id] = (numbered, tag)
        return numbered
