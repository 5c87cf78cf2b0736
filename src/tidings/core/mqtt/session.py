"""One MQTT connection at its broker: a client session of tidings' own protocol, spoken on the MQTT
client's behalf (the broker side of issue 23).

Theory of operation. An MQTT client is one more client of the same machines, not a second broker.
The MQTT protocol itself (keep-alive, packet identifiers, QoS flows and windows both ways, topic
aliases, Maximum Packet Size, what each version answers) is the protocol machine's
(core/mqtt/protocol.py `MqttConnection`); this session acts on what it reports (`Connected`,
`Published`, `Subscribed`, `Unsubscribed`, `DeliveryAcked`, `Disconnected`) by tidings' own client
messages (HELLO/AUTH, PUBLISH, SUBSCRIBE, UNSUBSCRIBE, RENEW, RELEASE), made by the client session
codec every native client uses (core/session/client_session.py), which the gateway
(core/mqtt/gateway.py) hands the broker as bytes received on the MQTT connection; and it answers the
machine with what the broker says on that connection (WELCOME, ERROR, ACK, SUBSCRIBED, EVENTS). So the
connection table, the guard (identities, access rules, limits, rates), the intake and its fsync, the
Subscription machines and their flow control serve an MQTT client exactly as a native one.

    MQTT client        protocol machine          this session                  the broker
    CONNECT       ->   Connected           ->    HELLO (+ AUTH)          ->    guard
    CONNACK       <-   accept / refuse     <-    WELCOME / ERROR         <-
    PUBLISH 1 #7  ->   Published(7)        ->    PUBLISH seq 12          ->    intake: log, fsync
    PUBACK 7      <-   publish_done(7)     <-    ACK 12 (once synced)    <-
    SUBSCRIBE #3  ->   Subscribed(3)       ->    SUBSCRIBE sub 2         ->    Subscribers
    SUBACK 3      <-   suback(3, codes)    <-    SUBSCRIBED 2 / ERROR    <-
    PUBLISH       <-   deliver(token)      <-    EVENTS 2                <-    fan-out, trees

Its subscriptions are core/mqtt/subscriptions.py's (a persistent session's: core/mqtt/persistent.py),
the event of a PUBLISH and back core/mqtt/bridge.py's, topics core/mqtt/topics.py's (the identity).

States (`MqttState`, moves checked by `TRANSITIONS`): AWAITING_CONNECT -> CONNECTING (the native
handshake under way) -> OPEN -> CLOSED (the machine said `Disconnected`, or closed before a CONNECT).
Anything the client gets wrong is the machine's to answer; never an exception out of the gateway.
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
from tidings.core.event import AttrValue
from tidings.core.mqtt import bridge, persistent
from tidings.core.mqtt import effects as fx
from tidings.core.mqtt import packets as p
from tidings.core.mqtt.bridge import MQTT_5, MqttSettings, PlainPassword
from tidings.core.mqtt.derivations import Derivations
from tidings.core.mqtt.exactly_once import ConnectionKeys, QosTwoKeys
from tidings.core.mqtt.inflight_ids import DurableIds, SessionIds, opened, resume_saved
from tidings.core.mqtt.limits import ProtocolLimits
from tidings.core.mqtt.password import Answer, PasswordCheck, Refuse, Step
from tidings.core.mqtt.properties import NO_PROPERTIES, Properties
from tidings.core.mqtt.protocol import MqttConnection
from tidings.core.mqtt.reason_codes import ReasonCode
from tidings.core.mqtt.resumption import Carried, Resumed, resend
from tidings.core.mqtt.retained import RetainedFeed, RetainedSent, due, owed
from tidings.core.mqtt.subscriptions import Held, MqttSubscriptions, Tag, numbered
from tidings.core.session.client_session import ClientSession, PublishEvent
from tidings.core.share.hub import ShareHub
from tidings.core.share.members import ShareRef
from tidings.core.share.session import SharedOf
from tidings.core.states import Transitions
from tidings.core.wire import messages

R = ReasonCode
CHANNELS_KNOWN_MAX = 4096  # topics a session remembers as valid channels


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


def limits_of(settings: MqttSettings, shared: bool = False) -> ProtocolLimits:
    """The protocol machine's limits: ours, and whether shared subscriptions are offered (core/share/)."""
    return ProtocolLimits(packet_bytes_max=settings.packet_bytes_max, receive_maximum=settings.receive_maximum,
                          deliveries_queued_max=settings.deliveries_queued_max, shared_subscription_available=shared,
                          keep_alive_factor_percent=settings.keep_alive_factor_percent)


