"""What an MQTT packet is in tidings' terms and back, for every connection alike (core/mqtt/session.py
applies it to one): the CONNECT's credential, a PUBLISH's event, an event's PUBLISH, and the broker's
refusal codes (core/errors.py) as MQTT 5.0 reason codes.

The event of a PUBLISH: its channel is the topic (core/mqtt/topics.py), its payload the payload as
is, its attributes the PUBLISH's user properties (a key given twice keeps its last value; a value
that is a number or a boolean in its canonical form becomes one, so filters compare it so), its
content type as `mqtt.content_type`, `mqtt.qos` = 0 for a QoS 0 publish and `mqtt.retain` = true
for a retained one (core/mqtt/retained.py), a 5.0 Response Topic as `mqtt.response_topic` and its
Correlation Data as `mqtt.correlation_data` (base64 text: an attribute holds no bytes, so at most
3,072 bytes of it fit the 4,096 of an attribute's text), its Message Expiry Interval as
`mqtt.expiry_interval_s` (counted from the event's tick, the pubend's clock: a delivery after it is
not sent, one before it carries what is left, rounded up); a user property under
`mqtt.` is refused (0x99), so that what the broker says of an event cannot be forged. Its source is
the connection's: the identity (or the service `mqtt` for a client without a user name) and the
client id as instance. An event's PUBLISH goes back the same way: the attributes but `mqtt.*` as
user properties (values as text) and the content type, response topic and correlation data as
their properties in 5.0, none in 3.1.1 (which has no properties), at the QoS
min(the subscription's, the event's: 0 for `mqtt.qos` = 0, else 1: a native event is logged and
acknowledged as QoS 1 is).

The password of a CONNECT is the identity's secret, as `tidings auth add` printed it (`NAME:SECRET`,
or SECRET alone with the user name NAME); it may come only over TLS or from a loopback peer unless
the broker runs with --allow-plain-password (`PlainPassword` otherwise: 0x87).
"""

from __future__ import annotations

import base64
import binascii
import math
from dataclasses import dataclass, replace

from tidings.core import errors
from tidings.core.auth.credentials import Credential, CredentialError, parse_credential, unb64
from tidings.core.auth.names import check_name
from tidings.core.defaults import FRAME_BYTES_MAX
from tidings.core.errors import TidingsError
from tidings.core.event import INT_MAX, INT_MIN, AttrValue, Event
from tidings.core.mqtt import packets as p
from tidings.core.mqtt import topics
from tidings.core.mqtt.properties import NO_PROPERTIES, Properties
from tidings.core.mqtt.reason_codes import ReasonCode
from tidings.core.session.client_session import ClientSession, PublishEvent

R = ReasonCode
MQTT_3_1_1 = 4
MQTT_5 = 5
ANONYMOUS_SERVICE = "mqtt"  # the service of a client that gives no user name
CONTENT_TYPE = "mqtt.content_type"  # attributes the broker sets (a user property cannot: refused)
QOS = "mqtt.qos"
RETAIN = "mqtt.retain"
RESPONSE_TOPIC = "mqtt.response_topic"  # 5.0 request/response: the Response Topic as is
CORRELATION_DATA = "mqtt.correlation_data"  # its Correlation Data, base64 (an attribute holds no bytes)
EXPIRY = "mqtt.expiry_interval_s"  # 5.0 Message Expiry Interval, from the event's tick
US_PER_S = 1_000_000
EXPIRY_S_MAX = 2**32 - 1  # a Four Byte Integer's
RESERVED_PREFIX = "mqtt."
FILTER_PROPERTY = "filter"  # a 5.0 SUBSCRIBE's user property: a content filter (docs/filters.md)
REASON_CHARS_MAX = 200  # of a reason string we send

CONNECT_REFUSALS = {errors.AUTH_FAILED: R.BAD_USER_NAME_OR_PASSWORD, errors.AUTH_REQUIRED: R.NOT_AUTHORIZED,
                    errors.BAD_NAME: R.CLIENT_IDENTIFIER_NOT_VALID, errors.LIMIT_EXCEEDED: R.QUOTA_EXCEEDED,
                    errors.BAD_CREDENTIAL: R.BAD_USER_NAME_OR_PASSWORD, errors.HANDSHAKE: R.SERVER_BUSY}
