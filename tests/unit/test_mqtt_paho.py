"""Interoperability with paho-mqtt 2.2 (the reference Python client), without sockets: the packets
paho encodes (3.1.1 and 5.0) decode to what paho meant, and the packets we encode for a client
are read by paho's own reader as we meant them (its callbacks see the codes and properties)."""

from __future__ import annotations

from typing import Any

import pytest

paho = pytest.importorskip("paho.mqtt.client")
from paho.mqtt.packettypes import PacketTypes  # noqa: E402
from paho.mqtt.properties import Properties as PahoProperties  # noqa: E402
from paho.mqtt.reasoncodes import ReasonCode as PahoReasonCode  # noqa: E402
from paho.mqtt.subscribeoptions import SubscribeOptions  # noqa: E402

from tidings.core.mqtt.codec import PacketDecoder  # noqa: E402
from tidings.core.mqtt.encode import encode  # noqa: E402
from tidings.core.mqtt.packet_type import MQTT_5, MQTT_311  # noqa: E402
from tidings.core.mqtt.packets import (  # noqa: E402
    Connack,
    Connect,
    Disconnect,
    Pingreq,
    Puback,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
    Suback,
    Subscribe,
    TopicFilter,
    Unsuback,
    Unsubscribe,
    Will,
)
from tidings.core.mqtt.properties import Properties  # noqa: E402
from tidings.core.mqtt.reason_codes import ReasonCode  # noqa: E402


class FakeSocket:
    """What paho's reader and writer touch of a socket: `recv` from what we queued."""

    def __init__(self) -> None:
        self.inbound = bytearray()

    def recv(self, n: int) -> bytes:
        if not self.inbound:
            raise BlockingIOError
        out = bytes(self.inbound[:n])
        del self.inbound[:n]
        return out

    def close(self) -> None:
        pass


class Capture(paho.Client):
    """A paho client whose packets are kept instead of written to a socket."""

    def __init__(self, protocol: int) -> None:
        super().__init__(paho.CallbackAPIVersion.VERSION2, client_id="dev-1", protocol=protocol)
        self.sent: list[bytes] = []
        self.fake = FakeSocket()
        self._sock = self.fake  # type: ignore[assignment]

    def _packet_queue(self, command: int, packet: bytes | bytearray, mid: int, qos: int, info: Any = None) -> Any:
        self.sent.append(bytes(packet))
        return paho.MQTTErrorCode.MQTT_ERR_SUCCESS

    def receive(self, data: bytes, refused: bool = False) -> None:
        """Hand paho `data` as if read from its socket, and let it handle every packet (`refused`:
        paho reports the last one, a refusal, as a protocol error after its callback)."""
        self.fake.inbound += data
        while self.fake.inbound:
            rc = self._packet_read()
            assert rc == (paho.MQTTErrorCode.MQTT_ERR_PROTOCOL if refused and not self.fake.inbound
                          else paho.MQTTErrorCode.MQTT_ERR_SUCCESS)


def decoded(client: Capture, version: int | None) -> list[Any]:
    decoder = PacketDecoder(1 << 20, version)
    out = decoder.feed(b"".join(client.sent))
    assert decoder.failure is None
    client.sent.clear()
    return out


def test_paho_3_1_1_packets_decode_as_paho_meant_them():
    c = Capture(paho.MQTTv311)
    c.username_pw_set("user", "pw")
    c.will_set("w/t", b"bye", 1, True)
    c._send_connect(30)
    c._send_publish(5, b"a/b", b"hi", 1, False, False)
    c._send_publish(0, b"a/c", b"", 0, True, False)
    c._send_subscribe(False, [(b"a/#", 2), (b"+/x", 0)])
    c._send_unsubscribe(False, [b"a/#"])
    c._send_puback(5)
    c._send_pubrec(6)
    c._send_pubrel(6)
    c._send_pubcomp(6)
    c._send_pingreq()
    c._send_disconnect()
    assert decoded(c, None) == [
        Connect(MQTT_311, "dev-1", True, 30, "user", b"pw", Will("w/t", b"bye", 1, True)),
        Publish("a/b", b"hi", 1, False, False, 5),
        Publish("a/c", b"", 0, True),
        Subscribe(1, (TopicFilter("a/#", 2), TopicFilter("+/x", 0))),
        Unsubscribe(2, ("a/#",)),
        Puback(5), Pubrec(6), Pubrel(6), Pubcomp(6), Pingreq(), Disconnect(),
    ]


