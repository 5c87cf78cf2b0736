import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidings.core.auth.rules import Rule
from tidings.core.errors import BAD_MESSAGE, ProtocolError
from tidings.core.multicast import messages as m
from tidings.core.overlay.envelope import MULTICAST_TYPES
from tidings.core.overlay.node_id import NodeRef

REF = NodeRef(0x1234_5678_9ABC_DEF0_1234_5678_9ABC_DEF0, "10.0.0.1:7000")
META = m.TreeMetadata("alice", (Rule("bob", "subscribe", True, "a/#"), Rule("*", "subscribe", False, "a/x")),
                      "10.0.0.2:7000")

EXAMPLES = [
    m.Subscribe("a/#", REF, None),
    m.Subscribe("a/b", REF, {"ticks": [1, 2]}),
    m.Subscribe("a/#", REF, None, (("bob", "a/+/c"), ("carol", "a/#"))),
    m.Unsubscribe("a/b"),
    m.Create("a/b", META),
    m.Create("a/b", m.TreeMetadata("alice")),
    m.Publish("a/b", ["a/b", {"x": 1}, b"payload"]),
    m.TreeEvent("a/b", []),
    m.Heartbeat(("a/b", "#")),
    m.Refresh(("a/b",)),
    m.Replica("a/b", META),
    m.Access("a/b", META),
    m.Access("a/b", m.TreeMetadata("alice", ())),
    m.TreeEmpty("a/b"),
    m.TreeActive("a/b"),
]


@pytest.mark.parametrize("message", EXAMPLES, ids=lambda x: type(x).__name__)
def test_round_trip_through_msgpack(message):
    wire = msgpack.unpackb(msgpack.packb(message.to_wire()))
    assert wire[0] in MULTICAST_TYPES
    assert m.decode(wire) == message


def test_type_numbers_are_distinct_and_in_the_multicast_range():
    numbers = [m.SUBSCRIBE, m.UNSUBSCRIBE, m.CREATE, m.PUBLISH, m.EVENT, m.HEARTBEAT, m.REFRESH,
               m.REPLICA, m.TREE_EMPTY, m.TREE_ACTIVE, m.ACCESS]
    assert len(set(numbers)) == len(numbers)
    assert all(n in MULTICAST_TYPES for n in numbers)


ID = REF.to_wire()[0]


@pytest.mark.parametrize("wire", [
    None, [], "x", [True, "a"], [95, "a"], [127, "a"], [m.UNSUBSCRIBE], [m.UNSUBSCRIBE, "a", "b"],
    [m.UNSUBSCRIBE, ""], [m.UNSUBSCRIBE, 7], [m.UNSUBSCRIBE, "x" * 2000], [m.UNSUBSCRIBE, b"a"],
    [m.SUBSCRIBE, "a", [ID], None], [m.SUBSCRIBE, "a", [ID[:15], "h:1"], None],
    [m.SUBSCRIBE, "a", [ID, ""], None, []], [m.SUBSCRIBE, "a", "h:1", None, []], [m.SUBSCRIBE, "a", [ID, "h:1"]],
    [m.SUBSCRIBE, "a", [ID, "h:1"], None, None], [m.SUBSCRIBE, "a", [ID, "h:1"], None, [["x"]]],
    [m.SUBSCRIBE, "a", [ID, "h:1"], None, [["x", "a/#/b"]]], [m.SUBSCRIBE, "a", [ID, "h:1"], None, [["", "a"]]],
    [m.SUBSCRIBE, "a", [ID, "h:1"], None, [["x", "a"]] * 65], [m.SUBSCRIBE, "a", [ID, "h:1"], None],
    [m.CREATE, "a", "", None, ""], [m.CREATE, "a", "alice", "bob", ""], [m.CREATE, "a", "alice", [1], ""],
    [m.CREATE, "a", "alice", None], [m.CREATE, "a", "alice", None, 7], [m.CREATE, "a", "alice", None, "x" * 301],
    [m.CREATE, "a", "alice", [["bob", True, "a/#"]] * 257, ""], [m.CREATE, "a", "alice", [["bob", 1, "a"]], ""],
    [m.CREATE, "a", "alice", [["bob", True]], ""], [m.CREATE, "a", "alice", [["bob", True, "#/a"]], ""],
    [m.REPLICA, "a", None, None, ""], [m.ACCESS, "a", "alice", ["bob"], ""], [m.ACCESS, "a", "alice", None],
    [m.PUBLISH, "a", {"x": 1}], [m.PUBLISH, "a", b"raw"], [m.EVENT, "a", None],
    [m.HEARTBEAT, []], [m.HEARTBEAT, "a"], [m.HEARTBEAT, ["a", 3]], [m.REFRESH, ["a"] * 5000],
    [m.TREE_EMPTY, None], [m.TREE_ACTIVE, ["a"]],
])
def test_malformed_messages_raise_protocol_error(wire):
    with pytest.raises(ProtocolError) as info:
        m.decode(wire)
    assert info.value.code == BAD_MESSAGE


VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.text(max_size=8) | st.binary(max_size=20),
    lambda inner: st.lists(inner, max_size=4),
    max_leaves=10,
)


@settings(max_examples=500)
@given(st.integers(90, 110), st.lists(VALUES, max_size=4))
def test_garbage_is_rejected_cleanly_or_decodes_to_a_message(kind, fields):
    try:
        decoded = m.decode([kind, *fields])
    except ProtocolError as exc:
        assert exc.code == BAD_MESSAGE
        return
    assert m.decode(msgpack.unpackb(msgpack.packb(decoded.to_wire()))) == decoded
