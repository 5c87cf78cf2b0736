"""The broker core in an overlay: trees of local subscriptions, and events that come down a tree.

Events from other brokers come from untrusted peers: anything malformed is counted and dropped,
and the subscribers and the broker carry on.
"""

from __future__ import annotations

import random

import msgpack
import pytest

from tests.unit.core_harness import Harness, delivered, of_type
from tidings.core.config import BrokerConfig
from tidings.core.effects import Disconnect
from tidings.core.errors import TidingsError
from tidings.core.inputs import Accepted, Received, SendBlocked, SendDrained, TimerFired
from tidings.core.multicast.effects import EventArrived
from tidings.core.overlay.node_id import NodeRef
from tidings.core.reliability.messages import KnowledgeMessage
from tidings.core.wire import decoders, messages, peer
from tidings.core.wire.types import ReliabilityType


def in_overlay(config: BrokerConfig | None = None) -> Harness:
    h = Harness(config)
    h.apply(h.broker.start_overlay(0, "127.0.0.1:7400", None, random.Random(1)))
    return h


def remote_record(tick: int, channel: str, attributes: dict, pubend: str = "p-remote") -> bytes:
    return msgpack.packb([pubend, tick, channel, attributes, "svc", "i", b"x"])


def knowledge(tree: str, after: int, through: int, records: list[bytes], pubend: str = "p-remote") -> list:
    """A knowledge message of `pubend` on `tree` as a parent sends it: D at the records' ticks."""
    ticks = tuple(msgpack.unpackb(r)[1] for r in records)
    return [PARENT, KnowledgeMessage(tree, pubend, after, through, ticks, tuple(records), False).to_wire()]


PARENT = "127.0.0.1:7999"


def come_down(h: Harness, tree: str, event: object) -> None:
    """What Scribe hands the reliability layer when an event arrives from this broker's parent."""
    h.apply(h.broker.settle(h.now, [EventArrived(tree, event, PARENT)]))


def test_a_lone_broker_delivers_its_own_events_once_although_they_also_go_down_its_trees():
    h = in_overlay()
    h.connect(1)
    h.connect(2)
    h.subscribe(1, "nodes/#")
    h.subscribe(1, "nodes/h1/load")
    h.inbox(1)
    h.publish(2, ("nodes/h1/load", b"a", {}), ("nodes/h2/mem", b"b", {}))
    h.sync()
    got = delivered(h.inbox(1))
    assert sorted(sub for sub, _ in got) == [1, 1, 2]  # nodes/# twice, the exact one once
    trees = {t["name"]: t for t in h.broker.status()["trees"]}
    assert trees["nodes/#"]["member"] and trees["nodes/h1/load"]["member"]


def test_events_from_a_tree_reach_only_that_trees_matching_subscriptions():
    h = in_overlay()
    h.connect(1)
    wide = h.subscribe(1, "nodes/#")
    exact = h.subscribe(1, "nodes/h1/load", "load > 2")
    h.inbox(1)
    come_down(h, "nodes/#", knowledge("nodes/#", 0, 10, [remote_record(5, "nodes/h1/load", {"load": 3})]))
    come_down(h, "nodes/h1/load", knowledge("nodes/h1/load", 0, 10, [
        remote_record(5, "nodes/h1/load", {"load": 3}), remote_record(6, "nodes/h1/load", {"load": 1})]))
    assert delivered(h.inbox(1)) == [(wide, 5), (exact, 5)]
    assert h.broker.status()["events_remote_delivered"] == 2


def test_knowledge_after_a_gap_waits_until_the_gap_is_filled_then_comes_in_tick_order():
    h = in_overlay()
    h.connect(1)
    sub = h.subscribe(1, "nodes/#")
    h.inbox(1)
    come_down(h, "nodes/#", knowledge("nodes/#", 20, 30, [remote_record(25, "nodes/a", {})]))
    assert h.inbox(1) == []  # (start, 20] is unknown: nothing is delivered past it
    come_down(h, "nodes/#", knowledge("nodes/#", 0, 20, [remote_record(12, "nodes/a", {})]))
    come_down(h, "nodes/#", knowledge("nodes/#", 0, 20, [remote_record(12, "nodes/a", {})]))  # again
    assert delivered(h.inbox(1)) == [(sub, 12), (sub, 25)]


def test_malformed_tree_events_are_counted_and_dropped():
    h = in_overlay()
    h.connect(1)
    sub = h.subscribe(1, "nodes/#")
    h.inbox(1)
    for event in ("garbage", ["p-remote"], [PARENT, "not a list"], [1, knowledge("nodes/#", 0, 1, [])[1]],
                  [PARENT, knowledge("other/#", 0, 1, [])[1]]):
        come_down(h, "nodes/#", event)
    assert h.broker.status()["delivery"]["peer_errors"] == 5
    good = remote_record(9, "nodes/a", {})
    bad = [b"\xc1", remote_record(3, "nodes/+", {}), remote_record(4, "x", {"": 1}),
           remote_record(8, "nodes/a", {}, pubend="p-other")]
    ticks = (2, 3, 4, 8, 9)
    message = KnowledgeMessage("nodes/#", "p-remote", 0, 10, ticks, (*bad, good), False)
    come_down(h, "nodes/#", [PARENT, message.to_wire()])
    assert delivered(h.inbox(1)) == [(sub, 9)]
    assert h.broker.status()["peer_messages_rejected"] == 3  # the record on channel "x" just matches nothing


def test_own_events_coming_back_down_a_tree_are_skipped_without_decoding():
    h = in_overlay()
    h.connect(1)
    h.subscribe(1, "nodes/#")
    h.inbox(1)
    come_down(h, "nodes/#", [PARENT, KnowledgeMessage("nodes/#", "p-test", 0, 10, (5,), (b"not even a record",),
                                               False).to_wire()])
    assert h.inbox(1) == []
    assert h.broker.status()["peer_messages_rejected"] == 0