def test_paho_5_0_packets_decode_with_their_properties():
    c = Capture(paho.MQTTv5)
    c.username_pw_set("user", "pw")
    will = PahoProperties(PacketTypes.WILLMESSAGE)
    will.WillDelayInterval = 5
    c.will_set("w/t", b"bye", 1, True, properties=will)
    connect = PahoProperties(PacketTypes.CONNECT)
    connect.SessionExpiryInterval = 300
    connect.ReceiveMaximum = 20
    connect.UserProperty = ("a", "b")
    c._connect_properties = connect
    c._send_connect(30)
    publish = PahoProperties(PacketTypes.PUBLISH)
    publish.ContentType = "text/plain"
    publish.UserProperty = ("k", "v")
    publish.MessageExpiryInterval = 60
    publish.CorrelationData = b"\x01\x02"
    publish.ResponseTopic = "re/ply"
    c._send_publish(5, b"a/b", b"hi", 2, False, True, None, publish)
    sub = PahoProperties(PacketTypes.SUBSCRIBE)
    sub.SubscriptionIdentifier = 300
    c._send_subscribe(False, [(b"a/#", SubscribeOptions(qos=2, noLocal=True, retainAsPublished=True,
                                                         retainHandling=1))], sub)
    c._send_unsubscribe(False, [b"a/#", b"b"])
    c._send_disconnect(PahoReasonCode(PacketTypes.DISCONNECT, "Disconnect with will message"))
    assert decoded(c, None) == [
        Connect(MQTT_5, "dev-1", True, 30, "user", b"pw",
                Will("w/t", b"bye", 1, True, Properties(will_delay_interval_s=5)),
                Properties(session_expiry_interval_s=300, receive_maximum=20, user_properties=(("a", "b"),))),
        Publish("a/b", b"hi", 2, False, True, 5,
                Properties(message_expiry_interval_s=60, content_type="text/plain", response_topic="re/ply",
                           correlation_data=b"\x01\x02", user_properties=(("k", "v"),))),
        Subscribe(1, (TopicFilter("a/#", 2, True, True, 1),), Properties(subscription_identifiers=(300,))),
        Unsubscribe(2, ("a/#", "b")),
        Disconnect(ReasonCode.DISCONNECT_WITH_WILL_MESSAGE),
    ]


