#!/usr/bin/env python3
"""The broker's CPU per event for MQTT clients against native ones, in one process (no sockets, no
disk): one publisher and one subscriber on one broker core, each event published, logged (an
in-memory log, synced at once) and delivered. Native clients speak tidings' protocol straight to
`Broker.handle`; MQTT clients go through the gateway (core/mqtt/gateway.py), whose sessions speak
it on their behalf. CPU time (process_time) in the core's `handle` per event (the clients' own encoding and
decoding left out), best of 5.

  python bench/mqtt_micro.py [--events 20000] [--turns]

Shapes: `batch` events per turn of the publisher (one MQTT chunk of that many PUBLISH packets, or
one native PUBLISH frame of that many events), QoS 0 and 1 for MQTT (QoS 1: every PUBACK sent back
by the subscriber, as a client would).

--turns adds, at one event per turn, where that CPU goes by the input the core was handed: the
publisher's bytes (its turn: read, checked, logged; the log's fsync starts after it), the log's
sync (the sync's turn: acknowledged, matched, delivered; the subscriber's bytes leave after it) and,
at QoS 1, the subscriber's PUBACKs. Test (d)'s event waits for the first two on the broker's loop,
so their sum over the native column's is what MQTT adds to its latency before any wake-up. Two
rows between them part what is the broker core's from what is the MQTT layers': native clients
publishing events with the one attribute an MQTT QoS 0 event carries (`mqtt.qos` = 0), on a broker
without and with the MQTT gateway.
"""

from __future__ import annotations

import argparse
import time

from tidings.core.auth.guard import Guard
from tidings.core.broker.broker import Broker
from tidings.core.config import BrokerConfig
from tidings.core.effects import Append, Send, Sync
from tidings.core.event import AttrValue
from tidings.core.inputs import Accepted, LogState, Received, WriteSynced
from tidings.core.mqtt import bridge
from tidings.core.mqtt import packets as p
from tidings.core.mqtt.bridge import MqttSettings
from tidings.core.mqtt.codec import PacketDecoder
from tidings.core.mqtt.encode import encode
from tidings.core.mqtt.gateway import MqttGateway
from tidings.core.session.client_session import ClientSession

WALL = 1_700_000_000_000_000
PAYLOAD = b"x" * 100
PUB, SUB = 1, 2


class Run:
    def __init__(self, mqtt: bool) -> None:
        self.broker = Broker(BrokerConfig(), "p-bench", LogState(), Guard.open())
        self.gw = MqttGateway(self.broker, MqttSettings(), lambda n: b"\x01" * n) if mqtt else None
        self.handle = self.gw.handle if self.gw is not None else self.broker.handle
        self.now = 0
        self.token = 0
        self.sent: dict[int, list[bytes]] = {PUB: [], SUB: []}
        self.cpu_s = 0.0  # in `handle` alone: the broker's part, not the clients' encoding and decoding
        self.turns = {"pub": 0.0, "sync": 0.0, "acks": 0.0}  # the same, by the input handled (--turns)

    def feed(self, inp: object) -> None:
        start = time.process_time()
        effects = self.handle(inp)  # type: ignore[arg-type]
        spent = time.process_time() - start
        self.cpu_s += spent
        kind = "sync" if type(inp) is WriteSynced else "pub" if getattr(inp, "conn", PUB) == PUB else "acks"
        self.turns[kind] += spent
        for eff in effects:
            if type(eff) is Send:
                self.sent[eff.conn].append(eff.data)
            elif type(eff) is Sync:
                self.token = eff.token
            elif type(eff) is Append:
                pass

    def received(self, conn: int, data: bytes) -> None:
        self.now += 1
        self.feed(Received(self.now, WALL + self.now, conn, data))

    def sync(self) -> None:
        self.feed(WriteSynced(self.now, self.token, LogState()))


Figures = tuple[float, dict[str, float]]  # CPU seconds per event in `handle`; the same by turn (Run.turns)


def per_event(r: Run, events: int) -> Figures:
    return r.cpu_s / events, {kind: spent / events for kind, spent in r.turns.items()}


