"""What the MQTT protocol machine (core/mqtt/protocol.py) tells the broker side: typed effects.

Two kinds. Effects on the connection (`Send` its bytes, `Close` it once they are flushed) are the
runtime's to carry out. Facts about the client's requests (`Connected`, `Published`, `Subscribed`,
`Unsubscribed`, `DeliveryAcked`, `DeliveryDropped`, `Disconnected`) are the broker side's to act on
(mqttnet23's session: the intake, subscriptions, wills), each answered through the machine's
methods (`accept`/`refuse`, `publish_done`, `suback`, `unsuback`, `deliver`). A fact is reported
once: a retried QoS 2 PUBLISH, a duplicate QoS 1 PUBLISH still awaiting its log, are not reported
again.
"""

from __future__ import annotations

from dataclasses import dataclass

from tidings.core.mqtt.packets import TopicFilter, Will
from tidings.core.mqtt.properties import Properties


@dataclass(frozen=True, slots=True)
class Send:
    """Write these bytes to the client (one or more whole packets)."""

    data: bytes


@dataclass(frozen=True, slots=True)
class Close:
    """Close the connection once what was sent before is flushed. `reason`: the 5.0 reason code
    of the ending (also for a 3.1.1 client, which was told nothing), `detail` for the log."""

    reason: int
    detail: str


@dataclass(frozen=True, slots=True)
class Connected:
    """A CONNECT the machine took: the broker side checks the credentials and session, then calls
    `accept` (CONNACK 0x00) or `refuse` (CONNACK with a reason code, then the close).

    `client_id` is the one to use: the client's, or the assigned one (`assigned`: the client sent
    none with Clean Start). `session_expiry_interval_s`: 0 ends the session with the connection;
    3.1.1's Clean Session 0 reads as `SESSION_NEVER_EXPIRES`. `will` with its properties."""

    protocol_level: int
    client_id: str
    assigned: bool
    clean_start: bool
    session_expiry_interval_s: int
    keep_alive_s: int
    username: str | None
    password: bytes | None
    will: Will | None
    properties: Properties


@dataclass(frozen=True, slots=True)
class Published:
    """A PUBLISH from the client, its topic resolved (a Topic Alias is the connection's, so the
    properties carry none). `packet_id` is None at QoS 0; at QoS 1 and 2 the broker side calls
    `publish_done(packet_id)` once the event is fsynced at its pubend (or with a refusal code)."""

    topic: str
    payload: bytes
    qos: int
    retain: bool
    properties: Properties
    packet_id: int | None


# a plain PUBLISH of a run: (topic, payload, qos 0 or 1, retain, packet id: None at QoS 0)
PlainPublish = tuple[str, bytes, int, bool, int | None]


@dataclass(frozen=True, slots=True)
class PublishedRun:
    """PUBLISHes read in one pass (core/mqtt/publish_run.py), each what a `Published` would say of
    it with no properties: QoS 0 or 1, topic as sent (no alias), a QoS 1 one new (not a retry).
    The broker side answers each QoS 1 one with `publish_done(packet_id)`, as for `Published`."""

    items: list[PlainPublish]


@dataclass(frozen=True, slots=True)
class Subscribed:
    """A SUBSCRIBE: answer `suback(packet_id, codes)`, one code per filter in order."""

    packet_id: int
    topics: tuple[TopicFilter, ...]
    properties: Properties


@dataclass(frozen=True, slots=True)
class Unsubscribed:
    """An UNSUBSCRIBE: answer `unsuback(packet_id, codes)`."""

    packet_id: int
    filters: tuple[str, ...]
    properties: Properties


@dataclass(frozen=True, slots=True)
class DeliveryAcked:
    """The client finished a QoS 1 or 2 delivery (`deliver`'s `token`): PUBACK, PUBCOMP, or a
    PUBREC with an error code (`reason_code`), after which the message is not redelivered."""

    token: int
    reason_code: int = 0


@dataclass(frozen=True, slots=True)
class DeliveryDropped:
    """A delivery not sent: over the client's Maximum Packet Size (3.1.2-25: discarded and treated
    as done) or past the queue behind the client's Receive Maximum (`reason_code` 0x97: offer it
    again later)."""

    token: int
    reason_code: int


@dataclass(frozen=True, slots=True)
class Released:
    """PUBREL of the client's QoS 2 PUBLISH `packet_id` (`known`: one this connection held awaiting
    its PUBREL): the broker side answers `release_done` once the release is durable, and the client
    gets its PUBCOMP then (0x92 when not `known`), so the identifier is not reused before."""

    packet_id: int
    known: bool


@dataclass(frozen=True, slots=True)
class Disconnected:
    """The connection ended after its CONNECT was taken, for `reason` (0x00 a normal DISCONNECT,
    0x04 one asking for the will, else the failure). `publish_will`: the will is due (every ending
    but a client's DISCONNECT 0x00). `session_expiry_interval_s`: as the client last set it (a 5.0
    DISCONNECT may change it)."""

    reason: int
    detail: str
    publish_will: bool
    session_expiry_interval_s: int


SESSION_NEVER_EXPIRES = 0xFFFFFFFF  # 5.0's largest Session Expiry Interval: no expiry (3.1.2.11.2)

MqttEffect = (Send | Close | Connected | Published | PublishedRun | Subscribed | Unsubscribed | DeliveryAcked
              | DeliveryDropped | Released | Disconnected)
