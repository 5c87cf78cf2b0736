"""MQTT connections on a broker: the sessions (core/mqtt/session.py) composed around the broker core.

Theory of operation. The runtime listens for MQTT clients on a port of its own (`--mqtt`, aio/mqtt.py)
and numbers their connections from the same counter as the others; it tells this gateway which
connections are MQTT's (`expect`, before their `Accepted`) and feeds every input here instead of to
the broker. An input about another connection, and every other input, goes to the broker as it is;
an MQTT connection's bytes go to its session, whose tidings frames (HELLO, PUBLISH, SUBSCRIBE, ...)
the broker then receives as that connection's bytes (`Received`). What the broker answers, an
MQTT connection's `Send` is handed to its session and leaves as MQTT packets; every other effect
(PauseReading, Disconnect, the log's, the peers') passes unchanged, in order. So an MQTT connection
is in the broker's connection table like any client: the guard admits it, the reading machine
holds it (disk, rate, send queue), the intake logs its events and ACKs them after the fsync, and
its subscriptions are Subscription machines fed by the fan-out and the trees; only the encoding
differs. A broker without `--mqtt` has no gateway and runs exactly as before.

The gateway keeps two timers per MQTT connection (`Deadlines`): its protocol machine's (the CONNECT
deadline, the keep-alive: core/mqtt/protocol.py) and the renewal of its subscriptions' lease
(core/subscription/leases.py), which a native client renews itself: here the MQTT keep-alive stands
for it. Two more keys live in the same `Deadlines`: one `ExpiryTimer` at the earliest Session
Expiry of the persistent sessions away (core/mqtt/expiry.py; the session then ends: its durable
subscriptions forgotten through the broker's durable machine, its QoS 2 keys and carried deliveries
dropped) and a `WillTimer` per ended connection whose will waits for its Will Delay
(core/mqtt/will.py; the broker hears that connection is lost only when its will goes or is
cancelled). Its `next_deadline` is the earlier of the broker's and its own; on `TimerFired` the broker
goes first. A second connection with the same client id and identity takes the session over (the
first is closed, 5.0: 0x8E); with another identity it is refused (0x85).

Figures (`status()["mqtt"]`, `/metrics` as `tidings_mqtt_*`: core/broker/metrics.py): connections
open and accepted, packets in and out, PUBLISHes received and delivered, refusals.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, NamedTuple

from tidings.core.broker.broker import Broker
from tidings.core.deadlines import Deadlines
from tidings.core.effects import Disconnect, Effect, Send
from tidings.core.inputs import Accepted, ConnectionLost, Input, Received, SendBlocked, SendDrained, TimerFired
from tidings.core.mqtt import persistent, takeover
from tidings.core.mqtt import will as wills
from tidings.core.mqtt.bridge import MqttSettings
from tidings.core.mqtt.derivations import Derivations, DeriveKey, KeyDerived
from tidings.core.mqtt.exactly_once import MqttStateSaved, QosTwoKeys, SaveMqttState, producer_of, row_of
from tidings.core.mqtt.expiry import SessionKey
from tidings.core.mqtt.figures import figures_of, status_of
from tidings.core.mqtt.inflight_ids import IDS_SAVE_INTERVAL_NS, DurableIds, live_records, records_of
from tidings.core.mqtt.reason_codes import ReasonCode
from tidings.core.mqtt.resumption import CARRIED_BYTES_MAX, Carried, carry
from tidings.core.mqtt.retained import CLOSED, IDLE, RETAINED_CONN, RetainedFeed
from tidings.core.mqtt.session import OPEN, MqttSession
from tidings.core.mqtt.subscriptions import Held
from tidings.core.mqtt.will import SavedWillTimer, WillTimer, will_frame
from tidings.core.mqtt.will_saved import SavedWills
from tidings.core.publish.dedup import scoped
from tidings.core.share import gateway as shares
from tidings.core.share.wire import ShareArrived

NONCE_BYTES = 24
SESSIONS_REPORTED_MAX = 256  # MQTT connections listed one by one in the status
CONN_INPUTS = (Received, ConnectionLost, SendBlocked, SendDrained)  # the inputs of one connection
class ProtocolTimer(NamedTuple):
    """The connection's protocol machine is due (its CONNECT deadline, its keep-alive)."""

    conn: int