def native(events: int, batch: int, attributes: dict[str, AttrValue] | None = None, gateway: bool = False) -> Figures:
    """`attributes`: each event's (an MQTT QoS 0 one carries `mqtt.qos` = 0); `gateway`: on a broker
    with an MQTT gateway (its retained feed, its wrapping of every input), the clients native."""
    r = Run(gateway)
    pub, sub = ClientSession("bench", "pub"), ClientSession("bench", "sub")
    for conn, session in ((PUB, pub), (SUB, sub)):
        r.feed(Accepted(0, conn))
        r.received(conn, session.hello())
    r.received(SUB, sub.subscribe("nodes/#")[1])
    frames = [f for _, _, f in pub.publish([("nodes/h1/load", attributes or {}, PAYLOAD)] * batch)]
    r.cpu_s = 0.0
    r.turns = dict.fromkeys(r.turns, 0.0)
    for _ in range(events // batch):
        for frame in frames:
            r.received(PUB, frame)
        r.sync()
        for conn in (PUB, SUB):
            for data in r.sent[conn]:
                (pub if conn == PUB else sub).receive(data)
            r.sent[conn].clear()
    return per_event(r, events)


def mqtt(events: int, batch: int, qos: int) -> Figures:
    r = Run(True)
    assert r.gw is not None
    for conn in (PUB, SUB):
        r.gw.expect(conn, True)
        r.feed(Accepted(0, conn))
        r.received(conn, encode(p.Connect(5, f"c{conn}"), 5))
    r.received(SUB, encode(p.Subscribe(1, (p.TopicFilter("nodes/#", 1),)), 5))
    decoder = PacketDecoder(1 << 24, 5)
    decoder.feed(b"".join(r.sent[SUB]))
    r.sent[SUB].clear()
    chunk = b"".join(encode(p.Publish("nodes/h1/load", PAYLOAD, qos, packet_id=(i % 60000) + 1 if qos else None), 5)
                     for i in range(batch))
    r.cpu_s = 0.0
    r.turns = dict.fromkeys(r.turns, 0.0)
    for _ in range(events // batch):
        r.received(PUB, chunk)
        r.sync()
        acks = [encode(p.Puback(m.packet_id), 5) for m in decoder.feed(b"".join(r.sent[SUB]))
                if isinstance(m, p.Publish) and m.packet_id is not None]
        r.sent[SUB].clear()
        r.sent[PUB].clear()
        if acks:
            r.received(SUB, b"".join(acks))
    return per_event(r, events)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=20000)
    ap.add_argument("--turns", action="store_true", help="at one event per turn, the CPU by the input handled")
    args = ap.parse_args()
    print(f"{'batch':>5} {'native us/ev':>12} {'mqtt qos0':>10} {'mqtt qos1':>10}")
    ones: list[Figures] = []
    for batch in (1, 20):
        n = min((native(args.events, batch) for _ in range(5)), key=lambda f: f[0])
        q0 = min((mqtt(args.events, batch, 0) for _ in range(5)), key=lambda f: f[0])
        q1 = min((mqtt(args.events, batch, 1) for _ in range(5)), key=lambda f: f[0])
        print(f"{batch:>5} {n[0] * 1e6:>12.1f} {q0[0] * 1e6:>10.1f} {q1[0] * 1e6:>10.1f}")
        if batch == 1:
            ones = [n, q0, q1]
    if args.turns:  # (the best run's split)
        print(f"\none event per turn, us by turn: {'publisher':>9} {'sync':>6} {'PUBACKs':>7}")
        qos0 = {bridge.QOS: 0}  # (what an MQTT QoS 0 event carries)
        ones[1:1] = [min((native(args.events, 1, qos0, gateway) for _ in range(5)), key=lambda f: f[0])
                     for gateway in (False, True)]
        names = ("native", "native, mqtt.qos attribute", "the same, MQTT gateway", "mqtt qos0", "mqtt qos1")
        for name, (_, turns) in zip(names, ones, strict=True):
            print(f"{name:>30} {turns['pub'] * 1e6:>9.1f} {turns['sync'] * 1e6:>6.1f} {turns['acks'] * 1e6:>7.1f}")


if __name__ == "__main__":
    main()
