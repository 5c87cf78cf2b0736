"""Encoding MQTT packets (core/mqtt/packets.py) for a connection of protocol level 4 (3.1.1) or 5.

`encode(packet, version)` gives the whole packet: fixed header (type, flags, remaining length as a
Variable Byte Integer), variable header and payload. On a 3.1.1 connection what 3.1.1 has no place
for is left out (properties, the reason codes of the acknowledgements and DISCONNECT, the
subscription options past QoS); reason codes that 3.1.1 does have (CONNACK's return code, SUBACK's)
are written as given: the protocol machine chooses them for the version (reason_codes.py folds
5.0's onto 3.1.1's). In 5.0 a reason code of 0 with no properties is left out, as 3.4.2.1 allows,
so an acknowledgement costs four bytes. Packets are ours: a value out of range is an assert.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from tidings.core.mqtt.fields import binary, u16, utf8, vbi
from tidings.core.mqtt.packet_type import MQTT_5, PROTOCOL_NAME, PacketType
from tidings.core.mqtt.packets import (
    Auth,
    Connack,
    Connect,
    Disconnect,
    Packet,
    Publish,
    Suback,
    Subscribe,
    Unsuback,
    Unsubscribe,
)
from tidings.core.mqtt.properties import NO_PROPERTIES, Properties, write_properties

P = PacketType
_REQUIRED_FLAGS: Final = {P.PUBREL: 0x02, P.SUBSCRIBE: 0x02, P.UNSUBSCRIBE: 0x02}
_PING: Final = {P.PINGREQ: b"\xc0\x00", P.PINGRESP: b"\xd0\x00"}


def _packet(ptype: PacketType, body: bytes, flags: int = 0) -> bytes:
    return bytes(((ptype << 4) | flags,)) + vbi(len(body)) + body


def _connect(p: Connect, version: int) -> bytes:
    flags = 0x02 if p.clean_start else 0
    will = p.will
    if will is not None:
        flags |= 0x04 | (will.qos << 3) | (0x20 if will.retain else 0)
    if p.password is not None:
        flags |= 0x40
    if p.username is not None:
        flags |= 0x80
    out = [utf8(PROTOCOL_NAME), bytes((p.protocol_level, flags)), u16(p.keep_alive_s)]
    if version == MQTT_5:
        out.append(write_properties(p.properties))
    out.append(utf8(p.client_id))
    if will is not None:
        if version == MQTT_5:
            out.append(write_properties(will.properties))
        out += (utf8(will.topic), binary(will.payload))
    if p.username is not None:
        out.append(utf8(p.username))
    if p.password is not None:
        out.append(binary(p.password))
    return _packet(P.CONNECT, b"".join(out))


def _connack(p: Connack, version: int) -> bytes:
    body = bytes((1 if p.session_present else 0, p.reason_code))
    if version == MQTT_5:
        body += write_properties(p.properties)
    return _packet(P.CONNACK, body)


def encode_publish(p: Publish, version: int) -> bytes:
    return publish_bytes(p.topic, p.payload, p.qos, p.retain, p.dup, p.packet_id, p.properties, version)


def publish_bytes(topic: str, payload: bytes, qos: int, retain: bool, dup: bool, packet_id: int | None,
                  properties: Properties, version: int) -> bytes:
    """A PUBLISH from its fields (a delivery is encoded without a Publish built for it)."""
    flags = (qos << 1) | (0x08 if dup else 0) | (0x01 if retain else 0)
    raw = topic.encode("utf-8")
    head = len(raw).to_bytes(2, "big") + raw
    if qos:
        assert packet_id is not None, topic
        head += packet_id.to_bytes(2, "big")
    if version == MQTT_5:
        head += write_properties(properties)
    return bytes((0x30 | flags,)) + vbi(len(head) + len(payload)) + head + payload


def _answer(p: Any, version: int) -> bytes:
    """PUBACK, PUBREC, PUBREL, PUBCOMP: the packet id, then in 5.0 what is not the default."""
    body = u16(p.packet_id)
    if version == MQTT_5 and (p.reason_code or p.properties is not NO_PROPERTIES):
        body += bytes((p.reason_code,))
        if p.properties is not NO_PROPERTIES:
            body += write_properties(p.properties)
    return _packet(p.type, body, _REQUIRED_FLAGS.get(p.type, 0))


def _subscribe(p: Subscribe, version: int) -> bytes:
    out = [u16(p.packet_id)]
    if version == MQTT_5:
        out.append(write_properties(p.properties))
    for t in p.topics:
        options = t.qos
        if version == MQTT_5:
            options |= (0x04 if t.no_local else 0) | (0x08 if t.retain_as_published else 0) | (t.retain_handling << 4)
        out += (utf8(t.filter), bytes((options,)))
    return _packet(P.SUBSCRIBE, b"".join(out), 0x02)


def _suback(p: Suback, version: int) -> bytes:
    props = write_properties(p.properties) if version == MQTT_5 else b""
    return _packet(P.SUBACK, u16(p.packet_id) + props + bytes(p.reason_codes))


def _unsubscribe(p: Unsubscribe, version: int) -> bytes:
    props = write_properties(p.properties) if version == MQTT_5 else b""
    return _packet(P.UNSUBSCRIBE, u16(p.packet_id) + props + b"".join(utf8(f) for f in p.filters), 0x02)


def _unsuback(p: Unsuback, version: int) -> bytes:
    if version != MQTT_5:
        return _packet(P.UNSUBACK, u16(p.packet_id))
    return _packet(P.UNSUBACK, u16(p.packet_id) + write_properties(p.properties) + bytes(p.reason_codes))


def _reasoned(p: Disconnect | Auth, version: int) -> bytes:
    """DISCONNECT and AUTH: empty in 3.1.1 (which has no AUTH); in 5.0 empty for a plain success."""
    assert version == MQTT_5 or p.type == P.DISCONNECT, "3.1.1 has no AUTH"
    if version != MQTT_5 or (not p.reason_code and p.properties is NO_PROPERTIES):
        return _packet(p.type, b"")
    body = bytes((p.reason_code,))
    if p.properties is not NO_PROPERTIES:
        body += write_properties(p.properties)
    return _packet(p.type, body)


ENCODERS: Final[dict[PacketType, Callable[[Any, int], bytes]]] = {
    P.CONNECT: _connect,
    P.CONNACK: _connack,
    P.PUBLISH: encode_publish,
    P.PUBACK: _answer,
    P.PUBREC: _answer,
    P.PUBREL: _answer,
    P.PUBCOMP: _answer,
    P.SUBSCRIBE: _subscribe,
    P.SUBACK: _suback,
    P.UNSUBSCRIBE: _unsubscribe,
    P.UNSUBACK: _unsuback,
    P.PINGREQ: lambda p, version: _PING[P.PINGREQ],
    P.PINGRESP: lambda p, version: _PING[P.PINGRESP],
    P.DISCONNECT: _reasoned,
    P.AUTH: _reasoned,
}


def encode(packet: Packet, version: int) -> bytes:
    """The bytes of `packet` on a connection of protocol level `version` (4 or 5)."""
    return ENCODERS[packet.type](packet, version)
