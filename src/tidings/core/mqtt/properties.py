"""MQTT 5.0 properties (section 2.2.2): every property id, its data type, the packets it may be
in, and `Properties`, the one typed value a packet carries them in.

Theory of operation. A property is a Variable Byte Integer id and a value whose type the id fixes
(`SPEC`). The codec reads a packet's properties with `read_properties(reader, place)`, where
`place` is the packet type (or `WILL_PLACE` for a CONNECT's Will Properties), and refuses:
  - an id the specification does not define: malformed (0x81), the rest cannot be parsed;
  - a defined id in a packet that may not carry it, a second copy of a property that may appear
    once (all but User Property, and Subscription Identifier in PUBLISH), or a value outside its
    range (a 0/1 flag that is 2, a Receive Maximum, Maximum Packet Size, Topic Alias or
    Subscription Identifier of 0): protocol error (0x82), the packet parsed but breaks a rule.
Writing (`write_properties`) goes in id order, each multi-valued property in its own order, so a
read of a written `Properties` gives it back equal.

Durations are seconds on the wire and named `..._s` here; the Maximum Packet Size is in bytes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Final

from tidings.core.mqtt import fields
from tidings.core.mqtt.fields import Reader
from tidings.core.mqtt.packet_type import PacketType
from tidings.core.mqtt.refusal import malformed, protocol_error


class PropertyId(IntEnum):
    PAYLOAD_FORMAT_INDICATOR = 0x01
    MESSAGE_EXPIRY_INTERVAL = 0x02
    CONTENT_TYPE = 0x03
    RESPONSE_TOPIC = 0x08
    CORRELATION_DATA = 0x09
    SUBSCRIPTION_IDENTIFIER = 0x0B
    SESSION_EXPIRY_INTERVAL = 0x11
    ASSIGNED_CLIENT_IDENTIFIER = 0x12
    SERVER_KEEP_ALIVE = 0x13
    AUTHENTICATION_METHOD = 0x15
    AUTHENTICATION_DATA = 0x16
    REQUEST_PROBLEM_INFORMATION = 0x17
    WILL_DELAY_INTERVAL = 0x18
    REQUEST_RESPONSE_INFORMATION = 0x19
    RESPONSE_INFORMATION = 0x1A
    SERVER_REFERENCE = 0x1C
    REASON_STRING = 0x1F
    RECEIVE_MAXIMUM = 0x21
    TOPIC_ALIAS_MAXIMUM = 0x22
    TOPIC_ALIAS = 0x23
    MAXIMUM_QOS = 0x24
    RETAIN_AVAILABLE = 0x25
    USER_PROPERTY = 0x26
    MAXIMUM_PACKET_SIZE = 0x27
    WILDCARD_SUBSCRIPTION_AVAILABLE = 0x28
    SUBSCRIPTION_IDENTIFIER_AVAILABLE = 0x29
    SHARED_SUBSCRIPTION_AVAILABLE = 0x2A


class PropertyType(IntEnum):
    """The data types of section 1.5."""

    BYTE = 1
    TWO_BYTE_INTEGER = 2
    FOUR_BYTE_INTEGER = 4
    VARIABLE_BYTE_INTEGER = 5
    UTF8_STRING = 6
    BINARY_DATA = 7
    UTF8_STRING_PAIR = 8


WILL_PLACE: Final = 0  # the Will Properties of a CONNECT (no packet type is 0)

P = PacketType
T = PropertyType
_PUBLISH_AND_WILL: Final = frozenset({P.PUBLISH, WILL_PLACE})
_ACKS: Final = frozenset({P.CONNACK, P.PUBACK, P.PUBREC, P.PUBREL, P.PUBCOMP, P.SUBACK, P.UNSUBACK, P.DISCONNECT,
                          P.AUTH})


@dataclass(frozen=True, slots=True)
class PropertySpec:
    id: PropertyId
    field: str  # the attribute of `Properties` holding it
    type: PropertyType
    places: frozenset[int]  # packet types (and WILL_PLACE) that may carry it
    flag: bool = False  # a Byte whose only values are 0 and 1
    nonzero: bool = False  # 0 is a protocol error


def _spec(pid: PropertyId, field: str, kind: PropertyType, places: frozenset[int] | set[int],
          flag: bool = False, nonzero: bool = False) -> PropertySpec:
    return PropertySpec(pid, field, kind, frozenset(places), flag, nonzero)


Pid = PropertyId
SPEC: Final[dict[int, PropertySpec]] = {s.id: s for s in (
    _spec(Pid.PAYLOAD_FORMAT_INDICATOR, "payload_format_indicator", T.BYTE, _PUBLISH_AND_WILL, flag=True),
    _spec(Pid.MESSAGE_EXPIRY_INTERVAL, "message_expiry_interval_s", T.FOUR_BYTE_INTEGER, _PUBLISH_AND_WILL),
    _spec(Pid.CONTENT_TYPE, "content_type", T.UTF8_STRING, _PUBLISH_AND_WILL),
    _spec(Pid.RESPONSE_TOPIC, "response_topic", T.UTF8_STRING, _PUBLISH_AND_WILL),
    _spec(Pid.CORRELATION_DATA, "correlation_data", T.BINARY_DATA, _PUBLISH_AND_WILL),
    _spec(Pid.SUBSCRIPTION_IDENTIFIER, "subscription_identifiers", T.VARIABLE_BYTE_INTEGER, {P.PUBLISH, P.SUBSCRIBE},
          nonzero=True),
    _spec(Pid.SESSION_EXPIRY_INTERVAL, "session_expiry_interval_s", T.FOUR_BYTE_INTEGER,
          {P.CONNECT, P.CONNACK, P.DISCONNECT}),
    _spec(Pid.ASSIGNED_CLIENT_IDENTIFIER, "assigned_client_identifier", T.UTF8_STRING, {P.CONNACK}),
    _spec(Pid.SERVER_KEEP_ALIVE, "server_keep_alive_s", T.TWO_BYTE_INTEGER, {P.CONNACK}),
    _spec(Pid.AUTHENTICATION_METHOD, "authentication_method", T.UTF8_STRING, {P.CONNECT, P.CONNACK, P.AUTH}),
    _spec(Pid.AUTHENTICATION_DATA, "authentication_data", T.BINARY_DATA, {P.CONNECT, P.CONNACK, P.AUTH}),
    _spec(Pid.REQUEST_PROBLEM_INFORMATION, "request_problem_information", T.BYTE, {P.CONNECT}, flag=True),
    _spec(Pid.WILL_DELAY_INTERVAL, "will_delay_interval_s", T.FOUR_BYTE_INTEGER, {WILL_PLACE}),
    _spec(Pid.REQUEST_RESPONSE_INFORMATION, "request_response_information", T.BYTE, {P.CONNECT}, flag=True),
    _spec(Pid.RESPONSE_INFORMATION, "response_information", T.UTF8_STRING, {P.CONNACK}),
    _spec(Pid.SERVER_REFERENCE, "server_reference", T.UTF8_STRING, {P.CONNACK, P.DISCONNECT}),
    _spec(Pid.REASON_STRING, "reason_string", T.UTF8_STRING, _ACKS),
    _spec(Pid.RECEIVE_MAXIMUM, "receive_maximum", T.TWO_BYTE_INTEGER, {P.CONNECT, P.CONNACK}, nonzero=True),
    _spec(Pid.TOPIC_ALIAS_MAXIMUM, "topic_alias_maximum", T.TWO_BYTE_INTEGER, {P.CONNECT, P.CONNACK}),
    _spec(Pid.TOPIC_ALIAS, "topic_alias", T.TWO_BYTE_INTEGER, {P.PUBLISH}, nonzero=True),
    _spec(Pid.MAXIMUM_QOS, "maximum_qos", T.BYTE, {P.CONNACK}, flag=True),
    _spec(Pid.RETAIN_AVAILABLE, "retain_available", T.BYTE, {P.CONNACK}, flag=True),
    _spec(Pid.USER_PROPERTY, "user_properties", T.UTF8_STRING_PAIR,
          _ACKS | {P.CONNECT, P.PUBLISH, WILL_PLACE, P.SUBSCRIBE, P.UNSUBSCRIBE}),
    _spec(Pid.MAXIMUM_PACKET_SIZE, "maximum_packet_size_bytes", T.FOUR_BYTE_INTEGER, {P.CONNECT, P.CONNACK},
          nonzero=True),
    _spec(Pid.WILDCARD_SUBSCRIPTION_AVAILABLE, "wildcard_subscription_available", T.BYTE, {P.CONNACK}, flag=True),
    _spec(Pid.SUBSCRIPTION_IDENTIFIER_AVAILABLE, "subscription_identifier_available", T.BYTE, {P.CONNACK},
          flag=True),
    _spec(Pid.SHARED_SUBSCRIPTION_AVAILABLE, "shared_subscription_available", T.BYTE, {P.CONNACK}, flag=True),
)}
MULTIPLE: Final = frozenset({Pid.USER_PROPERTY, Pid.SUBSCRIPTION_IDENTIFIER})  # kept as tuples in `Properties`


@dataclass(frozen=True, slots=True)
class Properties:
    """A packet's properties; None (or an empty tuple) where absent. `subscription_identifiers`
    holds one in a SUBSCRIBE, any number in a PUBLISH a server delivers (3.3.2.3.8)."""

    payload_format_indicator: int | None = None
    message_expiry_interval_s: int | None = None
    content_type: str | None = None
    response_topic: str | None = None
    correlation_data: bytes | None = None
    subscription_identifiers: tuple[int, ...] = ()
    session_expiry_interval_s: int | None = None
    assigned_client_identifier: str | None = None
    server_keep_alive_s: int | None = None
    authentication_method: str | None = None
    authentication_data: bytes | None = None
    request_problem_information: int | None = None
    will_delay_interval_s: int | None = None
    request_response_information: int | None = None
    response_information: str | None = None
    server_reference: str | None = None
    reason_string: str | None = None
    receive_maximum: int | None = None
    topic_alias_maximum: int | None = None
    topic_alias: int | None = None
    maximum_qos: int | None = None
    retain_available: int | None = None
    user_properties: tuple[tuple[str, str], ...] = ()
    maximum_packet_size_bytes: int | None = None
    wildcard_subscription_available: int | None = None
    subscription_identifier_available: int | None = None
    shared_subscription_available: int | None = None


NO_PROPERTIES: Final = Properties()
_EMPTY: Final = b"\x00"


_READ: Final[dict[PropertyType, Callable[[Reader, str], Any]]] = {
    T.BYTE: Reader.byte,
    T.TWO_BYTE_INTEGER: Reader.u16,
    T.FOUR_BYTE_INTEGER: Reader.u32,
    T.VARIABLE_BYTE_INTEGER: Reader.vbi,
    T.UTF8_STRING: Reader.utf8,
    T.BINARY_DATA: Reader.binary,
    T.UTF8_STRING_PAIR: Reader.pair,
}
_WRITE: Final[dict[PropertyType, Callable[[Any], bytes]]] = {
    T.BYTE: lambda v: bytes((v,)),
    T.TWO_BYTE_INTEGER: fields.u16,
    T.FOUR_BYTE_INTEGER: fields.u32,
    T.VARIABLE_BYTE_INTEGER: fields.vbi,
    T.UTF8_STRING: fields.utf8,
    T.BINARY_DATA: fields.binary,
    T.UTF8_STRING_PAIR: lambda v: fields.utf8(v[0]) + fields.utf8(v[1]),
}


def read_properties(reader: Reader, place: int) -> Properties:
    """The properties at the reader's position (their length, then each property) in a packet of
    type `place` (or WILL_PLACE); a refusal for any rule they break (see the module doc)."""
    length = reader.vbi("property length")
    if length == 0:
        return NO_PROPERTIES
    if length > reader.left():
        raise malformed(f"property length {length} runs past the packet's end")
    end = reader.pos + length
    sub = Reader(reader.data, reader.pos, end)
    values: dict[str, Any] = {}
    while sub.pos < end:
        pid = sub.vbi("property id")
        spec = SPEC.get(pid)
        if spec is None:
            raise malformed(f"unknown property id 0x{pid:02X}")
        if place not in spec.places:
            where = "Will Properties" if place == WILL_PLACE else PacketType(place).name
            raise protocol_error(f"{spec.id.name} is not allowed in {where}")
        value = _READ[spec.type](sub, spec.id.name)
        if spec.flag and value not in (0, 1):
            raise protocol_error(f"{spec.id.name} must be 0 or 1, not {value!r}")
        if spec.nonzero and value == 0:
            raise protocol_error(f"{spec.id.name} must not be 0")
        if spec.id in MULTIPLE:
            if spec.id == Pid.SUBSCRIPTION_IDENTIFIER and place != P.PUBLISH and spec.field in values:
                raise protocol_error("SUBSCRIPTION_IDENTIFIER appears twice")
            values[spec.field] = (*values.get(spec.field, ()), value)
        elif spec.field in values:
            raise protocol_error(f"{spec.id.name} appears twice")
        else:
            values[spec.field] = value
    reader.pos = end
    return Properties(**values)


def write_properties(props: Properties) -> bytes:
    """The property length and the properties, in id order."""
    if props is NO_PROPERTIES:
        return _EMPTY
    out = bytearray()
    for pid, spec in SPEC.items():
        value = getattr(props, spec.field)
        if value is None or value == ():
            continue
        for one in value if pid in MULTIPLE else (value,):
            out.append(pid)
            out += _WRITE[spec.type](one)
    return fields.vbi(len(out)) + bytes(out)


def misplaced(props: Properties, place: int) -> list[PropertyId]:
    """The properties set in `props` that `place` may not carry (empty when it may carry them all):
    what a test or our own encoder's caller checks before sending."""
    return [spec.id for spec in SPEC.values()
            if getattr(props, spec.field) not in (None, ()) and place not in spec.places]
