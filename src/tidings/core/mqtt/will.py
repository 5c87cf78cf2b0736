"""A connection's will, when its connection ended (core/mqtt/session.py's, for the gateway), and
5.0's Will Delay Interval (3.1.3.2.2).

Theory of operation of the delay. A will is due when its connection ends without DISCONNECT 0x00
(the protocol machine says so). Without a Will Delay Interval it is published at once, on its
connection, before the broker hears the connection is lost. With one, it waits for the delay or the
session's end, whichever comes first (a session that is not persistent ends with its connection: its
will goes at once; a persistent one ends when its Session Expiry Interval runs out,
core/mqtt/expiry.py), and it is not published at all when a connection with the same client id
(and service) opens in time. While it waits, the broker keeps the ended connection (`Waiting`): its
subscriptions are left (a persistent session's durable ones away, as if the connection had gone, so
the next connection resumes them), and only the connection itself stays, with its identity, so the
will is checked and logged as its client's PUBLISH when it goes (a connection with Clean Start 1
ends the old session: the will goes then). Then (or when it is cancelled) the
broker hears the connection is lost. The gateway times each with a `WillTimer` in its one
`Deadlines`. A will waiting is also kept in the broker's `mqtt.state` (core/mqtt/will_saved.py), so
that after a restart (a kill -9 too) it is published when due by a connection of the broker's own,
or cancelled by the client id's return: `saved_due`, `cancel` (timed by one `SavedWillTimer`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, NamedTuple

from tidings.core.auth.names import ANONYMOUS
from tidings.core.inputs import Accepted, Received
from tidings.core.mqtt import bridge
from tidings.core.mqtt import packets as p
from tidings.core.mqtt.will_saved import SavedWill
from tidings.core.session.client_session import ClientSession, PublishEvent

if TYPE_CHECKING:
    from tidings.core.effects import Effect
    from tidings.core.mqtt.gateway import MqttGateway
    from tidings.core.mqtt.session import MqttSession

NS_PER_S = 1_000_000_000
OWN_CONN_FIRST: Final = -(1 << 40)  # the broker's own connections for restored wills (counting down; share's are above)


class WillTimer(NamedTuple):
    """The delayed will of the ended connection `conn` is due."""

    conn: int


class SavedWillTimer(NamedTuple):
    """The earliest will restored from the saved state is due (core/mqtt/will_saved.py)."""


def will_frame(session: MqttSession) -> bytes | None:
    """The connection ended: its will, as the PUBLISH frame the broker logs and delivers (the same
    checks and rules as any PUBLISH of the client's), when the machine said it is due."""
    event = will_event(session)
    session.will = None
    return None if event is None or session.native is None else session.native.publish([event])[0][2]


def will_event(session: MqttSession) -> PublishEvent | None:
    """The due will's event (checked as the client's PUBLISH would be), None when none is due."""
    will, native = session.will, session.native
    if will is None or native is None or not session.will_due or not session.welcomed:
        return None
    retain = will.retain and session.retained is not None and session.retained.available
    event = bridge.event_of(native, p.Publish(will.topic, will.payload, will.qos, retain, properties=will.properties))
    return None if isinstance(event, bridge.Refused) else event


def delay_ns(session: MqttSession) -> int:
    """How long the session's due will waits: the lesser of its Will Delay Interval and its Session
    Expiry Interval (0 for a session that is not persistent: it ends now); 0: at once."""
    will = session.will
    if will is None or session.native is None or not session.will_due or not session.welcomed:
        return 0
    delay_s = will.properties.will_delay_interval_s or 0
    expiry_s = session.machine.session_expiry_interval_s if session.persistent else 0
    return min(delay_s, expiry_s) * NS_PER_S


def hold(gateway: MqttGateway, session: MqttSession, delay: int, out: list[Effect]) -> bool:
    """The session's connection ended with a will to wait `delay` ns: its subscriptions leave, the
    broker keeps the connection until the will is due (`due`) or cancelled (`cancel`). False when
    it does not wait (no delay, or the client id is already another connection's: cancelled)."""
    native = session.native
    if delay <= 0 or native is None:
        return False
    other = gateway.by_client_id.get(session.client_id)
    if other is not None and other != session.conn:  # a connection with its client id came first
        session.will = None
        return False
    gateway.waiting[session.conn] = session
    leave = [native.unsubscribe(sub) for sub in session.subscriptions.sub_of]  # (durable ones: away)
    session.subscriptions.sub_of.clear()
    session.subscriptions.subs.clear()
    gateway._to_broker(session, leave, out)
    gateway.timers.set(WillTimer(session.conn), gateway.now + delay)
    event = will_event(session)
    if event is not None and gateway.wall_us:  # (kept through a restart: will_saved.py)
        gateway.wills_saved.held((native.service, session.client_id), SavedWill(
            session.identity or ANONYMOUS, gateway._wall(gateway.now + delay), event[0], dict(event[1]), event[2]))
    return True


def due(gateway: MqttGateway, conn: int, out: list[Effect]) -> None:
    """The delay ran out: the will goes on its connection, then the broker hears it is lost."""
    session = gateway.waiting.pop(conn, None)
    if session is None:
        return
    if session.native is not None:
        gateway.wills_saved.drop((session.native.service, session.client_id))
    frame = will_frame(session)
    if frame is not None:
        gateway.wills_published += 1
        gateway._to_broker(session, [frame], out)
    gateway._broker_lost(conn, out)


def cancel(gateway: MqttGateway, service: str, client_id: str, clean_start: bool, out: list[Effect]) -> None:
    """A connection with the client id opened: a will waiting for it is not published, unless the
    connection starts clean (the old session ends now, and its will goes with it, 3.1.2.5)."""
    for conn in [c for c, s in gateway.waiting.items() if s.client_id == client_id
                 and s.native is not None and s.native.service == service]:
        gateway.timers.cancel(WillTimer(conn))
        if clean_start:
            due(gateway, conn, out)
            continue
        del gateway.waiting[conn]
        gateway.wills_saved.drop((service, client_id))
        gateway._broker_lost(conn, out)
    if (service, client_id) in gateway.wills_saved.restored:  # one from before a restart
        will = gateway.wills_saved.drop((service, client_id))
        if clean_start and will is not None:
            publish_saved(gateway, (service, client_id), will, out)


def arm_saved(gateway: MqttGateway) -> None:
    """The one timer at the earliest restored will (once the broker's wall time is known)."""
    due_us = gateway.wills_saved.next_us()
    if due_us is None or not gateway.wall_us:
        gateway.timers.cancel(SavedWillTimer())
        return
    gateway.timers.set(SavedWillTimer(), gateway.now + max(0, due_us - gateway._wall(gateway.now)) * 1000)


def saved_due(gateway: MqttGateway, out: list[Effect]) -> None:
    """The restored wills now due are published."""
    for key, will in gateway.wills_saved.due(gateway._wall(gateway.now)):
        publish_saved(gateway, key, will, out)
    arm_saved(gateway)


def publish_saved(gateway: MqttGateway, key: tuple[str, str], will: SavedWill, out: list[Effect]) -> None:
    """A restored will, published on a connection of the broker's own opened as its client's identity
    (Guard.vouched: refused, and the will with it, when the auth file no longer admits the identity),
    which ends at once. What the broker answers it is not anyone's (the gateway drops it)."""
    broker, now, conn = gateway.broker, gateway.now, gateway.own_conn
    gateway.own_conn -= 1
    opened = broker.handle(Accepted(now, conn))
    broker.reading.vouch(now, conn, will.identity, opened)
    gateway._to_client(opened, out)
    frame = ClientSession(key[0], key[1]).publish([(will.channel, will.attributes, will.payload)])[0][2]
    gateway._to_client(broker.handle(Received(now, gateway.wall_us, conn, frame)), out)
    gateway._broker_lost(conn, out)
    gateway.wills_published += 1

