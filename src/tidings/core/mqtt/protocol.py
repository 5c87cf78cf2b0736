"""One MQTT connection at the broker, sans-IO: bytes in, typed effects out (core/mqtt/effects.py).

Theory of operation. `MqttConnection` speaks MQTT 3.1.1 and 5.0 to one client and hands the broker
side (mqttnet23's session) facts to act on; it holds the protocol's rules and nothing of tidings'.
Its life (`ConnectionState`, moves checked by `TRANSITIONS`):

    AWAITING_CONNECT --CONNECT taken--> CONNECTING --accept()--> CONNECTED --end--> CLOSED
            |  anything else first, a refused CONNECT,     |  refuse()
            |  no CONNECT within connect_timeout_ns        v
            +------------------------------------------> CLOSED

The CONNECT must come first (the codec refuses any other packet first, 4.8: close). Its protocol
level picks the version (4: 3.1.1, 5: 5.0); other levels get the CONNACK their client can read
(0x01 in 3.1.1's form below level 5, 0x84 in 5.0's above). An empty client id with Clean Start
takes the id the runtime assigned (`assigned_client_id`, told to a 5.0 client in CONNACK); without
Clean Start it is refused (0x85 / 3.1.1's 0x02). Packets that follow the CONNECT wait in the
decoder (at most `early_bytes_max`) until the broker side accepts.

Once connected: keep-alive (a client silent for 1.5 keep-alives, 3.1.2-24, is gone: 0x8D; 5.0's
Server Keep Alive lowers a keep-alive over `keep_alive_s_max`), the QoS 1 and 2 flows both ways with
Receive Maximum windows (core/mqtt/inflight.py), Topic Aliases both ways (core/mqtt/aliases.py), the
client's Maximum Packet Size on all we send (a reason string and user properties are dropped first,
then the packet: 3.1.2-25) and Request Problem Information. Whatever the client gets wrong ends the
connection as its version requires: a 5.0 DISCONNECT with the reason code (a CONNACK before the
connection is accepted), a plain close in 3.1.1; never an exception. `Disconnected` tells the broker
side once how the connection ended and whether its will is due.

Timers (one `Deadlines`): the CONNECT deadline, then the keep-alive, moved on only when it fires
(bytes arriving just note the time).
"""

from __future__ import annotations

from dataclasses import replace
from enum import StrEnum
from typing import Final

from tidings.core.deadlines import Alarm, Deadlines
from tidings.core.mqtt import effects as fx
from tidings.core.mqtt import packets as p
from tidings.core.mqtt.aliases import InboundAliases, OutboundAliases
from tidings.core.mqtt.codec import PACKET_BYTES_MAX, PacketDecoder
from tidings.core.mqtt.delivery import DeliveryFlow, Outgoing, Plain
from tidings.core.mqtt.inflight import Arrival, Deliveries, Delivery, Receipts, ReceiptState
from tidings.core.mqtt.limits import (
    CLIENT_RECEIVE_MAXIMUM,
    CONNECT_DUE,
    KEEP_ALIVE_DUE,
    ConnectDue,
    KeepAliveDue,
    ProtocolLimits,
    TimerKey,
    connect_problem,
    merged,
    publish_problem,
    server_offer,
)
from tidings.core.mqtt.packet_type import MQTT_5, MQTT_311, PACKET_ID_MAX, PacketType
from tidings.core.mqtt.properties import NO_PROPERTIES, Properties
from tidings.core.mqtt.publish_run import take_run
from tidings.core.mqtt.reason_codes import (
    REASON_CODES_OF,
    ConnectReturnCode,
    ReasonCode,
    connack_return_code_311,
    suback_code_311,
)
from tidings.core.mqtt.refusal import Refusal
from tidings.core.states import Transitions
from tidings.core.units import SECOND_NS

R = ReasonCode


class ConnectionState(StrEnum):
    AWAITING_CONNECT = "awaiting-connect"
    CONNECTING = "connecting"
    CONNECTED = "connected"
    CLOSED = "closed"


