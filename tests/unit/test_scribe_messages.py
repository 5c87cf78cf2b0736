import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidings.core.auth.rules import Rule
from tidings.core.errors import BAD_MESSAGE, ProtocolError
from tidings.core.multicast import messages as m
from tidings.core.overlay.node_id import NodeRef
from tidings.core.wire.types import REGISTRY, Layer
from tidings.core.wire.types import ScribeType as S

REF = NodeRef(0x1234_5678_9ABC_DEF0_1234_5678_9ABC_DEF0, "10.0.0.1:7000")
META = m.TreeMetadata("alice", (Rule("bob", "subscribe", True, "a/#"), Rule("*", "subscribe", False, "a/x")),
                      "10.0.0.2:7000")

EXAMPLES = [
    m.ScribeSubscribe("a/#", REF, None),
    m.ScribeSubscribe("a/b", REF, {"ticks": [1, 2]}),
    m.ScribeSubscribe("a/#", REF, None, (("bob", "a/+/c"), ("carol", "a/#"))),
    m.ScribeUnsubscribe("a/b"),
    m.Create("a/b", META),
    m.Create("a/b", m.TreeMetadata("alice")),
    m.ScribePublish("a/b", ["a/b", {"x": 1}, b"payload"]),
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
    assert wire[0] in Layer.MULTICAST
    assert m.decode(wire) == message


def test_type_numbers_are_distinct_and_in_the_multicast_range():
    numbers = [number for kind, _, number in REGISTRY if kind == "ScribeType"]
    assert len(set(numbers)) == len(numbers)
    assert all(n in Layer.MULTICAST for n in numbers)


ID = REF.to_wire()[0]


@pytest.mark.parametrize("wire", [
    None, [], "x", [True, "a"], [95, "a"], [127, "a"], [S.UNSUBSCRIBE], [S.UNSUBSCRIBE, "a", "b"],
    [S.UNSUBSCRIBE, ""], [S.UNSUBSCRIBE, 7], [S.UNSUBSCRIBE, "x" * 2000], [S.UNSUBSCRIBE, b"a"],
    [S.SUBSCRIBE, "a", [ID], None], [S.SUBSCRIBE, "a", [ID[:15], "h:1"], None],
    [S.SUBSCRIBE, "a", [ID, ""], None, []], [S.SUBSCRIBE, "a", "h:1", None, []], [S.SUBSCRIBE, "a", [ID, "h:1"]],
    [S.SUBSCRIBE, "a", [ID, "h:1"], None, None], [S.SUBSCRIBE, "a", [ID, "h:1"], None, [["x"]]],
    [S.SUBSCRIBE, "a", [ID, "h:1"], None, [["x", "a/#/b"]]], [S.SUBSCRIBE, "a", [ID, "h:1"], None, [["", "a"]]],
    [S.SUBSCRIBE, "a", [ID, "h:1"], None, [["x", "a"]] * 65], [S.SUBSCRIBE, "a", [ID, "h:1"], None],
    [S.CREATE, "a", "", None, ""], [S.CREATE, "a", "alice", "bob", ""], [S.CREATE, "a", "alice", [1], ""],
    [S.CREATE, "a", "alice", None], [S.CREATE, "a", "alice", None, 7], [S.CREATE, "a", "alice", None, "x" * 301],
    [S.CREATE, "a", "alice", [["bob", True, "a/#"]] * 257, ""], [S.CREATE, "a", "alice", [["bob", 1, "a"]], ""],
    [S.CREATE, "a", "alice", [["bob", True]], ""], [S.CREATE, "a", "alice", [["bob", True, "#/a"]], ""],
    [S.REPLICA, "a", None, None, ""], [S.ACCESS, "a", "alice", ["bob"], ""], [S.ACCESS, "a", "alice", None],
    [S.PUBLISH, "a", {"x": 1}], [S.PUBLISH, "a", b"raw"], [S.EVENT, "a", None],
    [S.HEARTBEAT, []], [S.HEARTBEAT, "a"], [S.HEARTBEAT, ["a", 3]], [S.REFRESH, ["a"] * 5000],
    [S.TREE_EMPTY, None], [S.TREE_ACTIVE, ["a"]],
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
