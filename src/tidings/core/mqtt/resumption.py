"""A persistent session's deliveries in flight, carried from one connection to the next (MQTT 4.4).

Theory of operation. When a persistent session's connection ends, the QoS 1 and 2 deliveries the
client had been sent and had not finished (the protocol machine's `unfinished()`) are carried, each
with its packet identifier and its place: the subscription's filter and the event's (pubend, tick).
When the client connects again (Clean Start 0) each is sent again at once, right after the CONNACK,
under its packet identifier: a PUBLISH with DUP, or a PUBREL where the client had sent its PUBREC
(`MqttConnection.resume`), as the spec requires. Its subscription, resumed from its durable
position, then delivers the same event again (it was not acknowledged); `claim` takes that delivery
for the one resent instead of sending it a second time, and gives it its place in the subscription's
acknowledged prefix (a PUBACK or PUBCOMP that came first is applied then). So a QoS 2 message reaches
the client once across its reconnects: the client's own store of identifiers (4.3.3) knows a DUP.

What is carried lives in the broker's memory (the gateway's, `CARRIED_BYTES_MAX` in all): a kill -9
of the broker loses it, and the subscription then delivers those events again under new
identifiers (at least once). Deliveries queued behind the window were never sent: they are not carried
and come again as new ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from tidings.core.mqtt.effects import MqttEffect
from tidings.core.mqtt.inflight import Delivery, DeliveryState
from tidings.core.mqtt.packets import Publish
from tidings.core.mqtt.protocol import MqttConnection
from tidings.core.mqtt.subscriptions import Tag

CARRIED_BYTES_MAX: Final = 64 << 20  # payloads carried for sessions away, per broker; past it the oldest go

Key = tuple[str, str, int]  # (filter, pubend, tick): a delivery's place


@dataclass(frozen=True, slots=True)
class Carried:
    key: Key
    publish: Publish
    packet_id: int
    released: bool  # the client sent PUBREC: PUBREL is what is resent


def carry(unfinished: list[Delivery], tokens: dict[int, Tag], resumed: Resumed | None) -> list[Carried]:
    """What a persistent session's ending connection carries: its deliveries sent and unfinished."""
    out = []
    for d in unfinished:
        tag = tokens.get(d.token)
        key = (tag[0].filter, tag[1].pubend, tag[1].tick) if tag is not None else (
            None if resumed is None else resumed.keys.get(d.token))
        if d.packet_id and key is not None:
            out.append(Carried(key, d.publish, d.packet_id, d.state is DeliveryState.AWAITING_PUBCOMP))
    return out


def resend(machine: MqttConnection, carried: list[Carried], token: int) -> tuple[list[MqttEffect], Resumed, int]:
    """Each carried delivery sent again right after the CONNACK (4.4); the effects, the `Resumed`, and
    the last token taken (tokens after `token`)."""
    resumed, out = Resumed(), []
    for c in carried:
        token += 1
        resumed.add(c.key, token)
        m = c.publish
        out += machine.resume(token, c.packet_id, m.topic, m.payload, m.qos, m.retain, m.properties, c.released)
    return out, resumed, token


class Resumed:
    """One connection's deliveries resent from the last, until their events come again."""

    __slots__ = ("acked", "keys", "tokens")

    def __init__(self) -> None:
        self.tokens: dict[Key, int] = {}  # place -> the token it was resent under
        self.keys: dict[int, Key] = {}
        self.acked: set[int] = set()  # resent and finished before their event came again

    def add(self, key: Key, token: int) -> None:
        self.tokens[key] = token
        self.keys[token] = key

    def claim(self, tag: Tag, tokens: dict[int, Tag]) -> bool:
        """Whether the subscription's delivery `tag` is one resent (then bound to its token, not sent)."""
        if tag is None or not self.tokens:
            return False
        token = self.tokens.pop((tag[0].filter, tag[1].pubend, tag[1].tick), None)
        if token is None:
            return False
        del self.keys[token]
        if token in self.acked:
            self.acked.discard(token)
            tag[0].acked(tag[1])
        else:
            tokens[token] = tag
        return True

    def ended(self, token: int) -> None:
        """A delivery ended (PUBACK, PUBCOMP) with no place yet: kept for its `claim`."""
        if token in self.keys:
            self.acked.add(token)
