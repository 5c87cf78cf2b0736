"""One MQTT connection's subscriptions: SUBSCRIBE and UNSUBSCRIBE as tidings subscriptions, their
answers as SUBACK codes, their events as PUBLISH packets (core/mqtt/session.py composes it).

Each filter of a SUBSCRIBE is one tidings subscription (the pattern of core/mqtt/topics.py, the 5.0
user property `filter` as its content filter), numbered by the client session codec; its SUBACK goes
once the broker answered every filter of it (SUBSCRIBED: the QoS granted, the one asked for;
ERROR: the reason code of bridge.py's table; 5.0's No Local kept, so its own
messages are not delivered to the connection that published them; its Subscription Identifier goes
in each PUBLISH it delivers: one PUBLISH per matching subscription, each with its own, as 3.3.4
allows). A SUBSCRIBE to a filter held replaces its QoS (3.8.4). Its events leave as PUBLISH at
min(the event's QoS, the granted QoS), QoS 1 and 2 ones through the in-flight window (the protocol
machine's window). In a persistent session (core/mqtt/persistent.py) each subscription is a named
durable one: the acknowledged prefix of its deliveries is RELEASEd (`releases`), its subscriptions
are subscribed again when the client comes back (`resume`) and ended by a clean start (`forget`).

A plain data structure: methods return the packets to send and the frames for the broker.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from tidings.core.errors import TidingsError
from tidings.core.event import RECORD_LENGTHS, event_from_fields
from tidings.core.mqtt import bridge, persistent, topics
from tidings.core.mqtt import packets as p
from tidings.core.mqtt.bridge import MQTT_5
from tidings.core.mqtt.delivery import Plain
from tidings.core.mqtt.persistent import DurableCursor
from tidings.core.mqtt.properties import Properties
from tidings.core.mqtt.reason_codes import ReasonCode
from tidings.core.mqtt.retained import RetainedSent
from tidings.core.session.client_session import ClientSession
from tidings.core.session.cursor import silence_of
from tidings.core.wire import messages

if TYPE_CHECKING:
    from tidings.core.mqtt.resumption import Resumed

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
    retain_as_published: bool = False  # 5.0: a delivery keeps its retain mark (3.8.3.1)
    no_local: bool = False  # 5.0: not the connection's own messages (3.8.3.1)
    identifier: int | None = None  # 5.0: the SUBSCRIBE's Subscription Identifier, in each PUBLISH (3.8.2.1.2)
    retained_sent: RetainedSent | None = None  # its retained copies, while their live copies may come


@dataclass(slots=True)
class PendingSuback:
    """A SUBACK waiting for the broker's answers: a code per filter, None until answered."""

    packet_id: int
    codes: list[int | None]


Tag = tuple[DurableCursor, persistent.Delivery] | None  # a QoS 1 delivery's place in its persistent subscription
PLAIN_ATTRIBUTES = frozenset((bridge.QOS, bridge.RETAIN))  # the attributes a plain delivery may have


