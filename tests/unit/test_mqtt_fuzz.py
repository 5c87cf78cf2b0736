"""Hypothesis fuzz of the MQTT decoder (core/mqtt/codec.py): any bytes, valid streams split at
random, truncated, oversized and mutated packets, every property id in every packet. The decoder
never raises: it hands out packets or sets its one `failure` (a Refusal with a reason code), and
what it holds stays under the Maximum Packet Size plus a fixed header."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import SOAK
from tests.unit.test_mqtt_roundtrip import packets, streams, value_of, versions
from tidings.core.mqtt.codec import FIXED_HEADER_BYTES_MAX, PacketDecoder
from tidings.core.mqtt.encode import encode
from tidings.core.mqtt.fields import vbi
from tidings.core.mqtt.packet_type import MQTT_5, MQTT_311, PacketType
from tidings.core.mqtt.packets import (
    Auth,
    Connack,
    Connect,
    Disconnect,
    Packet,
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
from tidings.core.mqtt.properties import MULTIPLE, SPEC, WILL_PLACE, Properties, PropertyId
from tidings.core.mqtt.reason_codes import ReasonCode
from tidings.core.mqtt.refusal import Refusal

P = PacketType
EXAMPLES = 2000 if SOAK else 200


def feed_in_chunks(decoder: PacketDecoder, data: bytes, cuts: list[int]) -> list[Packet]:
    """Feed `data` split at `cuts`, checking the bound on what the decoder holds after each feed."""
    out: list[Packet] = []
    start = 0
    for cut in [*sorted(cuts), len(data)]:
        out += decoder.feed(data[start:cut])
        start = max(start, cut)
        if decoder.failure is None:
            assert decoder.held_bytes < decoder.packet_bytes_max + FIXED_HEADER_BYTES_MAX
        else:
            assert isinstance(decoder.failure, Refusal)
            assert decoder.failure.reason >= 0x80
            assert decoder.held_bytes == 0
    return out


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.binary(max_size=300), st.sampled_from((None, MQTT_311, MQTT_5)), st.integers(2, 400),
       st.lists(st.integers(0, 300), max_size=8))
def test_any_bytes_give_packets_or_a_refusal(data, version, packet_bytes_max, cuts):
    feed_in_chunks(PacketDecoder(packet_bytes_max, version), data, cuts)


@settings(max_examples=EXAMPLES, deadline=None)
@given(streams(), st.data())
def test_a_valid_stream_split_anywhere_decodes_the_same(stream, data):
    version, sent = stream
    wire = b"".join(encode(p, version) for p in sent)
    cuts = data.draw(st.lists(st.integers(0, len(wire)), max_size=10))
    decoder = PacketDecoder(len(wire), version)
    assert feed_in_chunks(decoder, wire, cuts) == sent
    assert decoder.failure is None and decoder.held_bytes == 0


@settings(max_examples=EXAMPLES, deadline=None)
@given(streams(), st.data())
def test_a_truncated_stream_gives_the_whole_packets_and_holds_the_rest(stream, data):
    version, sent = stream
    encoded = [encode(p, version) for p in sent]
    wire = b"".join(encoded)
    cut = data.draw(st.integers(0, len(wire) - 1))
    decoder = PacketDecoder(len(wire), version)
    got = feed_in_chunks(decoder, wire[:cut], [])
    whole = 0
    ends = 0
    for piece in encoded:
        if ends + len(piece) > cut:
            break
        ends += len(piece)
        whole += 1
    assert got == sent[:whole]
    assert decoder.failure is None
    assert decoder.held_bytes == cut - ends


@settings(max_examples=EXAMPLES, deadline=None)
@given(versions.flatmap(lambda v: st.tuples(st.just(v), packets(v))), st.data())
def test_a_packet_over_the_maximum_is_refused_before_its_body_is_held(vp, data):
    version, packet = vp
    wire = encode(packet, version)
    limit = data.draw(st.integers(2, len(wire) - 1)) if len(wire) > 2 else 2
    decoder = PacketDecoder(limit, version)
    cut = data.draw(st.integers(1, len(wire)))
    got = feed_in_chunks(decoder, wire[:cut], [])
    if len(wire) <= limit:
        return
    assert got == []
    header = 1 + next(i for i, b in enumerate(wire[1:5], 1) if not b & 0x80)
    if cut > header:
        assert decoder.failure is not None
        assert decoder.failure.reason == ReasonCode.PACKET_TOO_LARGE


@settings(max_examples=EXAMPLES, deadline=None)
@given(streams(), st.data())
def test_mutated_streams_never_raise(stream, data):
    version, sent = stream
    wire = bytearray(b"".join(encode(p, version) for p in sent))
    for _ in range(data.draw(st.integers(1, 4))):
        op = data.draw(st.sampled_from(("flip", "insert", "delete")))
        at = data.draw(st.integers(0, max(0, len(wire) - 1)))
        if op == "flip" and wire:
            wire[at] ^= 1 << data.draw(st.integers(0, 7))
        elif op == "insert":
            wire[at:at] = bytes([data.draw(st.integers(0, 255))])
        elif wire:
            del wire[at]
    cuts = data.draw(st.lists(st.integers(0, len(wire)), max_size=4))
    feed_in_chunks(PacketDecoder(len(wire) + 16, version), bytes(wire), cuts)


# --- every property id in every packet that has properties ---------------------------------------

def carrying(place: int, properties: Properties) -> Packet:
    """A 5.0 packet of type `place` (or a CONNECT whose Will has them) carrying `properties`; our
    encoder writes whatever it is given, so a property a packet may not carry reaches the decoder."""
    makers = {
        P.CONNECT: lambda: Connect(MQTT_5, "c", properties=properties),
        WILL_PLACE: lambda: Connect(MQTT_5, "c", will=Will("w", b"", properties=properties)),
        P.CONNACK: lambda: Connack(False, 0, properties),
        P.PUBLISH: lambda: Publish("t", b"x", 1, packet_id=1, properties=properties),
        P.PUBACK: lambda: Puback(1, 0, properties),
        P.PUBREC: lambda: Pubrec(1, 0, properties),
        P.PUBREL: lambda: Pubrel(1, 0, properties),
        P.PUBCOMP: lambda: Pubcomp(1, 0, properties),
        P.SUBSCRIBE: lambda: Subscribe(1, (TopicFilter("t"),), properties),
        P.SUBACK: lambda: Suback(1, (0,), properties),
        P.UNSUBSCRIBE: lambda: Unsubscribe(1, ("t",), properties),
        P.UNSUBACK: lambda: Unsuback(1, (0,), properties),
        P.DISCONNECT: lambda: Disconnect(0, properties),
        P.AUTH: lambda: Auth(0, properties),
    }
    return makers[place]()


PLACES = [P.CONNECT, WILL_PLACE, P.CONNACK, P.PUBLISH, P.PUBACK, P.PUBREC, P.PUBREL, P.PUBCOMP, P.SUBSCRIBE,
          P.SUBACK, P.UNSUBSCRIBE, P.UNSUBACK, P.DISCONNECT, P.AUTH]


@pytest.mark.parametrize("pid", sorted(SPEC), ids=lambda pid: PropertyId(pid).name)
@pytest.mark.parametrize("place", PLACES, ids=lambda p: "WILL" if p == WILL_PLACE else PacketType(p).name)
@settings(max_examples=10, deadline=None)
@given(data=st.data())
def test_every_property_in_every_packet(pid, place, data):
    spec = SPEC[pid]
    value = data.draw(value_of(PropertyId(pid)))
    properties = Properties(**{spec.field: (value,) if pid in MULTIPLE else value})
    packet = carrying(place, properties)
    decoder = PacketDecoder(1 << 16, MQTT_5)
    got = decoder.feed(encode(packet, MQTT_5))
    if place in spec.places:
        assert got == [packet]
    else:
        assert got == []
        assert decoder.failure is not None and decoder.failure.reason == ReasonCode.PROTOCOL_ERROR


def splice(place: int, raw: bytes) -> bytes:
    """A 5.0 packet of type `place` whose property list (the Will's for WILL_PLACE) is `raw`."""
    wire = encode(carrying(place, Properties(user_properties=(("~", "~"),))), MQTT_5)
    assert wire[1] < 0x80  # a one-byte remaining length
    marker = b"\x07\x26\x00\x01~\x00\x01~"  # property length 7, then the one User Property
    at = wire.index(marker)
    packet = wire[:at] + vbi(len(raw)) + raw + wire[at + len(marker):]
    return packet[:1] + vbi(len(packet) - 2) + packet[2:]


ONE_VALUE = {1: b"\x01", 2: b"\x00\x01", 4: b"\x00\x00\x00\x01", 5: b"\x01", 6: b"\x00\x01a", 7: b"\x00\x01a",
             8: b"\x00\x01a\x00\x01b"}  # a valid value of each data type (by PropertyType)


def refused(wire: bytes) -> ReasonCode | None:
    decoder = PacketDecoder(1 << 16, MQTT_5)
    got = decoder.feed(wire)
    if decoder.failure is None:
        assert len(got) == 1
        return None
    assert got == []
    return decoder.failure.reason


@pytest.mark.parametrize("pid", sorted(SPEC), ids=lambda pid: PropertyId(pid).name)
@pytest.mark.parametrize("place", PLACES, ids=lambda p: "WILL" if p == WILL_PLACE else PacketType(p).name)
def test_a_property_given_twice_is_a_protocol_error_unless_it_may_repeat(pid, place):
    spec = SPEC[pid]
    raw = bytes((pid,)) + ONE_VALUE[spec.type]
    assert refused(splice(place, raw)) == (None if place in spec.places else ReasonCode.PROTOCOL_ERROR)
    may_repeat = pid == PropertyId.USER_PROPERTY or (pid == PropertyId.SUBSCRIPTION_IDENTIFIER and place == P.PUBLISH)
    expected = None if may_repeat and place in spec.places else ReasonCode.PROTOCOL_ERROR
    assert refused(splice(place, raw + raw)) == expected


@pytest.mark.parametrize("place", PLACES, ids=lambda p: "WILL" if p == WILL_PLACE else PacketType(p).name)
def test_an_unknown_property_id_is_malformed(place):
    for pid in range(0x80):
        if pid not in SPEC:
            assert refused(splice(place, bytes((pid, 0)))) == ReasonCode.MALFORMED_PACKET, pid
    assert refused(splice(place, b"\x80\x01\x00")) == ReasonCode.MALFORMED_PACKET  # a two-byte id (128)
