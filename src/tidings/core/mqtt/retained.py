"""Retained messages across the overlay: the last retained event per topic, at every broker.

Theory of operation. A retained message is not a second store beside the broker: an MQTT PUBLISH
with RETAIN 1 is an ordinary event on its channel with the attribute `mqtt.retain` = true (the
retain mark, core/mqtt/bridge.py), logged and fsynced at its publisher's pubend like any other, and
delivered to the subscribers of its channel as any event. Each broker with an MQTT port keeps the
retained set in memory (`RetainedStore`), fed by one subscription of its own (`RetainedFeed`): the
pattern `#` with the content filter `mqtt.retain == true`, starting at the oldest event of every
log (`start`), so the trees bring it every retained event published anywhere in the overlay, and a
new or restarted broker reads the retained events of the logs again: the logs are the retained
set's durable copy, and nothing else is written.

The store keeps, per topic, the retained event greatest in the total order (tick, pubend) (a tick is
its pubend's time of logging; two pubends never share a name), so every broker folds the same events
to the same set whatever order they arrive in: last writer wins. An event with an empty payload
deletes the topic's retained message; its order is kept as a tombstone, so an older retained event
that arrives later (a replay from the logs) does not come back.

When an MQTT SUBSCRIBE is granted (retain handling 0, or 1 for a subscription that did not exist),
the session (core/mqtt/session.py) delivers `matching(filter)`: every live retained event whose
topic the filter matches (a leading wildcard does not match a `$` topic), with RETAIN 1: at most
`RETAINED_PER_SUBSCRIBE_MAX` for one SUBSCRIBE (the first by topic), so that they alone never
overflow the client's queue of deliveries (bridge.MqttSettings.deliveries_queued_max, which would
disconnect it).

A retained copy and its live copy. A new subscription reaches back on other brokers' pubends
(docs/delivery.md "The start point": their events from its broker's clock less the clock-skew
allowance, 1 s), and the retained set holds events that recent too, so an event sent as a retained
copy at the SUBACK can come again as a live delivery of the same subscription. What it was sent is
held against that (`RetainedSent`, on the subscription: core/mqtt/subscriptions.py): a live event of
a topic it was sent, from the copy's pubend, at a tick at or below the copy's (the same event, or one
older than the state the subscriber was given), is dropped for that subscription (in a persistent
session, done at once). Each pubend's events reach a subscription in its tick order, so once one
of pubend P's past the greatest tick sent from P came (or a SILENCE past it), none of P's can be a
copy any more and P is let go; once no pubend is left, or `LIVE_COPIES_WINDOW_US` passed on the
broker's clock, the whole is, and the subscription pays nothing more per delivery.

Limits: `topics_max` topics held (live and tombstones; a retained event for a new topic past it is
not kept: `dropped`), `bytes_max` bytes of live retained messages (topic, payload, attributes as
text; a message that would take the store past it is not kept and its topic holds a tombstone at
its order: subscribers then get no retained message for it rather than an older one).

The feed is the broker side of a client connection the gateway (core/mqtt/gateway.py) opens on the
broker (its connection number `RETAINED_CONN`, which no runtime gives out), opened as the broker's
own identity (`BROKER_OWN`, without a handshake: core/auth/guard.py `vouched`, as a shared group's
home opens its connection; its subscription is not held to the auth file's rules nor to trees'
access lists, so an `--auth` broker without anonymous access serves retained messages too), then the
SUBSCRIBE once WELCOME came. States (`FeedState`, moves checked by `TRANSITIONS`): IDLE -> OPENING
(vouched for) -> SUBSCRIBING (WELCOME came) -> OPEN (SUBSCRIBED) -> CLOSED (an ERROR: the broker
refused the feed, which its CONNACKs then say as Retain Available 0; or the broker's drain, whose
wait for its clients to go the feed must not hold up). CLOSED is final: the gateway then ends the
connection.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import TypeVar

from tidings.core.auth.names import BROKER_OWN
from tidings.core.broker.advice import Reason
from tidings.core.channels import pattern_matches
from tidings.core.errors import ProtocolError
from tidings.core.event import RECORD_LENGTHS, Event, event_from_fields
from tidings.core.mqtt import bridge
from tidings.core.mqtt import packets as p
from tidings.core.mqtt.persistent import DurableCursor
from tidings.core.session.client_session import ClientSession
from tidings.core.states import Transitions
from tidings.core.wire import messages

RETAIN = bridge.RETAIN  # the retain mark, an event attribute (a user property cannot set it: bridge.py)
FEED_PATTERN = "#"
FEED_FILTER = f"{RETAIN} == true"
FEED_SERVICE = "mqtt-retained"
RETAINED_CONN = -1  # the feed's connection on the broker (the runtime numbers its own from 1)
TOPICS_MAX = 100_000  # topics held (live and deleted)
BYTES_MAX = 64 * 1024 * 1024  # bytes of live retained messages held
ENTRY_OVERHEAD_BYTES = 64  # counted per live message beside its topic, payload and attributes
RETAINED_PER_SUBSCRIBE_MAX = 5_000  # retained messages sent for one SUBSCRIBE (under deliveries_queued_max)
LIVE_COPIES_WINDOW_US = 60_000_000  # how long a subscription looks for the live copies of its retained ones

Granted = TypeVar("Granted")  # a subscription granted (core/mqtt/subscriptions.py MqttSub)
Order = tuple[int, str]  # (tick, pubend): the total order of retained events, last writer wins


def order_of(event: Event) -> Order:
    return (event.tick, event.pubend)


def size_of(event: Event) -> int:
    """What a live retained message counts against `bytes_max`."""
    attrs = sum(len(k) + len(str(v)) for k, v in event.attributes.items())
    return ENTRY_OVERHEAD_BYTES + len(event.channel.encode()) + len(event.payload) + attrs


@dataclass(frozen=True, slots=True)
class Entry:
    """A topic's retained state: the greatest order seen, and its event (None: deleted, or not kept)."""

    order: Order
    event: Event | None


