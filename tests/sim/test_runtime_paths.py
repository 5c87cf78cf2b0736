"""Paths the asyncio runtime alone used to play, now driven through the simulated broker: a log
read that fails (ReadFailed), retention (ApplyRetention -> RetentionApplied), reads answered with
the log's bytes (ReadLog.span -> SPAN), the join deadline (JoinTimedOut) and the drain (Drained).
Each runs the real core through the one driver (core/drive.py) on the simulated disk and network."""

from __future__ import annotations

import dataclasses
from typing import Any

import msgpack

from tidings.core.config import BrokerConfig
from tidings.core.effects import Drained, JoinTimedOut
from tidings.core.errors import LOG_UNREADABLE
from tidings.core.units import MILLISECOND_NS, SECOND_NS
from tidings.core.wire import messages
from tidings.sim.broker_node import BrokerNode
from tidings.sim.clients import Publisher, SimClient, Subscriber
from tidings.sim.disk import Disk
from tidings.sim.network import Network
from tidings.sim.world import World
from tidings.storage.record import records_in

KIB = 1024
ADDRESS = "broker:7000"
CONFIG = BrokerConfig(send_queue_bytes_max=64 * KIB, log_read_bytes_max=8 * KIB,
                      handshake_timeout_ns=50 * MILLISECOND_NS, lease_ns=3600 * SECOND_NS)


def one_broker(seed: int, config: BrokerConfig = CONFIG, events: int = 200) -> tuple[World, Network, BrokerNode,
                                                                                       Publisher]:
    world = World(seed)
    network = Network(world)
    node = BrokerNode(world, network, Disk(world), ADDRESS, config)
    publisher = Publisher(world, network, ADDRESS, "pub", events, batch_max=4, window=4,
                          interval_ns=(MILLISECOND_NS, 2 * MILLISECOND_NS))
    node.start()
    publisher.start()
    return world, network, node, publisher


def published(world: World, publisher: Publisher, within_ns: int = 30 * SECOND_NS) -> None:
    world.run_until(lambda: publisher.finished, world.now + within_ns)
    assert publisher.finished and len(publisher.acked) + len(publisher.rejected) == publisher.events_total


def test_a_read_that_fails_ends_the_subscription_with_log_unreadable():
    world, network, node, publisher = one_broker(1)
    published(world, publisher)
    corrupt = node.disk.ticks[-10]  # past the first reads
    node.disk.corrupt(corrupt)
    sub = Subscriber(world, network, ADDRESS, "late", "#", start="start", renews=False)
    sub.start(world.now)
    world.run(until_ns=world.now + 5 * SECOND_NS)
    assert node.disk.reads_failed >= 1 and node.stats.get("ReadFailed", 0) >= 1
    assert [code for code, _ in sub.errors] == [LOG_UNREADABLE]
    ticks = [tick for tick, _ in sub.received]
    assert ticks and max(ticks) < corrupt, "nothing at or past the unreadable record was delivered"
    assert ticks == sorted(set(ticks))


def test_retention_runs_on_its_cadence_and_a_subscriber_from_the_oldest_starts_after_it():
    config = dataclasses.replace(CONFIG, retention_bytes_max=4 * KIB,
                                 retention_check_interval_ns=100 * MILLISECOND_NS)
    world, network, node, publisher = one_broker(2, config)
    published(world, publisher)
    world.run(until_ns=world.now + 300 * MILLISECOND_NS)  # a retention check after the last sync
    disk = node.disk
    assert node.stats.get("ApplyRetention", 0) >= 2 and node.stats.get("RetentionApplied", 0) >= 2
    assert disk.retained_records > 0 and disk.log_bytes <= 4 * KIB + max(len(r) for _, r in disk.records)
    assert node.core is not None
    status = node.core.status()
    assert status["released_through"] == disk.released_through > 0, "the core heard RetentionApplied"
    sub = Subscriber(world, network, ADDRESS, "oldest", "#", start="start", renews=False)
    sub.start(world.now)
    world.run(until_ns=world.now + 2 * SECOND_NS)
    assert sub.interval_start == disk.released_through
    assert [tick for tick, _ in sub.received] == disk.ticks


class SpanReader(SimClient):
    """A READ that takes SPAN frames, as the Spark reader does: it keeps the records of each span
    in (after, through] (storage.record.records_in checks them) and the EVENTS' ticks."""

    def __init__(self, world: World, network: Network, after: int, end: int) -> None:
        super().__init__(world, network, ADDRESS, "reader")
        self.after, self.end = after, end
        self.ticks: list[int] = []
        self.spans = 0
        self.ended = False
        self._sub: int | None = None

    def on_ready(self) -> None:
        assert self.session is not None
        self._sub, frame = self.session.read("#", None, self.after, self.end, spans=True)
        self.send(frame)

    def on_message(self, msg: Any) -> None:
        if isinstance(msg, messages.Span) and msg.sub == self._sub:
            self.spans += 1
            for body in records_in(msg.blob, msg.after, msg.through):
                self.ticks.append(msgpack.unpackb(body)[1])
        elif isinstance(msg, messages.Records) and msg.sub == self._sub:
            self.ticks += [fields[1] for fields in msgpack.unpackb(msg.blob)]
        elif isinstance(msg, messages.Events) and msg.sub == self._sub:
            self.ticks += [fields[1] for fields in msg.records]
        elif isinstance(msg, messages.End) and msg.sub == self._sub:
            self.ended = True
        elif not isinstance(msg, messages.Subscribed):
            super().on_message(msg)


