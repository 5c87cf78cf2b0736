"""Encode/decode round trips of every MQTT packet type in 3.1.1 and 5.0 (Hypothesis), with every
property a packet may carry; the strategies here (`packets`, `properties_for`) feed the decoder's
fuzz (test_mqtt_fuzz.py) and the protocol machine's tests."""

from __future__ import annotations

from typing import Any

from hypothesis import find, given, settings
from hypothesis import strategies as st

from tests.conftest import SOAK
from tidings.core.mqtt.codec import PacketDecoder
from tidings.core.mqtt.encode import encode
from tidings.core.mqtt.fields import VBI_MAX
from tidings.core.mqtt.packet_type import MQTT_5, MQTT_311, PacketType
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
from tidings.core.mqtt.properties import MULTIPLE, NO_PROPERTIES, SPEC, WILL_PLACE, Properties, PropertyId, PropertyType
from tidings.core.mqtt.reason_codes import REASON_CODES_OF, SUBACK_CODES_311, ConnectReturnCode

P = PacketType
T = PropertyType

text = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), max_size=12)
topics = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00+#"), min_size=1, max_size=12)
packet_ids = st.integers(1, 0xFFFF)
qos = st.integers(0, 2)

_VALUES: dict[PropertyType, Any] = {
    T.TWO_BYTE_INTEGER: st.integers(0, 0xFFFF),
    T.FOUR_BYTE_INTEGER: st.integers(0, 0xFFFFFFFF),
    T.VARIABLE_BYTE_INTEGER: st.integers(1, VBI_MAX),
    T.UTF8_STRING: text,
    T.BINARY_DATA: st.binary(max_size=12),
    T.UTF8_STRING_PAIR: st.tuples(text, text),
}


def value_of(pid: PropertyId) -> st.SearchStrategy[Any]:
    spec = SPEC[pid]
    if spec.flag:
        return st.integers(0, 1)
    strategy = _VALUES[spec.type]
    return strategy.filter(lambda v: v != 0) if spec.nonzero else strategy


@st.composite
def properties_for(draw: st.DrawFn, place: int) -> Properties:
    """Properties a packet of type `place` (or the Will) may carry, each present or not."""
    values: dict[str, Any] = {}
    for pid, spec in SPEC.items():
        if place not in spec.places or not draw(st.booleans()):
            continue
        if pid in MULTIPLE:
            most = 1 if pid == PropertyId.SUBSCRIPTION_IDENTIFIER and place != P.PUBLISH else 3
            values[spec.field] = tuple(draw(st.lists(value_of(PropertyId(pid)), min_size=1, max_size=most)))
        else:
            values[spec.field] = draw(value_of(PropertyId(pid)))
    return Properties(**values) if values else NO_PROPERTIES


def props(version: int, place: int) -> st.SearchStrategy[Properties]:
    return properties_for(place) if version == MQTT_5 else st.just(NO_PROPERTIES)


def codes(version: int, ptype: PacketType) -> st.SearchStrategy[int]:
    return st.sampled_from(sorted(REASON_CODES_OF[ptype])) if version == MQTT_5 else st.just(0)


@st.composite
def connects(draw: st.DrawFn, version: int) -> Connect:
    will = None
    if draw(st.booleans()):
        will = Will(draw(topics), draw(st.binary(max_size=12)), draw(qos), draw(st.booleans()),
                    draw(props(version, WILL_PLACE)))
    username = draw(st.none() | text)
    password = draw(st.none() | st.binary(max_size=12))
    if version == MQTT_311 and username is None:
        password = None
    return Connect(version, draw(text), draw(st.booleans()), draw(st.integers(0, 0xFFFF)), username, password,
                   will, draw(props(version, P.CONNECT)))


