"""Shared subscriptions through the MQTT gateway in process (core/share/, core/mqtt/session.py): one
broker alone in its overlay is every group's home, so the whole path runs here: SUBSCRIBE
`$share/GROUP/FILTER`, the group's broker-held subscription, each event to one member, PUBACK to
the home, and a member that goes holding unacknowledged messages."""

import random

import pytest

from tidings.core.auth.guard import Guard
from tidings.core.auth.handshake import AuthError
from tidings.core.auth.names import ANONYMOUS
from tidings.core.broker.metrics import reported
from tidings.core.config import BrokerConfig
from tidings.core.effects import Connect, Send
from tidings.core.inputs import Accepted, ConnectionLost, Received, TimerFired
from tidings.core.mqtt import packets as p
from tidings.core.mqtt.figures import FIGURES
from tidings.core.overlay.node_id import NodeRef
from tidings.core.share.gateway import _carry
from tidings.core.share.group import ShareLimits
from tidings.core.share.home import PeerOut
from tidings.core.share.wire import ShareMoved, encode
from tidings.core.wire import peer

from .test_mqtt_derivations import RIGHT, derive, gate
from .test_mqtt_gateway import Gate
from .test_tree_access import anonymous_with


def members_and_publisher(g, n=2):
    g.h.apply(g.h.broker.start_overlay(0, "127.0.0.1:7400", None, random.Random(1)))  # (alone: every group's home)
    for conn in range(1, n + 2):
        g.connect(conn)
    for conn in range(1, n + 1):
        [suback] = g.send(conn, p.Subscribe(conn, (p.TopicFilter("$share/g/t/#", 1),)))
        assert suback.reason_codes == (1,)


def publish(g, payloads, conn=3):
    for i, payload in enumerate(payloads):
        g.send(conn, p.Publish("t/x", payload, 1, packet_id=100 + i))
    g.sync()
    g.answers(conn)


def received(g, conn):
    return [pkt for pkt in g.answers(conn) if isinstance(pkt, p.Publish)]


def test_each_event_goes_to_one_member_round_robin():
    g = Gate()
    members_and_publisher(g)
    publish(g, [b"%d" % i for i in range(6)])
    one, two = received(g, 1), received(g, 2)
    assert [m.payload for m in one] == [b"0", b"2", b"4"]
    assert [m.payload for m in two] == [b"1", b"3", b"5"]
    assert {m.qos for m in one + two} == {1} and not any(m.retain for m in one + two)
    status = g.gw.status()["mqtt"]
    [homed] = status["share_groups_homed"]
    assert (homed["group"], homed["members"], homed["handed"], homed["unacked"]) == ("g", 2, 6, 6)
    for conn, msgs in ((1, one), (2, two)):
        for m in msgs:
            g.send(conn, p.Puback(m.packet_id))
    [homed] = g.gw.status()["mqtt"]["share_groups_homed"]
    assert (homed["unacked"], homed["acknowledged"]) == (0, 6)


def test_a_member_that_goes_holding_unacknowledged_messages_has_them_sent_to_another():
    g = Gate()
    members_and_publisher(g)
    publish(g, [b"%d" % i for i in range(4)])
    one, two = received(g, 1), received(g, 2)
    g.send(1, p.Puback(one[0].packet_id))  # member 1 acknowledges "0", not "2"
    g.feed(ConnectionLost(g.now, 1))
    again = received(g, 2)
    assert [m.payload for m in again] == [b"2"]
    publish(g, [b"after"])
    assert [m.payload for m in received(g, 2)] == [b"after"]
    [homed] = g.gw.status()["mqtt"]["share_groups_homed"]
    assert (homed["members"], homed["redelivered"]) == (1, 1)
    assert [m.payload for m in two] == [b"1", b"3"]


