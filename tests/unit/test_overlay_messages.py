"""The overlay's wire messages: every message survives msgpack and decode unchanged, and anything a
peer could send that is not a well-formed message raises ProtocolError, never another exception."""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidings.core.errors import BAD_MESSAGE, ProtocolError
from tidings.core.overlay import messages as m
from tidings.core.overlay.envelope import RouteMessage
from tidings.core.overlay.node_id import BASE, DIGITS, RING, NodeRef

node_ids = st.integers(0, RING - 1)
addresses = st.text(min_size=1, max_size=40)
refs = st.builds(NodeRef, node_ids, addresses)
ref_lists = st.lists(refs, max_size=20).map(tuple)
row_refs = st.lists(refs, max_size=BASE).map(tuple)
rows = st.lists(st.tuples(st.integers(0, DIGITS - 1), row_refs), max_size=4).map(tuple)
scalars = st.one_of(st.integers(-(2**63), 2**63 - 1), st.text(max_size=10), st.binary(max_size=10))
payloads = st.lists(scalars, max_size=5)

messages = st.one_of(
    st.builds(RouteMessage, node_ids, refs, st.integers(0, 1000), payloads),
    st.builds(m.JoinRequest, refs),
    st.builds(m.Join, refs, st.integers(0, 1000)),
    st.builds(m.JoinState, refs, rows, st.none() | ref_lists, st.none() | ref_lists),
    st.builds(m.Announce, refs),
    st.builds(m.KeepAlive, refs),
    st.builds(m.KeepAliveAck, refs),
    st.builds(m.LeafSetRequest, refs),
    st.builds(m.LeafSetReply, refs, ref_lists),
    st.builds(m.RowRequest, refs, st.integers(0, DIGITS - 1)),
    st.builds(m.RowReply, refs, st.integers(0, DIGITS - 1), row_refs),
)


def to_wire(message: m.OverlayMessage) -> list:
    return m.encode_route(message) if isinstance(message, RouteMessage) else message.to_wire()


@given(messages)
def test_every_message_round_trips_through_msgpack(message):
    wire = msgpack.unpackb(msgpack.packb(to_wire(message)))
    assert m.decode(wire) == message
    assert wire[0] in range(64, 96)
    if isinstance(message, RouteMessage):
        assert m.decode_route(wire) == message


garbage = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**64), 2**64) | st.floats() | st.text(max_size=5)
    | st.binary(max_size=20) | st.sampled_from([b"k" * 16, "a:1"]),
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=30,
)


def assert_rejected_or_valid(wire: object) -> None:
    try:
        decoded = m.decode(wire)
    except ProtocolError as error:
        assert error.code == BAD_MESSAGE
    else:
        assert m.decode(to_wire(decoded)) == decoded


@given(st.integers(60, 100), st.lists(garbage, max_size=6))
def test_garbage_after_a_type_number_is_rejected_cleanly(kind, fields):
    assert_rejected_or_valid([kind, *fields])


@given(messages, st.data())
def test_a_message_with_one_field_replaced_by_garbage_is_rejected_cleanly(message, data):
    wire = to_wire(message)
    path = []
    here = wire
    while isinstance(here, list) and here and data.draw(st.booleans()):
        i = data.draw(st.integers(0, len(here) - 1))
        path.append(i)
        here = here[i]
    if not path:
        assert_rejected_or_valid(data.draw(garbage))
        return
    target = wire
    for i in path[:-1]:
        target = target[i]
    target[path[-1]] = data.draw(garbage)
    assert_rejected_or_valid(wire)


def test_decode_route_refuses_other_messages():
    with pytest.raises(ProtocolError) as caught:
        m.decode_route(m.KeepAlive(NodeRef(1, "a:1")).to_wire())
    assert caught.value.code == BAD_MESSAGE
