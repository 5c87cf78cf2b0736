"""The numbers every MQTT module shares: the protocol levels, the packet types (2.1.2), the
ranges of packet identifiers and QoS."""

from __future__ import annotations

from enum import IntEnum
from typing import Final

MQTT_311: Final = 4  # the CONNECT protocol level of MQTT 3.1.1
MQTT_5: Final = 5  # and of MQTT 5.0
VERSIONS: Final = (MQTT_311, MQTT_5)
PROTOCOL_NAME: Final = "MQTT"
PACKET_ID_MAX: Final = 0xFFFF  # packet identifiers are 1..65535 (2.2.1)
QOS_MAX: Final = 2


class PacketType(IntEnum):
    CONNECT = 1
    CONNACK = 2
    PUBLISH = 3
    PUBACK = 4
    PUBREC = 5
    PUBREL = 6
    PUBCOMP = 7
    SUBSCRIBE = 8
    SUBACK = 9
    UNSUBSCRIBE = 10
    UNSUBACK = 11
    PINGREQ = 12
    PINGRESP = 13
    DISCONNECT = 14
    AUTH = 15  # 5.0 only: reserved in 3.1.1
