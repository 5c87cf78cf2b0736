import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidings.core.errors import BAD_MESSAGE, ProtocolError
from tidings.core.event import TICK_MAX
from tidings.core.multicast.messages import TREE_BYTES_MAX
from tidings.core.reliability import messages as m
from tidings.core.reliability.summary import SUMMARY_ENTRIES_MAX, Summary
from tidings.core.wire.types import REGISTRY, Layer, ReliabilityType

NUMBERS = [number for kind, _, number in REGISTRY if kind == "ReliabilityType"]


def round_trip(message: m.ReliabilityMessage) -> m.ReliabilityMessage:
    return m.decode(msgpack.unpackb(msgpack.packb(message.to_wire())))


def test_type_numbers_are_distinct_and_in_their_own_range():
    assert len(set(NUMBERS)) == len(NUMBERS)
    assert all(n in Layer.RELIABILITY for n in NUMBERS)
    for other in (Layer.OVERLAY, Layer.MULTICAST, Layer.BROKER):
        assert not set(Layer.RELIABILITY) & set(other)


EXAMPLES = [
    m.KnowledgeMessage("a/b", "p0123456789abcdef", 10, 20, (15,), (b"record",), False),
    m.KnowledgeMessage("a/#", "p", 0, TICK_MAX, (), (), True),
    m.KnowledgeMessage("a", "p", 5, 8, (6, 7, 8), (b"x", b"y", b"z"), True),
    m.StreamAcks((m.StreamAck("a/b", "p1", 0, 0, 0), m.StreamAck("c", "p2", TICK_MAX, 5, 7))),
    m.Moved("p0123456789abcdef", 7),
    m.Nack("a/b", "p1", ((0, 5), (5, 9), (100, 100 + m.NACK_RANGE_TICKS_MAX))),
    m.Nack("a/b", "p1", ((0, 5), (7, 9)), complete=True),
    m.RootMoved("a/b"),
    m.KnowledgeMessage("a", "p", 5, 8, (6,), (b"x",), False, 7),
    m.KnowledgeMessage("a", "p", 5, 8, (), (), True, None, True),
    m.SummaryUpdate("a/#", 3, None, 0),
    m.SummaryUpdate("a", 1, Summary(frozenset({("a/+", "x > 1"), ("a/b", "")})), TICK_MAX),
]


@pytest.mark.parametrize("message", EXAMPLES, ids=lambda x: type(x).__name__)
def test_examples_round_trip_through_msgpack(message):
    assert round_trip(message) == message


NAMES = st.text(min_size=1, max_size=20)
TICK_VALUES = st.integers(0, TICK_MAX)


@st.composite
def knowledge_messages(draw):
    after = draw(st.integers(0, TICK_MAX - 1))
    through = draw(st.integers(after + 1, min(TICK_MAX, after + 10**6)))
    ticks = sorted(draw(st.sets(st.integers(after + 1, through), max_size=8)))
    records = tuple(draw(st.binary(min_size=1, max_size=30)) for _ in ticks)
    return m.KnowledgeMessage(draw(NAMES), draw(NAMES), after, through, tuple(ticks), records, draw(st.booleans()),
                       draw(st.none() | TICK_VALUES), not ticks and draw(st.booleans()))


@st.composite
def nacks(draw):
    ranges, previous = [], draw(st.integers(0, 1000))
    for _ in range(draw(st.integers(1, m.NACK_RANGES_MAX))):
        after = previous + draw(st.integers(0, 1000))
        through = after + draw(st.integers(1, m.NACK_RANGE_TICKS_MAX))
        if through > TICK_MAX:
            break
        ranges.append((after, through))
        previous = through
    return m.Nack(draw(NAMES), draw(NAMES), tuple(ranges), draw(st.booleans()))


MESSAGES = st.one_of(
    knowledge_messages(),
    st.builds(m.StreamAcks, st.lists(st.tuples(NAMES, NAMES, st.lists(TICK_VALUES, min_size=3, max_size=3)
                                                          .map(sorted)).map(
        lambda t: m.StreamAck(t[0], t[1], t[2][2], t[2][0], t[2][1])), min_size=1, max_size=5).map(tuple)),
    nacks(),
)


@settings(max_examples=300)
@given(MESSAGES)
def test_every_message_round_trips(message):
    if isinstance(message, m.Nack) and not message.ranges:
        return  # the strategy ran past TICK_MAX at once
    assert round_trip(message) == message