class MqttSubscriptions:
    def __init__(self) -> None:
        self.client_id: str | None = None  # of a persistent session
        self.subs: dict[str, MqttSub] = {}  # by filter
        self.sub_of: dict[int, MqttSub] = {}  # by tidings subscription id
        self.pending: dict[int, tuple[PendingSuback, int]] = {}  # sub id -> (its SUBACK, index)
        self.delivered = 0

    # ---- the client's requests -------------------------------------------------------------------

    def subscribe(self, native: ClientSession, packet_id: int, wanted_filters: tuple[p.TopicFilter, ...],
                  properties: Properties) -> tuple[tuple[int, ...] | None, list[bytes]]:
        """A SUBSCRIBE: its codes when they are known now (else `subscribed` gives them), and the frames."""
        pending = PendingSuback(packet_id, [None] * len(wanted_filters))
        content_filter = dict(properties.user_properties).get(bridge.FILTER_PROPERTY)
        identifier = properties.subscription_identifiers[0] if properties.subscription_identifiers else None
        frames: list[bytes] = []
        for i, wanted in enumerate(wanted_filters):
            qos = wanted.qos  # (2 at most: the codec's) a persistent session's QoS 2 deliveries in flight
            # are resent under their packet identifiers after a reconnect (core/mqtt/resumption.py)
            pattern = topics.pattern_of(wanted.filter)
            if isinstance(pattern, topics.TopicRefused):
                pending.codes[i] = pattern.reason_code
                continue
            same = self.subs.get(wanted.filter)
            name = None if self.client_id is None else persistent.name_of(
                self.client_id, qos, wanted.filter,
                persistent.Options(wanted.no_local, wanted.retain_as_published, identifier))
            if same is not None and same.name == name:  # its options replaced (3.8.4): in place if named alike
                same.qos = qos
                same.retain_as_published = wanted.retain_as_published
                same.no_local = wanted.no_local
                same.identifier = identifier
                pending.codes[i] = qos
                continue
            if same is not None:  # a persistent one under other options: its name changes
                frames += self._end(native, same)
            try:
                sub, frame = native.subscribe(pattern, content_filter, positions=None if name is None else [],
                                              home=name)
            except TidingsError as exc:
                pending.codes[i] = bridge.SUBSCRIBE_REFUSALS.get(exc.code, R.UNSPECIFIED_ERROR)
                continue
            self._add(MqttSub(wanted.filter, qos, sub, name, retain_as_published=wanted.retain_as_published,
                              no_local=wanted.no_local, identifier=identifier))
            self.pending[sub] = (pending, i)
            frames.append(frame)
        return self._suback_if_done(pending), frames

    def _add(self, entry: MqttSub) -> None:
        self.subs[entry.filter] = self.sub_of[entry.sub] = entry
        if entry.name is not None:
            entry.durable = DurableCursor(entry.filter)

    def _end(self, native: ClientSession, entry: MqttSub) -> list[bytes]:
        """Unsubscribe `entry` (a persistent one for good)."""
        self.sub_of.pop(entry.sub, None)
        if self.subs.get(entry.filter) is entry:
            del self.subs[entry.filter]
        return [native.unsubscribe(entry.sub, forget=entry.name is not None)]

    def _suback_if_done(self, pending: PendingSuback) -> tuple[int, ...] | None:
        """The SUBACK's codes (5.0's: the protocol machine says them in 3.1.1's), once all are known."""
        if any(code is None for code in pending.codes):
            return None
        return tuple(c for c in pending.codes if c is not None)

    def unsubscribe(self, native: ClientSession, filters: tuple[str, ...]) -> tuple[tuple[int, ...], list[bytes]]:
        """An UNSUBSCRIBE: its codes and frames."""
        codes, frames = [], []
        for flt in filters:
            entry = self.subs.get(flt)
            if entry is None:
                codes.append(int(R.NO_SUBSCRIPTION_EXISTED))
                continue
            frames += self._end(native, entry)
            codes.append(int(R.SUCCESS))
        return tuple(codes), frames

    def resume(self, native: ClientSession, held: list[Held]) -> list[bytes]:
        """A persistent session's subscriptions, subscribed again at their names (no SUBACK owed)."""
        frames = []
        assert self.client_id is not None
        for name, pattern, content_filter in held:
            parsed = persistent.parse(name, self.client_id)
            if parsed is None or parsed[2] in self.subs:
                continue
            qos, options, topic_filter = parsed
            sub, frame = native.subscribe(pattern, content_filter or None, positions=[], home=name)
            self._add(MqttSub(topic_filter, qos, sub, name, retain_as_published=options.retain_as_published,
                              no_local=options.no_local, identifier=options.identifier))
            frames.append(frame)
        return frames

    def forget(self, native: ClientSession, held: list[Held]) -> list[bytes]:
        """A clean start ends what a persistent session of the client id held (subscribed, then ended)."""
        frames = []
        for name, pattern, content_filter in held:
            sub, frame = native.subscribe(pattern, content_filter or None, positions=[], home=name)
            frames += [frame, native.unsubscribe(sub, forget=True)]
        return frames

    def releases(self, native: ClientSession) -> list[bytes]:
        """RELEASE of each persistent subscription whose acknowledged prefix moved (only a persistent
        session's are durable: a clean one's have nothing to release, asked once per turn)."""
        if self.client_id is None:
            return []
        frames = []
        for entry in self.sub_of.values():
            wire = entry.durable.release() if entry.durable is not None else None
            if wire is not None:
                frames.append(native.release(entry.sub, wire))
        return frames

    # ---- the broker's answers --------------------------------------------------------------------

    def subscribed(self, sub: int, checkpoint: object, refused: int | None) -> list[tuple[int, tuple[int, ...]]]:
        """SUBSCRIBED (`refused` None) or its ERROR: the code of its filter in the SUBACK awaited;
        the SUBACKs now complete, (packet id, codes)."""
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
        done = self._suback_if_done(pending)
        return [] if done is None else [(pending.packet_id, done)]

    def silence(self, msg: messages.Silence) -> None:
        entry = self.sub_of.get(msg.sub)
        if entry is not None and (entry.durable is not None or entry.retained_sent is not None):
            positions = silence_of(msg).positions
            if entry.durable is not None:
                entry.durable.silence(positions)
            if entry.retained_sent is not None:
                entry.retained_sent.silence(positions)

    def deliver(self, msg: messages.Events, level: int = MQTT_5,
                source: tuple[str, str] | None = None, wall_us: int = 0) -> list[tuple[p.Publish | Plain, Tag]]:
        """EVENTS as PUBLISH packets for the protocol machine, each with its place in a persistent
        subscription (its acknowledgement moves the subscription on: `DurableCursor`). A No Local
        subscription skips the events of `source` (the connection's own: its service and client id),
        done at once in a persistent one, as is an event whose Message Expiry passed by `wall_us`.
        An event whose PUBLISH has no properties and no retain mark (its attributes none but
        `mqtt.qos` and `mqtt.retain`, a subscription without options) goes as `Plain`, without a
        Publish or an Event made for it: what `bridge.publish_of` would give."""
        entry = self.sub_of.get(msg.sub)
        if entry is None:  # unsubscribed: what was on its way is dropped
            return []
        out: list[tuple[p.Publish | Plain, Tag]] = []
        durable = entry.durable
        records = msg.records
        if entry.retained_sent is not None:  # (core/mqtt/retained.py: the live copies of what it was sent)
            records = entry.retained_sent.live(records, durable)
            if entry.retained_sent.over(wall_us):
                entry.retained_sent = None
        plain = not entry.no_local and not entry.retain_as_published and (entry.identifier is None or level != MQTT_5)
        granted = entry.qos
        short, long = RECORD_LENGTHS
        plain_keys, qos_key = PLAIN_ATTRIBUTES, bridge.QOS
        delivered = 0
        for fields in records:
            if plain and type(fields) is list:
                n = len(fields)
                if n == short:
                    pubend, tick, channel, attrs, service, instance, payload = fields
                elif n == long and type(fields[-1]) is bool:
                    pubend, tick, channel, attrs, service, instance, payload, _ = fields
                else:
                    n = 0
                if (n and type(channel) is str and type(payload) is bytes and type(attrs) is dict
                        and (not attrs or (len(attrs) == 1 and qos_key in attrs) or attrs.keys() <= plain_keys)
                        and type(tick) is int
                        and type(pubend) is str and type(service) is str and type(instance) is str):
                    published = attrs.get(qos_key)  # (bridge.publish_of's rule)
                    qos = 0 if published == 0 else 2 if published == 2 else 1
                    if qos > granted:  # noqa: PLR1730 (min(granted, qos) without the call)
                        qos = granted
                    delivered += 1
                    out.append(((channel, payload, qos), None if durable is None else
                                (durable, durable.delivered(pubend, tick, qos == 0))))
                    continue
            self._deliver_event(fields, entry, level, source, wall_us, out)
        self.delivered += delivered
        return out

    def _deliver_event(self, fields: object, entry: MqttSub, level: int, source: tuple[str, str] | None,
                       wall_us: int, out: list[tuple[p.Publish | Plain, Tag]]) -> None:
        """One record as its PUBLISH, by `bridge.publish_of` and the subscription's options."""
        durable = entry.durable
        try:
            event = event_from_fields(fields)
        except ValueError:
            return
        publish = None if entry.no_local and (event.service, event.instance) == source else (
            bridge.publish_of(event, entry.qos, level, wall_us))
        if publish is None:
            if durable is not None:
                durable.delivered(event.pubend, event.tick, True)
            return
        if entry.retain_as_published and event.attributes.get(bridge.RETAIN) is True:
            publish = replace(publish, retain=True)
        if entry.identifier is not None and level == MQTT_5:
            publish = replace(publish, properties=replace(publish.properties,
                                                          subscription_identifiers=(entry.identifier,)))
        self.delivered += 1
        if durable is None:
            out.append((publish, None))
        else:
            item = durable.delivered(event.pubend, event.tick, publish.qos == 0)
            out.append((publish, (durable, item)))


def numbered(delivered: list[tuple[p.Publish | Plain, Tag]], resumed: Resumed, tokens: dict[int, Tag],
             token: int) -> tuple[list[tuple[int, p.Publish | Plain]], int]:
    """A session's deliveries, each with its token (`MqttSession._token`'s, inline: a QoS 1/2 one's tag
    kept in `tokens`), but those resent already from the last connection (`resumed`); the last token."""
    claims = bool(resumed.tokens)
    items: list[tuple[int, p.Publish | Plain]] = []
    for publish, tag in delivered:
        if tag is not None and claims and resumed.claim(tag, tokens):
            continue
        token += 1
        if tag is not None and (publish[2] if isinstance(publish, tuple) else publish.qos):
            tokens[token] = tag
        items.append((token, publish))
    return items, token
