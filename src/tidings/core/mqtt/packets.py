"""MQTT control packets, 3.1.1 and 5.0, as frozen values.

One class per packet type (section 2.1.2 of both specifications); a field that only 5.0 has
(properties, reason codes, the subscription options past QoS) keeps its neutral value on a 3.1.1
connection, so the machines above read one shape whatever the version. Reason codes are kept as
plain ints (a receiver may be handed any byte: the codec checks them against the packet's list,
core/mqtt/reason_codes.py). Sizes and ranges are the codec's to check, not the constructors':
a packet built here by our own code is ours to get right.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Final

from tidings.core.mqtt.packet_type import PacketType
from tidings.core.mqtt.properties import NO_PROPERTIES, Properties


@dataclass(frozen=True, slots=True)
class Will:
    """The will message of a CONNECT (3.1.2.5): published when the connection ends without a
    DISCONNECT (or with 5.0's 0x04); `properties` are the Will Properties (3.1.3.2)."""

    topic: str
    payload: bytes
    qos: int = 0
    retain: bool = False
    properties: Properties = NO_PROPERTIES


@dataclass(frozen=True, slots=True)
class Connect:
    type: ClassVar[PacketType] = PacketType.CONNECT
    protocol_level: int  # 4 (3.1.1) or 5 (5.0)
    client_id: str
    clean_start: bool = True  # 3.1.1's Clean Session
    keep_alive_s: int = 60  # 0 switches keep-alive off
    username: str | None = None
    password: bytes | None = None
    will: Will | None = None
    properties: Properties = NO_PROPERTIES


@dataclass(frozen=True, slots=True)
class Connack:
    type: ClassVar[PacketType] = PacketType.CONNACK
    session_present: bool = False
    reason_code: int = 0  # 5.0 reason code, or 3.1.1 return code on a 3.1.1 connection
    properties: Properties = NO_PROPERTIES


@dataclass(frozen=True, slots=True)
class Publish:
    """`packet_id` is None at QoS 0 and 1..65535 above; an empty `topic` in 5.0 stands for the
    topic its Topic Alias names (3.3.2.3.4), which the protocol machine resolves."""

    type: ClassVar[PacketType] = PacketType.PUBLISH
    topic: str
    payload: bytes = b""
    qos: int = 0
    retain: bool = False
    dup: bool = False
    packet_id: int | None = None
    properties: Properties = NO_PROPERTIES


@dataclass(frozen=True, slots=True)
class Puback:
    type: ClassVar[PacketType] = PacketType.PUBACK
    packet_id: int
    reason_code: int = 0
    properties: Properties = NO_PROPERTIES


@dataclass(frozen=True, slots=True)
class Pubrec:
    type: ClassVar[PacketType] = PacketType.PUBREC
    packet_id: int
    reason_code: int = 0
    properties: Properties = NO_PROPERTIES


@dataclass(frozen=True, slots=True)
class Pubrel:
    type: ClassVar[PacketType] = PacketType.PUBREL
    packet_id: int
    reason_code: int = 0
    properties: Properties = NO_PROPERTIES


@dataclass(frozen=True, slots=True)
class Pubcomp:
    type: ClassVar[PacketType] = PacketType.PUBCOMP
    packet_id: int
    reason_code: int = 0
    properties: Properties = NO_PROPERTIES


RETAIN_SEND: Final = 0  # retain handling (3.8.3.1): send retained messages at subscribe time
RETAIN_SEND_IF_NEW: Final = 1  # only if the subscription did not exist
RETAIN_DO_NOT_SEND: Final = 2


@dataclass(frozen=True, slots=True)
class TopicFilter:
    """One entry of a SUBSCRIBE: the filter and its Subscription Options (3.8.3.1; in 3.1.1 the
    requested QoS alone)."""

    filter: str
    qos: int = 0
    no_local: bool = False
    retain_as_published: bool = False
    retain_handling: int = RETAIN_SEND


@dataclass(frozen=True, slots=True)
class Subscribe:
    type: ClassVar[PacketType] = PacketType.SUBSCRIBE
    packet_id: int
    topics: tuple[TopicFilter, ...]
    properties: Properties = NO_PROPERTIES


@dataclass(frozen=True, slots=True)
class Suback:
    """One reason code per filter of the SUBSCRIBE, in its order (in 3.1.1: 0, 1, 2 or 0x80)."""

    type: ClassVar[PacketType] = PacketType.SUBACK
    packet_id: int
    reason_codes: tuple[int, ...]
    properties: Properties = NO_PROPERTIES


@dataclass(frozen=True, slots=True)
class Unsubscribe:
    type: ClassVar[PacketType] = PacketType.UNSUBSCRIBE
    packet_id: int
    filters: tuple[str, ...]
    properties: Properties = NO_PROPERTIES


@dataclass(frozen=True, slots=True)
class Unsuback:
    """One reason code per filter in 5.0; none in 3.1.1 (its UNSUBACK is the packet id alone)."""

    type: ClassVar[PacketType] = PacketType.UNSUBACK
    packet_id: int
    reason_codes: tuple[int, ...] = ()
    properties: Properties = NO_PROPERTIES


@dataclass(frozen=True, slots=True)
class Pingreq:
    type: ClassVar[PacketType] = PacketType.PINGREQ


@dataclass(frozen=True, slots=True)
class Pingresp:
    type: ClassVar[PacketType] = PacketType.PINGRESP


@dataclass(frozen=True, slots=True)
class Disconnect:
    type: ClassVar[PacketType] = PacketType.DISCONNECT
    reason_code: int = 0
    properties: Properties = NO_PROPERTIES


@dataclass(frozen=True, slots=True)
class Auth:
    type: ClassVar[PacketType] = PacketType.AUTH
    reason_code: int = 0
    properties: Properties = NO_PROPERTIES


Packet = (Connect | Connack | Publish | Puback | Pubrec | Pubrel | Pubcomp | Subscribe | Suback | Unsubscribe
          | Unsuback | Pingreq | Pingresp | Disconnect | Auth)
PublishAnswer = Puback | Pubrec | Pubrel | Pubcomp  # the four packets of a packet id and a reason code
