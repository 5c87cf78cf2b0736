"""The one registry of message types: every number that opens a wire message, and the layer ranges.

Every body on a tidings connection is a msgpack array whose first element is its type, and the type
alone says which layer owns the message, so a composer dispatches on the number before anything is
decoded:

    1..63     client <-> broker (core/wire/messages.py; docs/protocol.md's table)
    64..95    overlay: Pastry (core/overlay/messages.py)
    96..127   multicast: Scribe (core/multicast/messages.py)
    128..159  the broker's own peer messages: the peer link (128..134, core/wire/peer.py) and the
              pubend directory (core/broker/directory.py)
    160..191  guaranteed delivery: Gryphon's knowledge, ack and nack (core/reliability/messages.py)

Each layer's numbers are the attributes of one class below, so a name says its layer
(`ClientType.PUBLISH` is 2, `ScribeType.PUBLISH` is 99) and no two layers' names collide. The
attributes are plain ints, not an IntEnum: a message is built and matched on the hot path, and an
enum member costs several times an int's attribute read and prints differently. `REGISTRY` lists
every (layer, name, number); a unit test holds them unique and inside their layer's range.
"""

from __future__ import annotations

from typing import Final


class Layer:
    """The range of type numbers each layer owns."""

    CLIENT: Final = range(1, 64)
    OVERLAY: Final = range(64, 96)
    MULTICAST: Final = range(96, 128)
    BROKER: Final = range(128, 160)
    LINK: Final = range(128, 135)  # the peer link's own messages, inside BROKER
    RELIABILITY: Final = range(160, 192)


class ClientType:
    """Client <-> broker: 1..15 client to broker, 16.. broker to client."""

    HELLO: Final = 1
    PUBLISH: Final = 2
    SUBSCRIBE: Final = 3
    UNSUBSCRIBE: Final = 4
    STATUS: Final = 5
    AUTH: Final = 6
    RENEW: Final = 7  # [RENEW]: the client is alive; extends the lease on its subscriptions
    RELEASE: Final = 8  # [RELEASE, sub, checkpoint]: a durable subscription consumed everything through it
    READ: Final = 9  # [READ, sub, pattern, filter, after, end(, spans)]: a bounded read of this broker's log
    HEARTBEAT: Final = 10  # [HEARTBEAT]: answer HEARTBEAT_REPLY at once (is a silent broker still there?)
    WELCOME: Final = 16
    ACK: Final = 17
    EVENTS: Final = 18
    SUBSCRIBED: Final = 19
    GAP: Final = 20
    END: Final = 21
    STATUS_REPLY: Final = 22
    ERROR: Final = 23
    CHALLENGE: Final = 24
    ADVICE: Final = 25  # [ADVICE, reason, [[address, rtt_us], ...]]: entry points that may serve better
    SILENCE: Final = 26  # [SILENCE, sub, [[pubend, tick], ...]]: a durable subscription's token moves up
    RECORDS: Final = 27  # [RECORDS, sub, count, blob]: a READ's records, as logged
    SPAN: Final = 28  # [SPAN, sub, after, through, blob]: a READ's records as the log's own bytes
    HEARTBEAT_REPLY: Final = 29  # [HEARTBEAT_REPLY]: the answer to HEARTBEAT (only to a client that sent one)


class OverlayType:
    """Pastry: ROUTE carries an application payload towards a key; the rest is housekeeping."""

    ROUTE: Final = 64
    JOIN_REQUEST: Final = 65
    JOIN: Final = 66
    JOIN_STATE: Final = 67
    ANNOUNCE: Final = 68
    KEEP_ALIVE: Final = 69
    KEEP_ALIVE_ACK: Final = 70
    LEAF_SET_REQUEST: Final = 71
    LEAF_SET_REPLY: Final = 72
    ROW_REQUEST: Final = 73
    ROW_REPLY: Final = 74


class ScribeType:
    """Scribe's trees: routed SUBSCRIBE, CREATE, PUBLISH; the rest direct between two nodes."""

    SUBSCRIBE: Final = 96
    UNSUBSCRIBE: Final = 97
    CREATE: Final = 98
    PUBLISH: Final = 99
    EVENT: Final = 100
    HEARTBEAT: Final = 101
    REFRESH: Final = 102
    REPLICA: Final = 103
    TREE_EMPTY: Final = 104
    TREE_ACTIVE: Final = 105
    ACCESS: Final = 106


class LinkType:
    """The peer link: handshake, RTT probes, peer errors."""

    PEER_HELLO: Final = 128
    PEER_WELCOME: Final = 129
    PING: Final = 130
    PONG: Final = 131
    PEER_ERROR: Final = 132
    PEER_CHALLENGE: Final = 133
    PEER_AUTH: Final = 134


class BrokerType:
    """The broker's own peer messages beyond the link."""

    DIRECTORY: Final = 140  # [DIRECTORY, [entry, ...]]: pubend directory entries
    SHARE_JOIN: Final = 141  # MQTT shared subscriptions (core/share/wire.py): a member broker's members, to the home
    SHARE_DELIVER: Final = 142  # the home hands one event to one member
    SHARE_ACK: Final = 143  # a member broker's acknowledgements (and returns) to the home
    SHARE_MOVED: Final = 144  # a group's new home to its old one: stop, forget the group's registration
    SHARE_LEFT: Final = 145  # the old home's answer: done


class ReliabilityType:
    """Guaranteed delivery on one stream edge of a (tree, pubend) knowledge tree."""

    KNOWLEDGE: Final = 160
    ACK: Final = 161
    NACK: Final = 162
    ROOT_MOVED: Final = 163
    SUMMARY: Final = 164
    MOVED: Final = 165


LAYERS: Final = ((Layer.CLIENT, ClientType), (Layer.OVERLAY, OverlayType), (Layer.MULTICAST, ScribeType),
                 (Layer.LINK, LinkType), (Layer.BROKER, BrokerType), (Layer.RELIABILITY, ReliabilityType))


def _numbers(kind: type) -> list[tuple[str, int]]:
    return [(key, value) for key, value in vars(kind).items() if key.isupper() and type(value) is int]


REGISTRY: Final = tuple((kind.__name__, key, number) for _, kind in LAYERS for key, number in _numbers(kind))