class RetainedStore:
    """The last retained event per topic (a plain data structure: no time, no I/O)."""

    def __init__(self, topics_max: int = TOPICS_MAX, bytes_max: int = BYTES_MAX) -> None:
        self.topics_max = topics_max
        self.bytes_max = bytes_max
        self.entries: dict[str, Entry] = {}
        self.bytes = 0
        self.dropped = 0  # retained events not kept for the limits

    def offer(self, event: Event) -> bool:
        """A retained event (its payload empty: a deletion); True when the topic's state changed."""
        topic, order = event.channel, order_of(event)
        old = self.entries.get(topic)
        if old is not None and old.order >= order:
            return False  # an older (or the same) one: the newer stays
        if old is None and len(self.entries) >= self.topics_max:
            self.dropped += 1
            return False
        if old is not None and old.event is not None:
            self.bytes -= size_of(old.event)
        kept: Event | None = event if event.payload else None
        if kept is not None and self.bytes + size_of(kept) > self.bytes_max:
            self.dropped += 1
            kept = None
        if kept is not None:
            self.bytes += size_of(kept)
        self.entries[topic] = Entry(order, kept)
        return True

    def matching(self, topic_filter: str) -> list[Event]:
        """The live retained events whose topic `topic_filter` (a valid pattern) matches, by topic."""
        if "+" not in topic_filter and "#" not in topic_filter:
            entry = self.entries.get(topic_filter)
            return [] if entry is None or entry.event is None else [entry.event]
        return [e.event for t, e in sorted(self.entries.items())
                if e.event is not None and pattern_matches(topic_filter, t)]

    def live(self) -> dict[str, Event]:
        return {t: e.event for t, e in self.entries.items() if e.event is not None}

    def status(self) -> dict[str, int]:
        return {"retained_topics": sum(1 for e in self.entries.values() if e.event is not None),
                "retained_bytes": self.bytes, "retained_dropped": self.dropped}


class RetainedSent:
    """The retained copies one subscription was sent, held against their live copies (see above)."""

    def __init__(self, sent: list[Event], wall_us: int, before: RetainedSent | None = None) -> None:
        """`sent`: the copies just sent; `wall_us`: the broker's clock (µs, 0: unknown); `before`: what
        the subscription was sent at an earlier SUBSCRIBE, still held."""
        self.topics: dict[str, tuple[str, int]] = {} if before is None else before.topics  # topic -> (pubend, tick)
        self.horizon: dict[str, int] = {} if before is None else before.horizon  # pubend -> greatest tick sent
        for event in sent:
            self.topics[event.channel] = (event.pubend, event.tick)
            if event.tick > self.horizon.get(event.pubend, -1):
                self.horizon[event.pubend] = event.tick
        newest = max((event.tick for event in sent), default=0)  # (a tick is its pubend's clock, in µs)
        self.until_us = max(wall_us, newest) + LIVE_COPIES_WINDOW_US

    @staticmethod
    def after(sent: list[Event], wall_us: int, before: RetainedSent | None) -> RetainedSent | None:
        """What a subscription holds once `sent` were sent to it (`before`: what it held)."""
        return RetainedSent(sent, wall_us, before) if sent else before

    def over(self, wall_us: int) -> bool:
        """No live copy can come any more (or the window passed): the subscription lets this go."""
        return not self.horizon or wall_us > self.until_us

    def copy(self, record: object) -> tuple[str, int] | None:
        """A delivered record's (pubend, tick) when it is dropped; a pubend past its horizon is let go."""
        if type(record) is not list or len(record) not in RECORD_LENGTHS:
            return None  # (malformed: the delivery's own checks answer it)
        pubend, tick, channel = record[0], record[1], record[2]
        if type(pubend) is not str or type(tick) is not int:
            return None
        horizon = self.horizon.get(pubend)
        if horizon is None:
            return None
        if tick > horizon:  # (each pubend's events come in its tick order)
            del self.horizon[pubend]
            return None
        sent = self.topics.get(channel) if type(channel) is str else None
        return (pubend, tick) if sent is not None and sent[0] == pubend and tick <= sent[1] else None

    def live(self, records: list[object], durable: DurableCursor | None) -> list[object]:
        """`records` without the live copies (in a persistent subscription, each done at once)."""
        kept: list[object] = []
        for record in records:
            dropped = self.copy(record)
            if dropped is None:
                kept.append(record)
            elif durable is not None:
                durable.delivered(dropped[0], dropped[1], True)
        return kept

    def silence(self, positions: dict[str, int]) -> None:
        """A SILENCE: nothing more of each pubend up to its tick; a pubend past its horizon is let go."""
        for pubend, tick in positions.items():
            if self.horizon.get(pubend, tick + 1) <= tick:
                del self.horizon[pubend]


