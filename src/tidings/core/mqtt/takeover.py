"""A session taken over: a client id connecting while a connection of it is still open (3.1.4).

Theory of operation. A client whose TCP connection died unseen (a phone changing networks, a NAT
that forgot it) connects again before the broker's keep-alive notices, so the broker still holds the
old connection, with the session's durable subscriptions attached and QoS 1 and 2 deliveries in
flight on it. The spec closes the old connection (5.0: DISCONNECT 0x8E, Session taken over) and the
session goes on on the new one. Here that is a reconnect made synchronous: when the new connection
is admitted (its WELCOME, before its subscriptions resume: `inherit`, which the session calls), the
old one is closed and gone at once for the gateway and for the broker, exactly as a dropped
connection is, so its durable subscriptions are free to resume on the new one and what it had in
flight is carried (core/mqtt/resumption.py) and resent under the same packet identifiers. Its will is
due or waits as for any ended connection, and is cancelled by the new connection like any waiting
will. The old socket still closes in the runtime; its last inputs (`dropped`) are ignored.

Only a connection of the same identity is taken over; another identity's keeps the client id and the
new connection is refused (the gateway's `_opened`, 0x85).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tidings.core.mqtt import will as wills
from tidings.core.mqtt.reason_codes import ReasonCode

if TYPE_CHECKING:
    from tidings.core.effects import Effect
    from tidings.core.mqtt.gateway import MqttGateway
    from tidings.core.mqtt.resumption import Carried
    from tidings.core.mqtt.session import MqttSession


def inherit(gateway: MqttGateway, session: MqttSession, out: list[Effect]) -> list[Carried]:
    """`session` was admitted: an open connection of its client id and identity is taken over, a
    will waiting for the client id cancelled; what its last connection left in flight, taken."""
    other = gateway.by_client_id.get(session.client_id)
    old = None if other is None or other == session.conn else gateway.sessions.get(other)
    if other is not None and old is not None and old.identity == session.identity:
        old.close_for(ReasonCode.SESSION_TAKEN_OVER, "another connection took the session over", out)
        gateway.drop(other, out)
    if session.native is None:
        return []
    wills.cancel(gateway, session.native.service, session.client_id, session.clean_start, out)
    return gateway.take_carried(session.native.service, session.client_id)
