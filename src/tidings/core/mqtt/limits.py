"""An MQTT connection's limits (`ProtocolLimits`), its deadlines' keys, and what the limits decide: whether a CONNECT is
refused before the broker side sees it (`connect_problem`), what our 5.0 CONNACK says of the server
(`server_offer`, 3.2.2.3: each property only when it is not the specification's default), and whether
a client's PUBLISH breaks what the CONNACK said (`publish_problem`).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Final

from tidings.core.mqtt import packets as p
from tidings.core.mqtt.properties import NO_PROPERTIES, Properties
from tidings.core.mqtt.reason_codes import ReasonCode
from tidings.core.units import KIB, MIB, SECOND_NS

R = ReasonCode


@dataclass(frozen=True, slots=True)
class ConnectDue:
    """The CONNECT deadline."""


@dataclass(frozen=True, slots=True)
class KeepAliveDue:
    """The keep-alive deadline."""


TimerKey = ConnectDue | KeepAliveDue
CONNECT_DUE: Final = ConnectDue()
KEEP_ALIVE_DUE: Final = KeepAliveDue()
CLIENT_RECEIVE_MAXIMUM: Final = 65535  # a client that names none (3.1.2.11.3), and the most there is


@dataclass(frozen=True, slots=True)
class ProtocolLimits:
    """What one MQTT connection may make the broker hold, and what the broker offers (CONNACK)."""

    packet_bytes_max: int = MIB + 16 * KIB  # our Maximum Packet Size (a packet the client sends)
    receive_maximum: int = 64  # the client's QoS 1/2 PUBLISHes awaiting our answer (5.0)
    topic_alias_maximum: int = 32  # aliases the client may set
    deliveries_in_flight_max: int = 256  # our cap on the client's Receive Maximum (3.1.1's window)
    deliveries_queued_max: int = 4096  # QoS 1/2 deliveries waiting behind that window
    maximum_qos: int = 2
    retain_available: bool = True
    wildcard_subscription_available: bool = True
    subscription_identifier_available: bool = True
    shared_subscription_available: bool = True
    keep_alive_s_max: int = 0  # 0: the client's keep-alive stands; else at most this (5.0 Server Keep Alive)
    keep_alive_factor_percent: int = 150  # silent this long past a keep-alive: gone (3.1.2-24)
    connect_timeout_ns: int = 10 * SECOND_NS  # from the connection to its CONNECT
    client_id_bytes_max: int = 256
    early_bytes_max: int = 64 * KIB  # bytes behind a CONNECT held while the broker side decides


def merged(base: Properties, extra: Properties) -> Properties:
    """`base` with every property `extra` sets."""
    if extra is NO_PROPERTIES:
        return base
    changes = {f.name: getattr(extra, f.name) for f in fields(Properties) if getattr(extra, f.name) not in (None, ())}
    return replace(base, **changes)


def connect_problem(packet: p.Connect, limits: ProtocolLimits,
                    assigned_client_id: str) -> tuple[ReasonCode, str] | None:
    """Why a CONNECT is refused before the broker side sees it, if it is."""
    if packet.properties.authentication_method is not None or packet.properties.authentication_data is not None:
        return ((R.BAD_AUTHENTICATION_METHOD, "enhanced authentication is not supported")
                if packet.properties.authentication_method is not None  # (data without a method: 3.1.2.11.10)
                else (R.PROTOCOL_ERROR, "Authentication Data without an Authentication Method"))
    if not packet.client_id and (not packet.clean_start or not assigned_client_id):
        return R.CLIENT_IDENTIFIER_NOT_VALID, "an empty client id needs Clean Start"
    if len(packet.client_id.encode("utf-8")) > limits.client_id_bytes_max:
        return R.CLIENT_IDENTIFIER_NOT_VALID, f"a client id is at most {limits.client_id_bytes_max} bytes"
    will = packet.will
    if will is not None and will.qos > limits.maximum_qos:
        return R.QOS_NOT_SUPPORTED, f"the will's QoS is over {limits.maximum_qos}"
    if will is not None and will.retain and not limits.retain_available:
        return R.RETAIN_NOT_SUPPORTED, "retained messages are not available"
    return None


def publish_problem(packet: p.Publish, limits: ProtocolLimits) -> tuple[ReasonCode, str] | None:
    """Why a client's PUBLISH ends its connection, if it does: over our Maximum QoS (0x9B), retained
    where retain is not available (0x9A), a Subscription Identifier (3.3.4-6: a server's only)."""
    if packet.qos > limits.maximum_qos:
        return R.QOS_NOT_SUPPORTED, f"PUBLISH at QoS {packet.qos}"
    if packet.retain and not limits.retain_available:
        return R.RETAIN_NOT_SUPPORTED, "retained messages are not available"
    if packet.properties.subscription_identifiers:
        return R.PROTOCOL_ERROR, "a Subscription Identifier in a client's PUBLISH"
    return None


def server_offer(limits: ProtocolLimits, assigned_client_id: str | None,
                 server_keep_alive_s: int | None) -> Properties:
    """What our 5.0 CONNACK says of this server (3.2.2.3): each property only if not its default."""
    lim = limits

    def off(available: bool) -> int | None:
        return None if available else 0
    return Properties(
        assigned_client_identifier=assigned_client_id,
        server_keep_alive_s=server_keep_alive_s,
        receive_maximum=lim.receive_maximum if lim.receive_maximum < CLIENT_RECEIVE_MAXIMUM else None,
        topic_alias_maximum=lim.topic_alias_maximum or None,
        maximum_qos=lim.maximum_qos if lim.maximum_qos < 2 else None,
        retain_available=off(lim.retain_available),
        maximum_packet_size_bytes=lim.packet_bytes_max,
        wildcard_subscription_available=off(lim.wildcard_subscription_available),
        subscription_identifier_available=off(lim.subscription_identifier_available),
        shared_subscription_available=off(lim.shared_subscription_available))
