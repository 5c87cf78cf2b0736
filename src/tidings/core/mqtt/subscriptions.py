"""One MQTT connection's subscriptions: SUBSCRIBE and UNSUBSCRIBE as tidings subscriptions, their
answers as SUBACK codes, their events as PUBLISH packets (core/mqtt/session.py composes it).

Each filter of a SUBSCRIBE is one tidings subscription (the pattern of core/mqtt/topics.py, the 5.0
user property `filter` as its content filter), numbered by the client session codec; its SUBACK goes
once the broker answered every filter of it (SUBSCRIBED: the QoS granted, at most 1; ERROR: the
reason code of bridge.py's table). A SUBSCRIBE to a filter held replaces its QoS (3.8.4). Its events
leave as PUBLISH at min(the event's QoS, the granted QoS), QoS 1 ones through the in-flight window
(outbound.py). In a persistent session (core/mqtt/persistent.py) each subscription is a named
durable one: the acknowledged prefix of its deliveries is RELEASEd (`releases`), its subscriptions
are subscribed again when the client comes back (`resume`) and ended by a clean start (`forget`).

A plain data structure: methods return the packets to send and the frames for the broker.
"""

from __future__ import annotations

from dataclasses import dataclass

from tidings.core.errors import TidingsError
from tidings.core.event import event_from_fields
from tidings.core.mqtt import bridge, persistent, topics
from tidings.core.mqtt import packets as p
from tidings.core.mqtt.bridge import MQTT_3_1_1, MQTT_5, MqttSettings
from tidings.core.mqtt.outbound import PACKET_IDS, Outbound
from tidings.core.mqtt.persistent import DurableCursor
from tidings.core.mqtt.reason_codes import ReasonCode, suback_code_311
from tidings.core.session.client_session import ClientSession
from tidings.core.session.cursor import silence_of
from tidings.core.wire import messages

R = ReasonCode
Held = tuple[str, str, str]  # a persistent session's named subscription: (name, pattern, content filter)


@dataclass(slots=True)
class MqttSub:
    """One MQTT subscription: its filter, the QoS granted, the tidings subscription id, and in a
    persistent session its durable name and acknowledged prefix."""

    filter: str
    qos: int
    sub: int
    name: str | None = None
    durable: DurableCursor | None = None


@dataclass(slots=True)
class PendingSuback:
    """A SUBACK waiting for the broker's answers: a code per filter, None until answered."""

    packet_id: int
    codes: list[int | None]


Tag = tuple[DurableCursor, persistent.Delivery] | None  # a QoS 1 delivery's place in its persistent subscription