def test_unsubscribe_leaves_the_group_and_bad_shared_filters_are_refused():
    g = Gate()
    members_and_publisher(g)
    [unsuback] = g.send(1, p.Unsubscribe(9, ("$share/g/t/#", "$share/other/t/#")))
    assert unsuback.reason_codes == (0x00, 0x11)
    publish(g, [b"a", b"b"])
    assert received(g, 1) == [] and [m.payload for m in received(g, 2)] == [b"a", b"b"]
    [suback] = g.send(1, p.Subscribe(10, (p.TopicFilter("$share/g+/t", 1), p.TopicFilter("$share/g/t/#", 0))))
    assert suback.reason_codes == (0x8F, 0)
    [disconnect] = g.send(2, p.Subscribe(11, (p.TopicFilter("$share/n/t", 1, no_local=True),)))
    assert disconnect.reason_code == 0x82 and 2 in g.closed  # No Local on a shared subscription (3.8.3.1)


def test_a_shared_filter_outside_the_identity_s_rules_is_refused_at_the_member_s_broker():
    g = Gate(guard=Guard(anonymous_with("t/#"), lambda n: b"n" * n))
    g.h.apply(g.h.broker.start_overlay(0, "127.0.0.1:7400", None, random.Random(1)))
    g.connect(1)
    [suback] = g.send(1, p.Subscribe(1, (p.TopicFilter("$share/g/t/#", 1), p.TopicFilter("$share/g/u/#", 1))))
    assert suback.reason_codes == (1, 0x87)
    assert list(g.gw.shares.members.members) == [("anonymous", "g", "t/#")]


def test_the_group_s_subscription_at_its_home_is_made_as_the_members_identity():
    """Members that authenticated as `sensor` on a broker that lets no anonymous client in: the
    group is scoped by that identity and its home's connection is opened as it (Guard.vouched), not
    as an anonymous service the broker would refuse."""
    g = gate()
    g.h.apply(g.h.broker.start_overlay(0, "127.0.0.1:7400", None, random.Random(1)))
    for conn in (1, 2, 3):
        connack = g.connect(conn, username="sensor", password=RIGHT)  # (the first derived, the others remembered)
        derive(g)
        assert [a.reason_code for a in connack + g.answers(conn)] == [0]
    for conn in (1, 2):
        [suback] = g.send(conn, p.Subscribe(conn, (p.TopicFilter("$share/g/t/#", 1),)))
        assert suback.reason_codes == (1,)
    assert list(g.gw.shares.members.members) == [("sensor", "g", "t/#")]
    publish(g, [b"a", b"b"])
    assert [m.payload for m in received(g, 1) + received(g, 2)] == [b"a", b"b"]
    [homed] = g.gw.status()["mqtt"]["share_groups_homed"]
    assert "refusal" not in homed and homed["handed"] == 2
    [conn] = [c for c in g.h.broker.connections.values() if c.conn < -1]
    assert (conn.identity, conn.authenticated) == ("sensor", True)


def test_a_broker_vouches_only_for_identities_its_policy_admits():
    guard = gate().h.broker.guard
    assert guard.vouched("sensor", "share-2").identity == "sensor"
    with pytest.raises(AuthError):
        guard.vouched("ghost", "share-2")  # not in this broker's auth file
    with pytest.raises(AuthError):
        guard.vouched(ANONYMOUS, "share-2")  # no anonymous client here
    assert Guard.open().vouched(ANONYMOUS, "share-2").authenticated is False