def test_a_peer_hello_to_a_broker_outside_any_overlay_is_refused_and_clients_go_on():
    h = Harness()
    h.feed(Accepted(0, 7))
    h.feed(Received(0, 1, 7, peer.hello(NodeRef(1, "127.0.0.1:9"))))
    assert 7 in h.closed
    error = decoders.decode_broker_message(b"".join(h.sent[7])[4:])
    assert isinstance(error, messages.Error) and "not in an overlay" in error.message
    assert h.broker.handle(Received(0, 2, 7, b"more")) == []  # the connection is gone
    h.connect(8)
    assert of_type(h.inbox(8), messages.Welcome)
    assert not any(isinstance(e, Disconnect) for e in h.broker.handle(Accepted(0, 9)))


def test_a_blocked_peer_connection_holds_its_messages_until_it_drains():
    h = in_overlay()
    h.feed(Accepted(0, 7))
    h.feed(Received(0, 1, 7, peer.hello(NodeRef(1, "127.0.0.1:9"))))
    assert 7 not in h.closed and h.broker.cluster.owns(7)
    h.sent.clear()
    h.feed(SendBlocked(0, 7))
    assert h.broker.cluster.peers.send(0, "127.0.0.1:9", [101, ["t"]]) == []  # held while blocked
    h.feed(SendDrained(0, 7))
    assert [frame[4:] for frame in h.sent[7]] == [msgpack.packb([101, ["t"]])]


def test_a_subscribe_past_trees_max_is_refused_to_its_client_and_leaves_nothing_behind():
    h = Harness(BrokerConfig(trees_max=2))
    h.apply(h.broker.start_overlay(0, "127.0.0.1:7400", None, random.Random(1)))
    h.connect(1)
    h.subscribe(1, "a/#")
    h.subscribe(1, "b/#")
    h.inbox(1)
    refused = h.subscribe(1, "c/#")  # a third tree: the broker's Scribe agent is full
    errors = of_type(h.inbox(1), messages.Error)
    assert [(e.code, e.context.get("sub")) for e in errors] == [("too-many-trees", refused)]
    status = h.broker.status()
    assert status["subscriptions"] == 2 and [t["name"] for t in status["trees"]] == ["a/#", "b/#"]
    h.subscribe(1, "a/+/x")  # in the tree a/# it is in already: still works
    assert not of_type(h.inbox(1), messages.Error)


def test_total_order_merges_pubends_on_tick_then_pubend_and_needs_a_start_of_now():
    h = in_overlay()
    h.connect(1)
    sub, wire = h.sessions[1].subscribe("nodes/#", order="total")
    h.send(1, wire)
    h.inbox(1)
    come_down(h, "nodes/#", knowledge("nodes/#", 0, 12, [remote_record(10, "nodes/b", {}, "p-b")], pubend="p-b"))
    come_down(h, "nodes/#", knowledge("nodes/#", 0, 30, [remote_record(10, "nodes/a", {}, "p-a"),
                                                         remote_record(20, "nodes/a", {}, "p-a")], pubend="p-a"))
    assert h.inbox(1) == []  # the merge point stays the clock-skew allowance behind the present...
    h.feed(TimerFired(10**9, h.wall_us + 2_000_000))  # ... which moves on
    first = [(f[0], f[1]) for m in of_type(h.inbox(1), messages.Events) for f in m.records]
    assert first == [("p-a", 10), ("p-b", 10)]  # merged up to p-b's horizon (12), ties by pubend
    come_down(h, "nodes/#", knowledge("nodes/#", 12, 30, [remote_record(15, "nodes/b", {}, "p-b")], pubend="p-b"))
    then = [(m.sub, f[0], f[1]) for m in of_type(h.inbox(1), messages.Events) for f in m.records]
    assert then == [(sub, "p-b", 15), (sub, "p-a", 20)]
    with pytest.raises(TidingsError, match="starts now"):
        h.sessions[1].subscribe("nodes/#", start="start", order="total")


@pytest.mark.parametrize("version", [1, peer.PEER_VERSION])
def test_a_nack_says_it_is_complete_only_to_a_parent_whose_link_speaks_version_2(version):
    """The parent dialled this broker saying peer protocol `version` (1: a broker older than complete
    nacks, which refuses a five-element NACK and closes the link) and was welcomed in it; the nack
    of a gap in what it sends down goes to it with its fifth element only in version 2."""
    h = in_overlay(BrokerConfig(nack_complete=True))
    h.feed(Accepted(0, 7))
    h.feed(Received(0, 1, 7, peer.hello(NodeRef(1, PARENT), version)))
    (welcome,) = [peer.decode_link_message(peer.unpack(frame[4:])) for frame in h.sent.pop(7)[:1]]
    assert welcome == peer.PeerWelcome(version, welcome.node)
    h.connect(1)
    h.subscribe(1, "nodes/#")
    come_down(h, "nodes/#", knowledge("nodes/#", 0, 10, [remote_record(5, "nodes/a", {})]))
    come_down(h, "nodes/#", knowledge("nodes/#", 20, 30, [remote_record(25, "nodes/a", {})]))  # (10, 20] lost
    h.run_until(h.now + 1_000_000_000)  # past the gap curiosity threshold
    nacks = [m for m in (msgpack.unpackb(frame[4:]) for frame in h.sent.get(7, [])) if m[0] == ReliabilityType.NACK]
    assert nacks and all(m[3] == [[10, 20]] for m in nacks)
    assert all(len(m) == (5 if version >= peer.COMPLETE_NACKS else 4) for m in nacks)