@st.composite
def connacks(draw: st.DrawFn, version: int) -> Connack:
    code = draw(codes(version, P.CONNACK) if version == MQTT_5 else st.sampled_from(list(ConnectReturnCode)))
    return Connack(draw(st.booleans()) if code == 0 else False, int(code), draw(props(version, P.CONNACK)))


@st.composite
def publishes(draw: st.DrawFn, version: int) -> Publish:
    q = draw(qos)
    properties = draw(props(version, P.PUBLISH))
    topic = draw(topics)
    if properties.topic_alias is not None and draw(st.booleans()):
        topic = ""
    return Publish(topic, draw(st.binary(max_size=40)), q, draw(st.booleans()), draw(st.booleans()) if q else False,
                   draw(packet_ids) if q else None, properties)


@st.composite
def subscribes(draw: st.DrawFn, version: int) -> Subscribe:
    def one(f: str) -> st.SearchStrategy[TopicFilter]:
        if version == MQTT_5:
            return st.builds(TopicFilter, st.just(f), qos, st.booleans(), st.booleans(), st.integers(0, 2))
        return st.builds(TopicFilter, st.just(f), qos)
    filters = draw(st.lists(text, min_size=1, max_size=4))
    return Subscribe(draw(packet_ids), tuple(draw(one(f)) for f in filters), draw(props(version, P.SUBSCRIBE)))


def packets(version: int) -> st.SearchStrategy[Packet]:
    """Any packet of either direction, valid for `version`."""
    answers = [st.builds(make, packet_ids, codes(version, t), props(version, t))
               for make, t in ((Puback, P.PUBACK), (Pubrec, P.PUBREC), (Pubrel, P.PUBREL), (Pubcomp, P.PUBCOMP))]
    suback_codes = st.sampled_from(sorted(REASON_CODES_OF[P.SUBACK] if version == MQTT_5 else SUBACK_CODES_311))
    unsuback = (st.builds(Unsuback, packet_ids, st.lists(codes(version, P.UNSUBACK), min_size=1).map(tuple),
                          props(version, P.UNSUBACK)) if version == MQTT_5 else st.builds(Unsuback, packet_ids))
    options = [
        connects(version), connacks(version), publishes(version), *answers, subscribes(version),
        st.builds(Suback, packet_ids, st.lists(suback_codes, min_size=1, max_size=4).map(tuple),
                  props(version, P.SUBACK)),
        st.builds(Unsubscribe, packet_ids, st.lists(text, min_size=1, max_size=4).map(tuple),
                  props(version, P.UNSUBSCRIBE)),
        unsuback, st.just(Pingreq()), st.just(Pingresp()),
        st.builds(Disconnect, codes(version, P.DISCONNECT), props(version, P.DISCONNECT)),
    ]
    if version == MQTT_5:
        options.append(st.builds(Auth, codes(version, P.AUTH), props(version, P.AUTH)))
    return st.one_of(options)


versions = st.sampled_from((MQTT_311, MQTT_5))


@st.composite
def streams(draw: st.DrawFn) -> tuple[int, list[Packet]]:
    version = draw(versions)
    return version, draw(st.lists(packets(version), min_size=1, max_size=4))


@settings(max_examples=1500 if SOAK else 150, deadline=None)
@given(streams())
def test_every_packet_round_trips_in_its_version(stream):
    version, sent = stream
    data = b"".join(encode(p, version) for p in sent)
    decoder = PacketDecoder(len(data) + 1, version)
    assert decoder.feed(data) == sent
    assert decoder.failure is None
    assert decoder.held_bytes == 0


def test_the_strategy_covers_every_type_in_both_versions():
    for version in (MQTT_311, MQTT_5):
        expected = set(PacketType) - ({P.AUTH} if version == MQTT_311 else set())
        for ptype in expected:  # find: draws until one of this type comes (it raises if none does)
            found = find(packets(version), lambda p, t=ptype: p.type == t,
                         settings=settings(max_examples=2000, database=None, derandomize=True))
            assert found.type == ptype
