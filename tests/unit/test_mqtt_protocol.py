"""The MQTT protocol machine (core/mqtt/protocol.py): the CONNECT and its refusals, keep-alive,
QoS 1 and 2 both ways with their windows, Maximum Packet Size, topic aliases, SUBSCRIBE and
UNSUBSCRIBE, endings; a client's bytes in, typed effects out."""

from __future__ import annotations

import pytest

from tidings.core.mqtt import effects as fx
from tidings.core.mqtt.codec import PacketDecoder
from tidings.core.mqtt.encode import encode
from tidings.core.mqtt.limits import ProtocolLimits
from tidings.core.mqtt.packet_type import MQTT_5, MQTT_311
from tidings.core.mqtt.packets import (
    Auth,
    Connack,
    Connect,
    Disconnect,
    Packet,
    Pingreq,
    Pingresp,
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
from tidings.core.mqtt.properties import Properties
from tidings.core.mqtt.protocol import ConnectionState, MqttConnection
from tidings.core.mqtt.reason_codes import ReasonCode
from tidings.core.units import SECOND_NS

R = ReasonCode
T0 = 1_000 * SECOND_NS


class Wire:
    """A client of the machine: packets in, and what the machine sends read back as packets."""

    def __init__(self, version: int, limits: ProtocolLimits | None = None, assigned: str = "auto-1") -> None:
        self.version = version
        self.m = MqttConnection(T0, limits, assigned)
        self.now = T0

    def send(self, *packets: Packet, data: bytes = b"") -> list[fx.MqttEffect]:
        return self.m.receive(self.now, b"".join(encode(p, self.version) for p in packets) + data)

    def connect(self, *, accept: bool = True, **kw: object) -> list[fx.MqttEffect]:
        connect = Connect(self.version, str(kw.pop("client_id", "dev-1")), **kw)  # type: ignore[arg-type]
        effects = self.send(connect)
        assert [type(e) for e in effects] == [fx.Connected]
        if accept:
            effects += self.m.accept(self.now)
        return effects

    def packets(self, effects: list[fx.MqttEffect]) -> list[Packet]:
        decoder = PacketDecoder(1 << 24, self.version)
        out = decoder.feed(b"".join(e.data for e in effects if isinstance(e, fx.Send)))
        assert decoder.failure is None
        return out


def facts(effects: list[fx.MqttEffect]) -> list[fx.MqttEffect]:
    return [e for e in effects if not isinstance(e, fx.Send)]


# ---- the CONNECT -----------------------------------------------------------------------------------

def test_anything_but_connect_first_closes_without_an_answer():
    w = Wire(MQTT_5)
    effects = w.m.receive(T0, encode(Pingreq(), MQTT_5))
    assert [type(e) for e in effects] == [fx.Close]
    assert w.m.state is ConnectionState.CLOSED
    assert w.m.receive(T0, encode(Pingreq(), MQTT_5)) == []


@pytest.mark.parametrize("version", [MQTT_311, MQTT_5])
def test_a_connect_is_reported_then_accepted(version):
    w = Wire(version)
    will = Will("w/t", b"bye", 1, True)
    effects = w.connect(client_id="dev-9", clean_start=False, keep_alive_s=20, username="u", password=b"p",
                        will=will, accept=False)
    connected = effects[0]
    assert isinstance(connected, fx.Connected)
    assert (connected.protocol_level, connected.client_id, connected.assigned, connected.clean_start) == (
        version, "dev-9", False, False)
    assert (connected.keep_alive_s, connected.username, connected.password, connected.will) == (20, "u", b"p", will)
    assert connected.session_expiry_interval_s == (fx.SESSION_NEVER_EXPIRES if version == MQTT_311 else 0)
    assert w.m.state is ConnectionState.CONNECTING
    ack = w.packets(w.m.accept(T0, session_present=True))
    assert len(ack) == 1 and isinstance(ack[0], Connack)
    assert (ack[0].session_present, ack[0].reason_code) == (True, 0)
    if version == MQTT_311:
        assert encode(ack[0], MQTT_311) == b"\x20\x02\x01\x00"
    else:
        offer = ack[0].properties
        assert (offer.receive_maximum, offer.topic_alias_maximum, offer.maximum_packet_size_bytes) == (
            64, 32, ProtocolLimits().packet_bytes_max)
    assert w.m.state is ConnectionState.CONNECTED


def test_an_empty_client_id_with_clean_start_gets_the_assigned_one_in_5_0():
    w = Wire(MQTT_5, assigned="tidings-7")
    connected = w.connect(client_id="", accept=False)[0]
    assert isinstance(connected, fx.Connected) and (connected.client_id, connected.assigned) == ("tidings-7", True)
    ack = w.packets(w.m.accept(T0))[0]
    assert isinstance(ack, Connack) and ack.properties.assigned_client_identifier == "tidings-7"


@pytest.mark.parametrize(("version", "code"), [(MQTT_311, 0x02), (MQTT_5, R.CLIENT_IDENTIFIER_NOT_VALID)])
def test_an_empty_client_id_without_clean_start_is_refused(version, code):
    w = Wire(version)
    effects = w.send(Connect(version, "", clean_start=False))
    assert [p.reason_code for p in w.packets(effects)] == [code]  # type: ignore[attr-defined]
    assert [type(e) for e in facts(effects)] == [fx.Close]


def connect_bytes(name: bytes, level: int) -> bytes:
    body = len(name).to_bytes(2, "big") + name + bytes((level, 0x02, 0, 60, 0, 1)) + b"c"
    return b"\x10" + bytes((len(body),)) + body


@pytest.mark.parametrize(("name", "level", "answer"), [
    (b"MQIsdp", 3, b"\x20\x02\x00\x01"),  # MQTT 3.1: 3.1.1's CONNACK, unacceptable protocol version
    (b"MQTT", 3, b"\x20\x02\x00\x01"),
    (b"MQTT", 6, b"\x20\x03\x00\x84\x00"),  # above 5: 5.0's CONNACK, 0x84
])
def test_an_unsupported_level_gets_the_connack_its_client_can_read(name, level, answer):
    m = MqttConnection(T0)
    effects = m.receive(T0, connect_bytes(name, level))
    assert effects[0] == fx.Send(answer)
    assert isinstance(effects[1], fx.Close) and len(effects) == 2


def test_a_malformed_5_0_connect_gets_a_connack_with_0x81():
    w = Wire(MQTT_5)
    wire = bytearray(encode(Connect(MQTT_5, "c"), MQTT_5))
    wire[9] |= 0x01  # the reserved connect flag
    effects = w.m.receive(T0, bytes(wire))
    ack = w.packets(effects)
    assert isinstance(ack[0], Connack) and ack[0].reason_code == R.MALFORMED_PACKET
    assert isinstance(effects[-1], fx.Close)


def test_enhanced_authentication_is_refused_at_connect():
    w = Wire(MQTT_5)
    effects = w.send(Connect(MQTT_5, "c", properties=Properties(authentication_method="SCRAM-SHA-1")))
    assert [p.reason_code for p in w.packets(effects)] == [R.BAD_AUTHENTICATION_METHOD]  # type: ignore[attr-defined]


def test_the_broker_side_refuses_with_the_version_s_code():
    for version, code in ((MQTT_311, 0x04), (MQTT_5, R.BAD_USER_NAME_OR_PASSWORD)):
        w = Wire(version)
        w.connect(accept=False)
        effects = w.m.refuse(R.BAD_USER_NAME_OR_PASSWORD, "no")
        assert [p.reason_code for p in w.packets(effects)] == [code]  # type: ignore[attr-defined]
        assert [type(e) for e in facts(effects)] == [fx.Close]


def test_no_connect_in_time_closes():
    m = MqttConnection(T0, ProtocolLimits(connect_timeout_ns=5 * SECOND_NS))
    assert m.next_deadline() == T0 + 5 * SECOND_NS
    assert m.handle_timeout(T0 + 4 * SECOND_NS) == []
    effects = m.handle_timeout(T0 + 5 * SECOND_NS)
    assert [type(e) for e in effects] == [fx.Close]


def test_packets_behind_the_connect_wait_for_the_accept():
    w = Wire(MQTT_5)
    effects = w.send(Connect(MQTT_5, "c"), Publish("a/b", b"x"), Pingreq())
    assert [type(e) for e in effects] == [fx.Connected]
    effects = w.m.accept(T0)
    assert [type(p) for p in w.packets(effects)] == [Connack, Pingresp]
    assert facts(effects) == [fx.Published("a/b", b"x", 0, False, Properties(), None)]


def test_too_much_behind_a_connect_is_refused():
    w = Wire(MQTT_5, ProtocolLimits(early_bytes_max=100))
    effects = w.send(Connect(MQTT_5, "c"), *[Publish("a/b", b"x" * 30)] * 4)
    assert [type(e) for e in facts(effects)] == [fx.Connected, fx.Disconnected, fx.Close]
    assert [p.reason_code for p in w.packets(effects)] == [R.QUOTA_EXCEEDED]  # type: ignore[attr-defined]


# ---- keep-alive -------------------------------------------------------------------------------------

@pytest.mark.parametrize("version", [MQTT_311, MQTT_5])
def test_a_client_silent_for_one_and_a_half_keep_alives_is_gone(version):
    w = Wire(version)
    w.connect(keep_alive_s=10)
    assert w.m.next_deadline() == T0 + 15 * SECOND_NS
    w.now = T0 + 14 * SECOND_NS
    w.send(Pingreq())
    assert w.m.handle_timeout(T0 + 15 * SECOND_NS) == []  # heard at 14 s: moved on to 29 s
    assert w.m.next_deadline() == T0 + 29 * SECOND_NS
    effects = w.m.handle_timeout(T0 + 29 * SECOND_NS)
    assert facts(effects) == [fx.Disconnected(R.KEEP_ALIVE_TIMEOUT, "keep-alive timeout", True, 0),
                              fx.Close(R.KEEP_ALIVE_TIMEOUT, "keep-alive timeout")]
    told = [p.reason_code for p in w.packets(effects)]  # type: ignore[attr-defined]
    assert told == ([R.KEEP_ALIVE_TIMEOUT] if version == MQTT_5 else [])


def test_keep_alive_zero_has_no_deadline_and_server_keep_alive_caps_it():
    w = Wire(MQTT_5)
    w.connect(keep_alive_s=0)
    assert w.m.next_deadline() is None
    w = Wire(MQTT_5, ProtocolLimits(keep_alive_s_max=30))
    effects = w.connect(keep_alive_s=0)
    ack = w.packets(effects)[0]
    assert isinstance(ack, Connack) and ack.properties.server_keep_alive_s == 30
    assert w.m.next_deadline() == T0 + 45 * SECOND_NS


# ---- QoS 1 and 2 from the client ------------------------------------------------------------------

@pytest.mark.parametrize("version", [MQTT_311, MQTT_5])
def test_qos_1_is_reported_once_and_acked_after_the_log(version):
    w = Wire(version)
    w.connect()
    effects = w.send(Publish("a/b", b"x", 1, packet_id=7))
    assert facts(effects) == [fx.Published("a/b", b"x", 1, False, Properties(), 7)]
    assert w.send(Publish("a/b", b"x", 1, dup=True, packet_id=7)) == []  # a retry awaiting the log
    assert w.packets(w.m.publish_done(7)) == [Puback(7)]
    assert w.m.publish_done(7) == []  # answered once


@pytest.mark.parametrize("version", [MQTT_311, MQTT_5])
def test_a_retried_qos_2_publish_is_reported_once(version):
    w = Wire(version)
    w.connect()
    first = w.send(Publish("a/b", b"x", 2, packet_id=9))
    assert facts(first) == [fx.Published("a/b", b"x", 2, False, Properties(), 9)]
    assert w.send(Publish("a/b", b"x", 2, dup=True, packet_id=9)) == []
    assert w.packets(w.m.publish_done(9)) == [Pubrec(9)]
    again = w.send(Publish("a/b", b"x", 2, dup=True, packet_id=9))  # the PUBREC was lost
    assert w.packets(again) == [Pubrec(9)] and facts(again) == []
    assert w.send(Pubrel(9)) == [fx.Released(9, True)]  # no PUBCOMP before the release is durable
    assert w.packets(w.m.release_done(9)) == [Pubcomp(9)]
    assert facts(w.send(Publish("a/b", b"y", 2, packet_id=9))) == [fx.Published("a/b", b"y", 2, False,
                                                                                   Properties(), 9)]


def test_pubrel_for_an_unknown_id_gets_pubcomp_0x92_and_before_pubrec_a_protocol_error():
    w = Wire(MQTT_5)
    w.connect()
    assert w.send(Pubrel(4)) == [fx.Released(4, False)]
    assert w.packets(w.m.release_done(4, known=False)) == [Pubcomp(4, R.PACKET_IDENTIFIER_NOT_FOUND)]
    w.send(Publish("a", b"", 2, packet_id=5))
    effects = w.send(Pubrel(5))
    assert [p.reason_code for p in w.packets(effects)] == [R.PROTOCOL_ERROR]  # type: ignore[attr-defined]


def test_our_receive_maximum_is_enforced_in_5_0():
    w = Wire(MQTT_5, ProtocolLimits(receive_maximum=2))
    w.connect()
    w.send(Publish("a", b"", 1, packet_id=1), Publish("a", b"", 2, packet_id=2))
    effects = w.send(Publish("a", b"", 1, packet_id=3))
    assert [p.reason_code for p in w.packets(effects)] == [R.RECEIVE_MAXIMUM_EXCEEDED]  # type: ignore[attr-defined]
    w2 = Wire(MQTT_5, ProtocolLimits(receive_maximum=2))
    w2.connect()
    w2.send(Publish("a", b"", 1, packet_id=1), Publish("a", b"", 1, packet_id=2))
    w2.m.publish_done(1)
    assert facts(w2.send(Publish("a", b"", 1, packet_id=3)))[0] == fx.Published("a", b"", 1, False, Properties(), 3)


def test_a_refused_publish_gets_its_code_in_5_0_and_closes_3_1_1():
    w = Wire(MQTT_5)
    w.connect()
    w.send(Publish("a", b"", 1, packet_id=1), Publish("a", b"", 2, packet_id=2))
    assert w.packets(w.m.publish_done(1, R.NOT_AUTHORIZED, "no")) == [
        Puback(1, R.NOT_AUTHORIZED, Properties(reason_string="no"))]
    assert w.packets(w.m.publish_done(2, R.QUOTA_EXCEEDED)) == [Pubrec(2, R.QUOTA_EXCEEDED)]
    assert facts(w.send(Publish("a", b"", 2, packet_id=2)))  # a refused QoS 2 id is free again
    w = Wire(MQTT_311)
    w.connect()
    w.send(Publish("a", b"", 1, packet_id=1))
    effects = w.m.publish_done(1, R.NOT_AUTHORIZED, "no")
    assert w.packets(effects) == [] and isinstance(effects[-1], fx.Close)


def test_a_packet_id_of_another_qos_still_open_is_in_use():
    w = Wire(MQTT_5)
    w.connect()
    w.send(Publish("a", b"", 2, packet_id=3))
    assert w.packets(w.send(Publish("a", b"", 1, packet_id=3))) == [Puback(3, R.PACKET_IDENTIFIER_IN_USE)]


# ---- topic aliases from the client ----------------------------------------------------------------

def test_inbound_topic_aliases():
    w = Wire(MQTT_5, ProtocolLimits(topic_alias_maximum=2))
    w.connect()
    set_it = w.send(Publish("long/topic", b"1", properties=Properties(topic_alias=2)))
    use_it = w.send(Publish("", b"2", properties=Properties(topic_alias=2)))
    assert [e.topic for e in set_it + use_it if isinstance(e, fx.Published)] == ["long/topic", "long/topic"]
    assert all(e.properties.topic_alias is None for e in set_it + use_it if isinstance(e, fx.Published))
    unknown = w.send(Publish("", b"3", properties=Properties(topic_alias=1)))
    assert [p.reason_code for p in w.packets(unknown)] == [R.PROTOCOL_ERROR]  # type: ignore[attr-defined]
    w = Wire(MQTT_5, ProtocolLimits(topic_alias_maximum=2))
    w.connect()
    over = w.send(Publish("t", b"", properties=Properties(topic_alias=3)))
    assert [p.reason_code for p in w.packets(over)] == [R.TOPIC_ALIAS_INVALID]  # type: ignore[attr-defined]


# ---- deliveries to the client ---------------------------------------------------------------------

def test_deliveries_honour_the_client_s_receive_maximum():
    w = Wire(MQTT_5)
    w.connect(properties=Properties(receive_maximum=2))
    sent = [w.packets(w.m.deliver(token, "a/b", b"%d" % token, 1)) for token in (10, 11, 12)]
    assert [len(s) for s in sent] == [1, 1, 0]  # the third waits for a PUBACK
    first = sent[0][0]
    assert isinstance(first, Publish) and first.qos == 1 and first.packet_id is not None
    effects = w.send(Puback(first.packet_id))
    assert facts(effects) == [fx.DeliveryAcked(10)]
    third = w.packets(effects)
    assert len(third) == 1 and isinstance(third[0], Publish) and third[0].payload == b"12"


def test_a_qos_2_delivery_goes_through_pubrec_pubrel_pubcomp():
    w = Wire(MQTT_311)
    w.connect()
    (publish,) = w.packets(w.m.deliver(5, "a", b"x", 2))
    assert isinstance(publish, Publish) and publish.packet_id is not None
    pid = publish.packet_id
    assert w.packets(w.send(Pubrec(pid))) == [Pubrel(pid)]
    assert facts(w.send(Pubcomp(pid))) == [fx.DeliveryAcked(5)]
    assert w.send(Pubcomp(pid)) == []  # done once


def test_a_delivery_over_the_client_s_maximum_packet_size_is_dropped_as_done():
    w = Wire(MQTT_5)
    w.connect(properties=Properties(maximum_packet_size_bytes=40))
    assert w.m.deliver(1, "a", b"x" * 100, 1) == [fx.DeliveryDropped(1, R.PACKET_TOO_LARGE)]
    assert w.m.deliver(2, "a", b"x" * 100, 0) == [fx.DeliveryDropped(2, R.PACKET_TOO_LARGE)]
    assert w.m.deliveries.in_flight == {}
    # an answer too large loses its reason string, not the answer
    w.send(Publish("a", b"", 1, packet_id=1))
    assert w.packets(w.m.publish_done(1, R.NOT_AUTHORIZED, "x" * 100)) == [Puback(1, R.NOT_AUTHORIZED)]


def test_outbound_topic_aliases_within_the_client_s_maximum():
    w = Wire(MQTT_5)
    w.connect(properties=Properties(topic_alias_maximum=1))
    got = [w.packets(w.m.deliver(i, topic, b"", 0))[0] for i, topic in enumerate(("a/b", "a/b", "c", "c"))]
    assert [(p.topic, p.properties.topic_alias) for p in got] == [  # type: ignore[attr-defined]
        ("a/b", 1), ("", 1), ("c", 1), ("", 1)]


def test_no_problem_information_strips_reason_strings_but_from_disconnect():
    w = Wire(MQTT_5)
    w.connect(properties=Properties(request_problem_information=0))
    w.send(Publish("a", b"", 1, packet_id=1))
    assert w.packets(w.m.publish_done(1, R.NOT_AUTHORIZED, "why")) == [Puback(1, R.NOT_AUTHORIZED)]
    ending = w.packets(w.m.disconnect(R.SESSION_TAKEN_OVER, "another connection"))
    assert ending == [Disconnect(R.SESSION_TAKEN_OVER, Properties(reason_string="another connection"))]


# ---- SUBSCRIBE and UNSUBSCRIBE ----------------------------------------------------------------------

@pytest.mark.parametrize("version", [MQTT_311, MQTT_5])
def test_subscribe_and_unsubscribe_are_answered_with_the_broker_side_s_codes(version):
    w = Wire(version)
    w.connect()
    topics = (TopicFilter("a/#", 1), TopicFilter("b", 2))
    assert facts(w.send(Subscribe(3, topics))) == [fx.Subscribed(3, topics, Properties())]
    assert w.m.suback(3, (1,)) == []  # one code per filter, or no SUBACK
    answer = w.packets(w.m.suback(3, (1, R.NOT_AUTHORIZED)))
    assert answer == [Suback(3, (1, R.NOT_AUTHORIZED if version == MQTT_5 else 0x80))]
    assert facts(w.send(Unsubscribe(4, ("a/#",)))) == [fx.Unsubscribed(4, ("a/#",), Properties())]
    assert w.packets(w.m.unsuback(4, (R.SUCCESS,))) == [Unsuback(4, (0,) if version == MQTT_5 else ())]


def test_a_subscribe_id_awaiting_its_suback_is_in_use():
    w = Wire(MQTT_5)
    w.connect()
    w.send(Subscribe(3, (TopicFilter("a"),)))
    assert w.packets(w.send(Subscribe(3, (TopicFilter("b"), TopicFilter("c"))))) == [
        Suback(3, (R.PACKET_IDENTIFIER_IN_USE,) * 2)]


def test_subscription_identifiers_when_not_available():
    w = Wire(MQTT_5, ProtocolLimits(subscription_identifier_available=False))
    effects = w.connect()
    assert w.packets(effects)[0].properties.subscription_identifier_available == 0  # type: ignore[attr-defined]
    effects = w.send(Subscribe(1, (TopicFilter("a"),), Properties(subscription_identifiers=(4,))))
    assert [p.reason_code for p in w.packets(effects)] == [  # type: ignore[attr-defined]
        R.SUBSCRIPTION_IDENTIFIERS_NOT_SUPPORTED]


# ---- endings ---------------------------------------------------------------------------------------

def test_a_normal_disconnect_drops_the_will_and_0x04_asks_for_it():
    w = Wire(MQTT_5)
    w.connect()
    assert facts(w.send(Disconnect())) == [fx.Disconnected(0, "the client disconnected", False, 0),
                                           fx.Close(0, "the client disconnected")]
    w = Wire(MQTT_5)
    w.connect(properties=Properties(session_expiry_interval_s=60))
    effects = w.send(Disconnect(R.DISCONNECT_WITH_WILL_MESSAGE, Properties(session_expiry_interval_s=5)))
    assert facts(effects)[0] == fx.Disconnected(R.DISCONNECT_WITH_WILL_MESSAGE, "the client disconnected", True, 5)


def test_a_session_expiry_set_at_disconnect_after_0_at_connect_is_a_protocol_error():
    w = Wire(MQTT_5)
    w.connect()
    effects = w.send(Disconnect(0, Properties(session_expiry_interval_s=5)))
    assert [p.reason_code for p in w.packets(effects)] == [R.PROTOCOL_ERROR]  # type: ignore[attr-defined]


@pytest.mark.parametrize("version", [MQTT_311, MQTT_5])
@pytest.mark.parametrize("bad", [encode(Connack(), MQTT_5), encode(Suback(1, (0,)), MQTT_5), b"\x00\x00",
                                 encode(Connect(MQTT_5, "again"), MQTT_5), b"\x30\x03\x00\x01+"],
                         ids=["connack", "suback", "type-0", "second-connect", "wildcard-topic"])
def test_a_client_breaking_the_rules_is_disconnected_as_its_version_requires(version, bad):
    w = Wire(version)
    w.connect()
    effects = w.m.receive(T0, bad)
    ended = facts(effects)
    assert [type(e) for e in ended] == [fx.Disconnected, fx.Close]
    assert isinstance(ended[0], fx.Disconnected) and ended[0].publish_will
    told = w.packets(effects)
    if version == MQTT_5:
        assert len(told) == 1 and isinstance(told[0], Disconnect) and told[0].reason_code >= 0x80
    else:
        assert told == []
    assert w.m.receive(T0, encode(Pingreq(), version)) == []


def test_auth_without_a_method_is_a_protocol_error():
    w = Wire(MQTT_5)
    w.connect()
    assert [p.reason_code for p in w.packets(w.send(Auth(0x18)))] == [R.PROTOCOL_ERROR]  # type: ignore[attr-defined]


def test_a_lost_connection_reports_the_will_once():
    w = Wire(MQTT_5)
    w.connect()
    assert w.m.connection_lost() == [fx.Disconnected(R.UNSPECIFIED_ERROR, "connection lost", True, 0)]
    assert w.m.connection_lost() == []
    assert w.m.deliver(1, "a", b"", 1) == []


def test_a_takeover_tells_a_5_0_client_and_the_will_is_due():
    w = Wire(MQTT_5)
    w.connect()
    effects = w.m.disconnect(R.SESSION_TAKEN_OVER, "taken over", server_reference="other:1883")
    assert w.packets(effects) == [Disconnect(R.SESSION_TAKEN_OVER, Properties(
        server_reference="other:1883", reason_string="taken over"))]
    assert facts(effects)[0] == fx.Disconnected(R.SESSION_TAKEN_OVER, "taken over", True, 0)


def test_a_packet_over_our_maximum_packet_size_is_0x95():
    w = Wire(MQTT_5, ProtocolLimits(packet_bytes_max=64))
    w.connect()
    effects = w.send(Publish("a", b"x" * 100))
    assert [p.reason_code for p in w.packets(effects)] == [R.PACKET_TOO_LARGE]  # type: ignore[attr-defined]
    assert w.m.decoder.held_bytes == 0


def test_properties_of_a_3_1_1_delivery_are_left_out():
    w = Wire(MQTT_311)
    w.connect()
    (publish,) = w.packets(w.m.deliver(1, "a", b"x", 0, properties=Properties(content_type="t")))
    assert publish == Publish("a", b"x")


# ---- a persistent session across connections ------------------------------------------------------

@pytest.mark.parametrize("version", [MQTT_311, MQTT_5])
def test_a_session_s_unfinished_flows_resume_on_the_next_connection(version):
    w = Wire(version)
    w.connect()
    w.m.deliver(1, "a", b"one", 1)
    w.m.deliver(2, "b", b"two", 2)
    (two,) = w.packets(w.m.deliver(3, "c", b"three", 2))
    assert isinstance(two, Publish) and two.packet_id is not None
    w.send(Pubrec(two.packet_id))  # the client has the third: PUBREL sent, PUBCOMP awaited
    w.send(Publish("in", b"q2", 2, packet_id=40))
    w.m.publish_done(40)  # PUBREC sent, PUBREL awaited
    w.m.connection_lost()
    deliveries, awaiting = w.m.unfinished()
    assert [(d.token, d.state) for d in deliveries] == [(1, "awaiting-puback"), (2, "awaiting-pubrec"),
                                                       (3, "awaiting-pubcomp")]
    assert awaiting == [40]

    nxt = Wire(version)
    nxt.connect(accept=False, clean_start=False)
    nxt.m.accept(T0, session_present=True, awaiting_release=awaiting)
    resent = []
    for d in deliveries:
        effects = nxt.m.resume(d.token, d.packet_id, d.publish.topic, d.publish.payload, d.publish.qos,
                               released=d.state == "awaiting-pubcomp")
        resent += nxt.packets(effects)
    assert resent == [Publish("a", b"one", 1, False, True, deliveries[0].packet_id),
                      Publish("b", b"two", 2, False, True, deliveries[1].packet_id),
                      Pubrel(deliveries[2].packet_id)]
    assert facts(nxt.send(Pubcomp(deliveries[2].packet_id))) == [fx.DeliveryAcked(3)]
    retry = nxt.send(Publish("in", b"q2", 2, dup=True, packet_id=40))  # its PUBREC was lost in the drop
    assert nxt.packets(retry) == [Pubrec(40)] and facts(retry) == []  # logged once across the reconnect
    assert nxt.send(Pubrel(40)) == [fx.Released(40, True)]
    assert nxt.packets(nxt.m.release_done(40)) == [Pubcomp(40)]
    # a fresh delivery does not take an identifier the resumed ones hold
    (fresh,) = nxt.packets(nxt.m.deliver(9, "d", b"", 1))
    assert isinstance(fresh, Publish) and fresh.packet_id not in {deliveries[0].packet_id, deliveries[1].packet_id}


def test_a_takeover_before_the_accept_is_a_connack_the_client_can_read():
    w = Wire(MQTT_5)
    w.connect(accept=False)
    effects = w.m.disconnect(R.SESSION_TAKEN_OVER, "taken over")
    assert [p.reason_code for p in w.packets(effects)] == [R.SERVER_UNAVAILABLE]  # type: ignore[attr-defined]
    assert [type(e) for e in facts(effects)] == [fx.Close]


def test_a_connection_lost_before_its_accept_has_no_will_due():
    w = Wire(MQTT_5)
    w.connect(accept=False, will=Will("w", b"bye"))
    assert w.m.connection_lost() == [fx.Disconnected(R.UNSPECIFIED_ERROR, "connection lost", False, 0)]


def test_an_alias_set_by_a_delivery_not_sent_is_not_used_after():
    w = Wire(MQTT_5)
    w.connect(properties=Properties(topic_alias_maximum=1, maximum_packet_size_bytes=40))
    assert w.m.deliver(1, "a/b", b"x" * 60, 0) == [fx.DeliveryDropped(1, R.PACKET_TOO_LARGE)]
    (publish,) = w.packets(w.m.deliver(2, "a/b", b"x", 0))
    assert isinstance(publish, Publish) and (publish.topic, publish.properties.topic_alias) == ("a/b", 1)


@pytest.mark.parametrize(("limits", "publish", "code"), [
    (ProtocolLimits(maximum_qos=1), Publish("a", b"", 2, packet_id=1), R.QOS_NOT_SUPPORTED),
    (ProtocolLimits(retain_available=False), Publish("a", b"", 0, True), R.RETAIN_NOT_SUPPORTED),
    (ProtocolLimits(), Publish("a", b"", properties=Properties(subscription_identifiers=(1,))), R.PROTOCOL_ERROR),
])
def test_a_publish_breaking_what_our_connack_said_ends_the_connection(limits, publish, code):
    w = Wire(MQTT_5, limits)
    offer = w.packets(w.connect())[0].properties  # type: ignore[attr-defined]
    assert (offer.maximum_qos, offer.retain_available) == (1 if limits.maximum_qos == 1 else None,
                                                           None if limits.retain_available else 0)
    effects = w.send(publish)
    assert [p.reason_code for p in w.packets(effects)] == [code]  # type: ignore[attr-defined]
    assert not any(isinstance(e, fx.Published) for e in effects)


def test_session_present_is_0_after_a_clean_start():
    w = Wire(MQTT_311)
    w.connect(accept=False, clean_start=True)
    assert w.packets(w.m.accept(T0, session_present=True)) == [Connack(False, 0)]


def test_a_delivery_too_large_is_dropped_whole_not_stripped_of_its_user_properties():
    w = Wire(MQTT_5)
    w.connect(properties=Properties(maximum_packet_size_bytes=60))
    props = Properties(user_properties=(("k", "v" * 60),))
    assert w.m.deliver(1, "a", b"x", 1, properties=props) == [fx.DeliveryDropped(1, R.PACKET_TOO_LARGE)]
    assert w.m.resume(2, 7, "a", b"x", 1, properties=props) == [fx.DeliveryDropped(2, R.PACKET_TOO_LARGE)]
    assert w.m.deliveries.in_flight == {}


def test_packet_identifiers_are_taken_in_turn_skipping_those_in_use_and_wrap():
    from tidings.core.mqtt.inflight import PacketIds

    ids = PacketIds()
    assert [ids.take() for _ in range(3)] == [1, 2, 3]
    ids.free(2)
    assert ids.take() == 4  # in turn, not the lowest free: a late answer for 2 meets nothing new
    ids.last = 0xFFFE
    assert [ids.take(), ids.take()] == [0xFFFF, 2]  # 1 is in use still, 2 was freed
    ids.used = set(range(1, 0x10000))
    with pytest.raises(AssertionError):
        ids.take()
