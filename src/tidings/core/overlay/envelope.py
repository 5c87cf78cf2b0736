"""What the overlay and the layers above it exchange: the route envelope, the decisions, the effects.

Pastry's API (route, send, deliver, forward) is expressed as values rather than callbacks. A node
that receives a routed message asks its `OverlayNode` for a decision: `Deliver` when it is the live
node numerically closest to the key that it knows of, else `Forward` naming the next hop. The
composer hands the decision to the application (the Scribe agent), which may act on it, replace the
payload, or stop the route (Scribe's subscribe stops at the first node already in the tree); only
then does the composer send the envelope on. `PeerSend` is Pastry's send(msg, node): one wire
message (a msgpack-able list whose first element is the message type) to one address.

Message type numbers are split by layer, so the composer dispatches on the number alone; the
numbers and the layers' ranges are in core/wire/types.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from tidings.core.overlay.node_id import NodeRef
from tidings.core.wire.packable import WireArray


@dataclass(frozen=True, slots=True)
class RouteMessage:
    """An application payload on its way to the live node numerically closest to `key`."""

    key: int
    source: NodeRef
    hops: int
    payload: WireArray


@dataclass(frozen=True, slots=True)
class Deliver:
    """This node is the destination of `message` (numerically closest live node it knows)."""

    message: RouteMessage


@dataclass(frozen=True, slots=True)
class Forward:
    """`message` should go on to `next_hop`; the application may change or stop it first."""

    message: RouteMessage
    next_hop: NodeRef


RouteDecision = Deliver | Forward


@dataclass(frozen=True, slots=True)
class PeerSend:
    """Send one wire message to the node at `address` (over the one connection of that pair)."""

    address: str
    message: WireArray


@dataclass(frozen=True, slots=True)
class RouteTo:
    """An application asks the composer to route `payload` towards `key` through the overlay."""

    key: int
    payload: WireArray