class MqttSubscriptions:
    def __init__(self, settings: MqttSettings) -> None:
        self.level = MQTT_3_1_1
        self.client_id: str | None = None  # of a persistent session
        self.subs: dict[str, MqttSub] = {}  # by filter
        self.sub_of: dict[int, MqttSub] = {}  # by tidings subscription id
        self.pending: dict[int, tuple[PendingSuback, int]] = {}  # sub id -> (its SUBACK, index)
        self.outbound: Outbound[Tag] = Outbound(PACKET_IDS, settings.deliveries_queued_max)
        self.delivered = 0

    # ---- the client's requests -------------------------------------------------------------------

    def subscribe(self, native: ClientSession, packet: p.Subscribe) -> tuple[list[p.Packet], list[bytes]]:
        pending = PendingSuback(packet.packet_id, [None] * len(packet.topics))
        content_filter = dict(packet.properties.user_properties).get(bridge.FILTER_PROPERTY)
        frames: list[bytes] = []
        for i, wanted in enumerate(packet.topics):
            qos = min(wanted.qos, 1)  # QoS 2 deliveries are not sent yet: granted 1 (3.8.4)
            pattern = topics.pattern_of(wanted.filter)
            if isinstance(pattern, topics.TopicRefused):
                pending.codes[i] = pattern.reason_code
                continue
            same = self.subs.get(wanted.filter)
            if same is not None and (same.qos == qos or same.name is None):  # its options replaced (3.8.4)
                same.qos = qos
                pending.codes[i] = qos
                continue
            if same is not None:  # a persistent one under another QoS: its name changes
                frames += self._end(native, same)
            name = None if self.client_id is None else persistent.name_of(self.client_id, qos, wanted.filter)
            try:
                sub, frame = native.subscribe(pattern, content_filter, positions=None if name is None else [],
                                              home=name)
            except TidingsError as exc:
                pending.codes[i] = bridge.SUBSCRIBE_REFUSALS.get(exc.code, R.UNSPECIFIED_ERROR)
                continue
            self._add(MqttSub(wanted.filter, qos, sub, name))
            self.pending[sub] = (pending, i)
            frames.append(frame)
        return self._suback_if_done(pending), frames

    def _add(self, entry: MqttSub) -> None:
        self.subs[entry.filter] = self.sub_of[entry.sub] = entry
        if entry.name is not None:
            entry.durable = DurableCursor()

    def _end(self, native: ClientSession, entry: MqttSub) -> list[bytes]:
        """Unsubscribe `entry` (a persistent one for good)."""
        self.sub_of.pop(entry.sub, None)
        if self.subs.get(entry.filter) is entry:
            del self.subs[entry.filter]
        return [native.unsubscribe(entry.sub, forget=entry.name is not None)]

    def _suback_if_done(self, pending: PendingSuback) -> list[p.Packet]:
        if any(code is None for code in pending.codes):
            return []
        codes = tuple(c for c in pending.codes if c is not None)
        if self.level == MQTT_3_1_1:
            codes = tuple(suback_code_311(c) for c in codes)
        return [p.Suback(pending.packet_id, codes)]

    def unsubscribe(self, native: ClientSession, packet: p.Unsubscribe) -> tuple[list[p.Packet], list[bytes]]:
        codes, frames = [], []
        for flt in packet.filters:
            entry = self.subs.get(flt)
            if entry is None:
                codes.append(int(R.NO_SUBSCRIPTION_EXISTED))
                continue
            frames += self._end(native, entry)
            codes.append(int(R.SUCCESS))
        return [p.Unsuback(packet.packet_id, tuple(codes) if self.level == MQTT_5 else ())], frames

    def resume(self, native: ClientSession, held: list[Held]) -> list[bytes]:
        """A persistent session's subscriptions, subscribed again at their names (no SUBACK owed)."""
        frames = []
        assert self.client_id is not None
        for name, pattern, content_filter in held:
            parsed = persistent.parse(name, self.client_id)
            if parsed is None or parsed[1] in self.subs:
                continue
            sub, frame = native.subscribe(pattern, content_filter or None, positions=[], home=name)
            self._add(MqttSub(parsed[1], parsed[0], sub, name))
            frames.append(frame)
        return frames

    def forget(self, native: ClientSession, held: list[Held]) -> list[bytes]:
        """A clean start ends what a persistent session of the client id held (subscribed, then ended)."""
        frames = []
        for name, pattern, content_filter in held:
            sub, frame = native.subscribe(pattern, content_filter or None, positions=[], home=name)
            frames += [frame, native.unsubscribe(sub, forget=True)]
        return frames

    def puback(self, packet_id: int) -> list[p.Packet]:
        """The client's PUBACK: its delivery done, and the deliveries that may go now."""
        tag, more = self.outbound.acked(packet_id)
        if tag is not None:
            tag[0].acked(tag[1])
        return list(more)

    def releases(self, native: ClientSession) -> list[bytes]:
        """RELEASE of each persistent subscription whose acknowledged prefix moved."""
        frames = []
        for entry in self.sub_of.values():
            wire = entry.durable.release() if entry.durable is not None else None
            if wire is not None:
                frames.append(native.release(entry.sub, wire))
        return frames

    # ---- the broker's answers --------------------------------------------------------------------

    def subscribed(self, sub: int, checkpoint: object, refused: int | None) -> list[p.Packet]:
        """SUBSCRIBED (`refused` None) or its ERROR: the code of its filter in the SUBACK awaited."""
        waiting = self.pending.pop(sub, None)
        entry = self.sub_of.get(sub)
        if entry is not None and refused is not None:
            del self.sub_of[sub]
            if self.subs.get(entry.filter) is entry:
                del self.subs[entry.filter]
        elif entry is not None and entry.durable is not None:
            entry.durable.started(checkpoint)
        if waiting is None:
            return []
        pending, i = waiting
        granted = entry.qos if entry is not None else R.UNSPECIFIED_ERROR
        pending.codes[i] = refused if refused is not None else granted
        return self._suback_if_done(pending)

    def silence(self, msg: messages.Silence) -> None:
        entry = self.sub_of.get(msg.sub)
        if entry is not None and entry.durable is not None:
            entry.durable.silence(silence_of(msg).positions)

    def deliver(self, msg: messages.Events) -> list[p.Packet] | None:
        """EVENTS as PUBLISH packets (None: more QoS 1 deliveries wait than `deliveries_queued_max`)."""
        entry = self.sub_of.get(msg.sub)
        if entry is None:  # unsubscribed: what was on its way is dropped
            return []
        out: list[p.Packet] = []
        durable = entry.durable
        for fields in msg.records:
            try:
                event = event_from_fields(fields)
            except ValueError:
                continue
            publish = bridge.publish_of(event, entry.qos, self.level)
            item = None if durable is None else durable.delivered(event.pubend, event.tick, publish.qos == 0)
            self.delivered += 1
            if publish.qos == 0:
                out.append(publish)
                continue
            numbered = self.outbound.offer(publish, None if durable is None or item is None else (durable, item))
            if numbered is not None:
                out.append(numbered)
            elif self.outbound.overflowing:
                return None
        return out