class MqttSession:
    def __init__(self, conn: int, now: int, settings: MqttSettings, secure: bool, nonce: bytes,
                 held: Callable[[str, str], list[Held]] = lambda owner, prefix: [],
                 retained: RetainedFeed | None = None, derivations: Derivations | None = None,
                 source: str = "", shares: ShareHub | None = None, *, qos2_keys: QosTwoKeys,
                 carried: Callable[[MqttSession, list[Effect]], list[Carried]] = lambda session, out: [],
                 ids: DurableIds | None = None) -> None:
        """`secure`: TLS or a loopback peer (a password may come in plain); `nonce`: fresh random
        bytes for the native handshake's challenge-response; `held(owner, prefix)`: the broker's
        named durable subscriptions of `owner` whose names begin with `prefix` (a persistent session's);
        `retained`: the broker's retained messages (core/mqtt/retained.py; None: Retain Available 0);
        `derivations`: where a password's scrypt is asked for, off the loop and bounded per `source`
        (the peer's address; core/mqtt/derivations.py; None: derived here, for tests); `shares`: the
        broker's shared subscriptions (core/share/hub.py; None: refused 0x9E); `qos2_keys`: the
        persistent sessions' QoS 2 keys (core/mqtt/exactly_once.py);
        `carried(session, out)`: at WELCOME, what its last connection left in flight (resumption.py,
        takeover.py); `ids` their packet ids through a kill -9 (core/mqtt/inflight_ids.py)."""
        self.conn = conn
        self.now = now
        self.wall_us = 0  # the broker's clock, microseconds since the epoch, as the gateway last knew it (0: unknown)
        self.settings = settings
        self.secure = secure or settings.allow_plain_password
        self.nonce = nonce
        self.held = held
        self.retained = retained
        self.retained_due: dict[int, tuple[str, ...]] = {}  # SUBSCRIBE packet id -> filters owed their retained
        self.machine = MqttConnection(now, limits_of(settings, shares is not None), f"tidings-{conn}-{nonce[:6].hex()}",
                                      runs=True)
        self.shared = SharedOf(shares)  # its $share/ subscriptions (core/share/session.py)
        self.armed: int | None = None  # the machine's deadline as the gateway's timer has it (core/mqtt/gateway.py)
        self.state = AWAITING_CONNECT
        self.level = 4
        self.client_id = ""
        self.identity = ""
        self.clean_start = True
        self.persistent = False  # a Session Expiry Interval (3.1.1: Clean Session 0)
        self.native: ClientSession | None = None
        self.password = PasswordCheck(conn, source, derivations)  # (core/mqtt/password.py)
        self.publishes: dict[int, int] = {}  # native seq -> packet id (QoS 1 and 2)
        self.batch: list[PublishEvent] = []  # PUBLISHes not yet handed to the broker
        self.batch_ids: list[int | None] = []
        self.channels: set[str] = set()  # topics whose PUBLISH made an event: valid channels (CHANNELS_KNOWN_MAX)
        self.subscriptions = MqttSubscriptions()
        self.tokens: dict[int, Tag] = {}  # deliveries in the machine's hands, by token
        self.next_token = 0
        self.will: p.Will | None = None
        self.qos2_keys = qos2_keys
        self.qos2: ConnectionKeys | None = None  # this connection's QoS 2 keys, from WELCOME on
        self.carried, self.resumed = carried, Resumed()  # deliveries of its last connection, resent
        self.durable_ids = ids
        self.ids: SessionIds | None = None  # a persistent session's (core/mqtt/inflight_ids.py)
        self.will_due = False  # the machine said the will is due
        self.welcomed = False  # the broker admitted the client (its will may be published)
        self.received = self.sent = self.published = self.dropped = self.refused = 0  # figures

    # ---- the client's side -----------------------------------------------------------------------

    def from_client(self, now: int, data: bytes, out: list[Effect], native: list[bytes]) -> None:
        """Bytes from the client: MQTT answers into `out`, frames for the broker into `native`."""
        self.now = now
        self.received += 1
        self._apply(self.machine.receive(now, data), out, native)
        self._flush(native)
        if self.native is not None:  # PUBACKs moved a persistent subscription on
            native += self.subscriptions.releases(self.native)

    def timed_out(self, now: int, out: list[Effect]) -> None:
        self.now = now
        self._apply(self.machine.handle_timeout(now), out, [])

    def close_for(self, code: ReasonCode, why: str, out: list[Effect]) -> None:
        """The broker side ends the connection (takeover, drain): a 5.0 client is told why."""
        self._apply(self.machine.disconnect(code, why), out, [])

    def lost(self) -> None:
        """The runtime lost the connection: the machine says whether the will is due."""
        self._apply(self.machine.connection_lost(), [], [])

    def next_deadline(self) -> int | None:
        return self.machine.next_deadline()

    def _apply(self, effects: list[fx.MqttEffect], out: list[Effect], native: list[bytes]) -> None:
        """The protocol machine's effects, in order (an answer may bring more: the packets that
        waited behind the CONNECT come with `accept`'s). Packets sent one after another leave in one
        Send (a run's PUBACKs: one write)."""
        sending: list[bytes] = []
        for eff in effects:
            if isinstance(eff, fx.Send):
                self.sent += 1
                sending.append(eff.data)
                continue
            if sending:
                out.append(Send(self.conn, b"".join(sending)))
                sending = []
            if isinstance(eff, fx.PublishedRun):
                self._publish_run(eff.items, out, native)
            elif isinstance(eff, fx.Published):
                self._publish(eff.topic, eff.payload, eff.qos, eff.retain, eff.properties, eff.packet_id, out, native)
            elif isinstance(eff, fx.Connected):
                self._connect(eff, out, native)
            elif isinstance(eff, fx.Subscribed | fx.Unsubscribed):
                self._subscribe(eff, out, native)
            elif isinstance(eff, fx.DeliveryAcked | fx.DeliveryDropped):
                self._delivered(eff, out)
            elif isinstance(eff, fx.Released):  # PUBCOMP once the release is saved (core/mqtt/exactly_once.py)
                assert self.qos2 is not None  # (a PUBREL comes after the CONNACK, so after WELCOME)
                self._apply(self.qos2.pubrel(eff.packet_id, eff.known, self.machine, self.now), out, native)
            else:
                self._ended(eff, out)
        if sending:
            out.append(Send(self.conn, b"".join(sending)))

    def _ended(self, eff: fx.Close | fx.Disconnected, out: list[Effect]) -> None:
        """Close: the connection's end; Disconnected: how it ended, whether the will is due."""
        if isinstance(eff, fx.Close):
            out.append(Disconnect(self.conn, f"mqtt: {eff.detail}"))
            if self.state is not CLOSED:
                self.state = TRANSITIONS.move(self.state, CLOSED)
            return
        self.will_due = eff.publish_will
        if eff.reason >= R.UNSPECIFIED_ERROR:
            self.refused += 1

    def _connect(self, eff: fx.Connected, out: list[Effect], native: list[bytes]) -> None:
        self.state = TRANSITIONS.move(self.state, CONNECTING)
        self.level = eff.protocol_level
        self.client_id = eff.client_id
        self.clean_start = eff.clean_start
        self.persistent = eff.session_expiry_interval_s > 0
        self.will = eff.will
        if len(eff.client_id) > INSTANCE_CHARS_MAX:
            self._refuse(R.CLIENT_IDENTIFIER_NOT_VALID, f"a client id is at most {INSTANCE_CHARS_MAX} characters",
                         out)
            return
        try:
            credential = bridge.credential_of(eff.username, eff.password, self.secure)
            name = eff.username
            service = bridge.ANONYMOUS_SERVICE if name is None else check_name(name, "a user name")
            self.native = ClientSession(service, eff.client_id, credential, self.nonce)
            self.password.credential = credential
        except (NameRuleError, CredentialError) as exc:
            self._refuse(R.BAD_USER_NAME_OR_PASSWORD, str(exc), out)
            return
        except PlainPassword as exc:
            self._refuse(R.NOT_AUTHORIZED, str(exc), out)
            return
        native.append(self.native.hello())

    def _refuse(self, code: ReasonCode, why: str, out: list[Effect]) -> None:
        self.refused += 1
        self._apply(self.machine.refuse(code, why), out, [])

    def _publish(self, topic: str, payload: bytes, qos: int, retain: bool, properties: Properties,
                 packet_id: int | None, out: list[Effect], native: list[bytes]) -> None:
        if retain and self.level == MQTT_5 and not self._retain_available():  # Retain Available 0 (3.3.1.3)
            self._apply(self.machine.disconnect(R.RETAIN_NOT_SUPPORTED, "retained messages are not available"),
                        out, native)
            return
        assert self.native is not None
        event = bridge.event_of(self.native, p.Publish(topic, payload, qos, retain and self._retain_available(),
                                                       properties=properties))
        if isinstance(event, bridge.Refused):
            self.refused += 1
            if packet_id is not None:
                self._apply(self.machine.publish_done(packet_id, event.code, event.reason), out, native)
            return
        if qos == 2 and self.qos2 is not None:  # a persistent session's: logged once through a kill -9
            event = self.qos2.event(event, qos, packet_id, self.wall_us)
        if event[0] == topic and len(self.channels) < CHANNELS_KNOWN_MAX:
            self.channels.add(topic)  # a valid channel: the next plain PUBLISH to it skips the checks
        self.published += 1
        self.batch.append(event)
        self.batch_ids.append(packet_id)

    def _publish_run(self, items: list[fx.PlainPublish], out: list[Effect], native: list[bytes]) -> None:
        """Plain PUBLISHes (core/mqtt/publish_run.py): each one's event as `_publish` makes it (no attributes
        but `mqtt.qos` = 0 at QoS 0), straight, to a topic known a valid channel, within the event size."""
        assert self.native is not None
        size_max = self.native.event_bytes_max
        channels, batch, ids, qos_key = self.channels, self.batch, self.batch_ids, bridge.QOS
        straight = 0
        for topic, payload, qos, retain, packet_id in items:
            if retain or topic not in channels or len(payload) > size_max:
                self._publish(topic, payload, qos, retain, NO_PROPERTIES, packet_id, out, native)
                continue
            straight += 1
            attributes: dict[str, AttrValue] = {qos_key: 0} if qos == 0 else {}
            batch.append((topic, attributes, payload))
            ids.append(packet_id)
        self.published += straight

    def _flush(self, native: list[bytes]) -> None:
        """The PUBLISHes read so far as native PUBLISH frames (many events to a frame)."""
        if not self.batch or self.native is None:
            return
        frames = self.native.publish(self.batch)  # (their seqs follow one another from the first's)
        if any(self.batch_ids):  # (a packet identifier is never 0; QoS 0 alone has none)
            seq = frames[0][0]
            for i, packet_id in enumerate(self.batch_ids):
                if packet_id is not None:
                    self.publishes[seq + i] = packet_id
        native += [frame for _, _, frame in frames]
        self.batch, self.batch_ids = [], []

    def _subscribe(self, eff: fx.Subscribed | fx.Unsubscribed, out: list[Effect], native: list[bytes]) -> None:
        assert self.native is not None
        self._flush(native)  # what was published before goes first
        if isinstance(eff, fx.Unsubscribed):
            codes, frames = self.subscriptions.unsubscribe(self.native, eff.filters)
            native += frames
            codes = self.shared.unsubscribe(self.conn, self.identity, eff.filters, codes)
            self._apply(self.machine.unsuback(eff.packet_id, codes), out, native)
            return
        if self.shared.subscribe(self.conn, self.client_id, self.identity, eff.packet_id, eff.topics):
            self.close_for(R.PROTOCOL_ERROR, "No Local on a shared subscription (3.8.3.1)", out)
            return
        if self._retain_available():
            self.retained_due[eff.packet_id] = tuple(t.filter for t in eff.topics
                                                     if due(t, t.filter in self.subscriptions.subs))
        done, frames = self.subscriptions.subscribe(self.native, eff.packet_id, eff.topics, eff.properties)
        native += frames
        if done is not None:
            self._suback(eff.packet_id, done, out, native)

    def _retain_available(self) -> bool:
        return self.retained is not None and self.retained.available

    def _suback(self, packet_id: int, codes: tuple[int, ...], out: list[Effect], native: list[bytes]) -> None:
        """SUBACK, then the retained messages its granted filters are owed (core/mqtt/retained.py)."""
        self._apply(self.machine.suback(packet_id, self.shared.codes(packet_id, codes)), out, native)
        filters = self.retained_due.pop(packet_id, ())
        if self.retained is None:
            return
        for entry, events in owed(self.retained.store, filters, self.subscriptions.subs):
            sent = []
            for event in events:
                if self.state is CLOSED:
                    return
                publish = bridge.publish_of(event, entry.qos, MQTT_5, self.wall_us)
                if publish is not None:  # (else expired)
                    self._send_publish(publish, None, True, out)
                    sent.append(event)
            entry.retained_sent = RetainedSent.after(sent, self.wall_us, entry.retained_sent)  # (their live copies)

    def _delivered(self, eff: fx.DeliveryAcked | fx.DeliveryDropped, out: list[Effect]) -> None:
        tag = self.tokens.pop(eff.token, None)
        if tag is None:  # a delivery resent from the last connection, ended before its event came again
            self.resumed.ended(eff.token)
        if isinstance(eff, fx.DeliveryDropped) and eff.reason_code == R.QUOTA_EXCEEDED:
            self.close_for(R.QUOTA_EXCEEDED, f"more than {self.settings.deliveries_queued_max} deliveries wait for "
                           "the client", out)  # a persistent session gets them again when it comes back
            return
        if isinstance(eff, fx.DeliveryDropped):
            self.dropped += 1  # over the client's Maximum Packet Size: discarded, as if delivered (3.1.2-25)
        if tag is not None:
            tag[0].acked(tag[1])
        self.shared.delivered(eff.token)

    # ---- the broker's side -----------------------------------------------------------------------

    def from_broker(self, data: bytes, out: list[Effect], native: list[bytes]) -> None:
        """What the broker sent the client: MQTT packets into `out`, any native answer into `native`."""
        if self.native is None or self.state is CLOSED:
            return
        try:
            msgs = self.native.receive(data, acks=bool(self.publishes))  # (an ACK of QoS 0 alone: unread)
        except ProtocolError as exc:  # our own broker broke the protocol: a bug, said to the client
            self.close_for(R.IMPLEMENTATION_SPECIFIC_ERROR, str(exc), out)
            return
        for msg in msgs:
            if isinstance(msg, messages.Events):
                self._deliver(msg, out)
            elif isinstance(msg, messages.Ack):
                self._acked(msg, out, native)
            elif isinstance(msg, messages.Subscribed | messages.Error):
                self._answered(msg, out, native)
            elif isinstance(msg, messages.Silence):
                self.subscriptions.silence(msg)
            elif isinstance(msg, messages.Challenge | messages.Welcome):
                self._handshake(msg, out, native)
            elif isinstance(msg, messages.Advice) and msg.reason == Reason.DRAINING.value:
                self.close_for(R.SERVER_SHUTTING_DOWN, "the broker is stopping", out)  # reconnect elsewhere
            if self.state is CLOSED:
                return
        # GAP, END, other ADVICE, HEARTBEAT_REPLY: nothing an MQTT client has a word for
        native += self.subscriptions.releases(self.native)

    def _handshake(self, msg: messages.Challenge | messages.Welcome, out: list[Effect], native: list[bytes]) -> None:
        """The broker's CHALLENGE (answered with the credential's proof) or WELCOME (CONNACK)."""
        assert self.native is not None
        if isinstance(msg, messages.Challenge):
            self._step(self.password.challenged(msg, self.native), out, native)
            return
        self.password.welcomed()
        self.identity = str(msg.info.get("identity", ""))
        self.state = TRANSITIONS.move(self.state, OPEN)
        self.welcomed = True
        carried = self.carried(self, out)  # (taken, before its subscriptions resume: a clean start drops it)
        held = self.held(self.native.service, persistent.prefix_of(self.client_id))
        if self.persistent:
            self.subscriptions.client_id = self.client_id
        if self.persistent and not self.clean_start:  # what the session held comes again
            native += self.subscriptions.resume(self.native, held)
        else:  # a clean start ends it
            native += self.subscriptions.forget(self.native, held)
        offer = Properties(retain_available=None if self._retain_available() else 0,
                           session_expiry_interval_s=None if self.persistent else 0)
        session_present = self.persistent and not self.clean_start and (
            bool(held) or self.qos2_keys.expiries.known((self.native.service, self.client_id)))
        self.ids = opened(self, carried)  # (its saved packet ids: a clean start drops them)
        self.qos2 = ConnectionKeys(self.qos2_keys, self.native.service, self.client_id, self.persistent,
                                   self.clean_start, self.wall_us, (session_present, offer))
        self.state_saved(out, native)  # the CONNACK, unless a clean start's forgetting waits for its save
        if self.persistent and not self.clean_start:  # what the last connection left in flight, again (4.4)
            effects, self.resumed, self.next_token = resend(self.machine, carried, self.next_token)
            self._apply(effects, out, native)
        self._flush(native)

    def state_saved(self, out: list[Effect], native: list[bytes]) -> None:
        """The QoS 2 keys were saved (core/mqtt/exactly_once.py): the CONNACK and PUBCOMPs waiting go."""
        if self.qos2 is not None:
            self._apply(self.qos2.due(self.machine, self.now), out, native)
            self._flush(native)

    def derived(self, ticket: int, salted: bytes | None, out: list[Effect], native: list[bytes]) -> None:
        """The runtime derived the key `ticket` asked for (None: it could not)."""
        if self.state is CONNECTING and self.native is not None:
            self._step(self.password.derived(ticket, salted, self.native), out, native)

    def _step(self, step: Step, out: list[Effect], native: list[bytes]) -> None:
        if isinstance(step, Answer):
            native.append(step.frame)
        elif isinstance(step, Refuse):
            self._refuse(step.code, step.why, out)

    def _acked(self, msg: messages.Ack, out: list[Effect], native: list[bytes]) -> None:
        """The broker's ACK: the events are fsynced at their pubend; QoS 1 gets its PUBACK, QoS 2 its PUBREC."""
        if not self.publishes:  # (QoS 0 alone: nothing answers the ACK)
            return
        effects: list[fx.MqttEffect] = []  # (the machine's answers to the run, applied once)
        for i, tick in enumerate(msg.ticks):
            packet_id = self.publishes.pop(msg.seq + i, None)
            if packet_id is not None and tick is not None:
                effects += self.machine.publish_done(packet_id)
        self._apply(effects, out, native)

    def _answered(self, msg: messages.Subscribed | messages.Error, out: list[Effect], native: list[bytes]) -> None:
        """SUBSCRIBED, or an ERROR: a refused handshake, events or subscriptions."""
        if isinstance(msg, messages.Subscribed):
            answers = self.subscriptions.subscribed(msg.sub, msg.checkpoint, None)
        elif self.state is CONNECTING:
            self._refuse(bridge.CONNECT_REFUSALS.get(msg.code, R.UNSPECIFIED_ERROR), msg.message, out)
            return
        else:
            answers = []
            for seq in bridge.seqs_of(msg.context.get("seqs")):
                packet_id = self.publishes.pop(seq, None)
                if packet_id is not None:
                    code = bridge.PUBLISH_REFUSALS.get(msg.code, R.UNSPECIFIED_ERROR)
                    self.refused += 1
                    self._apply(self.machine.publish_done(packet_id, code, msg.message), out, native)
            subs = msg.context.get("subs", [msg.context.get("sub")])
            for sub in subs if isinstance(subs, list) else []:
                if type(sub) is int:
                    code = bridge.SUBSCRIBE_REFUSALS.get(msg.code, R.UNSPECIFIED_ERROR)
                    answers += self.subscriptions.subscribed(sub, None, code)
        for packet_id, codes in answers:
            self._suback(packet_id, codes, out, native)

    def _deliver(self, msg: messages.Events, out: list[Effect]) -> None:
        """EVENTS as PUBLISHes: one call on the machine for the run, its packets in one Send."""
        source = None if self.native is None else (self.native.service, self.client_id)
        items, self.next_token = numbered(self.subscriptions.deliver(msg, self.level, source, self.wall_us),
                                          self.resumed, self.tokens, self.next_token)
        if items and self.ids is not None and self.ids.pending:  # (after a restart: under their saved ids)
            items = resume_saved(self, items, out)
        if items:
            self._apply(self.machine.deliver_many(items), out, [])

    def _token(self, qos: int, tag: Tag) -> int:
        """A new delivery's token; a QoS 1/2 delivery's tag is kept under it until its end."""
        self.next_token += 1
        if tag is not None and qos:
            self.tokens[self.next_token] = tag
        return self.next_token

    def _send_publish(self, publish: p.Publish, tag: Tag, retain: bool, out: list[Effect]) -> None:
        self._apply(self.machine.deliver(self._token(publish.qos, tag), publish.topic, publish.payload, publish.qos,
                                         retain, properties=publish.properties), out, [])

    def deliver_shared(self, ref: ShareRef, record: list[object], out: list[Effect]) -> None:
        """One event of a shared subscription's group, for this member (core/share/session.py)."""
        publish = self.shared.publish(ref, record, self.level, self.wall_us, self.state is OPEN)
        if publish is not None:
            token = self._token(publish.qos, None)
            self.shared.sent(token, ref, publish.qos)
            self._apply(self.machine.deliver(token, publish.topic, publish.payload, publish.qos, False,
                                             properties=publish.properties), out, [])