def test_the_home_holds_at_most_its_bound_for_a_member_that_never_acknowledges():
    """One member that acknowledges nothing: past `share_queued_bytes_max` the group's subscription
    is paced (its connection blocked, as a slow subscriber's), so what waits at the home stays under
    the bound plus one delivery, whatever is published; once the member acknowledges, the rest is
    read back from the log: every event, in order, none lost."""
    bound = 4096
    g = Gate(config=BrokerConfig(share_queued_bytes_max=bound))
    members_and_publisher(g, n=1)
    sent = [b"%03d" % i + b"x" * 100 for i in range(150)]
    peak = 0
    for payload in sent:
        publish(g, [payload], conn=2)  # (each synced alone: one delivery each)
        [homed] = g.gw.status()["mqtt"]["share_groups_homed"]
        peak = max(peak, homed["queued_bytes"])
    assert homed["paced"] and g.gw.shares.homes.paced == 1
    assert bound <= peak < bound + 300, peak  # (one event's record: about 180 bytes)
    got = received(g, 1)
    assert len(got) == 32  # member_unacked_max
    for _ in range(100):  # the member acknowledges all it has, until everything came
        if len(got) == len(sent):
            break
        for m in got[-32:]:
            got += [pkt for pkt in g.send(1, p.Puback(m.packet_id)) if isinstance(pkt, p.Publish)]
        g.h.serve_reads()  # (the runtime's log reads)
        got += received(g, 1)
    assert [m.payload for m in got] == sent
    [homed] = g.gw.status()["mqtt"]["share_groups_homed"]
    assert not homed["paced"] and homed["queued_bytes"] == 0
    figures = {f.name: value for f, value in reported(g.gw.status(), FIGURES)}  # (what /metrics shows)
    assert (figures["mqtt_share_deliveries"], figures["mqtt_share_groups_homed"], figures["mqtt_share_members"],
            figures["mqtt_share_queued_bytes"]) == (150, 1, 1, 0)
    assert figures["mqtt_share_paced"] >= 1  # (again when a log read brought more than the bound)


def test_a_paced_group_whose_members_all_left_ends_its_durable_subscription():
    """A group paced (its connection blocked, not read) when its last member goes: after
    empty_keep_ns its UNSUBSCRIBE is read all the same, and the broker holds no registration away."""
    g = Gate(config=BrokerConfig(share_queued_bytes_max=4096))
    members_and_publisher(g, n=1)
    for i in range(80):
        publish(g, [b"%03d" % i + b"x" * 100], conn=2)
    [homed] = g.gw.status()["mqtt"]["share_groups_homed"]
    assert homed["paced"] and g.h.broker.status()["durable_registrations"] == 1
    g.feed(ConnectionLost(g.now, 1))
    g.now += ShareLimits().empty_keep_ns + 1
    g.feed(TimerFired(g.now, g.h.wall_us))
    assert g.gw.status()["mqtt"]["share_groups_homed"] == []
    status = g.h.broker.status()
    assert (status["durable_registrations"], status["durable_away"]) == (0, 0)


@pytest.mark.parametrize("version", [1, peer.PEER_VERSION])
def test_a_share_moved_goes_only_over_a_link_speaking_the_handover_and_an_unlinked_home_is_dialled(version):
    """An old home of peer version 1 does not know SHARE_MOVED (an unknown type closes the link): it is
    sent only over a link of version SHARE_HANDOVER or later; to a broker not linked, it is dialled
    instead, and the handover's next repeat finds the link open."""
    g = Gate()
    g.h.apply(g.h.broker.start_overlay(0, "127.0.0.1:7400", None, random.Random(1)))
    g.feed(Accepted(0, 7))
    g.feed(Received(0, 1, 7, peer.hello(NodeRef(1, OLD_HOME), version)))
    g.h.sent.pop(7)  # (the WELCOME)
    moved = ShareMoved(("", "g", "t/#"), "127.0.0.1:7400", "p-old", 3)
    out: list = []
    _carry(g.gw, PeerOut(OLD_HOME, moved), out)
    sent = [peer.unpack(eff.data[4:]) for eff in out if isinstance(eff, Send) and eff.conn == 7]
    assert sent == ([] if version < peer.SHARE_HANDOVER else [encode(moved)])
    out = []
    _carry(g.gw, PeerOut("127.0.0.1:7998", moved), out)
    assert [eff for eff in out if isinstance(eff, Send)] == []
    assert [eff.address for eff in out if isinstance(eff, Connect)] == ["127.0.0.1:7998"]


OLD_HOME = "127.0.0.1:7999"
