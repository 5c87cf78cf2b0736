"""The shared subscription group machine (core/share/group.py): each event to one member, round
robin over members with window space, redelivered when a member leaves or returns it, the position
over the acknowledged prefix only; and the share messages' codec (core/share/wire.py)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidings.core.errors import ProtocolError
from tidings.core.share import wire
from tidings.core.share.group import CLOSED, OPEN, ShareGroup, ShareLimits
from tidings.core.share.hub import parse
from tidings.core.wire.types import BrokerType

KEY = ("mqtt", "g", "a/#")
A, B = ("b1", "c1"), ("b2", "c2")


def record(tick):
    return ["pe", tick, "a/x", {}, "mqtt", "c", b"%d" % tick]


def group(window=32, **limits):
    g = ShareGroup(KEY, ShareLimits(member_unacked_max=window, **limits))
    g.started([0, []])
    assert g.state is OPEN
    return g


def test_round_robin_over_members_on_two_brokers():
    g = group()
    assert g.joined(0, "b1", ("c1",)) == []
    g.joined(0, "b2", ("c2",))
    hands = g.offer([record(t) for t in range(1, 5)])
    assert [h.member for h in hands] == [A, B, A, B]
    assert [h.record[1] for h in hands] == [1, 2, 3, 4]


def test_a_full_window_holds_events_in_order_until_an_ack():
    g = group(window=1)
    g.joined(0, "b1", ("c1",))
    g.joined(0, "b2", ("c2",))
    first = g.offer([record(t) for t in range(1, 4)])
    assert [(h.member, h.record[1]) for h in first] == [(A, 1), (B, 2)]
    assert len(g.queue) == 1
    nxt = g.acked(0, B, (first[1].delivery,))
    assert [(h.member, h.record[1]) for h in nxt] == [(B, 3)]


def test_a_member_that_leaves_has_its_unacknowledged_events_redelivered_to_another_first():
    g = group(window=2)
    g.joined(0, "b1", ("c1",))
    g.joined(0, "b2", ("c2",))
    hands = g.offer([record(t) for t in range(1, 6)])  # A: 1, 3; B: 2, 4; 5 waits
    assert [h.record[1] for h in hands if h.member == A] == [1, 3]
    assert [h.record[1] for h in g.acked(0, B, tuple(h.delivery for h in hands if h.member == B))] == [5]
    again = g.joined(1, "b1", ())  # c1 left holding 1 and 3: before 6, after B's ack of 5
    assert [(h.member, h.record[1]) for h in again] == [(B, 1)]
    assert g.redelivered == 2 and [p.item.tick for p in g.queue] == [3]
    g.offer([record(6)])
    assert [h.record[1] for h in g.acked(1, B, tuple(d for d, m in g.held.items() if m == B))] == [3, 6]


def test_a_returned_delivery_goes_to_another_member_and_a_late_ack_is_ignored():
    g = group()
    g.joined(0, "b1", ("c1",))
    g.joined(0, "b2", ("c2",))
    (h1,) = g.offer([record(1)])
    assert h1.member == A
    g.turn = 1  # the next free member is B
    (h2,) = g.acked(0, A, (), (h1.delivery,))
    assert h2.member == B and h2.record[1] == 1 and h2.delivery != h1.delivery
    g.acked(0, A, (h1.delivery,))  # A's late ack of the copy it returned: not B's
    assert g.acknowledged == 0 and g.held == {h2.delivery: B}


def test_a_member_broker_not_heard_from_expires_with_its_members():
    g = group(member_expiry_ns=10)
    g.joined(0, "b1", ("c1",))
    g.joined(0, "b2", ("c2",))
    hands = g.offer([record(1), record(2)])
    g.joined(8, "b2", ("c2",))  # b2 refreshes, b1 does not
    assert g.next_deadline() == 10
    again = g.handle_timeout(10)
    assert [(h.member, h.record[1]) for h in again] == [(B, 1)]
    assert A not in g.members and hands[1].member == B


def test_the_position_moves_over_the_acknowledged_prefix_only():
    g = group()
    assert g.position() == [0, []]
    g.joined(0, "b1", ("c1",))
    g.joined(0, "b2", ("c2",))
    h1, h2 = g.offer([record(5), record(7)])
    g.acked(0, h2.member, (h2.delivery,))
    assert g.release() is None  # 5 is not acknowledged yet
    g.acked(0, h1.member, (h1.delivery,))
    assert g.release() == [0, [["pe", 7]]] == g.position()
    g.silence({"pe": 9})
    assert g.release() == [0, [["pe", 9]]]


def test_an_empty_group_closes_after_its_keep():
    g = group(empty_keep_ns=100)
    g.joined(0, "b1", ("c1",))
    g.joined(5, "b1", ())
    assert g.next_deadline() == 105
    g.handle_timeout(105)
    assert g.state is CLOSED


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["offer", "ack", "return", "leave", "join", "expire"]),
                          st.integers(0, 2), st.integers(1, 4)), max_size=60))
def test_every_event_is_held_by_one_member_at_most_and_all_end_acknowledged(steps):
    """Any mix of offers, acks, returns, members leaving, joining and expiring: no event is held by
    two members at once, none is lost, and with one member acknowledging all, all end acknowledged."""
    g = group(window=3, member_expiry_ns=5)
    brokers = ["b0", "b1", "b2"]
    now, tick = 0, 0
    for op, who, n in steps:
        broker = brokers[who]
        member = (broker, "c")
        if op == "offer":
            g.offer([record(tick + i + 1) for i in range(n)])
            tick += n
        elif op in ("ack", "return"):
            held = [d for d, m in g.held.items() if m == member][:n]
            g.acked(now, member, tuple(held) if op == "ack" else (), tuple(held) if op == "return" else ())
        elif op == "leave":
            g.joined(now, broker, ())
        elif op == "join":
            g.joined(now, broker, ("c",))
        else:
            now += 6
            g.handle_timeout(now)
        held_events = [p.item.tick for m in g.members.values() for p in m.unacked.values()]
        assert len(held_events) == len(set(held_events))
        assert len(held_events) == len(g.held)
    g.joined(now, "z", ("last",))
    for _ in range(tick + 1):  # every member acknowledges what it holds
        if not g.held and not g.queue:
            break
        for member in list(g.members):
            g.acked(now, member, tuple(d for d, m in g.held.items() if m == member))
    assert not g.queue and not g.held
    assert g.acknowledged == tick
    assert tick == 0 or g.release() in (None, [0, [["pe", tick]]])


def test_share_messages_round_trip_and_malformed_ones_are_refused():
    join = wire.ShareJoin(KEY, "127.0.0.1:7400", ("c1@3", "c2@4"), [5, [["pe", 3]]])
    deliver = wire.ShareDeliver(KEY, "127.0.0.1:7401", "c1@3", 7, record(3), [5, [["pe", 3]]])
    assert wire.decode(wire.join(wire.ShareJoin(KEY, "b", ()))) == wire.ShareJoin(KEY, "b", (), None)
    ack = wire.ShareAck(KEY, "c1@3", (7, 8), (9,))
    moved, left = wire.ShareMoved(KEY, "127.0.0.1:7402", "pe2", 4), wire.ShareLeft(KEY, "pe2", 4)
    homed_at = wire.ShareJoin(KEY, "b", ("c",), [5, [["pe", 3]], ["127.0.0.1:7402", "pe2", 4]])  # (the position's home)
    for msg, enc in ((join, wire.join), (deliver, wire.deliver), (ack, wire.ack), (moved, wire.moved),
                     (left, wire.left), (homed_at, wire.join)):
        assert wire.decode(enc(msg)) == msg
    for bad in ([BrokerType.SHARE_JOIN, ["a", "b"], "x", [], None], [BrokerType.SHARE_JOIN, list(KEY), "x", "c", None],
                [BrokerType.SHARE_JOIN, list(KEY), "x", [], [-1, []]], [BrokerType.SHARE_JOIN, list(KEY), "x", []],
                [BrokerType.SHARE_DELIVER, list(KEY), "h", "c", 1, [], [0, [["pe", "t"]]]],
                [BrokerType.SHARE_DELIVER, list(KEY), "h", "c", 0, [], None],
                [BrokerType.SHARE_DELIVER, list(KEY), "h", "c", 1, b"", None],
                [BrokerType.SHARE_ACK, list(KEY), "c", [1, "2"], []], [BrokerType.SHARE_ACK, list(KEY), "c", [], [-1]],
                [BrokerType.SHARE_ACK, list(KEY), "c", []], [BrokerType.SHARE_JOIN, list(KEY), 5, [], None],
                [BrokerType.SHARE_JOIN, list(KEY), "x", [], [5, [], ["h", "pe", 0]]],
                [BrokerType.SHARE_MOVED, list(KEY), "h", "pe", 0], [BrokerType.SHARE_MOVED, list(KEY), "h", "pe"],
                [BrokerType.SHARE_LEFT, list(KEY), 3, 1], [BrokerType.SHARE_LEFT, list(KEY), "pe", "1"]):
        with pytest.raises(ProtocolError):
            wire.decode(bad)


def test_shared_filters_are_parsed_and_bad_ones_refused():
    assert parse("a/#") is None
    assert parse("$share/g/a/+/b") == ("g", "a/+/b")
    assert parse("$share/g/#") == ("g", "#")
    for bad in ("$share//a", "$share/g", "$share/g+/a", "$share/g#/a", "$share/g/a/#/b"):
        assert not isinstance(parse(bad), tuple), bad


_values = st.recursive(st.none() | st.booleans() | st.integers(-2, 2**64) | st.text(max_size=8) | st.binary(max_size=8),
                       lambda inner: st.lists(inner, max_size=4), max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(sorted(wire.SHARE_TYPES)), st.lists(_values, max_size=7))
def test_any_share_message_is_decoded_or_refused_with_a_protocol_error(kind, fields):
    """What a peer sends is checked: a typed message or ProtocolError, never another exception."""
    try:
        decoded = wire.decode([kind, *fields])
    except ProtocolError:
        return
    assert wire.decode(wire.join(decoded) if isinstance(decoded, wire.ShareJoin) else wire.encode(decoded)) == decoded