S = ConnectionState
TRANSITIONS = Transitions[ConnectionState]("mqtt connection", {
    S.AWAITING_CONNECT: frozenset({S.CONNECTING, S.CLOSED}),
    S.CONNECTING: frozenset({S.CONNECTED, S.CLOSED}),
    S.CONNECTED: frozenset({S.CLOSED}),
})


REASON_CHARS_MAX: Final = 200  # of a reason string we send


def _why(version: int, detail: str) -> Properties:
    """A reason string for a 5.0 client."""
    if not detail or version != MQTT_5:
        return NO_PROPERTIES
    return Properties(reason_string=detail[:REASON_CHARS_MAX])


class MqttConnection:
    """The protocol machine of one connection (module doc). Inputs: `receive`, `handle_timeout`,
    `connection_lost`, and the broker side's answers; each returns the effects, in order."""

    def __init__(self, now: int, limits: ProtocolLimits | None = None, assigned_client_id: str = "",
                 alarm: Alarm | None = None, runs: bool = False) -> None:
        """`assigned_client_id`: a unique id the runtime made for a client that sends none ("":
        such a client is refused); `runs`: plain PUBLISHes reported as runs (core/mqtt/publish_run.py)."""
        self.runs = runs
        self.limits = limits = limits or ProtocolLimits()
        self.assigned_client_id = assigned_client_id
        self.state = S.AWAITING_CONNECT
        self.version = MQTT_311  # until the CONNECT says
        self.decoder = PacketDecoder(limits.packet_bytes_max)
        self.deadlines: Deadlines[TimerKey] = Deadlines(alarm)
        self.deadlines.set(CONNECT_DUE, now + limits.connect_timeout_ns)
        self.heard_at = now
        self.keep_alive_ns = 0
        self.session_expiry_interval_s = 0
        self.client_id = ""
        self.assigned = self.clean_start = False
        self.server_keep_alive_s: int | None = None
        self.outgoing = Outgoing(MQTT_311, PACKET_BYTES_MAX)  # the client's version and limits, once known
        self.receipts = Receipts(limits.receive_maximum)
        self.deliveries = Deliveries(limits.deliveries_in_flight_max, limits.deliveries_queued_max)
        self.flow = DeliveryFlow(self.outgoing, self.deliveries, OutboundAliases(0))
        self.inbound_aliases = InboundAliases(0)
        self.subscribing: dict[int, int] = {}  # SUBSCRIBE packet id -> its filters, SUBACK awaited
        self.unsubscribing: dict[int, int] = {}

    # ---- inputs from the connection ------------------------------------------------------------

    def receive(self, now: int, data: bytes) -> list[fx.MqttEffect]:
        """Bytes from the client."""
        if self.state is S.CLOSED:
            return []
        self.heard_at = now
        self.decoder.push(data)
        out: list[fx.MqttEffect] = []
        self._pump(now, out)
        return out

    def connection_lost(self) -> list[fx.MqttEffect]:
        """The runtime lost the connection (closed by the client or the network)."""
        out: list[fx.MqttEffect] = []
        if self.state is not S.CLOSED:  # a will is due only of a connection that was accepted
            self._end(R.UNSPECIFIED_ERROR, "connection lost", self.state is S.CONNECTED, out, close=False)
        return out

    def next_deadline(self) -> int | None:
        return self.deadlines.next_deadline()

    def handle_timeout(self, now: int) -> list[fx.MqttEffect]:
        out: list[fx.MqttEffect] = []
        for key in self.deadlines.pop_due(now):
            if isinstance(key, ConnectDue) and self.state is S.AWAITING_CONNECT:
                self._end(R.MAXIMUM_CONNECT_TIME, "no CONNECT in time", False, out)
            elif isinstance(key, KeepAliveDue) and self.state is S.CONNECTED:
                due = self.heard_at + self.keep_alive_ns
                if due <= now:
                    self._fail(R.KEEP_ALIVE_TIMEOUT, "keep-alive timeout", out)
                else:
                    self.deadlines.set(KEEP_ALIVE_DUE, due)
        return out

    def _pump(self, now: int, out: list[fx.MqttEffect]) -> None:
        """Take the packets the state allows, then the decoder's refusal if that is what is left."""
        while self.state is S.AWAITING_CONNECT or self.state is S.CONNECTED:
            if self.runs and self.state is S.CONNECTED and take_run(self, out):
                continue
            packet = self.decoder.pull()
            if packet is None:
                break
            (self._connect if self.state is S.AWAITING_CONNECT else self._packet)(packet, out)
        if self.state is S.CLOSED:
            return
        failure = self.decoder.failure
        if failure is not None:
            self._refused(failure, out)
        elif self.state is S.CONNECTING and self.decoder.held_bytes > self.limits.early_bytes_max:
            self._fail(R.QUOTA_EXCEEDED, f"more than {self.limits.early_bytes_max} bytes before CONNACK", out)

    # ---- the CONNECT -----------------------------------------------------------------------------

    def _refused(self, refusal: Refusal, out: list[fx.MqttEffect]) -> None:
        """The codec's refusal: before the CONNECT was taken, a CONNACK the client can read (if
        its level is known); after, `_fail`."""
        if self.state is not S.AWAITING_CONNECT:
            self._fail(refusal.reason, refusal.detail, out)
            return
        level = refusal.level
        if refusal.reason == R.UNSUPPORTED_PROTOCOL_VERSION and (level is None or level < MQTT_5):
            self._send(p.Connack(False, ConnectReturnCode.UNACCEPTABLE_PROTOCOL_VERSION), out, MQTT_311)
        elif level is not None and level >= MQTT_5:
            self._send(p.Connack(False, refusal.reason, _why(self.version, refusal.detail)), out, MQTT_5)
        self._end(refusal.reason, refusal.detail, False, out)

    def _connect(self, packet: p.Packet, out: list[fx.MqttEffect]) -> None:
        assert isinstance(packet, p.Connect), packet  # the codec refuses anything else first
        self.version = self.outgoing.version = packet.protocol_level
        self.deadlines.cancel(CONNECT_DUE)
        props = packet.properties
        problem = connect_problem(packet, self.limits, self.assigned_client_id)
        if problem is not None:
            self._refuse_connect(problem[0], problem[1], out)
            return
        self.client_id = packet.client_id or self.assigned_client_id
        self.assigned, self.clean_start = not packet.client_id, packet.clean_start
        keep_alive_s = packet.keep_alive_s
        ka_max = self.limits.keep_alive_s_max
        if self.version == MQTT_5:
            self.session_expiry_interval_s = props.session_expiry_interval_s or 0
            window = min(props.receive_maximum or CLIENT_RECEIVE_MAXIMUM, self.limits.deliveries_in_flight_max)
            self.deliveries.window = window
            self.outgoing.packet_bytes_max = props.maximum_packet_size_bytes or PACKET_BYTES_MAX
            self.flow.aliases = OutboundAliases(props.topic_alias_maximum or 0)
            self.outgoing.problem_information = props.request_problem_information != 0
            if ka_max and (keep_alive_s == 0 or keep_alive_s > ka_max):
                keep_alive_s = self.server_keep_alive_s = ka_max
        else:
            self.session_expiry_interval_s = 0 if packet.clean_start else fx.SESSION_NEVER_EXPIRES
            self.receipts.maximum = PACKET_ID_MAX
        self.keep_alive_ns = keep_alive_s * SECOND_NS * self.limits.keep_alive_factor_percent // 100
        self.state = TRANSITIONS.move(self.state, S.CONNECTING)
        out.append(fx.Connected(self.version, self.client_id, self.assigned, packet.clean_start,
                                self.session_expiry_interval_s, keep_alive_s, packet.username, packet.password,
                                packet.will, props))

    def _refuse_connect(self, code: int, detail: str, out: list[fx.MqttEffect], reported: bool = False) -> None:
        """CONNACK with `code`, then the close; `reported`: the broker side was told of the CONNECT
        and not of its refusal (it is then told `Disconnected`)."""
        if self.version == MQTT_5:
            self._send(p.Connack(False, code, _why(self.version, detail)), out)
        else:
            self._send(p.Connack(False, connack_return_code_311(code)), out)
        self._end(code, detail, False, out, reported=reported)

    def accept(self, now: int, session_present: bool = False, properties: Properties = NO_PROPERTIES,
               awaiting_release: list[int] | None = None) -> list[fx.MqttEffect]:
        """The broker side takes the connection: CONNACK 0x00 (with our limits in 5.0, and any
        `properties` of its own), then the packets that waited behind the CONNECT. A resumed
        session's QoS 2 identifiers `awaiting_release` (`unfinished()`) are held again first."""
        out: list[fx.MqttEffect] = []
        if self.state is not S.CONNECTING:
            return out
        self.state = TRANSITIONS.move(self.state, S.CONNECTED)
        self.receipts.restore(awaiting_release or [])
        props = NO_PROPERTIES
        if self.version == MQTT_5:
            props = merged(server_offer(self.limits, self.client_id if self.assigned else None,
                                         self.server_keep_alive_s), properties)
            self.inbound_aliases = InboundAliases(self.limits.topic_alias_maximum)
        self._send(p.Connack(session_present and not self.clean_start, 0, props), out)  # 3.2.2-2
        self.heard_at = now
        if self.keep_alive_ns:
            self.deadlines.set(KEEP_ALIVE_DUE, now + self.keep_alive_ns)
        self._pump(now, out)
        return out

    def refuse(self, code: int, detail: str = "") -> list[fx.MqttEffect]:
        """The broker side refuses the connection (a 5.0 reason code: bad credentials 0x86, not
        authorized 0x87, ...): CONNACK with it (3.1.1's nearest return code), then the close."""
        assert code in REASON_CODES_OF[PacketType.CONNACK] and code >= 0x80, code
        out: list[fx.MqttEffect] = []
        if self.state is S.CONNECTING:
            self._refuse_connect(code, detail, out)
        return out

    # ---- packets of a connected client -----------------------------------------------------------

    def _packet(self, packet: p.Packet, out: list[fx.MqttEffect]) -> None:
        if isinstance(packet, p.Publish):
            self._publish(packet, out)
        elif isinstance(packet, p.Puback):
            out += self.flow.puback(packet)
        elif isinstance(packet, p.Pubrec):
            out += self.flow.pubrec(packet)
        elif isinstance(packet, p.Pubcomp):
            out += self.flow.pubcomp(packet)
        elif isinstance(packet, p.Pubrel):
            self._pubrel(packet, out)
        elif isinstance(packet, p.Subscribe):
            self._subscribe(packet, out)
        elif isinstance(packet, p.Unsubscribe):
            self._unsubscribe(packet, out)
        elif isinstance(packet, p.Pingreq):
            self._send(p.Pingresp(), out)
        elif isinstance(packet, p.Disconnect):
            self._disconnect(packet, out)
        else:  # a second CONNECT, AUTH without an authentication method, a server's packet
            self._fail(R.PROTOCOL_ERROR, f"{packet.type.name} from a client", out)

    def _publish(self, packet: p.Publish, out: list[fx.MqttEffect]) -> None:
        problem = publish_problem(packet, self.limits)
        if problem is not None:
            self._fail(problem[0], problem[1], out)
            return
        props = packet.properties
        topic = self.inbound_aliases.resolve(packet.topic, props.topic_alias)
        if isinstance(topic, ReasonCode):
            self._fail(topic, f"Topic Alias {props.topic_alias} is not one the client may use here", out)
            return
        if props.topic_alias is not None:
            props = replace(props, topic_alias=None)
        pid = packet.packet_id
        if pid is None:
            out.append(fx.Published(topic, packet.payload, 0, packet.retain, props, None))
            return
        arrival = self.receipts.arrive(pid, packet.qos)
        if arrival is Arrival.NEW:
            out.append(fx.Published(topic, packet.payload, packet.qos, packet.retain, props, pid))
        elif arrival is Arrival.RETRY_RELEASED:
            self._send(p.Pubrec(pid), out)  # the PUBREC was lost: again, and nothing logged twice (4.3.3)
        elif arrival is Arrival.IN_USE:
            answer = p.Puback if packet.qos == 1 else p.Pubrec
            self._send(answer(pid, R.PACKET_IDENTIFIER_IN_USE), out)
        elif arrival is Arrival.OVER_WINDOW:
            self._fail(R.RECEIVE_MAXIMUM_EXCEEDED, f"more than {self.receipts.maximum} QoS 1/2 PUBLISHes "
                       "awaiting their answer", out)
        # Arrival.RETRY: awaiting the log; its answer goes once, when the broker side gives it

    def _pubrel(self, packet: p.Pubrel, out: list[fx.MqttEffect]) -> None:
        """PUBREL: `Released`, PUBCOMP on `release_done` (an identifier unknown gets 0x92 then, 4.3.3)."""
        was = self.receipts.released(packet.packet_id)
        if was is None or was is ReceiptState.AWAITING_PUBREL:
            out.append(fx.Released(packet.packet_id, was is not None))
        else:
            self._fail(R.PROTOCOL_ERROR, f"PUBREL {packet.packet_id} before its PUBREC", out)

    def release_done(self, packet_id: int, known: bool = True) -> list[fx.MqttEffect]:
        """The release `Released` reported is durable: PUBCOMP (0x92 if not `known`)."""
        out: list[fx.MqttEffect] = []
        if self.state is S.CONNECTED:
            self._send(p.Pubcomp(packet_id, 0 if known else R.PACKET_IDENTIFIER_NOT_FOUND), out)
        return out

    def _subscribe(self, packet: p.Subscribe, out: list[fx.MqttEffect]) -> None:
        if packet.properties.subscription_identifiers and not self.limits.subscription_identifier_available:
            self._fail(R.SUBSCRIPTION_IDENTIFIERS_NOT_SUPPORTED, "subscription identifiers are not available", out)
        elif packet.packet_id in self.subscribing:
            self._in_use(packet.packet_id, len(packet.topics), p.Suback, out)
        else:
            self.subscribing[packet.packet_id] = len(packet.topics)
            out.append(fx.Subscribed(packet.packet_id, packet.topics, packet.properties))

    def _unsubscribe(self, packet: p.Unsubscribe, out: list[fx.MqttEffect]) -> None:
        if packet.packet_id in self.unsubscribing:
            self._in_use(packet.packet_id, len(packet.filters), p.Unsuback, out)
        else:
            self.unsubscribing[packet.packet_id] = len(packet.filters)
            out.append(fx.Unsubscribed(packet.packet_id, packet.filters, packet.properties))

    def _in_use(self, pid: int, count: int, answer: type[p.Suback] | type[p.Unsuback],
                out: list[fx.MqttEffect]) -> None:
        """A SUBSCRIBE or UNSUBSCRIBE whose identifier awaits its answer still (2.2.1)."""
        if self.version == MQTT_5:
            self._send(answer(pid, (R.PACKET_IDENTIFIER_IN_USE,) * count), out)
        else:
            self._fail(R.PROTOCOL_ERROR, f"packet identifier {pid} is in use", out)

    def _disconnect(self, packet: p.Disconnect, out: list[fx.MqttEffect]) -> None:
        expiry = packet.properties.session_expiry_interval_s
        if expiry is not None:
            if self.session_expiry_interval_s == 0 and expiry:
                self._fail(R.PROTOCOL_ERROR, "a Session Expiry Interval set at DISCONNECT, 0 at CONNECT", out)
                return
            self.session_expiry_interval_s = expiry
        publish_will = packet.reason_code == R.DISCONNECT_WITH_WILL_MESSAGE
        self._end(packet.reason_code, "the client disconnected", publish_will, out)

    # ---- the broker side's answers ---------------------------------------------------------------

    def publish_done(self, packet_id: int, code: int = 0, detail: str = "") -> list[fx.MqttEffect]:
        """The client's PUBLISH `packet_id` is logged (fsynced at its pubend), or refused with `code`:
        PUBACK at QoS 1, PUBREC at QoS 2. A 3.1.1 client cannot be told no: it is disconnected."""
        assert code in REASON_CODES_OF[PacketType.PUBACK], code
        out: list[fx.MqttEffect] = []
        if self.state is not S.CONNECTED:
            return out
        failed = code >= 0x80
        qos = self.receipts.logged(packet_id, failed)
        if qos is None:
            return out
        if not failed and not code:  # the common answer, four bytes in either version (3.4.2.1)
            out.append(fx.Send(bytes((0x40 if qos == 1 else 0x50, 2, packet_id >> 8, packet_id & 0xFF))))
            return out
        if failed and self.version != MQTT_5:
            self._fail(code, detail or "publish refused", out)
            return out
        answer = p.Puback if qos == 1 else p.Pubrec
        self._send(answer(packet_id, code, _why(self.version, detail) if failed else NO_PROPERTIES), out)
        return out

    def suback(self, packet_id: int, codes: tuple[int, ...], detail: str = "") -> list[fx.MqttEffect]:
        """SUBACK: a 5.0 reason code per filter of the SUBSCRIBE (3.1.1 gets its own: 0x80 for any no)."""
        assert all(c in REASON_CODES_OF[PacketType.SUBACK] for c in codes), codes
        out: list[fx.MqttEffect] = []
        if self.state is S.CONNECTED and self.subscribing.get(packet_id) == len(codes):
            del self.subscribing[packet_id]
            if self.version == MQTT_5:
                self._send(p.Suback(packet_id, codes, _why(self.version, detail)), out)
            else:
                self._send(p.Suback(packet_id, tuple(suback_code_311(c) for c in codes)), out)
        return out

    def unsuback(self, packet_id: int, codes: tuple[int, ...]) -> list[fx.MqttEffect]:
        """UNSUBACK: a 5.0 reason code per filter (3.1.1's has none)."""
        assert all(c in REASON_CODES_OF[PacketType.UNSUBACK] for c in codes), codes
        out: list[fx.MqttEffect] = []
        if self.state is S.CONNECTED and self.unsubscribing.get(packet_id) == len(codes):
            del self.unsubscribing[packet_id]
            self._send(p.Unsuback(packet_id, codes if self.version == MQTT_5 else ()), out)
        return out

    def deliver(self, token: int, topic: str, payload: bytes, qos: int, retain: bool = False,
                properties: Properties = NO_PROPERTIES) -> list[fx.MqttEffect]:
        """A message for the client at `qos` (the minimum of the publication's and the
        subscription's): sent within the client's window and Maximum Packet Size, or queued; its
        end is `DeliveryAcked(token)` (QoS 1 and 2) or `DeliveryDropped(token)`."""
        if self.state is not S.CONNECTED:
            return []
        return self.flow.deliver(token, p.Publish(topic, payload, qos, retain, False, None,
                                                   properties if self.version == MQTT_5 else NO_PROPERTIES))

    def deliver_many(self, items: list[tuple[int, p.Publish | Plain]]) -> list[fx.MqttEffect]:
        """`deliver` of each (token, PUBLISH with no packet id yet, or a Plain one), in as few Sends as may be."""
        if self.state is not S.CONNECTED:
            return []
        return self.flow.deliver_many(items if self.version == MQTT_5 else [(t, m if isinstance(m, tuple) or (
            m.properties is NO_PROPERTIES) else replace(m, properties=NO_PROPERTIES)) for t, m in items])

    def resume(self, token: int, packet_id: int, topic: str, payload: bytes, qos: int, retain: bool = False,
               properties: Properties = NO_PROPERTIES, released: bool = False) -> list[fx.MqttEffect]:
        """A persistent session's unfinished delivery (`unfinished()` of its last connection), sent
        again right after `accept`: PUBLISH with DUP under `packet_id`, or PUBREL if `released`."""
        if self.state is not S.CONNECTED:
            return []
        props = properties if self.version == MQTT_5 else NO_PROPERTIES
        return self.flow.resume(token, p.Publish(topic, payload, qos, retain, False, None, props), packet_id, released)

    def unfinished(self) -> tuple[list[Delivery], list[int]]:
        """What a persistent session keeps when the connection ends: the deliveries the client has
        not finished (token, publish, packet id, state) and the QoS 2 packet identifiers whose PUBREL
        is awaited; the next connection gets them through `resume` and `accept(awaiting_release=)`."""
        return self.deliveries.unfinished(), self.receipts.awaiting_release()

    def disconnect(self, code: int, detail: str = "", server_reference: str | None = None) -> list[fx.MqttEffect]:
        """The broker side ends the connection (0x8E session taken over, 0x8B shutting down, 0x9C
        use another server): a 5.0 client is told why; its will is due."""
        assert code in REASON_CODES_OF[PacketType.DISCONNECT], code
        out: list[fx.MqttEffect] = []
        if self.state is S.CONNECTING:  # a CONNACK may not say 0x8B or 0x8E: the nearest it may
            self._refuse_connect(code if code in REASON_CODES_OF[PacketType.CONNACK] else R.SERVER_UNAVAILABLE,
                                 detail, out)
        elif self.state is S.CONNECTED:
            if self.version == MQTT_5:
                props = merged(_why(self.version, detail), Properties(server_reference=server_reference))
                self._send(p.Disconnect(code, props), out)
            self._end(code, detail, True, out)
        elif self.state is S.AWAITING_CONNECT:
            self._end(code, detail, False, out)
        return out

    # ---- sending and ending ----------------------------------------------------------------------

    def _send(self, packet: p.Packet, out: list[fx.MqttEffect], version: int | None = None) -> None:
        if version is not None:
            self.outgoing.version = version
        data = self.outgoing.encode(packet)
        if data is not None:
            out.append(fx.Send(data))

    def _fail(self, code: int, detail: str, out: list[fx.MqttEffect]) -> None:
        """The client broke a rule: a 5.0 client is told (CONNACK if not yet accepted, else
        DISCONNECT); then the close. The will is due."""
        if self.state is S.CONNECTING:
            self._refuse_connect(code, detail, out, reported=True)
            return
        if self.state is S.CONNECTED and self.version == MQTT_5:
            self._send(p.Disconnect(code, _why(self.version, detail)), out)
        self._end(code, detail, True, out)

    def _end(self, code: int, detail: str, publish_will: bool, out: list[fx.MqttEffect], close: bool = True,
             reported: bool = True) -> None:
        """To CLOSED; `Disconnected` if the broker side was told of the CONNECT (`reported`)."""
        was = self.state
        self.state = TRANSITIONS.move(was, S.CLOSED)
        self.decoder.clear()
        self.deadlines.cancel(CONNECT_DUE)
        self.deadlines.cancel(KEEP_ALIVE_DUE)
        if reported and was in (S.CONNECTING, S.CONNECTED):
            out.append(fx.Disconnected(code, detail, publish_will, self.session_expiry_interval_s))
        if close:
            out.append(fx.Close(code, detail))

    def status(self) -> dict[str, object]:
        return {"state": str(self.state), "version": "5.0" if self.version == MQTT_5 else "3.1.1",
                "client_id": self.client_id, "deliveries_in_flight": len(self.deliveries.in_flight),
                "deliveries_queued": len(self.deliveries.queued), "receipts_open": len(self.receipts.open),
                "held_bytes": self.decoder.held_bytes}
