"""QoS 1 and 2 on one MQTT connection, both ways (MQTT 4.3, 4.4, 4.9): packet identifiers, the
sender's and the receiver's states, and the Receive Maximum windows.

Theory of operation. `Deliveries` is the sender's side (the broker delivering to the client): a
delivery (the broker side's `token` and its PUBLISH) waits in order in `queued` until the client's
window has room (its Receive Maximum: at most that many QoS 1 and 2 PUBLISHes unacknowledged), then
takes a free packet identifier and moves through `DeliveryState`:

    QoS 1: QUEUED -> AWAITING_PUBACK -> DONE (PUBACK)
    QoS 2: QUEUED -> AWAITING_PUBREC -> AWAITING_PUBCOMP (PUBREC; we send PUBREL) -> DONE (PUBCOMP)
                                     -> DONE (a PUBREC with an error code: 4.3.3, the flow ends)
    any:   QUEUED -> DONE (not sent: over the client's Maximum Packet Size)

A packet identifier is free again once its delivery is DONE (2.2.1: reusable after the PUBACK or
PUBCOMP); identifiers are taken in turn from 1 to 65535, skipping those in use, so a late answer for
an old delivery does not meet a new one at once. `queued_max` bounds what waits.

`Receipts` is the receiver's side (the client's PUBLISHes at QoS 1 and 2), driven by `ReceiptState`:

    AWAITING_LOG      reported to the broker side, its answer (`publish_done`) awaited: a PUBLISH
                      with the same identifier is a retry (DUP) and is not reported again
    AWAITING_PUBREL   QoS 2 only: PUBREC sent; a retried PUBLISH gets the PUBREC again, PUBREL
                      ends it (PUBCOMP). A QoS 1 receipt ends at its PUBACK.

At most `maximum` receipts are open (our Receive Maximum, 5.0; a 3.1.1 client is bounded by its
65,535 identifiers); one more is the client's error (0x93 Receive Maximum exceeded).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from enum import StrEnum

from tidings.core.mqtt.packet_type import PACKET_ID_MAX
from tidings.core.mqtt.packets import Publish
from tidings.core.states import Transitions


class DeliveryState(StrEnum):
    QUEUED = "queued"
    AWAITING_PUBACK = "awaiting-puback"
    AWAITING_PUBREC = "awaiting-pubrec"
    AWAITING_PUBCOMP = "awaiting-pubcomp"
    DONE = "done"


D = DeliveryState
DELIVERY_TRANSITIONS = Transitions[DeliveryState]("mqtt delivery", {
    D.QUEUED: frozenset({D.AWAITING_PUBACK, D.AWAITING_PUBREC, D.DONE}),
    D.AWAITING_PUBACK: frozenset({D.DONE}),
    D.AWAITING_PUBREC: frozenset({D.AWAITING_PUBCOMP, D.DONE}),
    D.AWAITING_PUBCOMP: frozenset({D.DONE}),
})


@dataclass(slots=True)
class Delivery:
    token: int  # the broker side's name for it, reported back in DeliveryAcked
    publish: Publish  # as the broker side gave it (no packet id, no alias)
    state: DeliveryState = D.QUEUED
    packet_id: int = 0  # 0 while queued


class PacketIds:
    """Packet identifiers in use, taken in turn from 1 to 65535."""

    __slots__ = ("last", "used")

    def __init__(self) -> None:
        self.used: set[int] = set()
        self.last = 0

    def take(self) -> int:
        assert len(self.used) < PACKET_ID_MAX, "every packet identifier is in use"
        pid = self.last
        while True:
            pid = pid % PACKET_ID_MAX + 1
            if pid not in self.used:
                break
        self.used.add(pid)
        self.last = pid
        return pid

    def free(self, pid: int) -> None:
        self.used.discard(pid)


class Deliveries:
    __slots__ = ("ids", "in_flight", "moves", "moves2", "queued", "queued_max", "window")

    def __init__(self, window: int, queued_max: int) -> None:
        self.window = window  # the client's Receive Maximum (within our own cap)
        self.queued_max = queued_max
        self.in_flight: dict[int, Delivery] = {}  # packet id -> delivery awaiting the client
        self.queued: deque[Delivery] = deque()
        self.ids = PacketIds()
        self.moves = 0  # changes of what is in flight (a persistent session's ids are saved: core/mqtt/inflight_ids.py)
        self.moves2 = 0  # of those, QoS 2 PUBLISHes sent and PUBRELs due (they wait for that save)

    def reserve(self, pids: list[int]) -> None:
        """Identifiers a restarted session's deliveries hold (`resume`d when their events come again):
        not taken for new ones meanwhile."""
        self.ids.used.update(pid for pid in pids if 0 < pid <= PACKET_ID_MAX)

    def full(self) -> bool:
        """No room even to queue: the broker side offers the delivery again later."""
        return len(self.queued) >= self.queued_max

    def add(self, token: int, publish: Publish) -> None:
        assert not self.full() and publish.qos in (1, 2), publish
        self.queued.append(Delivery(token, publish))

    def ready(self) -> list[Delivery]:
        """The queued deliveries the window now has room for, each with its packet identifier."""
        out: list[Delivery] = []
        while self.queued and len(self.in_flight) < self.window:
            d = self.queued.popleft()
            d.packet_id = self.ids.take()
            d.state = DELIVERY_TRANSITIONS.move(d.state, D.AWAITING_PUBACK if d.publish.qos == 1 else D.AWAITING_PUBREC)
            self.in_flight[d.packet_id] = d
            out.append(d)
            self.moves2 += d.publish.qos == 2
        self.moves += bool(out)
        return out

    def _finish(self, d: Delivery) -> Delivery:
        d.state = DELIVERY_TRANSITIONS.move(d.state, D.DONE)
        del self.in_flight[d.packet_id]
        self.ids.free(d.packet_id)
        self.moves += 1
        return d

    def _awaiting(self, pid: int, state: DeliveryState) -> Delivery | None:
        d = self.in_flight.get(pid)
        return d if d is not None and d.state == state else None

    def resume(self, token: int, publish: Publish, pid: int, released: bool) -> Delivery | None:
        """A delivery of the session's last connection, unfinished, back in flight under its packet
        identifier (4.4: resent with it), past PUBREC if `released`; None if the identifier is taken."""
        if pid in self.in_flight or not 0 < pid <= PACKET_ID_MAX:
            return None
        d = Delivery(token, publish, D.QUEUED, pid)
        d.state = DELIVERY_TRANSITIONS.move(d.state, D.AWAITING_PUBACK if publish.qos == 1 else D.AWAITING_PUBREC)
        if released:
            d.state = DELIVERY_TRANSITIONS.move(d.state, D.AWAITING_PUBCOMP)
        self.ids.used.add(pid)
        self.in_flight[pid] = d
        self.moves += 1  # (its id is saved already: not a move its sends wait for)
        return d

    def unfinished(self) -> list[Delivery]:
        """What the client has not finished, in flight (by packet identifier) then queued: what a
        session keeps when the connection ends, to `resume` on the next."""
        return [*sorted(self.in_flight.values(), key=lambda d: d.packet_id), *self.queued]

    def drop(self, pid: int) -> Delivery:
        """A delivery given its identifier but not sent (over the client's Maximum Packet Size)."""
        return self._finish(self.in_flight[pid])

    def acked(self, pid: int) -> Delivery | None:
        """PUBACK: the QoS 1 delivery it ends, or None (an identifier we are not waiting on)."""
        d = self._awaiting(pid, D.AWAITING_PUBACK)
        return None if d is None else self._finish(d)

    def received(self, pid: int, failed: bool) -> Delivery | None:
        """PUBREC: the QoS 2 delivery moved on (PUBREL to send) or, `failed`, ended; None if unknown."""
        d = self._awaiting(pid, D.AWAITING_PUBREC)
        if d is None or failed:
            return None if d is None else self._finish(d)
        d.state = DELIVERY_TRANSITIONS.move(d.state, D.AWAITING_PUBCOMP)
        self.moves += 1
        self.moves2 += 1
        return d

    def completed(self, pid: int) -> Delivery | None:
        """PUBCOMP: the QoS 2 delivery it ends, or None."""
        d = self._awaiting(pid, D.AWAITING_PUBCOMP)
        return None if d is None else self._finish(d)


class ReceiptState(StrEnum):
    AWAITING_LOG = "awaiting-log"
    AWAITING_PUBREL = "awaiting-pubrel"
    DONE = "done"


RS = ReceiptState
RECEIPT_TRANSITIONS = Transitions[ReceiptState]("mqtt receipt", {
    RS.AWAITING_LOG: frozenset({RS.AWAITING_PUBREL, RS.DONE}),
    RS.AWAITING_PUBREL: frozenset({RS.DONE}),
})


class Arrival(StrEnum):
    """What a QoS 1 or 2 PUBLISH is to the receiver."""

    NEW = "new"  # report it
    RETRY = "retry"  # the same identifier and QoS, awaiting the log: nothing to do
    RETRY_RELEASED = "retry-released"  # QoS 2 whose PUBREC was sent: send it again
    IN_USE = "in-use"  # the identifier is another QoS's, still open: 0x91
    OVER_WINDOW = "over-window"  # one more than our Receive Maximum: 0x93


@dataclass(slots=True)
class Receipt:
    qos: int
    state: ReceiptState = RS.AWAITING_LOG


class Receipts:
    __slots__ = ("maximum", "open")

    def __init__(self, maximum: int) -> None:
        self.maximum = maximum
        self.open: dict[int, Receipt] = {}  # packet id -> receipt

    def arrive(self, pid: int, qos: int) -> Arrival:
        r = self.open.get(pid)
        if r is not None:
            if r.qos != qos:
                return Arrival.IN_USE
            return Arrival.RETRY if r.state == RS.AWAITING_LOG else Arrival.RETRY_RELEASED
        if len(self.open) >= self.maximum:
            return Arrival.OVER_WINDOW
        self.open[pid] = Receipt(qos)
        return Arrival.NEW

    def logged(self, pid: int, failed: bool) -> int | None:
        """The broker side's answer to the PUBLISH `pid`: its QoS (PUBACK or PUBREC to send), or
        None when no such PUBLISH awaits it. QoS 1 and a failed QoS 2 end here."""
        r = self.open.get(pid)
        if r is None or r.state != RS.AWAITING_LOG:
            return None
        if r.qos == 2 and not failed:
            r.state = RECEIPT_TRANSITIONS.move(r.state, RS.AWAITING_PUBREL)
        else:
            r.state = RECEIPT_TRANSITIONS.move(r.state, RS.DONE)
            del self.open[pid]
        return r.qos

    def restore(self, pids: list[int]) -> None:
        """QoS 2 PUBLISHes of the session's last connection whose PUBREC was sent: a retry of one is
        answered PUBREC again and not reported (logged once across the reconnect)."""
        for pid in pids:
            self.open[pid] = Receipt(2, RS.AWAITING_PUBREL)

    def awaiting_release(self) -> list[int]:
        """The QoS 2 identifiers whose PUBREL is awaited: what a session keeps to `restore`."""
        return sorted(pid for pid, r in self.open.items() if r.state == RS.AWAITING_PUBREL)

    def released(self, pid: int) -> ReceiptState | None:
        """PUBREL: the state the receipt was in (ended if AWAITING_PUBREL), None if unknown."""
        r = self.open.get(pid)
        if r is None:
            return None
        if r.state == RS.AWAITING_PUBREL:
            r.state = RECEIPT_TRANSITIONS.move(r.state, RS.DONE)
            del self.open[pid]
            return RS.AWAITING_PUBREL
        return r.state