def owed(store: RetainedStore, filters: tuple[str, ...],
         granted: Mapping[str, Granted]) -> Iterator[tuple[Granted, list[Event]]]:
    """The retained events a SUBSCRIBE's `filters` are sent, each with its subscription (`granted`, by
    filter: a refused one has none): `RETAINED_PER_SUBSCRIBE_MAX` for the whole SUBSCRIBE."""
    budget = RETAINED_PER_SUBSCRIBE_MAX
    for flt in filters:
        entry = granted.get(flt)
        if entry is not None and budget > 0:
            events = store.matching(flt)[:budget]
            budget -= len(events)
            yield entry, events


def due(wanted: p.TopicFilter, existed: bool) -> bool:
    """Whether a granted subscription gets the retained messages now (3.8.3.1 Retain Handling)."""
    if wanted.retain_handling == p.RETAIN_SEND:
        return True
    return wanted.retain_handling == p.RETAIN_SEND_IF_NEW and not existed


class FeedState(StrEnum):
    IDLE = "idle"
    OPENING = "opening"
    SUBSCRIBING = "subscribing"
    OPEN = "open"
    CLOSED = "closed"


IDLE, OPENING, SUBSCRIBING, OPEN, CLOSED = FeedState
TRANSITIONS = Transitions[FeedState]("retained feed", {
    IDLE: frozenset({OPENING}),
    OPENING: frozenset({SUBSCRIBING, CLOSED}),
    SUBSCRIBING: frozenset({OPEN, CLOSED}),
    OPEN: frozenset({CLOSED}),
})


class RetainedFeed:
    """The broker's own subscription to every retained event, folded into `store`."""

    def __init__(self, instance: str, store: RetainedStore | None = None) -> None:
        self.native = ClientSession(FEED_SERVICE, instance)
        self.store = store if store is not None else RetainedStore()
        self.state = IDLE
        self.refusal = ""  # why the broker refused the feed (CLOSED)

    @property
    def available(self) -> bool:
        """Retained messages are served (our CONNACK's Retain Available) unless the broker refused us."""
        return self.state is not CLOSED

    def open(self) -> str:
        """Opening: the identity the broker opens `RETAINED_CONN` as (after its Accepted), without a
        handshake (core/auth/guard.py `vouched`): the broker's own, which no client can be, so the feed
        needs no anonymous access and no rule of the auth file's (its WELCOME follows)."""
        self.state = TRANSITIONS.move(self.state, OPENING)
        return BROKER_OWN

    def from_broker(self, data: bytes) -> list[bytes]:
        """What the broker sent the feed: the frames to hand it back (the SUBSCRIBE after WELCOME)."""
        if self.state is CLOSED:
            return []
        try:
            msgs = self.native.receive(data)
        except ProtocolError as exc:  # our own broker broke the protocol: a bug, the feed stops
            self.stop(str(exc))
            return []
        out: list[bytes] = []
        for msg in msgs:
            if isinstance(msg, messages.Events):
                for fields in msg.records:
                    try:
                        self.store.offer(event_from_fields(fields))
                    except ValueError:
                        continue
            elif isinstance(msg, messages.Welcome) and self.state is OPENING:
                self.state = TRANSITIONS.move(self.state, SUBSCRIBING)
                out.append(self.native.subscribe(FEED_PATTERN, FEED_FILTER, start=messages.START_OLDEST)[1])
            elif isinstance(msg, messages.Subscribed) and self.state is SUBSCRIBING:
                self.state = TRANSITIONS.move(self.state, OPEN)
            elif isinstance(msg, messages.Error):
                self.stop(f"{msg.code}: {msg.message}")
            elif isinstance(msg, messages.Challenge):
                self.stop("the broker asks for a credential")
            elif isinstance(msg, messages.Advice) and msg.reason == Reason.DRAINING.value:
                self.stop("the broker is stopping")  # (its drain waits for its clients to go)
        return out

    def renew(self) -> bytes | None:
        """The lease renewal due (None: nothing to renew)."""
        return self.native.renew() if self.state is OPEN else None

    def stop(self, why: str) -> None:
        if self.state is not CLOSED:
            self.refusal = why
            self.state = TRANSITIONS.move(self.state, CLOSED)

    def status(self) -> dict[str, object]:
        return {"retained_feed": str(self.state), **self.store.status(),
                **({"retained_refusal": self.refusal} if self.refusal else {})}
