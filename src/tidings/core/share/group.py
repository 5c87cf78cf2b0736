"""One MQTT shared subscription group at its home broker: each event to one member, held until
that member acknowledges it, handed to another when the member leaves (docs/mqtt.md "Shared
subscriptions").

Theory of operation. A group (`$share/GROUP/FILTER` under one identity scope) has one *home*: the
broker whose node id is closest to the key hashed from (scope, GROUP, FILTER), as Scribe picks a
tree's root (core/share/wire.py `group_key`). The home subscribes to FILTER once for the whole
group, as a durable subscription (core/share/home.py), and feeds its events here, in order, with
the SILENCE markers between them. This machine hands each event to one member:

- the members are (broker address, client id); each member broker says which of its clients are
  members with a JOIN it repeats every `refresh_interval_ns` (`joined`): a member missing from its
  broker's latest JOIN has left, and a broker not heard from for `member_expiry_ns` has left with
  all its members (it died, or the home moved);
- an event goes to the next member in round-robin order that has fewer than `member_unacked_max`
  events unacknowledged (`Hand` effects); with none free, events wait in order in `queue`, whose
  bytes (`queued_bytes`) the home holds under `queued_bytes_max` by pacing the group's subscription
  (core/share/home.py: `paced`);
- a member's ACK (`acked`) ends its deliveries; a delivery it RETURNs (its client was gone by the
  time the delivery reached its broker), and every delivery still held by a member that left, go back
  to the front of the queue, oldest first, and to the next member free: at least once, never lost;
- the position moves over the acknowledged prefix (`persistent.DurableCursor`: the same prefix rule
  as a persistent session's): `release()` gives the checkpoint to RELEASE to the broker (the logs
  may drop what every member acknowledged), `position()` the one each SHARE_DELIVER carries to the
  members' brokers, from which the next home resumes.

Each hand gets a new delivery id, so a late ACK from a member that no longer holds the delivery is
ignored rather than ending another member's copy.

States (`GroupState`, moves checked by `TRANSITIONS`): SUBSCRIBING (the subscription asked for, its
checkpoint not yet known) -> OPEN -> CLOSED (no member left for `empty_keep_ns`, or the subscription
refused). Deadlines (member brokers' expiry, the empty group's end) are in one `Deadlines`.

Sans-IO: `now` is an argument; inputs are method calls, outputs `Hand` effects.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from enum import StrEnum
from typing import NamedTuple

from tidings.core.deadlines import Deadlines
from tidings.core.durable.checkpoint import Home
from tidings.core.mqtt.persistent import Delivery, DurableCursor
from tidings.core.states import Transitions
from tidings.core.units import SECOND_NS


@dataclass(frozen=True, slots=True)
class ShareLimits:
    member_unacked_max: int = 32  # events a member holds unacknowledged before the next goes elsewhere
    refresh_interval_ns: int = SECOND_NS  # a member broker repeats its JOIN this often
    member_expiry_ns: int = 3 * SECOND_NS  # a member broker not heard from this long has left
    empty_keep_ns: int = 30 * SECOND_NS  # a group without members is kept this long, then ends
    queued_bytes_max: int = 4 << 20  # events waiting for a member past this: the subscription is paced
    empty_tell_ns: int = 60 * SECOND_NS  # a member broker tells its position this long after its last member left


class GroupState(StrEnum):
    SUBSCRIBING = "subscribing"
    OPEN = "open"
    CLOSED = "closed"


SUBSCRIBING, OPEN, CLOSED = GroupState
TRANSITIONS = Transitions[GroupState]("share group", {
    SUBSCRIBING: frozenset({OPEN, CLOSED}),
    OPEN: frozenset({CLOSED}),
})

MemberKey = tuple[str, str]  # (member broker's address, client id)


class Hand(NamedTuple):
    """Deliver `record` (an event's fields) to `member` as delivery `delivery`."""

    member: MemberKey
    delivery: int
    record: list[object]


class BrokerExpiry(NamedTuple):
    broker: str


class EmptyEnd(NamedTuple):
    pass


GroupTimer = BrokerExpiry | EmptyEnd


@dataclass(slots=True)
class Pending:
    """An event of the group not yet acknowledged: its fields and its place in the cursor."""

    record: list[object]
    item: Delivery
    size: int  # its record's bytes, as `queued_bytes` counts them


@dataclass(slots=True)
class Member:
    unacked: dict[int, Pending] = field(default_factory=dict)  # delivery id -> what it holds


class ShareGroup:
    def __init__(self, key: tuple[str, str, str], limits: ShareLimits | None = None) -> None:
        """`key`: (scope, group name, filter)."""
        self.key = key
        self.limits = limits or ShareLimits()
        self.state = SUBSCRIBING
        self.members: dict[MemberKey, Member] = {}
        self.order: list[MemberKey] = []  # round-robin order
        self.turn = 0  # index in `order` of the next member asked
        self.brokers: dict[str, set[str]] = {}  # member broker -> its client ids, as its last JOIN said
        self.queue: deque[Pending] = deque()
        self.queued_bytes = 0  # the records' bytes in `queue`
        self.held: dict[int, MemberKey] = {}  # delivery id -> the member holding it
        self.next_delivery = 0
        self.cursor = DurableCursor()
        self.timers: Deadlines[GroupTimer] = Deadlines()
        # figures
        self.handed = self.redelivered = self.acknowledged = 0

    # ---- the subscription's side -----------------------------------------------------------------

    def started(self, checkpoint: object) -> None:
        """SUBSCRIBED: the durable subscription's checkpoint (its position)."""
        self.cursor.started(checkpoint)
        if self.state is SUBSCRIBING:
            self.state = TRANSITIONS.move(self.state, OPEN)

    def offer(self, records: list[object]) -> list[Hand]:
        """Events of the subscription, in order: each to one member."""
        for record in records:
            if not isinstance(record, list):  # (EVENTS from our own broker: never)
                continue
            pubend, tick = _position(record)
            size = record_bytes(record)
            self.queue.append(Pending(record, self.cursor.delivered(pubend, tick, False), size))
            self.queued_bytes += size
        return self._dispatch()

    def silence(self, positions: dict[str, int]) -> None:
        self.cursor.silence(positions)

    def position(self) -> list[object] | None:
        """The group's position, [default, [[pubend, tick], ...], [address, pubend, registration]]
        (its home here, as SUBSCRIBED named it; None until SUBSCRIBED)."""
        checkpoint = self.cursor.checkpoint
        return None if checkpoint is None else list(checkpoint.to_wire())

    def home(self) -> Home | None:
        """Where the group's durable subscription is registered (SUBSCRIBED's home), if known."""
        checkpoint = self.cursor.checkpoint
        return None if checkpoint is None else checkpoint.home

    def release(self) -> list[object] | None:
        """The checkpoint to RELEASE, when the acknowledged prefix moved since the last."""
        return self.cursor.release()

    def refused(self) -> None:
        """The broker refused the group's subscription: the group ends (its members are told by
        the home: core/share/home.py)."""
        self.close()

    def close(self) -> None:
        if self.state is not CLOSED:
            self.state = TRANSITIONS.move(self.state, CLOSED)
        self.timers.cancel(EmptyEnd())
        for broker in self.brokers:
            self.timers.cancel(BrokerExpiry(broker))

    # ---- the members' side -----------------------------------------------------------------------

    def joined(self, now: int, broker: str, clients: tuple[str, ...]) -> list[Hand]:
        """A member broker's JOIN: `clients` are its members now (the others of it have left)."""
        if self.state is CLOSED:
            return []
        now_members = set(clients)
        for gone in self.brokers.get(broker, set()) - now_members:
            self._leave((broker, gone))
        for client in now_members - self.brokers.get(broker, set()):
            self.members[(broker, client)] = Member()
            self.order.append((broker, client))
        if now_members:
            self.brokers[broker] = now_members
            self.timers.set(BrokerExpiry(broker), now + self.limits.member_expiry_ns)
        else:
            self.brokers.pop(broker, None)
            self.timers.cancel(BrokerExpiry(broker))
        self._empty_check(now)
        return self._dispatch()

    def acked(self, now: int, member: MemberKey, acked: tuple[int, ...], returned: tuple[int, ...] = ()) -> list[Hand]:
        """A member's ACK of `acked`, and the deliveries it RETURNs (its client was gone)."""
        entry = self.members.get(member)
        for delivery in acked:
            if self.held.get(delivery) == member and entry is not None:
                del self.held[delivery]
                pending = entry.unacked.pop(delivery)
                self.acknowledged += 1
                self.cursor.acked(pending.item)
        back = [d for d in returned if self.held.get(d) == member and entry is not None]
        if back and entry is not None:
            self._requeue([entry.unacked.pop(d) for d in sorted(back)], back)
        if member[0] in self.brokers:  # an ACK says its broker is alive
            self.timers.set(BrokerExpiry(member[0]), now + self.limits.member_expiry_ns)
        return self._dispatch()

    def handle_timeout(self, now: int) -> list[Hand]:
        for timer in self.timers.pop_due(now):
            if isinstance(timer, BrokerExpiry):
                for client in self.brokers.pop(timer.broker, set()):
                    self._leave((timer.broker, client))
                self._empty_check(now)
            elif not self.members and self.state is not CLOSED:
                self.close()
        return self._dispatch()

    def next_deadline(self) -> int | None:
        return self.timers.next_deadline()

    # ---- inside ----------------------------------------------------------------------------------

    def _leave(self, member: MemberKey) -> None:
        entry = self.members.pop(member, None)
        if entry is None:
            return
        index = self.order.index(member)
        del self.order[index]
        if index < self.turn:
            self.turn -= 1
        ids = sorted(entry.unacked)
        self._requeue([entry.unacked[d] for d in ids], ids)

    def _requeue(self, pendings: list[Pending], ids: list[int]) -> None:
        """Deliveries back to the front of the queue, oldest first (ids grow with each hand)."""
        for delivery in ids:
            self.held.pop(delivery, None)
        self.redelivered += len(pendings)
        self.queue.extendleft(reversed(pendings))
        self.queued_bytes += sum(pending.size for pending in pendings)

    def _empty_check(self, now: int) -> None:
        if self.members:
            self.timers.cancel(EmptyEnd())
        elif self.timers.when(EmptyEnd()) is None:
            self.timers.set(EmptyEnd(), now + self.limits.empty_keep_ns)

    def _dispatch(self) -> list[Hand]:
        """Queued events to the members with window space, round robin."""
        out: list[Hand] = []
        queue, order, members = self.queue, self.order, self.members
        window = self.limits.member_unacked_max
        while queue and order:
            for _ in range(len(order)):
                self.turn %= len(order)
                member = order[self.turn]
                self.turn += 1
                entry = members[member]
                if len(entry.unacked) < window:
                    break
            else:
                return out  # every member's window is full
            pending = queue.popleft()
            self.queued_bytes -= pending.size
            self.next_delivery += 1
            entry.unacked[self.next_delivery] = pending
            self.held[self.next_delivery] = member
            self.handed += 1
            out.append(Hand(member, self.next_delivery, pending.record))
        return out

    def status(self) -> dict[str, object]:
        scope, name, topic_filter = self.key
        return {"scope": scope, "group": name, "filter": topic_filter, "state": str(self.state),
                "members": len(self.members), "queued": len(self.queue), "queued_bytes": self.queued_bytes,
                "unacked": len(self.held),
                "handed": self.handed, "redelivered": self.redelivered, "acknowledged": self.acknowledged}


def record_bytes(record: list[object]) -> int:
    """An event record's bytes as the group counts them: its strings' and bytes' lengths (the
    attributes' keys and values too), 8 for any other value."""
    return sum(_bytes_of(f) for f in record)


def _bytes_of(value: object) -> int:
    if isinstance(value, str | bytes):
        return len(value)
    if isinstance(value, dict):
        return sum(len(str(k)) + _bytes_of(v) for k, v in value.items())
    return 8


def _position(record: object) -> tuple[str, int]:
    """An event record's (pubend, tick) (core/event.py's layout: the first two fields)."""
    if isinstance(record, list) and len(record) >= 2 and isinstance(record[0], str) and type(record[1]) is int:
        return record[0], record[1]
    return "", 0