def test_a_read_with_spans_gets_the_logs_bytes_from_the_simulated_disk():
    world, network, node, publisher = one_broker(3, events=600)
    published(world, publisher)
    ticks = node.disk.ticks
    reader = SpanReader(world, network, ticks[9], ticks[-1])
    reader.start(world.now)
    world.run_until(lambda: reader.ended, world.now + 5 * SECOND_NS)
    assert reader.ended and not reader.violations
    assert reader.spans >= 1, "the log's bytes were never sent"
    assert reader.ticks == ticks[10:]


def test_a_broker_that_cannot_join_stops_at_its_join_deadline():
    world = World(4)
    network = Network(world)
    node = BrokerNode(world, network, Disk(world), "b1:7000", CONFIG, pubend_id="p-b1", name="b1", overlay=True,
                      join="nobody:7000", join_timeout_ns=2 * SECOND_NS)
    node.start()
    world.run(until_ns=5 * SECOND_NS)
    assert isinstance(node.stopped, JoinTimedOut) and not node.up
    assert node.stopped.address == "nobody:7000" and node.stopped.timeout_ns == 2 * SECOND_NS
    assert node.stopped.attempts_failed >= 1 and node.stopped.last_failure == "refused"


def joined(node: BrokerNode) -> bool:
    return node.core is not None and node.core.machines.joined


def two_brokers(seed: int) -> tuple[World, Network, BrokerNode, BrokerNode]:
    world = World(seed)
    network = Network(world)
    a = BrokerNode(world, network, Disk(world, "disk-a"), "a:7000", CONFIG, pubend_id="p-a", name="a", overlay=True)
    b = BrokerNode(world, network, Disk(world, "disk-b"), "b:7000", CONFIG, pubend_id="p-b", name="b", overlay=True,
                   join="a:7000", join_timeout_ns=10 * SECOND_NS)
    a.start()
    b.start()
    world.run_until(lambda: joined(a) and joined(b),
                    3 * SECOND_NS)
    assert a.core is not None and b.core is not None and a.core.machines.joined and b.core.machines.joined
    return world, network, a, b


def test_a_drain_advises_clients_waits_for_them_until_its_deadline_then_stops():
    world, network, a, b = two_brokers(5)
    sub = Subscriber(world, network, "b:7000", "stays", "#", renews=False)  # simulated clients stay put
    sub.start(world.now)
    world.run_until(lambda: sub.subscribed_at is not None, world.now + SECOND_NS)
    began = world.now
    b.drain(2 * SECOND_NS)
    world.run_until(lambda: not b.up, world.now + 5 * SECOND_NS)
    assert isinstance(b.stopped, Drained) and not b.up
    assert b.stopped.clients_left == 1 and b.stopped.elapsed_ns == 2 * SECOND_NS == world.now - began
    assert a.up and a.stopped is None


def test_a_drain_without_clients_stops_once_nothing_is_owed():
    world, _, _, b = two_brokers(6)
    b.drain(5 * SECOND_NS)
    world.run_until(lambda: not b.up, world.now + 6 * SECOND_NS)
    assert isinstance(b.stopped, Drained) and b.stopped.clients_left == 0 and b.stopped.owed == 0
    assert b.stopped.elapsed_ns < 5 * SECOND_NS


def test_two_brokers_restarted_together_each_joining_through_the_other_form_one_overlay():
    """Each dials the other and asks to join; neither is in an overlay, so neither could answer and
    both waited for their join deadline. The one with the smaller nodeId now founds the overlay."""
    world = World(7)
    network = Network(world)
    a = BrokerNode(world, network, Disk(world, "disk-a"), "a:7000", CONFIG, pubend_id="p-a", name="a", overlay=True,
                   join="b:7000", join_timeout_ns=10 * SECOND_NS)
    b = BrokerNode(world, network, Disk(world, "disk-b"), "b:7000", CONFIG, pubend_id="p-b", name="b", overlay=True,
                   join="a:7000", join_timeout_ns=10 * SECOND_NS)
    a.start()
    b.start()
    world.run_until(lambda: joined(a) and joined(b),
                    5 * SECOND_NS)
    assert a.up and b.up and a.stopped is None and b.stopped is None
    assert a.core is not None and b.core is not None and a.core.machines.joined and b.core.machines.joined
    world.run_until(lambda: False, world.now + 2 * SECOND_NS)
    leaves = {node.name: [n.address for n in node.core.cluster.overlay.leaf_set.members()] for node in (a, b)}
    assert leaves == {"a": ["b:7000"], "b": ["a:7000"]}, "one overlay, not two"
