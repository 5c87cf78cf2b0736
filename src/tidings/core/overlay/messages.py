"""The overlay's wire messages (types 64..95): msgpack-able lists, first element the type.

ROUTE carries an application payload towards a key (decoded to `envelope.RouteMessage`); the others
are Pastry's own housekeeping:

    64 ROUTE            [64, key, source, hops, payload]
    65 JOIN_REQUEST     [65, newcomer]                      newcomer -> a nearby member
    66 JOIN             [66, newcomer, hops]                routed towards key = newcomer's nodeId
    67 JOIN_STATE       [67, sender, [[row, [node..]]..], leaf set | nil, neighbourhood | nil]
    68 ANNOUNCE         [68, node]                          "I have joined: add me"
    69 KEEP_ALIVE       [69, sender]                        between leaves, every keep-alive interval
    70 KEEP_ALIVE_ACK   [70, sender]                        to a sender that is not our leaf
    71 LEAF_SET_REQUEST [71, sender]                        leaf-set repair
    72 LEAF_SET_REPLY   [72, sender, [node..]]
    73 ROW_REQUEST      [73, sender, row]                   lazy routing-table repair
    74 ROW_REPLY        [74, sender, row, [node..]]

Keys and nodeIds travel as 16 bytes, nodes as `NodeRef.to_wire()`. Peers are untrusted: `decode`
checks every field and its bounds and raises `ProtocolError(BAD_MESSAGE)` for anything else, so a
malformed message is never half-applied.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tidings.core.errors import BAD_MESSAGE, ProtocolError
from tidings.core.overlay.envelope import RouteMessage
from tidings.core.overlay.node_id import BASE, DIGITS, NodeRef, id_from_wire, id_to_wire
from tidings.core.wire.packable import WireArray
from tidings.core.wire.types import OverlayType

HOPS_MAX = 1 << 16  # beyond any sane route_hops_max; bigger counts are garbage
NODES_PER_LIST_MAX = 256  # leaf sets and neighbourhood sets on the wire


@dataclass(frozen=True, slots=True)
class JoinRequest:
    newcomer: NodeRef

    def to_wire(self) -> WireArray:
        return [OverlayType.JOIN_REQUEST, self.newcomer.to_wire()]


@dataclass(frozen=True, slots=True)
class Join:
    newcomer: NodeRef
    hops: int

    def to_wire(self) -> WireArray:
        return [OverlayType.JOIN, self.newcomer.to_wire(), self.hops]


@dataclass(frozen=True, slots=True)
class JoinState:
    """One route node's share of a newcomer's state: its rows matching the newcomer's prefix, its
    leaf set when it is where the join ended, its neighbourhood set when it was the first node."""

    sender: NodeRef
    rows: tuple[tuple[int, tuple[NodeRef, ...]], ...]
    leaf_set: tuple[NodeRef, ...] | None
    neighbours: tuple[NodeRef, ...] | None

    def to_wire(self) -> WireArray:
        return [
            OverlayType.JOIN_STATE,
            self.sender.to_wire(),
            [[i, _refs_to_wire(row)] for i, row in self.rows],
            None if self.leaf_set is None else _refs_to_wire(self.leaf_set),
            None if self.neighbours is None else _refs_to_wire(self.neighbours),
        ]


@dataclass(frozen=True, slots=True)
class Announce:
    node: NodeRef

    def to_wire(self) -> WireArray:
        return [OverlayType.ANNOUNCE, self.node.to_wire()]


@dataclass(frozen=True, slots=True)
class KeepAlive:
    sender: NodeRef

    def to_wire(self) -> WireArray:
        return [OverlayType.KEEP_ALIVE, self.sender.to_wire()]


@dataclass(frozen=True, slots=True)
class KeepAliveAck:
    sender: NodeRef

    def to_wire(self) -> WireArray:
        return [OverlayType.KEEP_ALIVE_ACK, self.sender.to_wire()]


@dataclass(frozen=True, slots=True)
class LeafSetRequest:
    sender: NodeRef

    def to_wire(self) -> WireArray:
        return [OverlayType.LEAF_SET_REQUEST, self.sender.to_wire()]


@dataclass(frozen=True, slots=True)
class LeafSetReply:
    sender: NodeRef
    leaves: tuple[NodeRef, ...]

    def to_wire(self) -> WireArray:
        return [OverlayType.LEAF_SET_REPLY, self.sender.to_wire(), _refs_to_wire(self.leaves)]


@dataclass(frozen=True, slots=True)
class RowRequest:
    sender: NodeRef
    row: int

    def to_wire(self) -> WireArray:
        return [OverlayType.ROW_REQUEST, self.sender.to_wire(), self.row]


@dataclass(frozen=True, slots=True)
class RowReply:
    sender: NodeRef
    row: int
    nodes: tuple[NodeRef, ...]

    def to_wire(self) -> WireArray:
        return [OverlayType.ROW_REPLY, self.sender.to_wire(), self.row, _refs_to_wire(self.nodes)]


OverlayMessage = (
    RouteMessage
    | JoinRequest
    | Join
    | JoinState
    | Announce
    | KeepAlive
    | KeepAliveAck
    | LeafSetRequest
    | LeafSetReply
    | RowRequest
    | RowReply
)


def encode_route(message: RouteMessage) -> WireArray:
    return [OverlayType.ROUTE, id_to_wire(message.key), message.source.to_wire(), message.hops, message.payload]


def _refs_to_wire(nodes: tuple[NodeRef, ...]) -> WireArray:
    return [n.to_wire() for n in nodes]


def _bad(why: str) -> ProtocolError:
    return ProtocolError(BAD_MESSAGE, f"overlay message: {why}")


def _int(data: object, low: int, high: int, what: str) -> int:
    if type(data) is not int or not low <= data < high:
        raise _bad(f"{what} is an integer in [{low}, {high})")
    return data


def _refs(data: object, limit: int, what: str) -> tuple[NodeRef, ...]:
    if type(data) is not list or len(data) > limit:
        raise _bad(f"{what} is a list of at most {limit} nodes")
    return tuple(NodeRef.from_wire(item) for item in data)


def _optional_refs(data: object, what: str) -> tuple[NodeRef, ...] | None:
    return None if data is None else _refs(data, NODES_PER_LIST_MAX, what)


def _rows(data: object) -> tuple[tuple[int, tuple[NodeRef, ...]], ...]:
    if type(data) is not list or len(data) > DIGITS:
        raise _bad(f"rows is a list of at most {DIGITS} rows")
    rows = []
    for item in data:
        if type(item) is not list or len(item) != 2:
            raise _bad("a row is [index, nodes]")
        rows.append((_int(item[0], 0, DIGITS, "a row index"), _refs(item[1], BASE, "a row")))
    return tuple(rows)


def _decode_route(m: list[Any]) -> RouteMessage:  # m: a decoded message, unchecked until here
    if type(m[4]) is not list:
        raise _bad("a route payload is a list")
    return RouteMessage(id_from_wire(m[1]), NodeRef.from_wire(m[2]), _int(m[3], 0, HOPS_MAX, "hops"), m[4])


_LENGTHS = {
    OverlayType.ROUTE: 5,
    OverlayType.JOIN_REQUEST: 2,
    OverlayType.JOIN: 3,
    OverlayType.JOIN_STATE: 5,
    OverlayType.ANNOUNCE: 2,
    OverlayType.KEEP_ALIVE: 2,
    OverlayType.KEEP_ALIVE_ACK: 2,
    OverlayType.LEAF_SET_REQUEST: 2,
    OverlayType.LEAF_SET_REPLY: 3,
    OverlayType.ROW_REQUEST: 3,
    OverlayType.ROW_REPLY: 4,
}


def decode(message: object) -> OverlayMessage:
    """The typed form of one overlay wire message; ProtocolError(BAD_MESSAGE) if malformed."""
    if type(message) is not list or not message:
        raise _bad("a message is a non-empty list")
    kind = message[0]
    if type(kind) is not int or kind not in _LENGTHS:
        raise _bad(f"unknown type {kind!r}")
    if len(message) != _LENGTHS[kind]:
        raise _bad(f"type {kind} has {_LENGTHS[kind]} fields")
    if kind == OverlayType.ROUTE:
        return _decode_route(message)
    sender = NodeRef.from_wire(message[1])
    result: OverlayMessage
    if kind == OverlayType.JOIN:
        result = Join(sender, _int(message[2], 0, HOPS_MAX, "hops"))
    elif kind == OverlayType.JOIN_STATE:
        leaves = _optional_refs(message[3], "a leaf set")
        result = JoinState(sender, _rows(message[2]), leaves, _optional_refs(message[4], "a neighbourhood set"))
    elif kind == OverlayType.LEAF_SET_REPLY:
        result = LeafSetReply(sender, _refs(message[2], NODES_PER_LIST_MAX, "a leaf set"))
    elif kind == OverlayType.ROW_REQUEST:
        result = RowRequest(sender, _int(message[2], 0, DIGITS, "a row index"))
    elif kind == OverlayType.ROW_REPLY:
        result = RowReply(sender, _int(message[2], 0, DIGITS, "a row index"), _refs(message[3], BASE, "a row"))
    else:
        result = _SIMPLE[kind](sender)
    return result


def decode_route(message: object) -> RouteMessage:
    """A ROUTE message's envelope; ProtocolError(BAD_MESSAGE) if malformed or of another type."""
    decoded = decode(message)
    if not isinstance(decoded, RouteMessage):
        raise _bad("expected a ROUTE message")
    return decoded


_SIMPLE: dict[int, type[JoinRequest | Announce | KeepAlive | KeepAliveAck | LeafSetRequest]] = {
    OverlayType.JOIN_REQUEST: JoinRequest,
    OverlayType.ANNOUNCE: Announce,
    OverlayType.KEEP_ALIVE: KeepAlive,
    OverlayType.KEEP_ALIVE_ACK: KeepAliveAck,
    OverlayType.LEAF_SET_REQUEST: LeafSetRequest,
}
