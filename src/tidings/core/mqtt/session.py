"""One MQTT connection at its broker: a client session of tidings' own protocol, spoken on the MQTT
client's behalf (the broker-side half of issue 23; the codec is core/mqtt/codec.py).

Theory of operation. An MQTT client is one more client of the same machines, not a second broker:
this session turns its packets into tidings' client messages (HELLO/AUTH, PUBLISH, SUBSCRIBE,
UNSUBSCRIBE, RENEW), made by the client's own session codec (core/session/client_session.py), which
the gateway (core/mqtt/gateway.py) hands the broker as bytes received on the MQTT connection; and
it turns what the broker answers on that connection (WELCOME, ERROR, ACK, SUBSCRIBED, EVENTS) into
MQTT packets. So the connection table, the guard (identities, access rules, limits, rates), the
intake and its fsync, the Subscription machines and their flow control apply to an MQTT client
exactly as to a native one, and a broker without MQTT connections runs as before.

    MQTT client                      this session                      the broker (core/broker/)
    CONNECT user/password     ->     HELLO (+ AUTH for the CHALLENGE)  ->  guard: identity, instance
                              <-     CONNACK                    <-     WELCOME / ERROR
    PUBLISH qos 1 id 7        ->     PUBLISH seq 12             ->     intake: checks, log, fsync
                              <-     PUBACK 7                   <-     ACK 12 (only once synced)
    SUBSCRIBE id 3 a/+        ->     SUBSCRIBE sub 2 a/+        ->     Subscribers, Subscription
                              <-     SUBACK 3 [1]               <-     SUBSCRIBED 2 (or ERROR: 0x87)
                              <-     PUBLISH qos min(p, s)      <-     EVENTS 2

Its subscriptions are core/mqtt/subscriptions.py's (a persistent session's: core/mqtt/persistent.py).
The mapping of topics is core/mqtt/topics.py (the identity). An event's attributes are the PUBLISH's
user properties, its content type `mqtt.content_type`, and `mqtt.qos` = 0 for a QoS 0 publish (the
delivery QoS is min(publish QoS, granted QoS); a native event counts as QoS 1: it is logged and
acknowledged). Its source is the authenticated identity (or the service `mqtt` for an anonymous
client) and the client id as instance.

States (`MqttState`, moves checked by `TRANSITIONS`): AWAITING_CONNECT -> CONNECTING (the native
handshake under way; packets that follow the CONNECT wait, at most `early_packets_max`) -> OPEN ->
CLOSED. Anything the client gets wrong is answered as its version requires (a 5.0 DISCONNECT with
a reason code, a 3.1.1 close) and counted; never an exception out of the gateway.

Limits: `deliveries_queued_max` QoS 1 deliveries waiting behind the client's Receive Maximum
(past it the connection is closed: quota exceeded), `early_packets_max` packets before CONNACK.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum

from tidings.core.auth.credentials import CredentialError
from tidings.core.auth.names import NameRuleError, check_name
from tidings.core.auth.policy import INSTANCE_CHARS_MAX
from tidings.core.broker.advice import Reason
from tidings.core.effects import Disconnect, Effect, Send
from tidings.core.errors import ProtocolError
from tidings.core.mqtt import bridge, persistent
from tidings.core.mqtt import packets as p
from tidings.core.mqtt.bridge import MQTT_3_1_1, MQTT_5, MqttSettings, PlainPassword, reason
from tidings.core.mqtt.codec import PacketDecoder
from tidings.core.mqtt.encode import encode
from tidings.core.mqtt.properties import NO_PROPERTIES, Properties
from tidings.core.mqtt.reason_codes import ReasonCode, connack_return_code_311
from tidings.core.mqtt.subscriptions import Held, MqttSubscriptions
from tidings.core.session.client_session import ClientSession, PublishEvent
from tidings.core.states import Transitions
from tidings.core.wire import messages

R = ReasonCode


class MqttState(StrEnum):
    AWAITING_CONNECT = "awaiting-connect"
    CONNECTING = "connecting"
    OPEN = "open"
    CLOSED = "closed"


AWAITING_CONNECT, CONNECTING, OPEN, CLOSED = MqttState
TRANSITIONS = Transitions[MqttState]("mqtt session", {
    AWAITING_CONNECT: frozenset({CONNECTING, CLOSED}),
    CONNECTING: frozenset({OPEN, CLOSED}),
    OPEN: frozenset({CLOSED}),
})


class MqttSession:
    def __init__(self, conn: int, settings: MqttSettings, secure: bool, nonce: bytes,
                 held: Callable[[str, str], list[Held]] = lambda owner, prefix: []) -> None:
        """`secure`: TLS or a loopback peer (a password may come in plain); `nonce`: fresh random
        bytes for the native handshake's challenge-response; `held(owner, prefix)`: the broker's
        named durable subscriptions of `owner` whose names begin with `prefix` (a persistent session's)."""
        self.conn = conn
        self.settings = settings
        self.secure = secure or settings.allow_plain_password
        self.nonce = nonce
        self.held = held
        self.persistent = False  # Clean Session 0, or Clean Start 0 with a Session Expiry Interval
        self.state = AWAITING_CONNECT
        self.level = MQTT_3_1_1  # until the CONNECT says
        self.decoder = PacketDecoder(settings.packet_bytes_max)
        self.client_id = ""
        self.identity = ""
        self.keep_alive_ns = 0
        self.native: ClientSession | None = None
        self.early: list[p.Packet] = []  # packets after CONNECT, before CONNACK
        self.assigned_id: str | None = None
        self.publishes: dict[int, tuple[int, int | None]] = {}  # native seq -> (qos, packet id)
        self.batch: list[PublishEvent] = []  # PUBLISHes not yet handed over
        self.batch_ids: list[tuple[int, int | None]] = []
        self.awaiting_rel: set[int] = set()  # QoS 2 packet ids logged, their PUBREL awaited
        self.subscriptions = MqttSubscriptions(settings)  # and the QoS 1 deliveries in flight
        self.packet_bytes_max: int | None = None  # the client's Maximum Packet Size
        self.disconnected_cleanly = False  # a DISCONNECT (but 5.0's 0x04): the will is not published
        self.will: p.Will | None = None
        self.opened = False  # WELCOME came (the will may be published)
        # figures
        self.received = self.sent = self.published = self.dropped = self.refused = 0

    # ---- bytes from the client -------------------------------------------------------------------

    def from_client(self, data: bytes, out: list[Effect], native: list[bytes]) -> None:
        """What the client sent: MQTT answers into `out`, frames for the broker into `native`."""
        if self.state is CLOSED:
            return
        for packet in self.decoder.feed(data):
            self.received += 1
            if self.state is AWAITING_CONNECT:
                self._connect(packet, out, native)
            elif self.state is CONNECTING:
                if len(self.early) >= self.settings.early_packets_max:
                    self._fail(R.QUOTA_EXCEEDED, "too many packets before CONNACK", out)
                else:
                    self.early.append(packet)
            elif self.state is OPEN:
                self._packet(packet, out, native)
            if self.state is CLOSED:
                return
        self._flush(native)
        if self.native is not None:
            native += self.subscriptions.releases(self.native)
        failure = self.decoder.failure
        if failure is not None:  # what came before it was served; then the answer its version requires
            self._fail(failure.reason, failure.detail, out, level=failure.level)

    def _connect(self, packet: p.Packet, out: list[Effect], native: list[bytes]) -> None:
        if not isinstance(packet, p.Connect):
            self._fail(R.PROTOCOL_ERROR, f"expected CONNECT first, got {type(packet).__name__.upper()}", out)
            return
        self.level = self.subscriptions.level = packet.protocol_level
        props = packet.properties
        if props.receive_maximum:
            self.subscriptions.outbound.receive_maximum = props.receive_maximum
        self.persistent = not packet.clean_start and (self.level == MQTT_3_1_1
                                                      or bool(props.session_expiry_interval_s))
        self.packet_bytes_max = props.maximum_packet_size_bytes
        client_id = packet.client_id
        if not client_id:
            if self.level == MQTT_3_1_1 and not packet.clean_start:
                self._refuse_connect(R.CLIENT_IDENTIFIER_NOT_VALID, "an empty client id needs a clean session", out)
                return
            client_id = self.assigned_id = f"tidings-{self.conn}-{self.nonce[:6].hex()}"
        if len(client_id) > INSTANCE_CHARS_MAX:
            self._refuse_connect(R.CLIENT_IDENTIFIER_NOT_VALID,
                                 f"a client id is at most {INSTANCE_CHARS_MAX} characters", out)
            return
        self.client_id = client_id
        self.will = packet.will
        self.keep_alive_ns = packet.keep_alive_s * 1_000_000_000 * self.settings.keep_alive_factor_percent // 100
        try:
            credential = bridge.credential_of(packet, self.secure)
            name = packet.username
            service = bridge.ANONYMOUS_SERVICE if name is None else check_name(name, "a user name")
            self.native = ClientSession(service, client_id, credential, self.nonce)
        except (NameRuleError, CredentialError) as exc:
            self._refuse_connect(R.BAD_USER_NAME_OR_PASSWORD, str(exc), out)
            return
        except PlainPassword as exc:
            self._refuse_connect(R.NOT_AUTHORIZED, str(exc), out)
            return
        self.state = TRANSITIONS.move(self.state, CONNECTING)
        native.append(self.native.hello())

    # ---- packets of an open connection -----------------------------------------------------------

    def _packet(self, packet: p.Packet, out: list[Effect], native: list[bytes]) -> None:
        if isinstance(packet, p.Publish):
            self._publish(packet, out)
            return
        self._flush(native)  # what was published before goes first
        if isinstance(packet, p.Puback):
            for publish in self.subscriptions.puback(packet.packet_id):
                self._send(publish, out)
        elif isinstance(packet, p.Pubrel):
            known = packet.packet_id in self.awaiting_rel
            self.awaiting_rel.discard(packet.packet_id)
            self._send(p.Pubcomp(packet.packet_id, 0 if known else R.PACKET_IDENTIFIER_NOT_FOUND), out)
        elif isinstance(packet, p.Subscribe | p.Unsubscribe):
            assert self.native is not None
            answers, frames = (self.subscriptions.subscribe(self.native, packet) if isinstance(packet, p.Subscribe)
                               else self.subscriptions.unsubscribe(self.native, packet))
            native += frames
            for answer in answers:
                self._send(answer, out)
        elif isinstance(packet, p.Pingreq):
            self._send(p.Pingresp(), out)
        elif isinstance(packet, p.Disconnect):
            self.disconnected_cleanly = packet.reason_code != R.DISCONNECT_WITH_WILL_MESSAGE
            self._close("the client disconnected", out)
        else:  # a second CONNECT, AUTH, PUBREC/PUBCOMP for what we never sent at QoS 2, a server's packet
            self._fail(R.PROTOCOL_ERROR, f"{type(packet).__name__.upper()} is not expected here", out)

    def _publish(self, packet: p.Publish, out: list[Effect]) -> None:
        if packet.retain and self.level == MQTT_5:  # our CONNACK said Retain Available 0 (3.3.1.3)
            self._fail(R.RETAIN_NOT_SUPPORTED, "retained messages are not supported yet", out)
            return
        if packet.properties.topic_alias is not None:  # our CONNACK's Topic Alias Maximum is 0
            self._fail(R.TOPIC_ALIAS_INVALID, "topic aliases are not supported yet", out)
            return
        if packet.qos == 2 and packet.packet_id in self.awaiting_rel:  # a retry: logged once (4.3.3)
            self._send(p.Pubrec(packet.packet_id), out)
            return
        assert self.native is not None
        event = bridge.event_of(self.native, packet)
        if isinstance(event, bridge.Refused):
            self._refuse_publish(packet, event.code, event.reason, out)
            return
        self.published += 1
        self.batch.append(event)
        self.batch_ids.append((packet.qos, packet.packet_id))
        if packet.qos == 2 and packet.packet_id is not None:
            self.awaiting_rel.add(packet.packet_id)

    def _flush(self, native: list[bytes]) -> None:
        """The PUBLISHes read so far as native PUBLISH frames (many events to a frame)."""
        if not self.batch or self.native is None:
            return
        ids = iter(self.batch_ids)
        for seq, count, frame in self.native.publish(self.batch):
            for i in range(count):
                self.publishes[seq + i] = next(ids)
            native.append(frame)
        self.batch, self.batch_ids = [], []

    def _refuse_publish(self, packet: p.Publish, code: ReasonCode, why: str, out: list[Effect]) -> None:
        """A PUBLISH the broker will not take: 5.0 answers a QoS 1/2 one with its reason code (QoS 0
        has no answer); 3.1.1 has no way to say no but closing (3.3.5)."""
        self.refused += 1
        if self.level == MQTT_3_1_1:
            self._close(f"publish refused: {why}", out)
        elif packet.qos == 1 and packet.packet_id is not None:
            self._send(p.Puback(packet.packet_id, code, reason(why)), out)
        elif packet.qos == 2 and packet.packet_id is not None:
            self._send(p.Pubrec(packet.packet_id, code, reason(why)), out)

    # ---- frames from the broker ------------------------------------------------------------------

    def from_broker(self, data: bytes, out: list[Effect], native: list[bytes]) -> None:
        """What the broker sent the client: MQTT packets into `out`, any native answer into `native`."""
        if self.native is None or self.state is CLOSED:
            return
        try:
            msgs = self.native.receive(data)
        except ProtocolError as exc:  # our own broker broke the protocol: a bug, said to the client
            self._fail(R.IMPLEMENTATION_SPECIFIC_ERROR, str(exc), out)
            return
        for msg in msgs:
            if isinstance(msg, messages.Events):
                self._deliver(msg, out)
            elif isinstance(msg, messages.Ack):
                self._acked(msg, out)
            elif isinstance(msg, messages.Subscribed):
                for answer in self.subscriptions.subscribed(msg.sub, msg.checkpoint, None):
                    self._send(answer, out)
            elif isinstance(msg, messages.Silence):
                self.subscriptions.silence(msg)
            elif isinstance(msg, messages.Error):
                self._error(msg, out)
            elif isinstance(msg, messages.Challenge | messages.Welcome):
                self._handshake(msg, out, native)
            elif isinstance(msg, messages.Advice) and msg.reason == Reason.DRAINING.value and self.state is OPEN:
                self.close_for(R.SERVER_SHUTTING_DOWN, "the broker is stopping", out)  # reconnect elsewhere
            if self.state is CLOSED:
                return
        # GAP, END, other ADVICE, HEARTBEAT_REPLY: nothing an MQTT client has a word for
        native += self.subscriptions.releases(self.native)

    def _handshake(self, msg: messages.Challenge | messages.Welcome, out: list[Effect], native: list[bytes]) -> None:
        """The broker's CHALLENGE (answered with the credential's proof) or WELCOME."""
        assert self.native is not None
        if isinstance(msg, messages.Welcome):
            self._welcome(msg, out, native)
            return
        try:
            native.append(self.native.answer(msg))
        except ProtocolError as exc:
            self._refuse_connect(R.BAD_USER_NAME_OR_PASSWORD, str(exc), out)

    def _welcome(self, msg: messages.Welcome, out: list[Effect], native: list[bytes]) -> None:
        self.identity = str(msg.info.get("identity", ""))
        self.state = TRANSITIONS.move(self.state, OPEN)
        self.opened = True
        assert self.native is not None
        held = self.held(self.native.service, persistent.prefix_of(self.client_id))
        if self.persistent:  # what the session held comes again (core/mqtt/persistent.py)
            self.subscriptions.client_id = self.client_id
            native += self.subscriptions.resume(self.native, held)
        else:  # a clean start ends it
            native += self.subscriptions.forget(self.native, held)
        props = NO_PROPERTIES
        if self.level == MQTT_5:
            props = Properties(receive_maximum=self.settings.receive_maximum, retain_available=0,
                               shared_subscription_available=0, subscription_identifier_available=0,
                               topic_alias_maximum=0, session_expiry_interval_s=None if self.persistent else 0,
                               maximum_packet_size_bytes=self.settings.packet_bytes_max,
                               assigned_client_identifier=self.assigned_id)
        self._send(p.Connack(self.persistent and bool(held), 0, props), out)
        early, self.early = self.early, []
        for packet in early:
            self._packet(packet, out, native)
            if self.state is CLOSED:
                return
        self._flush(native)

    def _acked(self, msg: messages.Ack, out: list[Effect]) -> None:
        """The broker's ACK: the events are fsynced at their pubend; QoS 1 gets its PUBACK, QoS 2 its PUBREC."""
        for i, tick in enumerate(msg.ticks):
            entry = self.publishes.pop(msg.seq + i, None)
            if entry is None or tick is None:
                continue
            qos, packet_id = entry
            if packet_id is None:
                continue
            self._send(p.Puback(packet_id) if qos == 1 else p.Pubrec(packet_id), out)

    def _error(self, msg: messages.Error, out: list[Effect]) -> None:
        if self.state is CONNECTING:
            self._refuse_connect(bridge.CONNECT_REFUSALS.get(msg.code, R.UNSPECIFIED_ERROR), msg.message, out)
            return
        seqs = bridge.seqs_of(msg.context.get("seqs"))
        subs = msg.context.get("subs", [msg.context.get("sub")])
        subs = [s for s in subs if type(s) is int] if isinstance(subs, list) else []
        if seqs:
            code = bridge.PUBLISH_REFUSALS.get(msg.code, R.UNSPECIFIED_ERROR)
            for seq in seqs:
                entry = self.publishes.pop(seq, None)
                if entry is not None:
                    self.awaiting_rel.discard(entry[1] or 0)
                    self._refuse_publish(p.Publish("", qos=entry[0], packet_id=entry[1]), code, msg.message, out)
        elif subs:
            for sub in subs:
                code = bridge.SUBSCRIBE_REFUSALS.get(msg.code, R.UNSPECIFIED_ERROR)
                for answer in self.subscriptions.subscribed(sub, None, code):
                    self._send(answer, out)
        elif self.level == MQTT_5:  # about the connection (it is closing if fatal): the reason, said once
            self.refused += 1
            self._send(p.Disconnect(R.UNSPECIFIED_ERROR, reason(msg.message)), out)

    def _deliver(self, msg: messages.Events, out: list[Effect]) -> None:
        packets = self.subscriptions.deliver(msg)
        if packets is None:
            self._fail(R.QUOTA_EXCEEDED, f"more than {self.settings.deliveries_queued_max} QoS 1 deliveries wait "
                       "for the client's PUBACKs", out)
            return
        for packet in packets:
            self._send(packet, out)

    # ---- answers and endings ---------------------------------------------------------------------

    def _send(self, packet: p.Packet, out: list[Effect]) -> None:
        data = encode(packet, self.level)
        if self.packet_bytes_max is not None and len(data) > self.packet_bytes_max:
            self.dropped += 1  # over the client's Maximum Packet Size: discarded, as if delivered (3.1.2.11.4)
            if isinstance(packet, p.Publish) and packet.packet_id is not None:
                for more in self.subscriptions.puback(packet.packet_id):
                    self._send(more, out)
            return
        self.sent += 1
        out.append(Send(self.conn, data))

    def _refuse_connect(self, code: ReasonCode, why: str, out: list[Effect]) -> None:
        self.refused += 1
        if self.level == MQTT_5:
            self._send(p.Connack(False, code, reason(why)), out)
        else:
            self._send(p.Connack(False, connack_return_code_311(code)), out)
        self._close(why, out)

    def _fail(self, code: ReasonCode, why: str, out: list[Effect], level: int | None = None) -> None:
        """A refusal of the connection: CONNACK before it is open, else a 5.0 DISCONNECT; then the close."""
        if self.state is not OPEN:
            if level is not None:
                self.level = level
            if self.state is AWAITING_CONNECT and level is None:
                self._close(why, out)  # a first packet that is not a CONNECT: nothing to answer (4.8)
            else:
                self._refuse_connect(code, why, out)
            return
        self.refused += 1
        if self.level == MQTT_5:
            self._send(p.Disconnect(code, reason(why)), out)
        self._close(why, out)

    def _close(self, reason: str, out: list[Effect]) -> None:
        if self.state is not CLOSED:
            self.state = TRANSITIONS.move(self.state, CLOSED)
            out.append(Disconnect(self.conn, f"mqtt: {reason}"))

    def close_for(self, code: ReasonCode, why: str, out: list[Effect]) -> None:
        """The gateway ends the connection (keep-alive, takeover): a 5.0 client is told why."""
        if self.state is OPEN and self.level == MQTT_5:
            self._send(p.Disconnect(code, reason(why)), out)
        self._close(why, out)

    def will_frame(self) -> bytes | None:
        """The connection ended: its will, as the PUBLISH frame the broker logs and delivers (the same
        checks and rules as any PUBLISH of the client's), unless it said DISCONNECT; None without one."""
        will, native = self.will, self.native
        if will is None or native is None or not self.opened or self.disconnected_cleanly:
            return None
        self.will = None
        event = bridge.event_of(native, p.Publish(will.topic, will.payload, will.qos, properties=will.properties))
        return None if isinstance(event, bridge.Refused) else native.publish([event])[0][2]

    def status(self) -> dict[str, object]:
        return {"conn": self.conn, "client_id": self.client_id, "identity": self.identity, "state": str(self.state),
                "version": "5.0" if self.level == MQTT_5 else "3.1.1", "subscriptions": len(self.subscriptions.subs),
                "persistent": self.persistent, "inflight": len(self.subscriptions.outbound.inflight),
                "queued": len(self.subscriptions.outbound.queued), "received": self.received,
                "sent": self.sent}