PUBLISH_REFUSALS = {errors.FORBIDDEN: R.NOT_AUTHORIZED, errors.LIMIT_EXCEEDED: R.QUOTA_EXCEEDED,
                    errors.BAD_CHANNEL: R.TOPIC_NAME_INVALID, errors.EVENT_TOO_LARGE: R.QUOTA_EXCEEDED,
                    errors.BAD_ATTRIBUTES: R.IMPLEMENTATION_SPECIFIC_ERROR}
SUBSCRIBE_REFUSALS = {errors.FORBIDDEN: R.NOT_AUTHORIZED, errors.LIMIT_EXCEEDED: R.QUOTA_EXCEEDED,
                      errors.TOO_MANY_SUBSCRIPTIONS: R.QUOTA_EXCEEDED, errors.BAD_PATTERN: R.TOPIC_FILTER_INVALID,
                      errors.BAD_FILTER: R.IMPLEMENTATION_SPECIFIC_ERROR}


@dataclass(frozen=True, slots=True)
class MqttSettings:
    """The MQTT side's limits (the broker's own apply too: frame and event sizes, rates, leases)."""

    keep_alive_factor_percent: int = 150  # a client silent for 1.5 keep-alives is gone (MQTT 3.1.2.10)
    receive_maximum: int = 1024  # QoS 1/2 publishes of a 5.0 client not yet answered (our CONNACK's)
    deliveries_queued_max: int = 10_000  # QoS 1 deliveries waiting behind the client's Receive Maximum
    early_packets_max: int = 64  # packets a client sends before its CONNACK
    packet_bytes_max: int = FRAME_BYTES_MAX  # the Maximum Packet Size we announce and hold clients to
    allow_plain_password: bool = False  # a password over plain TCP from another host (--allow-plain-password)


class PlainPassword(TidingsError):
    """A password where it would travel in plain over the network."""


def reason(text: str) -> Properties:
    """A reason string (5.0) as the properties of an answer."""
    return Properties(reason_string=text[:REASON_CHARS_MAX])


def credential_of(username: str | None, password: bytes | None, secure: bool) -> Credential | None:
    """The native credential of a CONNECT's user name and password (None: the client gives no
    password); CredentialError or NameRuleError for one that cannot be, PlainPassword where it may not come."""
    if password is None:
        return None
    if username is None:
        raise CredentialError("a password needs a user name (the identity's)")
    if not secure:
        raise PlainPassword("a password is accepted only over TLS or from loopback "
                            "(the broker's --allow-plain-password lifts this)")
    text = password.decode("utf-8", "replace")
    if ":" in text:
        credential = parse_credential(text)
        if credential.name != username:
            raise CredentialError("the password names another identity than the user name")
        return credential
    return Credential(check_name(username, "a user name"), unb64(text, "the password"))


def attributes_of(packet: p.Publish) -> dict[str, AttrValue] | str:
    """The attributes of a PUBLISH's event, or why they cannot be (a reserved user property)."""
    attributes: dict[str, AttrValue] = {}
    for key, value in packet.properties.user_properties:
        if key.startswith(RESERVED_PREFIX):
            return f"user property {key!r}: the prefix {RESERVED_PREFIX!r} is the broker's"
        attributes[key] = attribute_of(value)
    if packet.properties.content_type is not None:
        attributes[CONTENT_TYPE] = packet.properties.content_type
    props = packet.properties
    if props.response_topic is not None:
        attributes[RESPONSE_TOPIC] = props.response_topic
    if props.correlation_data is not None:
        attributes[CORRELATION_DATA] = base64.b64encode(props.correlation_data).decode("ascii")
    if props.message_expiry_interval_s is not None:
        attributes[EXPIRY] = props.message_expiry_interval_s
    if packet.qos != 1:  # (a native event counts as QoS 1: logged and acknowledged)
        attributes[QOS] = packet.qos
    if packet.retain:
        attributes[RETAIN] = True  # the retain mark (core/mqtt/retained.py)
    return attributes


@dataclass(frozen=True, slots=True)
class Refused:
    """Why a PUBLISH is not an event: its reason code and in words."""

    code: ReasonCode
    reason: str


