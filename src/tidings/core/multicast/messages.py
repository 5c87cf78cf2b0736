"""Scribe's wire messages: msgpack-able lists whose first element is the type (96..127).

Two kinds travel differently. Routed messages ride a Pastry `RouteMessage` towards a tree key and
are seen by every node on the route (forward) and by the rendez-vous point (deliver): SUBSCRIBE,
CREATE and PUBLISH. Direct messages go over the one connection between two nodes (`PeerSend`):
UNSUBSCRIBE and REFRESH go from a child to its parent, EVENT, HEARTBEAT and ACCESS from a parent to
its children (ACCESS also answers a SUBSCRIBE the tree's access list refuses), REPLICA from the root
to the nodes of its leaf set nearest the key, TREE_EMPTY and TREE_ACTIVE from the rendez-vous point
to a publisher's node. HEARTBEAT and REFRESH name several
trees at once, so one message per pair of nodes carries the liveness of all the trees they share.

An event and a subscribe's `extra` are opaque to Scribe: the broker and its reliability layer fill
them with msgpack-able values. Peers are untrusted, so `decode` checks every field Scribe reads and
raises ProtocolError (bad-message) on anything else; the agent never sees a malformed message. A
decode runs in this module alone (its checks are written here, not called from a shared helper;
access lists and members excepted, access.py): every hop of every event decodes an EVENT, and
bench/path_trace.py counts a codec that calls out as a stop.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tidings.core.errors import BAD_MESSAGE, ProtocolError
from tidings.core.multicast.access import Acl, Member, acl_from_wire, acl_to_wire, members_from_wire, members_to_wire
from tidings.core.overlay.node_id import NodeRef
from tidings.core.wire.packable import Packable, WireArray
from tidings.core.wire.types import ScribeType

TREE_BYTES_MAX = 1100  # a channel (1024 bytes) plus "/#", with room to spare
CREATOR_BYTES_MAX = 300
BROKER_BYTES_MAX = 300  # a broker's address, HOST:PORT
TREES_PER_MESSAGE_MAX = 4096


@dataclass(frozen=True, slots=True)
class TreeMetadata:
    """What the rendez-vous point keeps about a tree, replicates in its leaf set and passes down
    the tree: who created it (an identity, at the broker `broker`) and its access list (access.py;
    None: an open tree)."""

    creator: str
    acl: Acl | None = None
    broker: str = ""


@dataclass(frozen=True, slots=True)
class ScribeSubscribe:
    """Routed to the tree key; `subscriber` asks the first node already in the tree to adopt it,
    for the (identity, pattern) `members` its broker joins for (none: a forwarder's own)."""

    tree: str
    subscriber: NodeRef
    extra: Packable = None
    members: tuple[Member, ...] = ()

    def to_wire(self) -> WireArray:
        return [ScribeType.SUBSCRIBE, self.tree, self.subscriber.to_wire(), self.extra, members_to_wire(self.members)]


@dataclass(frozen=True, slots=True)
class ScribeUnsubscribe:
    tree: str

    def to_wire(self) -> WireArray:
        return [ScribeType.UNSUBSCRIBE, self.tree]


@dataclass(frozen=True, slots=True)
class Create:
    tree: str
    metadata: TreeMetadata

    def to_wire(self) -> WireArray:
        return [ScribeType.CREATE, self.tree, *_metadata_to_wire(self.metadata)]


@dataclass(frozen=True, slots=True)
class ScribePublish:
    """Routed to the tree key; the rendez-vous point multicasts `event` down the tree."""

    tree: str
    event: WireArray

    def to_wire(self) -> WireArray:
        return [ScribeType.PUBLISH, self.tree, self.event]


@dataclass(frozen=True, slots=True)
class TreeEvent:
    """An EVENT: one hop of the multicast, parent to child."""

    tree: str
    event: WireArray

    def to_wire(self) -> WireArray:
        return [ScribeType.EVENT, self.tree, self.event]


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """Parent to child: "I am alive and you are my child" in each of `trees`."""

    trees: tuple[str, ...]

    def to_wire(self) -> WireArray:
        return [ScribeType.HEARTBEAT, list(self.trees)]


@dataclass(frozen=True, slots=True)
class Refresh:
    """Child to parent: continued interest in each of `trees`."""

    trees: tuple[str, ...]

    def to_wire(self) -> WireArray:
        return [ScribeType.REFRESH, list(self.trees)]


@dataclass(frozen=True, slots=True)
class Replica:
    tree: str
    metadata: TreeMetadata

    def to_wire(self) -> WireArray:
        return [ScribeType.REPLICA, self.tree, *_metadata_to_wire(self.metadata)]


@dataclass(frozen=True, slots=True)
class Access:
    """The tree's metadata as the sender holds it: to a child it adopted, to its children when the
    list changed, or to a subscriber whose SUBSCRIBE it refused."""

    tree: str
    metadata: TreeMetadata

    def to_wire(self) -> WireArray:
        return [ScribeType.ACCESS, self.tree, *_metadata_to_wire(self.metadata)]


@dataclass(frozen=True, slots=True)
class TreeEmpty:
    tree: str

    def to_wire(self) -> WireArray:
        return [ScribeType.TREE_EMPTY, self.tree]


@dataclass(frozen=True, slots=True)
class TreeActive:
    tree: str

    def to_wire(self) -> WireArray:
        return [ScribeType.TREE_ACTIVE, self.tree]


RoutedMessage = ScribeSubscribe | Create | ScribePublish
DirectMessage = ScribeUnsubscribe | TreeEvent | Heartbeat | Refresh | Replica | Access | TreeEmpty | TreeActive
ScribeMessage = RoutedMessage | DirectMessage


def _metadata_to_wire(metadata: TreeMetadata) -> WireArray:
    return [metadata.creator, acl_to_wire(metadata.acl), metadata.broker]


def _bad(what: str) -> ProtocolError:
    return ProtocolError(BAD_MESSAGE, f"scribe: {what}")


def _string(value: object, bytes_max: int, what: str) -> str:
    """A non-empty string of at most `bytes_max` UTF-8 bytes (as wire/typed.py's `name`)."""
    # a string never has more characters than UTF-8 bytes, so a long one is refused before encoding
    if type(value) is str and 0 < len(value) <= bytes_max and len(value.encode("utf-8", "surrogatepass")) <= bytes_max:
        return value
    raise _bad(f"{what} is a non-empty string of at most {bytes_max} bytes")


def _tree(value: object) -> str:
    return _string(value, TREE_BYTES_MAX, "a tree name")


def _trees(value: object) -> tuple[str, ...]:
    if type(value) is not list or not value or len(value) > TREES_PER_MESSAGE_MAX:
        raise _bad(f"a tree list holds 1 to {TREES_PER_MESSAGE_MAX} names")
    return tuple(_tree(name) for name in value)


def _event(value: object) -> WireArray:
    if type(value) is not list:
        raise _bad("an event is a list")
    return value


def _metadata(creator: object, acl: object, broker: object) -> TreeMetadata:
    name = _string(creator, CREATOR_BYTES_MAX, "a tree creator")
    address = "" if broker == "" else _string(broker, BROKER_BYTES_MAX, "a tree creator's broker")
    return TreeMetadata(name, acl_from_wire(acl, _bad), address)


# the decoders' boundary: each takes a message's fields as msgpack decoded them (unchecked) and checks
# every one it reads before it builds the typed message
_DECODERS: dict[int, tuple[int, Callable[[list[Any]], ScribeMessage]]] = {
    ScribeType.SUBSCRIBE: (4, lambda f: ScribeSubscribe(_tree(f[0]), NodeRef.from_wire(f[1]), f[2],
                                                  members_from_wire(f[3], _bad))),
    ScribeType.UNSUBSCRIBE: (1, lambda f: ScribeUnsubscribe(_tree(f[0]))),
    ScribeType.CREATE: (4, lambda f: Create(_tree(f[0]), _metadata(f[1], f[2], f[3]))),
    ScribeType.PUBLISH: (2, lambda f: ScribePublish(_tree(f[0]), _event(f[1]))),
    ScribeType.EVENT: (2, lambda f: TreeEvent(_tree(f[0]), _event(f[1]))),
    ScribeType.HEARTBEAT: (1, lambda f: Heartbeat(_trees(f[0]))),
    ScribeType.REFRESH: (1, lambda f: Refresh(_trees(f[0]))),
    ScribeType.REPLICA: (4, lambda f: Replica(_tree(f[0]), _metadata(f[1], f[2], f[3]))),
    ScribeType.ACCESS: (4, lambda f: Access(_tree(f[0]), _metadata(f[1], f[2], f[3]))),
    ScribeType.TREE_EMPTY: (1, lambda f: TreeEmpty(_tree(f[0]))),
    ScribeType.TREE_ACTIVE: (1, lambda f: TreeActive(_tree(f[0]))),
}


def decode(message: object) -> ScribeMessage:
    """The Scribe message in `message` (a decoded msgpack value); ProtocolError if malformed."""
    if type(message) is not list or not message or type(message[0]) is not int:
        raise _bad("a message is a list starting with its type")
    shape = _DECODERS.get(message[0])
    if shape is None:
        raise _bad(f"unknown message type {message[0]}")
    count, build = shape
    if len(message) != count + 1:
        raise _bad(f"message type {message[0]} has {count} fields")
    return build(message[1:])


def decode_routed(message: object) -> RoutedMessage:
    """The routed Scribe message in a route's payload; ProtocolError if malformed or direct."""
    decoded = decode(message)
    if not isinstance(decoded, ScribeSubscribe | Create | ScribePublish):
        raise _bad("a direct message arrived through a route")
    return decoded
