"""MQTT on a real 3-broker overlay under kill -9, judged by a checker that trusts no broker.

A paho 5.0 publisher in a persistent session publishes numbered QoS 1 messages steadily at one broker;
two paho subscribers in persistent sessions, QoS 1, at the two others. Each broker is killed -9 twice
(in an order drawn from the seed) and started again, and the clients it served reconnect to it (its
MQTT port is new) as a client does, each finding its session present.
The checker is the test's own record: the numbers the publisher sent and the ones PUBACKed, and what
each subscriber received, in order. Every number PUBACKed must reach every subscriber (QoS 1 through
a kill -9 of the publisher's broker and of the subscriber's own); nothing is received that was not
published; each subscriber's first receipts of the numbers come in the order they were published
(tidings keeps each publisher's order; a redelivery comes again after what was sent, so only first
receipts are ordered). Duplicates are QoS 1's right and are counted, not refused.

`make test` plays one seed's order of faults; `make soak` (TIDINGS_SOAK=1) four more."""

from __future__ import annotations

import contextlib
import itertools
import queue
import random
import threading
import time

import pytest

from tests.conftest import soak_params
from tidings.testing import LOCAL_LIVENESS, Cluster

from .mqtt_io import V5, Mqtt, until_delivered

pytestmark = pytest.mark.integration

RATE_PER_S = 100
SETTLE_S = 1.5  # publishing between faults
DELIVERED_S = 60.0  # the deadline for every acknowledged number to reach every subscriber


class Publisher:
    """A persistent session publishing numbers on its own thread; PUBACKs recorded by paho's callback."""

    def __init__(self, address: str) -> None:
        self.mqtt = Mqtt(address, "faults-pub", V5, clean=False, in_flight=50)
        self.sent: dict[int, int] = {}  # paho mid -> number
        self.stop = threading.Event()
        self.held = threading.Event()  # set: publish nothing new (paho resends what was in flight first)
        self.lock = threading.Lock()
        self.next = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        period = 1.0 / RATE_PER_S
        while not self.stop.wait(period):
            with self.lock:
                if self.held.is_set():
                    continue
                n = self.next
                info = self.mqtt.client.publish("faults/x", b"%d" % n, 1)
                if info.mid:  # (queued by paho even while disconnected: it sends it on the reconnect)
                    self.sent[info.mid] = n
                    self.next += 1

    def acked(self) -> set[int]:
        acks = dict(self.mqtt.acks)
        with self.lock:
            return {n for mid, n in self.sent.items() if acks.get(mid) == 0}

    def published(self) -> int:
        with self.lock:
            return self.next


def received(sub: Mqtt, into: list[int]) -> None:
    """What `sub` holds now, appended in order of arrival (numbers of faults/x only)."""
    while True:
        try:
            message = sub.messages.get_nowait()
        except queue.Empty:
            return
        if message.topic == "faults/x":
            into.append(int(message.payload))


@pytest.mark.parametrize("seed", [23, *soak_params(5, 7, 11, 13)])
def test_qos1_through_kill_9_of_each_broker_nothing_acknowledged_lost_nothing_reordered(tmp_path, seed):
    rng = random.Random(seed)
    with Cluster(tmp_path, 3, LOCAL_LIVENESS, args=["--mqtt", "127.0.0.1:0"]) as cluster:
        subs = {1: Mqtt(cluster[1].mqtt_address, "faults-sub-1", V5, clean=False),
                2: Mqtt(cluster[2].mqtt_address, "faults-sub-2", V5, clean=False)}
        pub = Publisher(cluster[0].mqtt_address)
        got: dict[int, list[int]] = {1: [], 2: []}
        try:
            for sub in subs.values():
                assert sub.subscribe("faults/#", qos=1) == [1]
                until_delivered(lambda n: pub.mqtt.publish("faults/probe", b"p", qos=0), sub.get)  # its tree joined
            pub.thread.start()
            served = {0: [pub.mqtt], 1: [subs[1]], 2: [subs[2]]}
            for _ in range(2):
                for victim in rng.sample([0, 1, 2], 3):
                    time.sleep(SETTLE_S)  # (publishing goes on meanwhile: the load the fault meets)
                    broker = cluster[victim]
                    cluster.kill(broker)
                    cluster.restart(broker)
                    for client in served[victim]:
                        if client is pub.mqtt:  # paho tells on_connect before it resends what was in flight:
                            pub.held.set()  # a PUBLISH from another thread then could overtake the resends
                        client.reconnect(broker.mqtt_address)
                        assert client.session_present, f"the session at broker {victim} did not survive its kill -9"
                        if client is pub.mqtt:
                            cluster.wait(lambda: len(pub.acked()) == pub.published(), DELIVERED_S,
                                         what="what was in flight resent and acknowledged")
                            pub.held.clear()
                    for i, sub in subs.items():
                        received(sub, got[i])
            time.sleep(SETTLE_S)
            pub.stop.set()
            pub.thread.join(10)
            cluster.wait(lambda: pub.acked() == set(range(pub.published())), DELIVERED_S,
                         what="every number published acknowledged")
            acked = pub.acked()

            def complete() -> bool:
                for i, sub in subs.items():
                    received(sub, got[i])
                return all(acked <= set(numbers) for numbers in got.values())

            with contextlib.suppress(TimeoutError):  # (the assertions below say what is missing)
                cluster.wait(complete, DELIVERED_S, what="every acknowledged number at every subscriber")
            for i, numbers in got.items():
                first = list(dict.fromkeys(numbers))
                lost = sorted(acked - set(numbers))
                foreign = sorted(set(numbers) - set(range(pub.published())))
                out_of_order = [(a, b) for a, b in itertools.pairwise(first) if b < a]
                assert not lost, f"subscriber {i} lost {len(lost)} acknowledged: {lost[:20]}"
                assert not foreign, f"subscriber {i} received numbers never published: {foreign[:20]}"
                assert not out_of_order, f"subscriber {i} first receipts out of order: {out_of_order[:20]}"
                print(f"subscriber {i}: {len(first)} numbers, {len(numbers) - len(first)} duplicates, "
                      f"{len(acked)} acknowledged of {pub.published()} published")
        finally:
            pub.stop.set()
            for client in [pub.mqtt, *subs.values()]:
                client.close()
