"""Persistent MQTT sessions as broker-held durable subscriptions (docs/durable.md, `durable="NAME"`).

Theory of operation. A client that connects with Clean Session 0 (3.1.1), or Clean Start 0 and a
Session Expiry Interval (5.0), has a persistent session: each of its subscriptions is a named durable
subscription of its identity (or service) at this broker, named `mqtt:CLIENT_ID:OPTIONS:FILTER`
(OPTIONS: the QoS granted, then `,n` for No Local, `,r` for Retain As Published, `,iN` for the
Subscription Identifier N: 5.0's options are the session's, 3.8.3.1, so they live in the name, saved
with the subscription before its SUBACK and found again on every reconnect, through a kill -9), so the
broker keeps its position in its durable state (saved within `durable_save_interval_ns` of a move,
through a kill -9) and holds the events it has not acknowledged. What the client acknowledges is the
prefix of its deliveries that is done: a QoS 1 delivery once its PUBACK came, a QoS 0 one when sent,
and the SILENCE markers in line with them (`DurableCursor`); that prefix moves the subscription's
checkpoint (core/durable/checkpoint.py), which the session RELEASEs. When the client connects again
with the same client id, its subscriptions are found by their names and subscribed again: the broker
delivers what was not acknowledged, again, then the rest (at least once, in each publisher's order),
those that were in flight taken for the ones the session resends under their packet identifiers
(core/mqtt/resumption.py). A connection with Clean Start 1 ends them (UNSUBSCRIBE, forget).

A plain data structure: the session (core/mqtt/session.py) feeds it and sends what it returns.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Final

from tidings.core.durable.checkpoint import Checkpoint
from tidings.core.errors import TidingsError

PREFIX = "mqtt:"
IDENTIFIER_MAX: Final = 268_435_455  # a Subscription Identifier's largest (3.8.2.1.2)


@dataclass(frozen=True, slots=True)
class Options:
    """A subscription's 5.0 options that its name keeps."""

    no_local: bool = False
    retain_as_published: bool = False
    identifier: int | None = None


NO_OPTIONS: Final = Options()


def name_of(client_id: str, qos: int, topic_filter: str, options: Options = NO_OPTIONS) -> str:
    """The durable name of a persistent session's subscription."""
    flags = ",n" * options.no_local + ",r" * options.retain_as_published
    if options.identifier is not None:
        flags += f",i{options.identifier}"
    return f"{PREFIX}{client_id}:{qos}{flags}:{topic_filter}"


def prefix_of(client_id: str) -> str:
    return f"{PREFIX}{client_id}:"


def parse(name: str, client_id: str) -> tuple[int, Options, str] | None:
    """(QoS, options, filter) of `client_id`'s subscription named `name`; None when it is not one."""
    prefix = prefix_of(client_id)
    if not name.startswith(prefix):
        return None
    head, sep, topic_filter = name[len(prefix):].partition(":")
    qos, *flags = head.split(",")
    if not sep or qos not in ("0", "1", "2") or len(flags) != len(set(flags)):
        return None
    identifier = None
    for flag in flags:
        if flag[:1] == "i" and flag[1:].isdigit() and 0 < int(flag[1:]) <= IDENTIFIER_MAX and identifier is None:
            identifier = int(flag[1:])
        elif flag not in ("n", "r"):
            return None
    return int(qos), Options("n" in flags, "r" in flags, identifier), topic_filter


@dataclass(slots=True)
class Delivery:
    """A delivery (its pubend and tick) or a SILENCE marker (its positions), done once acknowledged."""

    pubend: str
    tick: int
    done: bool
    silence: dict[str, int] | None = None


class DurableCursor:
    """One persistent subscription's acknowledged prefix and its checkpoint."""

    __slots__ = ("checkpoint", "filter", "items", "moved")

    def __init__(self, topic_filter: str = "") -> None:
        self.filter = topic_filter  # its subscription's (a delivery's place: core/mqtt/resumption.py)
        self.checkpoint: Checkpoint | None = None  # SUBSCRIBED's, then after the acknowledged prefix
        self.items: deque[Delivery] = deque()  # deliveries and markers not yet in the checkpoint, in order
        self.moved = False  # the checkpoint moved since the last RELEASE

    def started(self, wire: object) -> None:
        """SUBSCRIBED's checkpoint (a malformed one leaves the subscription unacknowledged)."""
        try:
            self.checkpoint = Checkpoint.from_wire(wire)
        except TidingsError:
            self.checkpoint = None

    def delivered(self, pubend: str, tick: int, done: bool) -> Delivery:
        item = Delivery(pubend, tick, done)
        self.items.append(item)
        if done:
            self._advance()
        return item

    def silence(self, positions: dict[str, int]) -> None:
        self.items.append(Delivery("", 0, True, positions))
        self._advance()

    def acked(self, item: Delivery) -> None:
        item.done = True
        self._advance()

    def _advance(self) -> None:
        checkpoint = self.checkpoint
        if checkpoint is None:
            return
        while self.items and self.items[0].done:
            item = self.items.popleft()
            if item.silence is not None:
                checkpoint.silence(item.silence)
            else:
                checkpoint.delivered(item.pubend, item.tick)
            self.moved = True

    def release(self) -> list[object] | None:
        """The checkpoint to RELEASE ([default, positions]), when it moved since the last."""
        if not self.moved or self.checkpoint is None:
            return None
        self.moved = False
        return list(self.checkpoint.to_wire()[:2])
