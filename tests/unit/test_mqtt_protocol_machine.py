"""A Hypothesis rule-based test of the MQTT protocol machine (core/mqtt/protocol.py): a client that
publishes, retries, releases, acknowledges (rightly and wrongly), subscribes, pings, sends garbage
and goes quiet, against a broker side that logs, refuses, answers and delivers at every QoS. After
every step: no exception, every byte we send decodes in the client's version within its Maximum
Packet Size, a PUBLISH is reported once while open, deliveries stay inside the client's Receive
Maximum and end once, the decoder's hold is bounded, nothing follows the close."""

from __future__ import annotations

from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from tests.conftest import SOAK
from tidings.core.mqtt import effects as fx
from tidings.core.mqtt.codec import FIXED_HEADER_BYTES_MAX, PacketDecoder
from tidings.core.mqtt.encode import encode
from tidings.core.mqtt.limits import ProtocolLimits
from tidings.core.mqtt.packet_type import MQTT_5, MQTT_311
from tidings.core.mqtt.packets import (
    Connect,
    Disconnect,
    Packet,
    Pingreq,
    Puback,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
    Subscribe,
    TopicFilter,
)
from tidings.core.mqtt.properties import Properties
from tidings.core.mqtt.protocol import ConnectionState, MqttConnection
from tidings.core.mqtt.reason_codes import ReasonCode
from tidings.core.units import SECOND_NS

R = ReasonCode
T0 = 10 * SECOND_NS
LIMITS = ProtocolLimits(packet_bytes_max=300, receive_maximum=6, topic_alias_maximum=2, deliveries_in_flight_max=4,
                        deliveries_queued_max=4, early_bytes_max=400)
pids = st.integers(1, 7)  # one more than our Receive Maximum
topics = st.sampled_from(("a", "a/b", "c/d/e", "long/topic/name"))
ENDINGS_AFTER = 20  # client steps before garbage, a DISCONNECT or a lost connection may end a run