@pytest.mark.parametrize("protocol", [paho.MQTTv311, paho.MQTTv5], ids=["3.1.1", "5.0"])
def test_paho_reads_what_we_send_a_client(protocol):
    version = MQTT_5 if protocol == paho.MQTTv5 else MQTT_311
    c = Capture(protocol)
    seen: dict[str, Any] = {"messages": []}

    def on_connect(client: Any, userdata: Any, flags: Any, reason: Any, props: Any) -> None:
        seen["connect"] = (flags.session_present, reason.value, props)

    def on_subscribe(client: Any, userdata: Any, mid: int, codes: Any, props: Any) -> None:
        seen["subscribe"] = (mid, [code.value for code in codes])

    def on_message(client: Any, userdata: Any, message: Any) -> None:
        seen["messages"].append((message.topic, message.payload, message.qos, message.retain, message.properties))

    c.on_connect = on_connect
    c.on_subscribe = on_subscribe
    c.on_message = on_message
    c._send_connect(30)
    if version == MQTT_5:
        c._send_subscribe(False, [(b"a/#", SubscribeOptions(qos=2)), (b"b/#", SubscribeOptions(qos=1))])
    else:
        c._send_subscribe(False, [(b"a/#", 2), (b"b/#", 1)])
    c.sent.clear()
    connack = Properties(assigned_client_identifier="auto-7", topic_alias_maximum=4, receive_maximum=10)
    props = Properties(content_type="text/plain", user_properties=(("k", "v"),), subscription_identifiers=(3,))
    c.receive(b"".join(encode(p, version) for p in (
        Connack(False, 0, connack if version == MQTT_5 else Properties()),
        Suback(1, (2, ReasonCode.NOT_AUTHORIZED if version == MQTT_5 else 0x80)),
        Publish("a/b", b"one", 1, False, False, 11, props if version == MQTT_5 else Properties()),
        Publish("a/c", b"two", 2, True, False, 12),
        Pubrel(12),
        Publish("a/d", b"three", 0),
    )))
    assert seen["connect"][:2] == (False, 0)
    if version == MQTT_5:
        assert seen["connect"][2].AssignedClientIdentifier == "auto-7"
        assert seen["connect"][2].TopicAliasMaximum == 4
    assert seen["subscribe"] == (1, [2, 0x87 if version == MQTT_5 else 0x80])
    topics = [(m[0], m[1], m[2], m[3]) for m in seen["messages"]]
    assert topics == [("a/b", b"one", 1, False), ("a/c", b"two", 2, True), ("a/d", b"three", 0, False)]
    if version == MQTT_5:
        first = seen["messages"][0][4]
        assert first.ContentType == "text/plain"
        assert first.UserProperty == [("k", "v")]
        assert first.SubscriptionIdentifier == [3]
    # paho's answers read back: PUBACK for 11, PUBREC then PUBCOMP for 12
    assert decoded(c, version) == [Puback(11), Pubrec(12), Pubcomp(12)]


def test_paho_reads_our_5_0_refusals_with_their_reason_strings():
    c = Capture(paho.MQTTv5)
    got: dict[str, Any] = {}

    def on_connect(client: Any, userdata: Any, flags: Any, reason: Any, props: Any) -> None:
        got["connect"] = (reason.value, props.ReasonString)

    c.on_connect = on_connect
    c._send_connect(30)
    c.receive(encode(Connack(False, ReasonCode.BAD_USER_NAME_OR_PASSWORD, Properties(reason_string="no")), MQTT_5),
              refused=True)
    assert got["connect"] == (0x86, "no")


def test_unsuback_of_both_versions_reads_in_paho():
    for protocol, version, packet in ((paho.MQTTv311, MQTT_311, Unsuback(2)),
                                      (paho.MQTTv5, MQTT_5, Unsuback(2, (0, 0x11)))):
        c = Capture(protocol)
        got: list[Any] = []
        c.on_unsubscribe = lambda client, userdata, mid, codes, props, got=got: got.append((mid, codes))
        c._send_connect(30)
        c.receive(encode(Connack(False, 0), version) + encode(packet, version))
        assert got and got[0][0] == 2