class RenewTimer(NamedTuple):
    """The connection's subscriptions' lease is to be renewed."""

    conn: int


class ExpiryTimer(NamedTuple):
    """The earliest Session Expiry of a persistent session away is due (core/mqtt/expiry.py)."""


class IdsTimer(NamedTuple):
    """The deliveries' packet ids are due to be saved (core/mqtt/inflight_ids.py): a wake-up."""


EXPIRY_TIMER, IDS_TIMER = ExpiryTimer(), IdsTimer()
MqttTimer = ProtocolTimer | RenewTimer | ExpiryTimer | WillTimer | IdsTimer | SavedWillTimer


class MqttGateway:
    def __init__(self, broker: Broker, settings: MqttSettings, nonce: Callable[[int], bytes],
                 saved_state: bytes | None = None) -> None:
        """`nonce(n)`: n fresh random bytes (the runtime's), for each session's native handshake;
        `saved_state`: what `take_saves` last had saved (persistent sessions' QoS 2 keys)."""
        self.broker = broker
        self.settings = settings
        self.nonce = nonce
        self.sessions: dict[int, MqttSession] = {}
        self.expected: dict[int, tuple[bool, str]] = {}  # conn -> (secure, source address), until its Accepted
        self.derivations = Derivations(nonce(32))  # passwords' scrypt, off the loop (core/mqtt/derivations.py)
        self.by_client_id: dict[str, int] = {}
        self.timers: Deadlines[MqttTimer] = Deadlines()
        self.now = 0
        self.wall_us = 0
        self.wall_now = 0  # `now` when `wall_us` was learnt (the wall time at `now`: `_wall`)
        self.accepted = 0
        self.sessions_expired = 0
        self.wills_published = 0
        self.waiting: dict[int, MqttSession] = {}  # ended connections whose will waits (core/mqtt/will.py)
        self.dropped: set[int] = set()  # connections taken over (`drop`): gone, their socket closing
        self.closed: dict[str, int] = {}  # figures of the sessions gone
        self.totals = {"packets_received": 0, "packets_sent": 0, "publishes_received": 0,
                       "publishes_delivered": 0, "refusals": 0, "deliveries_dropped": 0}
        self.retained = RetainedFeed(f"broker-{nonce(6).hex()}")  # retained messages (core/mqtt/retained.py)
        self.shares = shares.hub_of(broker)  # shared subscriptions (core/share/)
        self.qos2_keys = QosTwoKeys(broker.dedup, saved_state)  # QoS 2 through a kill -9 (core/mqtt/exactly_once.py)
        self.saving: set[int] = set()  # sessions with a CONNACK or PUBCOMP waiting for a save
        self.carried: dict[tuple[str, str], list[Carried]] = {}  # persistent sessions away: what they had in
        self.carried_bytes = 0  # flight, by (service, client id), oldest first (core/mqtt/resumption.py)
        self.ids = DurableIds(row_of(saved_state, 3))  # their packet ids through a kill -9 (core/mqtt/inflight_ids.py)
        self.wills_saved = SavedWills(row_of(saved_state, 4))  # wills waiting, through a restart (will_saved.py)
        self.own_conn = wills.OWN_CONN_FIRST  # the broker's own connections that publish restored wills
        broker.sections.append(self.status)  # the broker's status (and so STATUS, /status, /metrics) has ours

    def expect(self, conn: int, secure: bool, source: str = "") -> None:
        """The runtime accepted `conn` on an MQTT port (its Accepted follows); `secure`: TLS or loopback;
        `source`: the peer's address (its password derivations are bounded per source)."""
        self.expected[conn] = (secure, source)

    def take_derivations(self) -> list[DeriveKey]:
        """The scrypt derivations the sessions asked for (effects for the runtime's workers, whose
        results come back through `derived`)."""
        return self.derivations.take()

    def take_saves(self) -> list[SaveMqttState]:
        """The state to save for the QoS 2 keys (an effect for the runtime, whose completion comes back
        through `state_saved`): at most one under way, the later changes in the next."""
        ids, saved = self.ids, self.wills_saved
        save = self.qos2_keys.take_save(self.wall_us, lambda: [ids.rows(live_records(self), self.now), saved.rows()],
                                        ids.due(self.now) or saved.changed)
        return [] if save is None else [save]

    def state_saved(self, inp: MqttStateSaved) -> list[Effect]:
        """A save is on disk: the CONNACKs and PUBCOMPs that waited for it go."""
        self.now = inp.now
        self.qos2_keys.done(inp.version)
        self.ids.saved_records = self.ids.saving_records
        out: list[Effect] = self.ids.release(self.qos2_keys.saved) if self.ids.holding else []
        waiting, self.saving = self.saving, set()
        for conn in sorted(waiting):
            session = self.sessions.get(conn)
            if session is None:
                continue
            native: list[bytes] = []
            session.state_saved(out, native)
            self._to_broker(session, native, out)
            self._arm(session)
        return self.ids.hold(out) if self.ids.holding else out

    def derived(self, inp: KeyDerived) -> list[Effect]:
        """A derivation is done: its session answers the broker's CHALLENGE with it."""
        self.now = self.shares.now = inp.now
        self.derivations.done(inp.conn)
        out: list[Effect] = []
        session = self.sessions.get(inp.conn)
        if session is not None:
            native: list[bytes] = []
            session.derived(inp.ticket, inp.salted, out, native)
            self._to_broker(session, native, out)
            self._arm(session)
        shares.run(self, out)
        return self.ids.hold(out) if self.ids.holding else out

    # ---- inputs ----------------------------------------------------------------------------------

    def handle(self, inp: Input) -> list[Effect]:
        out = self._handle(inp)
        return self.ids.hold(out) if self.ids.holding else out  # (sends waiting for a save: inflight_ids.py)

    def _handle(self, inp: Input) -> list[Effect]:
        self.now = self.shares.now = inp.now
        kind = type(inp)
        if (type(inp) is Received or type(inp) is TimerFired) and inp.wall_us:
            known, self.wall_us, self.wall_now = self.wall_us, inp.wall_us, inp.now
            if not known:  # (the saved sessions' expiries and wills are timed from the first wall time known)
                self.qos2_keys.expiries.restarted(self.wall_us)
                self._arm_expiry()
                wills.arm_saved(self)
        out: list[Effect] = []
        if self.dropped and isinstance(inp, CONN_INPUTS) and inp.conn in self.dropped:  # (core/mqtt/takeover.py)
            if kind is ConnectionLost:
                self.dropped.discard(inp.conn)
            return out
        if self.retained.state is IDLE:  # the broker's own subscription to retained events, once
            opened = self.broker.handle(Accepted(inp.now, RETAINED_CONN))
            self.broker.reading.vouch(inp.now, RETAINED_CONN, self.retained.open(), opened)
            self._to_client(opened, out)
        if kind is Received:
            assert isinstance(inp, Received)
            session = self.sessions.get(inp.conn)
            if session is not None:
                self._from_client(session, inp.data, out)
                shares.run(self, out)
                return out
        elif kind is Accepted:
            assert isinstance(inp, Accepted)
            expected = self.expected.pop(inp.conn, None)
            if expected is not None:
                self.accepted += 1
                session = MqttSession(inp.conn, inp.now, self.settings, expected[0], self.nonce(NONCE_BYTES),
                                      self._held, self.retained, self.derivations, expected[1], self.shares,
                                      qos2_keys=self.qos2_keys, carried=partial(takeover.inherit, self), ids=self.ids)
                self.sessions[inp.conn] = session
                self._arm(session)
        elif kind is ConnectionLost:
            assert isinstance(inp, ConnectionLost)
            self._gone(inp.conn, out)
            if inp.conn in self.waiting:  # (the broker keeps it until its will goes: core/mqtt/will.py)
                shares.run(self, out)
                return out
        self._to_client(self.broker.handle(inp), out)
        if kind is TimerFired:
            self._timeouts(inp.now, out)
        shares.run(self, out)
        return out

    def next_deadline(self) -> int | None:
        deadlines = [d for d in (self.broker.next_deadline(), self.timers.next_deadline(),
                                 self.shares.next_deadline()) if d is not None]
        return min(deadlines) if deadlines else None

    def _from_client(self, session: MqttSession, data: bytes, out: list[Effect]) -> None:
        native: list[bytes] = []
        session.wall_us = self.wall_us  # (message expiry: core/mqtt/bridge.py)
        session.from_client(self.now, data, out, native)
        self._to_broker(session, native, out)
        self._arm(session)

    def _arm(self, session: MqttSession) -> None:
        """The session's protocol machine's deadline, as it now is (and whether it waits for a save).
        The timer is touched only when that deadline moved since it was last armed (`session.armed`:
        most turns leave it where it was)."""
        qos2 = session.qos2
        if qos2 is not None and qos2.waiting():
            self.saving.add(session.conn)
        if session.ids is not None and self.ids.moved(session.conn, session.ids, self.qos2_keys.version + 1):
            self.qos2_keys.version += 1  # (its sends wait for the next save: core/mqtt/inflight_ids.py)
        elif self.ids.dirty and self.timers.when(IDS_TIMER) is None:
            self.timers.set(IDS_TIMER, max(self.now, self.ids.last_save + IDS_SAVE_INTERVAL_NS))
        deadline = session.machine.deadlines.next_deadline()
        if deadline == session.armed:
            return
        session.armed = deadline
        if deadline is None:
            self.timers.cancel(ProtocolTimer(session.conn))
        elif self.timers.when(ProtocolTimer(session.conn)) != deadline:
            self.timers.set(ProtocolTimer(session.conn), deadline)

    def _to_broker(self, session: MqttSession, frames: list[bytes], out: list[Effect]) -> None:
        """The session's tidings frames, received by the broker on its connection."""
        for frame in frames:
            before = session.state
            self._to_client(self.broker.handle(Received(self.now, self.wall_us, session.conn, frame)), out)
            if before is not OPEN and session.state is OPEN:
                self._opened(session, out)

    def _to_client(self, effects: list[Effect], out: list[Effect]) -> None:
        """The broker's effects: an MQTT connection's Sends through its session, the rest as they are."""
        sessions = self.sessions
        for eff in effects:
            if type(eff) is Send:
                session = sessions.get(eff.conn)
                if session is not None:
                    native: list[bytes] = []
                    session.wall_us = self.wall_us
                    session.from_broker(eff.data, out, native)
                    if native:
                        self._to_broker(session, native, out)
                    self._arm(session)
                elif eff.conn == RETAINED_CONN:  # the retained feed's
                    self._feed(eff, out)
                elif eff.conn < 0:  # a share group's
                    shares.taken(self, eff)
                else:
                    out.append(eff)
            elif type(eff) is Disconnect and eff.conn < 0:
                if eff.conn == RETAINED_CONN:
                    self._feed(eff, out)
                else:
                    shares.taken(self, eff)
            elif isinstance(eff, ShareArrived):  # a shared subscription's message (core/share/)
                shares.taken(self, eff)
            else:
                out.append(eff)

    def _feed(self, eff: Send | Disconnect, out: list[Effect]) -> None:
        """What the broker sent the retained feed; the connection ends when the feed is closed."""
        was = self.retained.state
        if type(eff) is Send:
            for frame in self.retained.from_broker(eff.data):
                self._to_feed(frame, out)
        else:
            self.retained.stop("the broker closed its connection")
        if was is not CLOSED and self.retained.state is CLOSED:
            self.timers.cancel(RenewTimer(RETAINED_CONN))
            self._to_client(self.broker.handle(ConnectionLost(self.now, RETAINED_CONN)), out)

    def _to_feed(self, frame: bytes, out: list[Effect]) -> None:
        """A frame of the retained feed, received by the broker on its connection."""
        self._to_client(self.broker.handle(Received(self.now, self.wall_us, RETAINED_CONN, frame)), out)
        interval = self.retained.native.renew_interval_ns
        if interval and self.timers.when(RenewTimer(RETAINED_CONN)) is None:
            self.timers.set(RenewTimer(RETAINED_CONN), self.now + interval)

    # ---- a session's life ------------------------------------------------------------------------

    def drop(self, conn: int, out: list[Effect]) -> None:
        """The connection `conn` is gone now, for the sessions and the broker (core/mqtt/takeover.py),
        though its socket is still closing: its last inputs are ignored."""
        self._gone(conn, out)
        if conn not in self.waiting:  # (a will waiting: its cancel or its publishing tells the broker)
            self._broker_lost(conn, out)
        self.dropped.add(conn)

    def _opened(self, session: MqttSession, out: list[Effect]) -> None:
        """WELCOME came: the session takes its client id (a connection of its identity was taken over
        then: core/mqtt/takeover.py), and renews its lease."""
        other = self.by_client_id.get(session.client_id)
        if other == session.conn:  # (told already, by a nested turn)
            return
        if other is not None and other in self.sessions:
            why = "the client id is in use by another identity"
            session.close_for(ReasonCode.CLIENT_IDENTIFIER_NOT_VALID, why, out)
            return
        self.by_client_id[session.client_id] = session.conn
        if session.native is not None:  # the session is back (or starts anew): no expiry while connected
            self.qos2_keys.expiries.back((session.native.service, session.client_id),
                                         session.machine.session_expiry_interval_s if session.persistent else None)
            self._arm_expiry()
            wills.arm_saved(self)
        interval = session.native.renew_interval_ns if session.native is not None else None
        if interval:
            self.timers.set(RenewTimer(session.conn), self.now + interval)

    def _held(self, owner: str, prefix: str) -> list[Held]:
        """The named durable subscriptions of `owner` whose names begin with `prefix`: a persistent
        MQTT session's (core/mqtt/persistent.py), as the broker's durable state holds them."""
        return [(r.name[1], r.pattern, r.filter) for r in self.broker.registrations.all()
                if r.name is not None and r.name[0] == owner and r.name[1].startswith(prefix)]

    def _gone(self, conn: int, out: list[Effect]) -> None:
        """The connection ended: its will is published (on its connection, before the broker hears it
        is lost), then the session goes."""
        self.expected.pop(conn, None)
        session = self.sessions.get(conn)
        if session is None:
            return
        session.lost()
        self.shares.gone(conn)
        self.ids.gone(conn)
        will = None if wills.hold(self, session, wills.delay_ns(session), out) else will_frame(session)
        if will is not None:
            self.wills_published += 1
            self._to_client(self.broker.handle(Received(self.now, self.wall_us, conn, will)), out)
        del self.sessions[conn]
        self.timers.cancel(ProtocolTimer(conn))
        self.timers.cancel(RenewTimer(conn))
        if self.by_client_id.get(session.client_id) == conn:  # (not taken over: nobody resumed it yet)
            del self.by_client_id[session.client_id]
            if session.native is not None:
                away = (session.native.service, session.client_id)  # what it had in flight: resumption.py
                self._carry(away, carry(session.machine.unfinished()[0], session.tokens, session.resumed)
                            if session.persistent else [])
                if session.ids is not None:  # and their packet ids, through a kill -9 (inflight_ids.py)
                    self.ids.left(away, records_of(session))
                if session.persistent and session.welcomed:  # its Session Expiry runs (core/mqtt/expiry.py)
                    self.qos2_keys.expiries.left((session.native.service, session.client_id),
                                                 session.machine.session_expiry_interval_s, self._wall(self.now))
                    self._arm_expiry()
        for key, value in figures_of(session).items():
            self.totals[key] += value

    def _carry(self, key: tuple[str, str], carried: list[Carried]) -> None:
        """Keep what a persistent session had in flight for its next connection, within CARRIED_BYTES_MAX."""
        self.take_carried(*key)
        if carried:
            self.carried[key] = carried
            self.carried_bytes += sum(len(c.publish.payload) for c in carried)
        while self.carried_bytes > CARRIED_BYTES_MAX:  # the oldest go (their events come again, new ids)
            self.take_carried(*next(iter(self.carried)))

    def take_carried(self, service: str, client_id: str) -> list[Carried]:
        carried = self.carried.pop((service, client_id), [])
        self.carried_bytes -= sum(len(c.publish.payload) for c in carried)
        return carried

    def _broker_lost(self, conn: int, out: list[Effect]) -> None:
        self._to_client(self.broker.handle(ConnectionLost(self.now, conn)), out)

    def _wall(self, now: int) -> int:
        """The wall time (microseconds since the epoch) at `now`, from the last one known (0: none yet)."""
        return self.wall_us + (now - self.wall_now) // 1000 if self.wall_us else 0

    def _arm_expiry(self) -> None:
        """The one expiry timer at the earliest session deadline (once a wall time is known)."""
        deadline_us = self.qos2_keys.expiries.next_us()
        if deadline_us is None or not self.wall_us:
            self.timers.cancel(EXPIRY_TIMER)
            return
        when = self.now + max(0, deadline_us - self._wall(self.now)) * 1000
        if self.timers.when(EXPIRY_TIMER) != when:
            self.timers.set(EXPIRY_TIMER, when)

    def _expire(self, now: int, out: list[Effect]) -> None:
        """The persistent sessions whose Session Expiry ran out end: their durable subscriptions are
        forgotten (as a clean start's would be), their QoS 2 keys and what they had in flight dropped."""
        wall_us = self._wall(now)
        for key in self.qos2_keys.expiries.due(wall_us):
            self._end_session(key, wall_us, out)
        self._arm_expiry()

    def _end_session(self, key: SessionKey, wall_us: int, out: list[Effect]) -> None:
        service, client_id = key
        if client_id in self.by_client_id:  # (connected again: not away)
            return
        self.sessions_expired += 1
        prefix, broker = persistent.prefix_of(client_id), self.broker
        for reg in [r for r in broker.registrations.all() if r.name is not None and r.key is None
                    and r.name[0] == service and r.name[1].startswith(prefix)]:
            self._to_client(broker.router.carry(broker.subscribers.outcome(broker.durable.forget(reg.number)), []),
                            out)
        self.qos2_keys.clear(scoped(service, producer_of(client_id)), wall_us)
        self.take_carried(service, client_id)
        self.ids.take(key)

    def _timeouts(self, now: int, out: list[Effect]) -> None:
        shares.timed_out(self, now, out)
        for key in self.timers.pop_due(now):
            if isinstance(key, ExpiryTimer):
                self._expire(now, out)
                continue
            if isinstance(key, WillTimer):
                wills.due(self, key.conn, out)
                continue
            if isinstance(key, SavedWillTimer):
                wills.saved_due(self, out)
                continue
            if isinstance(key, IdsTimer):  # (a wake-up: `take_saves` then saves them)
                continue
            if key.conn == RETAINED_CONN:
                renew = self.retained.renew()
                if renew is not None:
                    self._to_feed(renew, out)
                continue
            session = self.sessions.get(key.conn)
            if session is None:
                continue
            if type(key) is ProtocolTimer:
                session.timed_out(now, out)
                self._arm(session)
            elif session.native is not None and session.state is OPEN:
                self._to_broker(session, [session.native.renew()], out)
                interval = session.native.renew_interval_ns
                if interval:
                    self.timers.set(RenewTimer(session.conn), now + interval)

    # ---- figures ---------------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """The MQTT connections' figures, under `mqtt` in the broker's status."""
        figures = dict(self.totals)
        for session in self.sessions.values():
            for key, value in figures_of(session).items():
                figures[key] += value
        open_sessions = [s for s in self.sessions.values() if s.state is OPEN]
        mqtt = {"connections": len(open_sessions), "connections_accepted": self.accepted,
                "sessions_away": len(self.qos2_keys.expiries.away), "sessions_expired": self.sessions_expired,
                "wills_published": self.wills_published, "wills_waiting": len(self.waiting),
                **self.wills_saved.status(),
                **figures, **self.retained.status(), **self.shares.status(),
                **self.derivations.status(), **self.qos2_keys.status(), **self.ids.status(),
                "sessions": [status_of(s) for s in open_sessions[:SESSIONS_REPORTED_MAX]]}
        return {"mqtt": mqtt}