K, A, N, S = ReliabilityType.KNOWLEDGE, ReliabilityType.ACK, ReliabilityType.NACK, ReliabilityType.SUMMARY
LONG = "x" * (TREE_BYTES_MAX + 1)


@pytest.mark.parametrize("wire", [
    # envelope
    None, [], "x", {}, [True], [K], [K, "a"], [159, "a"], [192], [164, "a", "p", 1], [float(K)],
    # knowledge
    [K, "a", "p", 1, 5, [3], [b"r"], False],  # a field missing
    [K, "a", "p", 1, 5, [3], [b"r"], False, None, False, None],  # one too many
    [K, "a", "p", 1, 5, [3], [b"r"], False, -1, False], [K, "a", "p", 1, 5, [3], [b"r"], False, True, False],
    [K, "a", "p", 1, 5, [3], [b"r"], False, "1", False],
    [K, "a", "p", 1, 5, [3], [b"r"], False, None, True],  # a lost range with data
    [K, "a", "p", 1, 5, [], [], False, None, 1], [K, "a", "p", 1, 5, [], [], False, None, None],
    [K, "", "p", 1, 5, [], [], False], [K, "a", "", 1, 5, [], [], False], [K, LONG, "p", 1, 5, [], [], False],
    [K, "a", "p" * 200, 1, 5, [], [], False], [K, b"a", "p", 1, 5, [], [], False], [K, "a", 7, 1, 5, [], [], False],
    [K, "a", "p", -1, 5, [], [], False], [K, "a", "p", 1, TICK_MAX + 1, [], [], False],
    [K, "a", "p", 5, 5, [], [], False], [K, "a", "p", 6, 5, [], [], False],
    [K, "a", "p", True, 5, [], [], False], [K, "a", "p", 1, 5.0, [], [], False], [K, "a", "p", "1", 5, [], [], False],
    [K, "a", "p", 1, 5, [3], [], False], [K, "a", "p", 1, 5, [], [b"r"], False],
    [K, "a", "p", 1, 5, [1], [b"r"], False], [K, "a", "p", 1, 5, [6], [b"r"], False],
    [K, "a", "p", 1, 5, [3, 3], [b"r", b"s"], False], [K, "a", "p", 1, 5, [4, 3], [b"r", b"s"], False],
    [K, "a", "p", 1, 5, [True], [b"r"], False], [K, "a", "p", 0, 5, [True], [b"r"], False],
    [K, "a", "p", 1, 5, [3], ["r"], False], [K, "a", "p", 1, 5, [3], [b""], False],
    [K, "a", "p", 1, 5, [3], [None], False], [K, "a", "p", 1, 5, (3,), [b"r"], False],
    [K, "a", "p", 1, 5, [3], b"r", False], [K, "a", "p", 1, 5, [], [], 0], [K, "a", "p", 1, 5, [], [], None],
    [K, "a", "p", 0, 10**9, list(range(1, m.RECORDS_PER_MESSAGE_MAX + 2)),
     [b"r"] * (m.RECORDS_PER_MESSAGE_MAX + 1), False],
    # ack
    [A, []], [A, None], [A, ["a", "p", 3, 3, 3]], [A, [["a", "p", 3, 3]]], [A, [["a", "p", 3, 4, 4]]],
    [A, [["a", "p", 3, 2, 4]]], [A, [["a", "p", 3, 3, 2]]],
    [A, [["a", "p", -1, 0, 0]]], [A, [["a", "p", 3, -1, 0]]], [A, [["a", "p", 3, 3, 3, 3]]],
    [A, [["a", "p", True, 0, 0]]], [A, [["a", "p", 3, False, 0]]], [A, [["a", None, 3, 3, 3]]],
    [A, [("a", "p", 3, 3, 3)]], [A, [["a", "p", 3, 3, 3]] * (m.ACK_ENTRIES_MAX + 1)], [A, [["a", "p", 3, 3, 3]], None],
    # moved
    [165, "p"], [165, "p", 0], [165, "", 1], [165, "p", True], [165, "p", 1.0], [165, "p", 2**63], [165, 5, 1],
    # nack
    [N, "a", "p", []], [N, "a", "p", None], [N, "a", "p", [[1, 2, 3]]], [N, "a", "p", [[1]]], [N, "a", "p", [1, 2]],
    [N, "a", "p", [[2, 2]]], [N, "a", "p", [[3, 2]]], [N, "a", "p", [[-1, 2]]], [N, "a", "p", [[True, 2]]],
    [N, "a", "p", [[0, True]]], [N, "a", "p", [[1, 2.0]]], [N, "a", "p", [[5, 9], [1, 2]]],
    [N, "a", "p", [[1, 5], [4, 9]]], [N, "a", "p", [[0, m.NACK_RANGE_TICKS_MAX + 1]]],
    [N, "a", "p", [[TICK_MAX - 1, TICK_MAX + 1]]], [N, "", "p", [[1, 2]]], [N, "a", "p", [(1, 2)]],
    [N, "a", "p", [[2 * k, 2 * k + 1] for k in range(m.NACK_RANGES_MAX + 1)]],
    [N, "a", "p", [[1, 2]], 1], [N, "a", "p", [[1, 2]], None], [N, "a", "p", [[1, 2]], True, True],  # complete: a bool
    # root moved
    [163], [163, ""], [163, 5], [163, "a", "p"], [163, "a" * 5000],
    # summary
    [S, "a", 1, None], [S, "a", -1, None, 0], [S, "a", None, None, 0], [S, "a", True, None, 0],
    [S, "a", 1, None, -1], [S, "", 1, None, 0], [S, "a", 1, "x", 0], [S, "a", 1, [["a"]], 0],
    [S, "a", 1, [["a+", ""]], 0], [S, "a", 1, [["a", "x ="]], 0], [S, "a", 1, [["a", 5]], 0],
    [S, "a", 1, [["a", ""]] * (SUMMARY_ENTRIES_MAX + 1), 0],
    # the paper's ack-expected has no message here (periodic silence does its work)
    [166, "a", "p", 5],
])
def test_malformed_messages_raise_protocol_error(wire):
    if type(wire) is list and wire[:1] == [K] and len(wire) == 8 and wire[5:7] != [[3], [b"r"]]:
        wire = [*wire, None]  # the cases below check the first seven fields; the epoch is valid
    with pytest.raises(ProtocolError) as info:
        m.decode(wire)
    assert info.value.code == BAD_MESSAGE


