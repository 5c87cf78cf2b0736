"""What the broker sends one MQTT client: every packet within the client's limits, and the
deliveries (the broker side's `deliver`) through their QoS flows (core/mqtt/inflight.py).

`Outgoing` encodes a packet for the connection's version within the client's Maximum Packet Size
(3.1.2-25, 3.1.2.11.4): a packet over it but a PUBLISH (whose user properties are the message's)
loses its reason string and user properties first
(3.2.2.3.9 and the like: "MUST NOT send this property if it would increase the size beyond"), and
is not sent at all if it is still over. A client that asked for no problem information (5.0's
Request Problem Information 0, 3.1.2.11.7) gets neither in any packet but PUBLISH, CONNACK and
DISCONNECT.

`DeliveryFlow` is the sender's side: a QoS 0 delivery is sent at once; QoS 1 and 2 wait in the
client's Receive Maximum window (`Deliveries`), take a packet identifier and a Topic Alias
(`OutboundAliases`) as they leave, and end with `DeliveryAcked` (PUBACK, PUBCOMP, a failed PUBREC).
A delivery too large for the client is dropped (`DeliveryDropped` 0x95, treated as done), its
alias forgotten and its identifier freed; past `deliveries_queued_max` a delivery is refused at once
(`DeliveryDropped` 0x97) for the broker side to offer again.
"""

from __future__ import annotations

from dataclasses import replace

from tidings.core.mqtt import effects as fx
from tidings.core.mqtt import packets as p
from tidings.core.mqtt.aliases import OutboundAliases
from tidings.core.mqtt.encode import encode, publish_bytes
from tidings.core.mqtt.fields import vbi
from tidings.core.mqtt.inflight import Deliveries, Delivery
from tidings.core.mqtt.packet_type import MQTT_5, PacketType
from tidings.core.mqtt.properties import NO_PROPERTIES, Properties
from tidings.core.mqtt.reason_codes import ReasonCode

R = ReasonCode
Plain = tuple[str, bytes, int]  # a delivery without properties nor retain: (topic, payload, qos)
TOPIC_HEADS_MAX = 1024  # topics whose bytes a connection keeps (`DeliveryFlow.heads`)
PROBLEM_FREE = (PacketType.PUBLISH, PacketType.CONNACK, PacketType.DISCONNECT)  # 3.1.2.11.7
EMPTY_PROPERTIES = b"\x00"  # a 5.0 packet's property length when it has none
FIXED_QOS0 = tuple(bytes((0x30, n)) for n in range(0x80))  # a QoS 0 PUBLISH's fixed header, by a length < 128


class Outgoing:
    __slots__ = ("packet_bytes_max", "problem_information", "version")

    def __init__(self, version: int, packet_bytes_max: int, problem_information: bool = True) -> None:
        self.version = version
        self.packet_bytes_max = packet_bytes_max  # the client's
        self.problem_information = problem_information

    def encode(self, packet: p.Packet) -> bytes | None:
        """The bytes of `packet` for this client, or None when it cannot be sent (too large)."""
        data = encode(packet, self.version)
        props: Properties | None = getattr(packet, "properties", None)
        if self.version != MQTT_5 or props is None or props is NO_PROPERTIES or packet.type == PacketType.PUBLISH:
            return data if len(data) <= self.packet_bytes_max else None
        if (len(data) <= self.packet_bytes_max
                and (self.problem_information or packet.type in PROBLEM_FREE)):
            return data
        if props.reason_string is None and not props.user_properties:
            return None if len(data) > self.packet_bytes_max else data
        quiet: p.Packet = replace(packet, properties=replace(props, reason_string=None, user_properties=()))  # type: ignore[arg-type]
        data = encode(quiet, self.version)
        return data if len(data) <= self.packet_bytes_max else None