@pytest.mark.parametrize("protocol", [paho.MQTTv311, paho.MQTTv5], ids=["3.1.1", "5.0"])
def test_paho_against_the_protocol_machine(protocol):
    """paho's client against MqttConnection with a toy broker side (exact topics): CONNECT, SUBSCRIBE,
    PUBLISH at QoS 0, 1 and 2 delivered back at the granted QoS through every acknowledgement."""
    from tidings.core.mqtt import effects as fx
    from tidings.core.mqtt.protocol import MqttConnection

    c = Capture(protocol)
    c._sock = c.fake  # type: ignore[assignment]
    m = MqttConnection(0, assigned_client_id="auto")
    got: list[tuple[str, bytes, int]] = []
    acked: list[int] = []
    granted: dict[str, int] = {}
    tokens = iter(range(1000))
    c.on_message = lambda client, userdata, msg: got.append((msg.topic, msg.payload, msg.qos))
    c.on_publish = lambda client, userdata, mid, reason, props: acked.append(mid)

    def pump() -> None:
        """Carry bytes both ways until neither side has anything to say (at most 50 rounds)."""
        for _ in range(50):
            sent, c.sent = b"".join(c.sent), []
            if not sent:
                return
            for e in m.receive(0, sent):
                broker_side(e)

    def broker_side(e: fx.MqttEffect) -> None:
        effects: list[fx.MqttEffect] = []
        if isinstance(e, fx.Send):
            c.receive(e.data)
        elif isinstance(e, fx.Connected):
            effects = m.accept(0)
        elif isinstance(e, fx.Released):
            effects = m.release_done(e.packet_id, e.known)
        elif isinstance(e, fx.Subscribed):
            granted.update((t.filter, t.qos) for t in e.topics)
            effects = m.suback(e.packet_id, tuple(t.qos for t in e.topics))
        elif isinstance(e, fx.Published):
            if e.packet_id is not None:
                effects = m.publish_done(e.packet_id)
            if e.topic in granted:
                effects += m.deliver(next(tokens), e.topic, e.payload, min(e.qos, granted[e.topic]))
        for more in effects:
            broker_side(more)

    c._send_connect(30)
    if protocol == paho.MQTTv5:
        c._send_subscribe(False, [(b"q2", SubscribeOptions(qos=2)), (b"q1", SubscribeOptions(qos=1))])
    else:
        c._send_subscribe(False, [(b"q2", 2), (b"q1", 1)])
    pump()
    for topic, qos in (("q2", 2), ("q2", 1), ("q1", 2), ("q2", 0)):
        info = c.publish(topic, f"{topic}@{qos}".encode(), qos)
        pump()
        assert qos == 0 or info.is_published()  # (paho marks QoS 0 published as its socket takes it)
    assert got == [("q2", b"q2@2", 2), ("q2", b"q2@1", 1), ("q1", b"q1@2", 1), ("q2", b"q2@0", 0)]
    assert len(acked) == 3  # paho saw each of its QoS 1 and 2 publishes through (PUBACK, PUBCOMP)
    assert m.deliveries.in_flight == {} and m.receipts.open == {}


def test_our_property_table_is_paho_s():
    """Every 5.0 property: the same id, data type and packets as paho's own table (a second reading
    of the specification's 2.2.2.2)."""
    from paho.mqtt.properties import Properties as PahoTable

    from tidings.core.mqtt.properties import SPEC, WILL_PLACE, PropertyType

    table = PahoTable(PacketTypes.CONNECT)
    names = {"Byte": PropertyType.BYTE, "Two Byte Integer": PropertyType.TWO_BYTE_INTEGER,
             "Four Byte Integer": PropertyType.FOUR_BYTE_INTEGER,
             "Variable Byte Integer": PropertyType.VARIABLE_BYTE_INTEGER, "Binary Data": PropertyType.BINARY_DATA,
             "UTF-8 Encoded String": PropertyType.UTF8_STRING, "UTF-8 String Pair": PropertyType.UTF8_STRING_PAIR}
    theirs = {pid: (names[table.types[kind]], {WILL_PLACE if t == PacketTypes.WILLMESSAGE else t for t in packets})
              for pid, (kind, packets) in table.properties.items()}
    ours = {pid: (spec.type, set(spec.places)) for pid, spec in SPEC.items()}
    assert ours == theirs


def test_our_reason_codes_are_paho_s_per_packet():
    """Every reason code and the packets it may be in, as paho lists them (section 2.4), but one
    paho leaves out: CONNACK's 0x99, "the Will Payload does not match the specified Payload Format
    Indicator" (3.2.2.2's table has it)."""
    from tidings.core.mqtt.packet_type import PacketType
    from tidings.core.mqtt.reason_codes import REASON_CODES_OF

    theirs: dict[int, set[int]] = {}
    for code, meanings in PahoReasonCode.names.items():
        for packets in meanings.values():
            for packet in packets:
                theirs.setdefault(packet, set()).add(code)
    theirs[PacketType.CONNACK].add(0x99)
    ours = {int(t): {int(c) for c in codes} for t, codes in REASON_CODES_OF.items()}
    assert set(ours) == set(theirs) == {int(t) for t in PacketType} - {1, 3, 8, 10, 12, 13}
    for packet, codes in ours.items():
        assert codes == theirs[packet], PacketType(packet).name