def test_limits_are_inclusive():
    ranges = [[2 * k, 2 * k + 1] for k in range(m.NACK_RANGES_MAX)]
    assert len(m.decode([N, "a", "p", ranges]).ranges) == m.NACK_RANGES_MAX
    entries = [["a", "p", 3, 3, 3]] * m.ACK_ENTRIES_MAX
    assert len(m.decode([A, entries]).streams) == m.ACK_ENTRIES_MAX
    count = m.RECORDS_PER_MESSAGE_MAX
    knowledge = m.decode([K, "a", "p", 0, count, list(range(1, count + 1)), [b"r"] * count, False, None, False])
    assert len(knowledge.ticks) == count
    assert m.decode([K, "a" * TREE_BYTES_MAX, "p" * m.PUBEND_BYTES_MAX, 0, 1, [], [], False, 3, False]).ticks == ()


VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats() | st.text(max_size=8)
    | st.binary(max_size=20),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=16,
)
SMALL_TICKS = st.integers(-2, 40)


@settings(max_examples=400)
@given(st.sampled_from([*NUMBERS, 159, 164]), st.lists(VALUES | SMALL_TICKS, max_size=8))
def test_garbage_only_ever_raises_protocol_error(kind, fields):
    try:
        decoded = m.decode([kind, *fields])
    except ProtocolError as exc:
        assert exc.code == BAD_MESSAGE
        return
    assert round_trip(decoded) == decoded


@settings(max_examples=500)
@given(VALUES)
def test_any_value_only_ever_raises_protocol_error(value):
    try:
        decoded = m.decode(value)
    except ProtocolError:
        return
    assert round_trip(decoded) == decoded


def mutate(wire: list, path: list[int], value: object) -> list:
    """`wire` with the element reached by following `path` (indices, modulo each list's length)
    replaced by `value`; a path that meets a non-list stops there."""
    wire = list(wire)
    if not wire:
        return [value]
    i = path[0] % len(wire)
    if len(path) > 1 and type(wire[i]) is list:
        wire[i] = mutate(wire[i], path[1:], value)
    else:
        wire[i] = value
    return wire


@settings(max_examples=600)
@given(MESSAGES, st.lists(st.integers(0, 100), min_size=1, max_size=3), VALUES | SMALL_TICKS)
def test_valid_messages_with_one_field_spoilt_only_ever_raise_protocol_error(message, path, value):
    try:
        decoded = m.decode(mutate(message.to_wire(), path, value))
    except ProtocolError as exc:
        assert exc.code == BAD_MESSAGE
        return
    assert round_trip(decoded) == decoded