class DeliveryFlow:
    __slots__ = ("aliases", "deliveries", "heads", "outgoing")

    def __init__(self, outgoing: Outgoing, deliveries: Deliveries, aliases: OutboundAliases) -> None:
        self.heads: dict[str, bytes] = {}  # a topic's bytes in a PUBLISH (length, UTF-8), by topic
        self.outgoing = outgoing
        self.deliveries = deliveries
        self.aliases = aliases

    def deliver(self, token: int, publish: p.Publish) -> list[fx.MqttEffect]:
        """Send `publish` (QoS already the minimum of the publication's and the subscription's)."""
        if publish.qos == 0:
            data = self._encode_aliased(publish)
            if data is None:
                return [fx.DeliveryDropped(token, R.PACKET_TOO_LARGE)]
            return [fx.Send(data)]
        if self.deliveries.full():
            return [fx.DeliveryDropped(token, R.QUOTA_EXCEEDED)]
        self.deliveries.add(token, publish)
        return self.flush()

    def deliver_many(self, items: list[tuple[int, p.Publish | Plain]]) -> list[fx.MqttEffect]:
        """`deliver` of each (token, publish) in order, the packets sent joined (a Send between other
        effects): QoS 1 and 2 queued together and the window filled once, before a QoS 0 one goes
        (so the order holds) and when the queue is full (so the bound is `deliver`'s). A `Plain`
        one (topic, payload, qos: no properties, no retain) is what its Publish would be; a QoS 0
        one's bytes are its topic's kept head and the payload, joined once with the rest of the run."""
        out: list[fx.MqttEffect] = []
        data: list[bytes] = []
        deliveries = self.deliveries
        queued = False
        names = self.heads
        bare = not self.aliases.maximum  # (with Topic Aliases a QoS 0 one goes through `deliver`)
        room = self.outgoing.packet_bytes_max
        empty = EMPTY_PROPERTIES if self.outgoing.version == MQTT_5 else b""
        for token, item in items:
            if isinstance(item, tuple):  # Plain: a QoS 0 one as its bytes at once, a QoS 1 one as its Publish
                if not item[2] and not queued and bare:
                    name = names.get(item[0])
                    if name is None:
                        name = self._name(item[0])
                    size = len(name) + len(empty) + len(item[1])
                    fixed = FIXED_QOS0[size] if size < 0x80 else b"\x30" + vbi(size)
                    if len(fixed) + size <= room:
                        data += (fixed, name, empty, item[1])
                        continue
                publish = p.Publish(*item)
            else:
                publish = item
            if publish.qos and not deliveries.full():
                deliveries.add(token, publish)
                queued = True
                continue
            if queued:
                self._join(self.flush(), out, data)
                queued = False
            self._join(self.deliver(token, publish), out, data)
        if queued:
            self._join(self.flush(), out, data)
        if data:
            out.append(fx.Send(b"".join(data)))
        return out

    def _name(self, topic: str) -> bytes:
        """The bytes of `topic` in a PUBLISH (its length, then the topic), made once per topic and
        kept (at most TOPIC_HEADS_MAX)."""
        raw = topic.encode("utf-8")
        name = len(raw).to_bytes(2, "big") + raw
        if len(self.heads) >= TOPIC_HEADS_MAX:
            self.heads.clear()
        self.heads[topic] = name
        return name

    @staticmethod
    def _join(effects: list[fx.MqttEffect], out: list[fx.MqttEffect], data: list[bytes]) -> None:
        for eff in effects:
            if type(eff) is fx.Send:
                data.append(eff.data)
                continue
            if data:
                out.append(fx.Send(b"".join(data)))
                data.clear()
            out.append(eff)

    def _encode_aliased(self, publish: p.Publish, packet_id: int | None = None) -> bytes | None:
        topic, alias = self.aliases.choose(publish.topic)
        props = publish.properties
        if alias is not None:
            props = replace(props, topic_alias=alias)
        data = publish_bytes(topic, publish.payload, publish.qos, publish.retain, False, packet_id, props,
                             self.outgoing.version)
        if len(data) <= self.outgoing.packet_bytes_max:
            return data
        if topic:
            self.aliases.forget(topic)
        return None

    def resume(self, token: int, publish: p.Publish, packet_id: int, released: bool) -> list[fx.MqttEffect]:
        """An unfinished delivery of the session's last connection: PUBLISH again with DUP under its
        packet identifier, or PUBREL if the client had received it (4.4); a new delivery when the
        identifier is taken already."""
        d = self.deliveries.resume(token, publish, packet_id, released)
        if d is None:
            return self.deliver(token, publish)
        if released:
            return self._send(p.Pubrel(packet_id))
        data = publish_bytes(publish.topic, publish.payload, publish.qos, publish.retain, True, packet_id,
                             publish.properties, self.outgoing.version)
        if len(data) > self.outgoing.packet_bytes_max:
            self.deliveries.drop(packet_id)
            return [fx.DeliveryDropped(token, R.PACKET_TOO_LARGE)]
        return [fx.Send(data)]

    def flush(self) -> list[fx.MqttEffect]:
        """Every queued delivery the window has room for, sent. One without properties (nor a Topic
        Alias to choose) is encoded from its topic's kept bytes, its parts joined once with the rest."""
        out: list[fx.MqttEffect] = []
        sent: list[bytes] = []
        bare = not self.aliases.maximum
        room = self.outgoing.packet_bytes_max
        empty = EMPTY_PROPERTIES if self.outgoing.version == MQTT_5 else b""
        names = self.heads
        while ready := self.deliveries.ready():
            for d in ready:
                publish = d.publish
                if bare and publish.properties is NO_PROPERTIES:
                    name = names.get(publish.topic)
                    if name is None:
                        name = self._name(publish.topic)
                    size = len(name) + 2 + len(empty) + len(publish.payload)  # (2: the packet identifier)
                    first = 0x30 | (publish.qos << 1) | publish.retain
                    fixed = bytes((first, size)) if size < 0x80 else bytes((first,)) + vbi(size)
                    if len(fixed) + size <= room:
                        pid = d.packet_id
                        sent += (fixed, name, bytes((pid >> 8, pid & 0xFF)), empty, publish.payload)
                        continue
                data = self._encode_aliased(publish, d.packet_id)
                if data is None:
                    self.deliveries.drop(d.packet_id)
                    out.append(fx.DeliveryDropped(d.token, R.PACKET_TOO_LARGE))
                else:
                    sent.append(data)
        if sent:
            out.insert(0, fx.Send(b"".join(sent)))
        return out

    def _done(self, d: Delivery | None, code: int = 0) -> list[fx.MqttEffect]:
        if d is None:
            return []
        return [fx.DeliveryAcked(d.token, code), *self.flush()]

    def puback(self, packet: p.Puback) -> list[fx.MqttEffect]:
        return self.acked(packet.packet_id, packet.reason_code)

    def acked(self, packet_id: int, code: int = 0) -> list[fx.MqttEffect]:
        """PUBACK `packet_id` (a run of them: core/mqtt/publish_run.py): the delivery it ends, and what
        the window then lets go."""
        return self._done(self.deliveries.acked(packet_id), code)

    def acked_many(self, packet_ids: list[int]) -> list[fx.MqttEffect]:
        """A run of PUBACKs (core/mqtt/publish_run.py): `acked` of each, the window refilled once
        for the run rather than after each (an identifier not in flight is looked for again after a
        refill, in case the window gives it out: as `acked` one by one would have). The bytes and
        facts are `acked`'s one by one, its Sends joined; the identifiers taken the same unless
        nearly all 65,535 are in flight (core/mqtt/inflight.py `PacketIds` takes them in turn)."""
        out: list[fx.MqttEffect] = []
        deliveries = self.deliveries
        freed = False
        for pid in packet_ids:
            d = deliveries.acked(pid)
            if d is None and freed and deliveries.queued:
                out += self.flush()
                freed = False
                d = deliveries.acked(pid)
            if d is not None:
                out.append(fx.DeliveryAcked(d.token, 0))
                freed = True
        if freed:
            out += self.flush()
        return out

    def pubrec(self, packet: p.Pubrec) -> list[fx.MqttEffect]:
        """PUBREC: PUBREL (0x92 if we know no such delivery, 4.3.3), or the end of a refused one."""
        failed = packet.reason_code >= 0x80
        d = self.deliveries.received(packet.packet_id, failed)
        if d is None:
            if failed:
                return []
            return self._send(p.Pubrel(packet.packet_id, R.PACKET_IDENTIFIER_NOT_FOUND))
        if failed:
            return self._done(d, packet.reason_code)
        return self._send(p.Pubrel(packet.packet_id))

    def pubcomp(self, packet: p.Pubcomp) -> list[fx.MqttEffect]:
        return self._done(self.deliveries.completed(packet.packet_id), packet.reason_code)

    def _send(self, packet: p.Packet) -> list[fx.MqttEffect]:
        data = self.outgoing.encode(packet)
        return [] if data is None else [fx.Send(data)]
