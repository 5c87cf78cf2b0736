"""The MQTT codec (core/mqtt/): byte-exact packets built by hand from the 3.1.1 and 5.0
specifications, each refusal rule with the reason code 5.0 gives it, and the decoder's bounds."""

import pytest

from tidings.core.mqtt.codec import PacketDecoder
from tidings.core.mqtt.encode import encode
from tidings.core.mqtt.packet_type import MQTT_5, MQTT_311
from tidings.core.mqtt.packets import (
    Auth,
    Connack,
    Connect,
    Disconnect,
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
from tidings.core.mqtt.reason_codes import ReasonCode

R = ReasonCode


def decode_all(data: bytes, version: int | None, packet_bytes_max: int = 1 << 20):
    d = PacketDecoder(packet_bytes_max, version)
    return d.feed(data), d


def refusal_of(data: bytes, version: int | None = MQTT_5, packet_bytes_max: int = 1 << 20):
    packets, d = decode_all(data, version, packet_bytes_max)
    assert packets == []
    assert d.failure is not None, packets
    assert d.held_bytes == 0
    return d.failure.reason


# --- byte-exact, built from the specifications' figures ---------------------------------------

CONNECT_311 = bytes.fromhex(
    "10" "1b"  # CONNECT, remaining length 27
    "0004" "4d515454" "04"  # "MQTT", level 4 (3.1.1 figure 3.5..3.6)
    "ce"  # user name, password, will QoS 1, will flag, clean session (figure 3.6's example flags)
    "000a"  # keep alive 10 (figure 3.7)
    "0002" "6331"  # client id "c1"
    "0001" "77"  # will topic "w"
    "0001" "78"  # will message "x"
    "0001" "75"  # user name "u"
    "0002" "7077"  # password "pw"
)


def test_a_311_connect_as_the_spec_lays_it_out():
    expected = Connect(MQTT_311, "c1", True, 10, "u", b"pw", Will("w", b"x", 1, False))
    assert encode(expected, MQTT_311) == CONNECT_311
    packets, d = decode_all(CONNECT_311, None)
    assert packets == [expected]
    assert d.version == MQTT_311


def test_fixed_size_packets_of_both_versions():
    assert encode(Connack(False, 0), MQTT_311) == b"\x20\x02\x00\x00"
    assert encode(Puback(1), MQTT_311) == b"\x40\x02\x00\x01"
    assert encode(Pubrel(1), MQTT_311) == b"\x62\x02\x00\x01"  # PUBREL's flags are 0010
    assert encode(Pingreq(), MQTT_5) == b"\xc0\x00"
    assert encode(Pingresp(), MQTT_311) == b"\xd0\x00"
    assert encode(Disconnect(), MQTT_311) == b"\xe0\x00"
    assert encode(Disconnect(), MQTT_5) == b"\xe0\x00"  # 3.14.2.1: no reason code means 0x00
    assert encode(Disconnect(R.KEEP_ALIVE_TIMEOUT), MQTT_5) == b"\xe0\x01\x8d"
    assert encode(Puback(1), MQTT_5) == b"\x40\x02\x00\x01"  # 3.4.2.1: 0x00 and no properties left out
    assert encode(Pubrec(2, R.NO_MATCHING_SUBSCRIBERS), MQTT_5) == b"\x50\x03\x00\x02\x10"
    assert encode(Connack(True, 0), MQTT_5) == b"\x20\x03\x01\x00\x00"


def test_subscribe_as_3_1_1_figure_3_23_lays_it_out():
    # packet id 10, "a/b" QoS 1, "c/d" QoS 2
    wire = bytes.fromhex("820e000a0003612f62010003632f6402")
    packet = Subscribe(10, (TopicFilter("a/b", 1), TopicFilter("c/d", 2)))
    assert encode(packet, MQTT_311) == wire
    assert decode_all(wire, MQTT_311)[0] == [packet]
    assert encode(Suback(10, (1, 2, 0x80)), MQTT_311) == bytes.fromhex("9005000a010280")


def test_a_5_0_publish_with_properties():
    wire = bytes.fromhex(
        "32" "12"  # PUBLISH QoS 1, remaining length 18
        "0003" "612f62"  # topic "a/b"
        "0007"  # packet id 7
        "05" "0101" "230003"  # properties: Payload Format Indicator 1, Topic Alias 3
        "68656c6c6f"  # payload "hello"
    )
    assert len(wire) == 2 + 0x12
    packet = Publish("a/b", b"hello", 1, False, False, 7, Properties(payload_format_indicator=1, topic_alias=3))
    assert encode(packet, MQTT_5) == wire
    assert decode_all(wire, MQTT_5)[0] == [packet]


def test_every_packet_type_round_trips_split_byte_by_byte():
    props = Properties(reason_string="why", user_properties=(("a", "b"), ("a", "c")))
    packets = [
        Connect(MQTT_5, "c1", True, 30, "u", b"p", Will("w/t", b"x", 1, True, Properties(will_delay_interval_s=3)),
                Properties(receive_maximum=10, user_properties=(("k", "v"),))),
        Connack(False, 0, Properties(assigned_client_identifier="auto-1", topic_alias_maximum=5)),
        Publish("a/b", b"hello", 2, True, True, 7, Properties(topic_alias=3, content_type="t",
                                                                subscription_identifiers=(1, 300))),
        Puback(7), Puback(8, R.NO_MATCHING_SUBSCRIBERS, props), Pubrec(9), Pubrel(9, 0x92), Pubcomp(9, 0, props),
        Subscribe(3, (TopicFilter("a/#", 1, True, True, 2),), Properties(subscription_identifiers=(5,))),
        Suback(3, (1, 0x87)), Unsubscribe(4, ("a", "b")), Unsuback(4, (0, 0x11)),
        Pingreq(), Pingresp(), Disconnect(R.SESSION_TAKEN_OVER, props),
        Auth(0x18, Properties(authentication_method="x")),
    ]
    data = b"".join(encode(p, MQTT_5) for p in packets)
    d = PacketDecoder(1 << 20)
    out = []
    for i in range(len(data)):
        out += d.feed(data[i:i + 1])
        assert d.held_bytes < 1 << 20
    assert d.failure is None
    assert out == packets


# --- refusals -----------------------------------------------------------------------------------

def test_a_packet_over_the_maximum_packet_size_is_refused_from_its_header():
    big = encode(Publish("t", b"x" * 100), MQTT_5)
    assert refusal_of(big[:2], MQTT_5, packet_bytes_max=50) == R.PACKET_TOO_LARGE


@pytest.mark.parametrize("wire", [
    b"\x30\xff\xff\xff\xff\x01",  # remaining length of five bytes
    b"\x30\x80\x00",  # remaining length not in its shortest form
    b"\x00\x00",  # packet type 0
    b"\x60\x02\x00\x01",  # PUBREL with flags 0000
    b"\x80\x06\x00\x01\x00\x01a\x00",  # SUBSCRIBE with flags 0000
    b"\x41\x02\x00\x01",  # PUBACK with a flag set
    b"\x36\x06\x00\x01a\x00\x01\x00",  # PUBLISH QoS 3
    b"\x38\x04\x00\x01a\x00",  # DUP at QoS 0
    b"\x32\x05\x00\x01a\x00\x00",  # packet id 0
    b"\x30\x05\x00\x02\xc0\x80\x00",  # overlong UTF-8
    b"\x30\x05\x00\x02a\x00\x00",  # U+0000 in a topic
    b"\x30\x06\x00\x03\xed\xa0\x80\x00",  # a UTF-16 surrogate in UTF-8
    b"\x40\x03\x00\x01\x01",  # PUBACK reason code 0x01
    b"\x30\x05\x00\x01a\x01\xff",  # unknown property id
    b"\xc0\x01\x00",  # PINGREQ with a body
    b"\x40\x05\x00\x01\x00\x05\x00",  # property length past the end
])
def test_malformed_packets_get_0x81(wire):
    assert refusal_of(wire, MQTT_5) == R.MALFORMED_PACKET


@pytest.mark.parametrize("wire", [
    b"\x82\x03\x00\x01\x00",  # SUBSCRIBE without a filter
    b"\x82\x07\x00\x01\x00\x00\x01a\x30",  # retain handling 3
    b"\x30\x03\x00\x00\x00",  # empty topic, no alias
    b"\x30\x0a\x00\x01a\x06\x23\x00\x01\x23\x00\x02",  # Topic Alias twice
    b"\x30\x07\x00\x01a\x03\x23\x00\x00",  # Topic Alias 0
    b"\x30\x07\x00\x01a\x03\x21\x00\x05",  # Receive Maximum in a PUBLISH
    b"\x30\x06\x00\x01a\x02\x01\x02",  # Payload Format Indicator 2
])
def test_protocol_errors_get_0x82(wire):
    assert refusal_of(wire, MQTT_5) == R.PROTOCOL_ERROR


def test_wildcards_in_a_publish_topic_get_0x90():
    assert refusal_of(encode(Publish("a/+"), MQTT_5)) == R.TOPIC_NAME_INVALID


def test_anything_but_connect_first_is_refused_and_connect_sets_the_version():
    assert refusal_of(encode(Pingreq(), MQTT_5), None) == R.PROTOCOL_ERROR
    packets, d = decode_all(encode(Connect(MQTT_5, "x"), MQTT_5) + encode(Pingreq(), MQTT_5), None)
    assert packets == [Connect(MQTT_5, "x"), Pingreq()]
    assert d.version == MQTT_5


@pytest.mark.parametrize(("name", "level"), [(b"MQIsdp", 3), (b"MQTT", 6), (b"MQTT", 3), (b"XXXX", 4)])
def test_an_unsupported_level_is_refused_with_the_level(name, level):
    body = len(name).to_bytes(2, "big") + name + bytes((level, 0x02, 0, 60, 0, 1)) + b"c"
    wire = b"\x10" + bytes((len(body),)) + body
    _, d = decode_all(wire, None)
    assert d.failure is not None
    assert (d.failure.reason, d.failure.level) == (R.UNSUPPORTED_PROTOCOL_VERSION, level)


def test_3_1_1_rules():
    assert refusal_of(b"\xf0\x00", MQTT_311) == R.MALFORMED_PACKET  # AUTH is reserved
    assert refusal_of(b"\xe0\x01\x00", MQTT_311) == R.MALFORMED_PACKET  # DISCONNECT has no body
    assert refusal_of(b"\x40\x03\x00\x01\x00", MQTT_311) == R.MALFORMED_PACKET  # PUBACK has no reason code
    assert refusal_of(b"\x82\x06\x00\x01\x00\x01a\x04", MQTT_311) == R.MALFORMED_PACKET  # no-local is 5.0's
    # a password without a user name (3.1.2-22), refused with the level known
    body = b"\x00\x04MQTT\x04\x42\x00\x3c\x00\x01c\x00\x01p"
    _, d = decode_all(b"\x10" + bytes((len(body),)) + body, None)
    assert d.failure is not None and (d.failure.reason, d.failure.level) == (R.MALFORMED_PACKET, MQTT_311)


def test_packets_before_a_refusal_are_handed_out_and_nothing_after():
    data = encode(Pingreq(), MQTT_5) + b"\x00\x00" + encode(Pingreq(), MQTT_5)
    packets, d = decode_all(data, MQTT_5)
    assert packets == [Pingreq()]
    assert d.failure is not None
    assert d.feed(encode(Pingreq(), MQTT_5)) == []