class ConnectionMachine(RuleBasedStateMachine):
    @initialize(version=st.sampled_from((MQTT_311, MQTT_5)), window=st.integers(1, 3),
                client_max=st.integers(30, 400), aliases=st.integers(0, 2), keep_alive_s=st.sampled_from((0, 60, 5)))
    def connect(self, version, window, client_max, aliases, keep_alive_s):
        self.version = version
        self.window = window if version == MQTT_5 else LIMITS.deliveries_in_flight_max
        self.client_max = client_max if version == MQTT_5 else 1 << 30
        self.now = T0
        self.m = MqttConnection(T0, LIMITS, "auto")
        self.reader = PacketDecoder(1 << 24, version)
        self.open_inbound: dict[int, int] = {}  # packet id -> QoS, reported and not yet ended
        self.logged_qos2: set[int] = set()  # PUBREC sent, PUBREL awaited
        self.reported_awaiting: list[int] = []  # reported, publish_done not yet called
        self.outbound: dict[int, Publish] = {}  # packet id -> our PUBLISH the client holds
        self.released: set[int] = set()  # our PUBRELs awaiting PUBCOMP
        self.tokens_open: set[int] = set()
        self.tokens_ended: set[int] = set()
        self.next_token = 0
        self.subscribes: dict[int, int] = {}
        self.closed = self.disconnected = False
        self.steps = 0
        self.aliases: set[int] = set()  # aliases the client set
        self.our_aliases: dict[int, str] = {}  # aliases we set, as the client holds them
        props = Properties(receive_maximum=window, maximum_packet_size_bytes=client_max, topic_alias_maximum=aliases,
                           session_expiry_interval_s=30) if version == MQTT_5 else Properties()
        self.apply(self.m.receive(T0, encode(Connect(version, "dev", True, keep_alive_s, properties=props),
                                             version)))
        self.apply(self.m.accept(T0))

    # ---- effects, checked as they come --------------------------------------------------------------

    def apply(self, effects: list[fx.MqttEffect]) -> None:
        for e in effects:
            assert not self.closed, f"{e} after the close"
            if isinstance(e, fx.Send):
                self.read(e.data)
            elif isinstance(e, fx.Published) and e.packet_id is not None:
                assert e.packet_id not in self.open_inbound, f"PUBLISH {e.packet_id} reported twice"
                self.open_inbound[e.packet_id] = e.qos
                self.reported_awaiting.append(e.packet_id)
            elif isinstance(e, fx.Subscribed):
                self.subscribes[e.packet_id] = len(e.topics)
            elif isinstance(e, fx.DeliveryAcked | fx.DeliveryDropped):
                event(f"a delivery ended: {type(e).__name__}")
                assert e.token in self.tokens_open, f"delivery {e.token} ended twice or never began"
                self.tokens_open.discard(e.token)
                self.tokens_ended.add(e.token)
            elif isinstance(e, fx.Released):  # the broker side's release is durable at once here
                self.apply(self.m.release_done(e.packet_id, e.known))
            elif isinstance(e, fx.Disconnected):
                assert not self.disconnected
                self.disconnected = True
            elif isinstance(e, fx.Close):
                event(f"closed after {min(self.steps // 10 * 10, 40)}+ client steps")
                self.closed = True

    def read(self, data: bytes) -> None:
        for packet in self.reader.feed(data):
            size = len(encode(packet, self.version))
            assert size <= self.client_max, f"{packet} is {size} bytes, over the client's {self.client_max}"
            if isinstance(packet, Publish):
                self.check_topic(packet)
            if isinstance(packet, Publish) and packet.packet_id is not None:
                assert packet.packet_id not in self.outbound
                self.outbound[packet.packet_id] = packet
                assert len(self.outbound) <= self.window
            elif isinstance(packet, Puback):
                self.open_inbound.pop(packet.packet_id, None)
            elif isinstance(packet, Pubrec):
                if packet.reason_code >= 0x80:
                    self.open_inbound.pop(packet.packet_id, None)
                else:
                    self.logged_qos2.add(packet.packet_id)
            elif isinstance(packet, Pubcomp):
                event("a QoS 2 PUBLISH from the client completed")
                if self.open_inbound.get(packet.packet_id) == 2 and packet.reason_code == 0:
                    del self.open_inbound[packet.packet_id]
                    self.logged_qos2.discard(packet.packet_id)
            elif isinstance(packet, Pubrel):
                self.released.add(packet.packet_id)
            elif isinstance(packet, Disconnect):
                assert self.version == MQTT_5
        assert self.reader.failure is None

    def check_topic(self, publish: Publish) -> None:
        """Resolve our Topic Alias as the client does (3.3.2.3.4): it names the topic delivered."""
        alias = publish.properties.topic_alias
        topic = publish.topic
        if alias is not None:
            assert 1 <= alias <= self.m.flow.aliases.maximum
            if topic:
                self.our_aliases[alias] = topic
            else:
                event("a delivery went by its topic alias")
                topic = self.our_aliases[alias]
        assert topic.encode() == publish.payload.split(b"|")[0], (topic, publish.payload)

    def client(self, *packets: Packet, data: bytes = b"") -> None:
        self.steps += 1
        self.apply(self.m.receive(self.now, b"".join(encode(p, self.version) for p in packets) + data))

    # ---- the client ----------------------------------------------------------------------------------

    @rule(qos=st.integers(0, 2), pid=pids, topic=topics, payload=st.binary(max_size=80), dup=st.booleans(),
          alias=st.sampled_from((None, 1, 2)), empty=st.booleans())
    def publish(self, qos, pid, topic, payload, dup, alias, empty):
        props = Properties(topic_alias=alias) if self.version == MQTT_5 and alias else Properties()
        name = "" if alias in self.aliases and empty and self.version == MQTT_5 else topic
        if props.topic_alias and name:
            self.aliases.add(alias)
        self.client(Publish(name, payload, qos, False, dup and qos > 0, pid if qos else None, props))

    @precondition(lambda self: self.logged_qos2)
    @rule(data=st.data())
    def pubrel(self, data):
        self.client(Pubrel(data.draw(st.sampled_from(sorted(self.logged_qos2)))))

    @precondition(lambda self: self.steps > ENDINGS_AFTER)
    @rule(pid=pids)
    def stray_pubrel(self, pid):  # unknown (PUBCOMP 0x92) or before its PUBREC (a protocol error)
        self.client(Pubrel(pid))

    @precondition(lambda self: self.outbound)
    @rule(data=st.data(), wrong=st.booleans())
    def acknowledge(self, data, wrong):
        pid = data.draw(st.sampled_from(sorted(self.outbound)))
        qos = self.outbound[pid].qos
        if wrong:  # the answer of the other QoS: ignored or 0x92, never a crash
            self.client(Pubrec(pid) if qos == 1 else Puback(pid))
        elif qos == 1:
            del self.outbound[pid]
            self.client(Puback(pid))
        elif pid in self.released:
            del self.outbound[pid]
            self.released.discard(pid)
            self.client(Pubcomp(pid))
        else:
            failed = data.draw(st.booleans()) and self.version == MQTT_5
            if failed:
                del self.outbound[pid]
            self.client(Pubrec(pid, R.QUOTA_EXCEEDED if failed else 0))

    @rule(pid=pids, n=st.integers(1, 3))
    def subscribe(self, pid, n):
        self.client(Subscribe(pid, tuple(TopicFilter(f"t/{i}", i % 3) for i in range(n))))

    @rule()
    def ping(self):
        self.client(Pingreq())

    @precondition(lambda self: self.steps > ENDINGS_AFTER)
    @rule(garbage=st.binary(min_size=1, max_size=12))
    def garbage(self, garbage):
        self.client(data=garbage)

    @precondition(lambda self: self.steps > ENDINGS_AFTER)
    @rule(reason=st.sampled_from((0, R.DISCONNECT_WITH_WILL_MESSAGE)))
    def disconnect(self, reason):
        self.client(Disconnect(reason if self.version == MQTT_5 else 0))

    @rule(seconds=st.integers(0, 4))
    def time_passes(self, seconds):
        self.now += seconds * SECOND_NS
        deadline = self.m.next_deadline()
        if deadline is not None and deadline <= self.now:
            self.apply(self.m.handle_timeout(self.now))

    @precondition(lambda self: self.steps > ENDINGS_AFTER)
    @rule()
    def lost(self):
        effects = self.m.connection_lost()
        assert not any(isinstance(e, fx.Send | fx.Close) for e in effects)
        self.apply(effects)
        self.closed = True

    # ---- the broker side -----------------------------------------------------------------------------

    @precondition(lambda self: self.reported_awaiting)
    @rule(data=st.data(), refuse=st.booleans())
    def publish_done(self, data, refuse):
        pid = data.draw(st.sampled_from(self.reported_awaiting))
        self.reported_awaiting.remove(pid)
        self.apply(self.m.publish_done(pid, R.NOT_AUTHORIZED if refuse else 0, "no" if refuse else ""))

    @precondition(lambda self: self.subscribes)
    @rule(data=st.data())
    def suback(self, data):
        pid = data.draw(st.sampled_from(sorted(self.subscribes)))
        n = self.subscribes.pop(pid)
        self.apply(self.m.suback(pid, tuple(data.draw(st.sampled_from((0, 1, 2, 0x87))) for _ in range(n))))

    @rule(qos=st.integers(0, 2), topic=topics, payload=st.binary(max_size=120))
    def deliver(self, qos, topic, payload):
        token = self.next_token
        self.next_token += 1
        payload = topic.encode() + b"|" + payload  # the topic it was delivered on, for check_topic
        effects = self.m.deliver(token, topic, payload, qos, False, Properties(content_type="t"))
        if qos and self.m.state is ConnectionState.CONNECTED:
            self.tokens_open.add(token)
        elif any(isinstance(e, fx.DeliveryDropped) for e in effects):
            self.tokens_open.add(token)  # a QoS 0 delivery too large is reported dropped
        self.apply(effects)

    @precondition(lambda self: self.steps > ENDINGS_AFTER)
    @rule(code=st.sampled_from((R.SESSION_TAKEN_OVER, R.SERVER_SHUTTING_DOWN)))
    def takeover(self, code):
        self.apply(self.m.disconnect(code, "bye"))

    # ---- invariants -----------------------------------------------------------------------------------

    @invariant()
    def bounded(self):
        m = self.m
        assert m.decoder.held_bytes < LIMITS.packet_bytes_max + FIXED_HEADER_BYTES_MAX
        assert len(m.deliveries.in_flight) <= self.window
        assert len(m.deliveries.queued) <= LIMITS.deliveries_queued_max
        if m.deliveries.queued:
            event("deliveries waited behind the window")
        if self.version == MQTT_5:
            assert len(m.receipts.open) <= LIMITS.receive_maximum
        assert (m.state is ConnectionState.CLOSED) == self.closed
        if self.closed:
            assert m.next_deadline() is None


ConnectionMachine.TestCase.settings = settings(max_examples=1000 if SOAK else 150, stateful_step_count=60,
                                               deadline=None)
test_the_protocol_machine = ConnectionMachine.TestCase
