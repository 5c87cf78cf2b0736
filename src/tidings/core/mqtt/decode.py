"""Decoding one MQTT packet's body (its fixed header already read by core/mqtt/codec.py).

Theory of operation. `decode_body(type, flags, body, version)` reads the variable header and the
payload the packet type and the protocol level (4 = 3.1.1, 5 = 5.0) give, checks every rule that can
be seen in the packet alone, and returns the typed packet (core/mqtt/packets.py) or raises the
codec's `Refusal`:
  - malformed (0x81): a field that runs past the end or bytes left after the last one, a reserved
    bit set (the fixed header's flags are checked by the codec), a QoS of 3, DUP on QoS 0, a packet
    identifier of 0, bad UTF-8 or U+0000 in a string, a reason code the packet does not list, a
    3.1.1 password without a user name, will QoS or retain without a will;
  - protocol error (0x82): what parsed but breaks a rule: a SUBSCRIBE or UNSUBSCRIBE without a
    filter, retain handling 3, an empty topic without a Topic Alias (5.0), the property rules
    (core/mqtt/properties.py), Session Present with a refusal;
  - topic name invalid (0x90): a PUBLISH topic with a wildcard (3.3.2-2);
  - unsupported protocol version (0x84): a CONNECT whose name is not "MQTT" or whose level is not 4
    or 5, with the level read so the answer is a CONNACK its client can read.
A CONNECT's refusal carries its level once it was read (a 5.0 client gets a CONNACK with the code).
Whether a packet may come in the state the connection is in is the protocol machine's concern.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from tidings.core.mqtt.fields import Reader
from tidings.core.mqtt.packet_type import MQTT_5, PROTOCOL_NAME, VERSIONS, PacketType
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
from tidings.core.mqtt.properties import NO_PROPERTIES, WILL_PLACE, Properties, read_properties
from tidings.core.mqtt.reason_codes import REASON_CODES_OF, SUBACK_CODES_311, ConnectReturnCode, ReasonCode
from tidings.core.mqtt.refusal import Refusal, malformed, protocol_error

P = PacketType
LEGACY_NAME: Final = "MQIsdp"  # MQTT 3.1's protocol name (level 3): refused as an unsupported level
WILDCARDS: Final = frozenset("+#")  # not in a topic name (3.3.2-2), nor a will topic


def _packet_id(r: Reader, what: str) -> int:
    pid = r.u16(what + " packet identifier")
    if pid == 0:
        raise malformed(f"{what} has packet identifier 0")
    return pid


def _reason(r: Reader, ptype: PacketType) -> int:
    code = r.byte(ptype.name + " reason code")
    if code not in REASON_CODES_OF[ptype]:
        raise malformed(f"{ptype.name} reason code 0x{code:02X} is not one the packet may carry")
    return code


def _props(r: Reader, version: int, place: int) -> Properties:
    return read_properties(r, place) if version == MQTT_5 else NO_PROPERTIES


def decode_connect(r: Reader) -> Connect:
    name = r.utf8("protocol name")
    level = r.byte("protocol level")
    if name != PROTOCOL_NAME or level not in VERSIONS:
        shown = name if name in (PROTOCOL_NAME, LEGACY_NAME) else "an unknown name"
        raise Refusal(ReasonCode.UNSUPPORTED_PROTOCOL_VERSION, f"protocol {shown} level {level}", level)
    try:
        return _connect_after_level(r, level)
    except Refusal as exc:
        raise Refusal(exc.reason, exc.detail, level) from None


def _connect_after_level(r: Reader, level: int) -> Connect:
    flags = r.byte("connect flags")
    if flags & 0x01:
        raise malformed("CONNECT's reserved flag is set")
    has_will = bool(flags & 0x04)
    will_qos = (flags >> 3) & 0x03
    will_retain = bool(flags & 0x20)
    has_password = bool(flags & 0x40)
    has_username = bool(flags & 0x80)
    if will_qos == 3:
        raise malformed("CONNECT will QoS 3")
    if not has_will and (will_qos or will_retain):
        raise malformed("CONNECT will QoS or retain without a will")
    if has_password and not has_username and level != MQTT_5:
        raise malformed("CONNECT password without a user name (3.1.1)")
    keep_alive_s = r.u16("keep alive")
    props = _props(r, level, P.CONNECT)
    client_id = r.utf8("client identifier")
    will = None
    if has_will:
        will_props = _props(r, level, WILL_PLACE)
        topic = r.utf8("will topic")
        if not topic or WILDCARDS.intersection(topic):
            raise Refusal(ReasonCode.TOPIC_NAME_INVALID, "the will topic is empty or holds a wildcard")
        will = Will(topic, r.binary("will payload"), will_qos, will_retain, will_props)
    username = r.utf8("user name") if has_username else None
    password = r.binary("password") if has_password else None
    r.finish("CONNECT")
    return Connect(level, client_id, bool(flags & 0x02), keep_alive_s, username, password, will, props)


def _connack(r: Reader, flags: int, version: int) -> Connack:
    ack_flags = r.byte("connack flags")
    if ack_flags & 0xFE:
        raise malformed("CONNACK's reserved flags are set")
    if version == MQTT_5:
        code = _reason(r, P.CONNACK)
    else:
        code = r.byte("connack return code")
        if code > max(ConnectReturnCode):
            raise malformed(f"CONNACK return code {code}")
    props = _props(r, version, P.CONNACK)
    r.finish("CONNACK")
    if code and ack_flags:
        raise protocol_error("CONNACK with Session Present and a refusal")
    return Connack(bool(ack_flags), code, props)


# a PUBLISH's fields in Publish's order: (topic, payload, qos, retain, dup, packet id, properties)
PublishFields = tuple[str, bytes, int, bool, bool, int | None, Properties]


def decode_publish(body: bytes, flags: int, version: int) -> Publish:
    """PUBLISH, read straight from its body: the packet of the hot path."""
    return Publish(*publish_fields(body, 0, len(body), flags, version))


def publish_fields(buf: bytes | bytearray, start: int, stop: int, flags: int, version: int) -> PublishFields:
    """The fields of the PUBLISH whose body is `buf[start:stop]`, read in place (the same rules as
    the Reader's, without a call per field, nor a Publish built: a run of them is read so by
    core/mqtt/codec.py `take_publishes`)."""
    qos = (flags >> 1) & 0x03
    dup = bool(flags & 0x08)
    if qos == 3:
        raise malformed("PUBLISH QoS 3")
    if dup and not qos:
        raise malformed("PUBLISH with DUP at QoS 0")
    pos = start + 2 + ((buf[start] << 8) | buf[start + 1]) if stop - start >= 2 else stop + 2
    if pos > stop:
        raise malformed("topic name: the packet ends early")
    try:
        topic = buf[start + 2:pos].decode("utf-8")
    except UnicodeDecodeError:
        raise malformed("topic name is not well-formed UTF-8") from None
    if "\x00" in topic:
        raise malformed("topic name holds U+0000")
    packet_id = None
    if qos:
        if pos + 2 > stop:
            raise malformed("PUBLISH packet identifier: the packet ends early")
        packet_id = (buf[pos] << 8) | buf[pos + 1]
        if not packet_id:
            raise malformed("PUBLISH has packet identifier 0")
        pos += 2
    props = NO_PROPERTIES
    if version == MQTT_5:
        if pos < stop and buf[pos] == 0:
            pos += 1
        else:
            r = Reader(bytes(buf[pos:stop]))
            props = read_properties(r, P.PUBLISH)
            pos += r.pos
    if not topic or "+" in topic or "#" in topic:
        _bad_topic(topic, props, version)
    return topic, bytes(buf[pos:stop]), qos, bool(flags & 0x01), dup, packet_id, props


def _bad_topic(topic: str, props: Properties, version: int) -> None:
    """An empty topic or one with a wildcard: refused, but an empty one a 5.0 Topic Alias names."""
    if topic:
        raise Refusal(ReasonCode.TOPIC_NAME_INVALID, "a PUBLISH topic holds a wildcard")
    if version != MQTT_5:
        raise malformed("PUBLISH with an empty topic")
    if props.topic_alias is None:
        raise protocol_error("PUBLISH with an empty topic and no Topic Alias")


_ANSWERS: Final[dict[int, Callable[[int, int, Properties], Packet]]] = {
    P.PUBACK: Puback, P.PUBREC: Pubrec, P.PUBREL: Pubrel, P.PUBCOMP: Pubcomp}


def _answer(ptype: PacketType) -> Callable[[Reader, int, int], Packet]:
    """The decoder of PUBACK, PUBREC, PUBREL or PUBCOMP: a packet id; in 5.0 a reason code and
    properties, each left out when the rest is (3.4.2.1: a remaining length of 2 means 0x00)."""
    make = _ANSWERS[ptype]

    def decode(r: Reader, flags: int, version: int) -> Packet:
        pid = _packet_id(r, ptype.name)
        code = 0
        props = NO_PROPERTIES
        if version == MQTT_5 and r.left():
            code = _reason(r, ptype)
            if r.left():
                props = read_properties(r, ptype)
        r.finish(ptype.name)
        return make(pid, code, props)
    return decode


def _subscribe(r: Reader, flags: int, version: int) -> Subscribe:
    pid = _packet_id(r, "SUBSCRIBE")
    props = _props(r, version, P.SUBSCRIBE)
    topics: list[TopicFilter] = []
    reserved = 0xC0 if version == MQTT_5 else 0xFC
    while r.left():
        flt = r.utf8("topic filter")
        options = r.byte("subscription options")
        if options & reserved:
            raise malformed("SUBSCRIBE options with reserved bits set")
        qos = options & 0x03
        retain_handling = (options >> 4) & 0x03
        if qos == 3:
            raise malformed("SUBSCRIBE QoS 3")
        if retain_handling == 3:
            raise protocol_error("SUBSCRIBE retain handling 3")
        topics.append(TopicFilter(flt, qos, bool(options & 0x04), bool(options & 0x08), retain_handling))
    if not topics:
        raise protocol_error("SUBSCRIBE without a topic filter")
    return Subscribe(pid, tuple(topics), props)


def _codes(r: Reader, ptype: PacketType, allowed: frozenset[int]) -> tuple[int, ...]:
    codes = tuple(r.rest())
    bad = [c for c in codes if c not in allowed]
    if bad:
        raise malformed(f"{ptype.name} reason code 0x{bad[0]:02X} is not one the packet may carry")
    if not codes:
        raise protocol_error(f"{ptype.name} without a reason code")
    return codes


def _suback(r: Reader, flags: int, version: int) -> Suback:
    pid = _packet_id(r, "SUBACK")
    props = _props(r, version, P.SUBACK)
    allowed = frozenset(REASON_CODES_OF[P.SUBACK]) if version == MQTT_5 else SUBACK_CODES_311
    return Suback(pid, _codes(r, P.SUBACK, allowed), props)


def _unsubscribe(r: Reader, flags: int, version: int) -> Unsubscribe:
    pid = _packet_id(r, "UNSUBSCRIBE")
    props = _props(r, version, P.UNSUBSCRIBE)
    filters: list[str] = []
    while r.left():
        filters.append(r.utf8("topic filter"))
    if not filters:
        raise protocol_error("UNSUBSCRIBE without a topic filter")
    return Unsubscribe(pid, tuple(filters), props)


def _unsuback(r: Reader, flags: int, version: int) -> Unsuback:
    pid = _packet_id(r, "UNSUBACK")
    if version != MQTT_5:
        r.finish("UNSUBACK")
        return Unsuback(pid)
    props = read_properties(r, P.UNSUBACK)
    return Unsuback(pid, _codes(r, P.UNSUBACK, frozenset(REASON_CODES_OF[P.UNSUBACK])), props)


def _empty(make: Callable[[], Packet], ptype: PacketType) -> Callable[[Reader, int, int], Packet]:
    def decode(r: Reader, flags: int, version: int) -> Packet:
        r.finish(ptype.name)
        return make()
    return decode


def _reasoned(ptype: PacketType) -> Callable[[Reader, int, int], Packet]:
    """DISCONNECT and AUTH: in 5.0 a reason code and properties, each left out when the rest is."""
    make: Callable[..., Packet] = Disconnect if ptype == P.DISCONNECT else Auth

    def decode(r: Reader, flags: int, version: int) -> Packet:
        if version != MQTT_5:
            if ptype == P.AUTH:
                raise malformed("AUTH (packet type 15) is reserved in 3.1.1")
            r.finish(ptype.name)
            return make()
        code = 0
        props = NO_PROPERTIES
        if r.left():
            code = _reason(r, ptype)
            if r.left():
                props = read_properties(r, ptype)
        r.finish(ptype.name)
        return make(code, props)
    return decode


BODY: Final[dict[int, Callable[[Reader, int, int], Packet]]] = {
    P.CONNECT: lambda r, flags, version: decode_connect(r),
    P.CONNACK: _connack,
    P.PUBACK: _answer(P.PUBACK),
    P.PUBREC: _answer(P.PUBREC),
    P.PUBREL: _answer(P.PUBREL),
    P.PUBCOMP: _answer(P.PUBCOMP),
    P.SUBSCRIBE: _subscribe,
    P.SUBACK: _suback,
    P.UNSUBSCRIBE: _unsubscribe,
    P.UNSUBACK: _unsuback,
    P.PINGREQ: _empty(Pingreq, P.PINGREQ),
    P.PINGRESP: _empty(Pingresp, P.PINGRESP),
    P.DISCONNECT: _reasoned(P.DISCONNECT),
    P.AUTH: _reasoned(P.AUTH),
}


def decode_body(ptype: int, flags: int, body: bytes, version: int) -> Packet:
    """The packet of type `ptype` whose fixed-header flags are `flags` and body `body` on a
    connection of protocol level `version`; a Refusal when it breaks a rule (module doc)."""
    if ptype == P.PUBLISH:
        return decode_publish(body, flags, version)
    if len(body) == 2 and ptype in _ANSWERS:  # PUBACK, PUBREC, PUBREL, PUBCOMP as most are: an id
        pid = (body[0] << 8) | body[1]
        if not pid:
            raise malformed(f"{PacketType(ptype).name} has packet identifier 0")
        return _ANSWERS[ptype](pid, 0, NO_PROPERTIES)
    return BODY[ptype](Reader(body), flags, version)
