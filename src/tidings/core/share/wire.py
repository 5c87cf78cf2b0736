"""The shared subscriptions' peer messages (BrokerType 141..143, core/wire/types.py) and the group key.

    SHARE_JOIN    [141, [scope, group, filter], broker, [client id, ...], position]
        routed by the group's key to its home (Pastry's route, as Scribe routes a SUBSCRIBE): the
        member broker at `broker` has these clients as members now (an empty list: none left). Sent
        on each change and repeated every `refresh_interval_ns` (the home forgets a broker silent for
        `member_expiry_ns`; a new home learns its members from the next JOIN). `position`: the
        group's position as the last SHARE_DELIVER said it, or nil: a new home starts there.
    SHARE_DELIVER [142, [scope, group, filter], home, client id, delivery, record, position]
        direct from the home to the member's broker: one event (its record's fields, as EVENTS carry
        them) for one member, with the group's position (`[default, [[pubend, tick], ...]]`, the
        checkpoint over what every member acknowledged, core/durable/checkpoint.py) so that the
        members' brokers can hand it to the next home.
    SHARE_ACK     [143, [scope, group, filter], client id, [delivery, ...], [delivery, ...]]
        direct from the member's broker to the home: deliveries acknowledged by the client (QoS 1:
        its PUBACK; QoS 0: sent), and deliveries returned (the client was gone).
    SHARE_MOVED   [144, [scope, group, filter], home, pubend, registration, taken]
        direct from the broker at `home` to a group's old home, named by a position
        (core/share/handover.py). `taken`: the group is homed at `home` now (it started from that
        position): the old home stops the group if its durable subscription is registration
        `registration` of pubend `pubend` there, and forgets that registration in any case (as MOVED
        would, core/reliability/messages.py). Not `taken` (the position came in a JOIN without
        members, the group homed nowhere else): the old home forgets the registration unless its
        group is using it. Repeated until answered.
    SHARE_LEFT    [145, [scope, group, filter], pubend, registration]
        the old home's answer: done (the new home stops repeating its SHARE_MOVED).

A position (`[default, [[pubend, tick], ...], [address, pubend, registration]]`) names the home whose
durable subscription it was taken from (the token's home, core/durable/checkpoint.py).

Decoders check every field and raise ProtocolError naming the problem (the peer layer answers it
on its link, core/broker/cluster.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tidings.core.durable.checkpoint import Checkpoint
from tidings.core.errors import BAD_MESSAGE, UNKNOWN_MESSAGE, ProtocolError, TidingsError
from tidings.core.overlay.envelope import Forward, PeerSend, RouteDecision, RouteMessage
from tidings.core.overlay.messages import encode_route
from tidings.core.overlay.node_id import NodeRef, node_id_from
from tidings.core.wire.packable import WireArray
from tidings.core.wire.types import BrokerType

if TYPE_CHECKING:
    from tidings.core.overlay.node import OverlayNode

SHARE_TYPES = frozenset({BrokerType.SHARE_JOIN, BrokerType.SHARE_DELIVER, BrokerType.SHARE_ACK,
                         BrokerType.SHARE_MOVED, BrokerType.SHARE_LEFT})
TEXT_CHARS_MAX = 4096  # a scope, group name, filter, address or client id
MEMBERS_MAX = 10_000  # client ids in one JOIN
IDS_MAX = 65_536  # delivery ids in one ACK
DELIVERY_MAX = (1 << 63) - 1

GroupKey = tuple[str, str, str]  # (scope: the members' identity, group name, topic filter)


def group_key(key: GroupKey) -> int:
    """The overlay key of a group: its home is the live broker whose node id is closest to it."""
    scope, name, topic_filter = key
    return node_id_from(f"mqtt-share\x00{scope}\x00{name}\x00{topic_filter}")


@dataclass(frozen=True, slots=True)
class ShareJoin:
    group: GroupKey
    broker: str
    clients: tuple[str, ...]
    position: list[object] | None = None


@dataclass(frozen=True, slots=True)
class ShareDeliver:
    group: GroupKey
    home: str
    client: str
    delivery: int
    record: list[object]
    position: list[object] | None = None


@dataclass(frozen=True, slots=True)
class ShareAck:
    group: GroupKey
    client: str
    acked: tuple[int, ...]
    returned: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ShareMoved:
    group: GroupKey
    home: str  # the sender's address (the new home's, when `taken`)
    pubend: str  # the old home's pubend id and the group's registration there
    registration: int
    taken: bool = True  # the sender homes the group now


@dataclass(frozen=True, slots=True)
class ShareLeft:
    group: GroupKey
    pubend: str
    registration: int


ShareMessage = ShareJoin | ShareDeliver | ShareAck | ShareMoved | ShareLeft


def join(msg: ShareJoin) -> WireArray:
    return [BrokerType.SHARE_JOIN, list(msg.group), msg.broker, list(msg.clients), msg.position]  # type: ignore[list-item]


def deliver(msg: ShareDeliver) -> WireArray:
    body: list[object] = [BrokerType.SHARE_DELIVER, list(msg.group), msg.home, msg.client, msg.delivery, msg.record,
                          msg.position]
    return body  # type: ignore[return-value]  # (a record and a position are msgpack's as decoded)


def ack(msg: ShareAck) -> WireArray:
    return [BrokerType.SHARE_ACK, list(msg.group), msg.client, list(msg.acked), list(msg.returned)]


def moved(msg: ShareMoved) -> WireArray:
    return [BrokerType.SHARE_MOVED, list(msg.group), msg.home, msg.pubend, msg.registration, msg.taken]


def left(msg: ShareLeft) -> WireArray:
    return [BrokerType.SHARE_LEFT, list(msg.group), msg.pubend, msg.registration]


def encode(msg: ShareDeliver | ShareAck | ShareMoved | ShareLeft) -> WireArray:
    """A share message sent direct to one broker."""
    if isinstance(msg, ShareDeliver):
        return deliver(msg)
    if isinstance(msg, ShareAck):
        return ack(msg)
    return moved(msg) if isinstance(msg, ShareMoved) else left(msg)


def _bad(what: str) -> ProtocolError:
    return ProtocolError(BAD_MESSAGE, what)


def _text(value: object, what: str) -> str:
    if type(value) is not str or len(value) > TEXT_CHARS_MAX:
        raise _bad(f"{what} must be a string of at most {TEXT_CHARS_MAX} characters")
    return value


def _group(value: object) -> GroupKey:
    if type(value) is not list or len(value) != 3:
        raise _bad("a share group is [scope, group, filter]")
    return _text(value[0], "a group's scope"), _text(value[1], "a group's name"), _text(value[2], "a group's filter")


def _ids(value: object, what: str) -> tuple[int, ...]:
    if type(value) is not list or len(value) > IDS_MAX:
        raise _bad(f"{what} must be a list of at most {IDS_MAX} delivery ids")
    if any(type(d) is not int or not 0 < d <= DELIVERY_MAX for d in value):
        raise _bad(f"{what} must hold delivery ids from 1 to 2**63-1")
    return tuple(value)


def _registration(value: object, what: str) -> int:
    if type(value) is not int or not 0 < value <= DELIVERY_MAX:
        raise _bad(f"{what} must be a registration number from 1 to 2**63-1")
    return value


def _position(value: object) -> list[object] | None:
    """A group's position, [default, [[pubend, tick], ...]] and the home it was taken from
    ([address, pubend, registration], when known), checked (nil: none)."""
    if value is None:
        return None
    try:
        return list(Checkpoint.from_wire(value).to_wire())
    except TidingsError as exc:
        raise _bad(f"a share position: {exc}") from None


def decode(msg: list[object]) -> ShareMessage:
    """A share message (type 141..145), checked; ProtocolError when malformed."""
    kind = msg[0]
    if kind == BrokerType.SHARE_JOIN:
        if len(msg) != 5:
            raise _bad("SHARE_JOIN has 4 fields")
        clients = msg[3]
        if type(clients) is not list or len(clients) > MEMBERS_MAX:
            raise _bad(f"SHARE_JOIN's members are a list of at most {MEMBERS_MAX} client ids")
        return ShareJoin(_group(msg[1]), _text(msg[2], "SHARE_JOIN broker"),
                         tuple(_text(c, "a member's client id") for c in clients), _position(msg[4]))
    if kind == BrokerType.SHARE_DELIVER:
        if len(msg) != 7:
            raise _bad("SHARE_DELIVER has 6 fields")
        delivery, record = msg[4], msg[5]
        if type(delivery) is not int or not 0 < delivery <= DELIVERY_MAX:
            raise _bad("SHARE_DELIVER's delivery id must be from 1 to 2**63-1")
        if type(record) is not list:
            raise _bad("SHARE_DELIVER's record must be an event's fields")
        return ShareDeliver(_group(msg[1]), _text(msg[2], "SHARE_DELIVER home"),
                            _text(msg[3], "SHARE_DELIVER client id"), delivery, record, _position(msg[6]))
    if kind == BrokerType.SHARE_ACK:
        if len(msg) != 5:
            raise _bad("SHARE_ACK has 4 fields")
        return ShareAck(_group(msg[1]), _text(msg[2], "SHARE_ACK client id"), _ids(msg[3], "SHARE_ACK acked"),
                        _ids(msg[4], "SHARE_ACK returned"))
    return _handover(kind, msg)


def _handover(kind: object, msg: list[object]) -> ShareMoved | ShareLeft:
    """SHARE_MOVED or SHARE_LEFT (core/share/handover.py), checked."""
    if kind == BrokerType.SHARE_MOVED:
        if len(msg) != 6 or type(msg[5]) is not bool:
            raise _bad("SHARE_MOVED has 5 fields, the last true or false")
        return ShareMoved(_group(msg[1]), _text(msg[2], "SHARE_MOVED home"), _text(msg[3], "SHARE_MOVED pubend"),
                          _registration(msg[4], "SHARE_MOVED registration"), msg[5])
    if kind == BrokerType.SHARE_LEFT:
        if len(msg) != 4:
            raise _bad("SHARE_LEFT has 3 fields")
        return ShareLeft(_group(msg[1]), _text(msg[2], "SHARE_LEFT pubend"),
                         _registration(msg[3], "SHARE_LEFT registration"))
    raise ProtocolError(UNKNOWN_MESSAGE, f"unknown share message type {kind}")


@dataclass(frozen=True, slots=True)
class ShareArrived:
    """A share message for this broker (the cluster member's output, core/broker/cluster.py): from
    the peer at `sender`, or routed here as the group's home (`sender` is then the route's source)."""

    sender: str
    message: ShareMessage


def arrived(sender: str, message: list[object]) -> ShareArrived:
    """A share message from the peer at `sender` (ProtocolError when malformed)."""
    return ShareArrived(sender, decode(message))


def routed(overlay: OverlayNode, message: RouteMessage, decision: RouteDecision) -> list[ShareArrived | PeerSend]:
    """A JOIN on its way: delivered here (this broker is the group's home; ProtocolError when
    malformed), or sent on to the next hop unchanged (Scribe's upcalls are not asked)."""
    if isinstance(decision, Forward):
        return [overlay.forward(decision)]
    return [ShareArrived(message.source.address, decode(list(message.payload)))]


def route(me: NodeRef, join_msg: ShareJoin) -> WireArray:
    """The ROUTE message carrying `join_msg` towards its group's home, as if received from this
    broker itself (the cluster member's `received` then routes it, core/broker/cluster.py)."""
    return encode_route(RouteMessage(group_key(join_msg.group), me, 0, join(join_msg)))