def event_of(native: ClientSession, packet: p.Publish) -> PublishEvent | Refused:
    """The event of a PUBLISH, checked as the client session checks a native client's (the broker
    checks it again), or why it cannot be one."""
    channel = topics.channel_of(packet.topic)
    if isinstance(channel, topics.TopicRefused):
        return Refused(ReasonCode(channel.reason_code), channel.reason)
    attributes = attributes_of(packet)
    if isinstance(attributes, str):
        return Refused(R.PAYLOAD_FORMAT_INVALID, attributes)
    try:
        return native.check_event(channel, packet.payload, attributes)
    except TidingsError as exc:
        return Refused(PUBLISH_REFUSALS.get(exc.code, R.UNSPECIFIED_ERROR), str(exc))


def remaining_s(event: Event, wall_us: int) -> int | None:
    """The seconds left of an event's Message Expiry Interval at `wall_us` (the broker's clock;
    0: unknown, the interval whole), rounded up; 0 once expired; None for an event without one."""
    interval = event.attributes.get(EXPIRY)
    if type(interval) is not int:
        return None
    if not wall_us:
        return min(max(interval, 0), EXPIRY_S_MAX)
    left_us = event.tick + interval * US_PER_S - wall_us
    return min(max(-(-left_us // US_PER_S), 0), EXPIRY_S_MAX)  # (a native event's may be any integer)


def publish_of(event: Event, granted_qos: int, level: int, wall_us: int = 0) -> p.Publish | None:
    """An event as the PUBLISH a subscription granted `granted_qos` delivers (no packet id yet), or
    None when its Message Expiry Interval has passed by `wall_us` (3.3.2.3.3: not sent)."""
    attrs = event.attributes
    published = attrs.get(QOS)
    qos = min(granted_qos, 0 if published == 0 else 2 if published == 2 else 1)
    props = NO_PROPERTIES
    left_s = remaining_s(event, wall_us) if EXPIRY in attrs else None
    if left_s == 0:
        return None
    if level == MQTT_5 and attrs:
        content_type, response_topic = attrs.get(CONTENT_TYPE), attrs.get(RESPONSE_TOPIC)
        correlation = correlation_of(attrs.get(CORRELATION_DATA))
        user = tuple((k, text_of(v)) for k, v in attrs.items() if not k.startswith(RESERVED_PREFIX))
        if user or isinstance(content_type, str) or isinstance(response_topic, str) or correlation is not None:
            props = Properties(content_type=content_type if isinstance(content_type, str) else None,
                               response_topic=response_topic if isinstance(response_topic, str) else None,
                               correlation_data=correlation, user_properties=user)
        if left_s is not None:  # the interval less the time the message waited (3.3.2.3.3)
            props = replace(props, message_expiry_interval_s=left_s)
    return p.Publish(event.channel, event.payload, qos, properties=props)  # (topics.topic_of: the identity)


def correlation_of(value: AttrValue | None) -> bytes | None:
    """The Correlation Data of an event's `mqtt.correlation_data` (base64), None where there is none
    or it is not base64 (a native publisher's own value: not sent rather than sent wrong)."""
    if not isinstance(value, str):
        return None
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return None


def seqs_of(ranges: object) -> list[int]:
    """The seqs of an ERROR's `seqs` context, inclusive ranges [[first, last], ...] (core/broker/refusals.py)."""
    out: list[int] = []
    if isinstance(ranges, list):
        for r in ranges:
            if isinstance(r, list) and len(r) == 2 and type(r[0]) is int and type(r[1]) is int and r[0] <= r[1]:
                out += range(r[0], min(r[1], r[0] + 65535) + 1)
    return out


def attribute_of(text: str) -> AttrValue:
    """A user property's value as an attribute: a number or a boolean when the text is one in its
    canonical form (`3`, `-2`, `2.5`, `true`), so that filters compare it as one (`price > 3`); else
    the text. `text_of` gives the same text back."""
    if text in ("true", "false"):
        return text == "true"
    try:
        number = int(text)
        if str(number) == text and INT_MIN <= number <= INT_MAX:
            return number
    except ValueError:
        pass
    try:
        real = float(text)
        if math.isfinite(real) and repr(real) == text:
            return real
    except ValueError:
        pass
    return text


def text_of(value: AttrValue) -> str:
    """An attribute's value as a user property's text (the inverse of `attribute_of`)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if isinstance(value, float) else str(value)
