"""The local subscriptions: the table of the subends a subscriber's broker serves (Gryphon's
subends, one `Subscription` machine each), and the fan-outs that reach them.

Theory of operation. The broker hands every local subscription to this table: it gives each a
broker-wide key (also the reader id of its catch-up reads of this broker's log), enters an
unbounded one that is not in total order in the `SubscriptionIndex` (which finds the subscriptions
an event of this broker's own pubend matches), and keeps the tree memberships (`LocalTrees` over
`TreeMemberships`: which tree each subscription belongs to, under the trees' access lists). Events
reach subscriptions by three ways, all ending in `Subscription.deliver`:

- the fan-out of this broker's own pubend as each batch becomes durable (`synced`): the live
  subscriptions the index matches, each event past its position;
- the trees, for other pubends' events (`delivered`), and their lost ticks (`lost`: a GAP each).
  The reliability node (reliability/node.py) hands over each tree's records in delivery order,
  exactly once, below the doubt horizon (`DeliverRecords`), naming the local subscriptions that
  consume them; each record is checked once (peers are checked like clients: one that does not
  name the pubend whose stream carried it is counted in `records_rejected` and dropped, never
  delivered) and each of those subscriptions takes the ones matching its pattern and filter
  (`Subscription.take`);
- the subscription's own catch-up reads of this broker's log (`log_read`).

Readers. A ReadLog's reader id names who reads this broker's log: a subscription (its key) or the
pubend answering a nack (reliability/source.py). `reader` answers which, from the keys this table
gave out, so that the broker routes each LogRead and ReadFailed by its owner.

The table decides nothing about the durable registrations, and asks the trees' streams nothing but
what they know: admitting, binding and ending subscriptions are the subscriber's side's
(subscription/subscribers.py), and a subscription's streams leave with `LeaveStreams`, which the
composer carries out in its place among the effects.

Invariants: a key is given once; `subends[key]` is in the index exactly when it is unbounded, not
in total order and not ended; counts only grow.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from operator import itemgetter
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from tidings.core import errors
from tidings.core.auth.guard import Guard
from tidings.core.effects import Effect, Send
from tidings.core.event import OneAttribute, one_attribute, record_routing_fields, records_routing_fields
from tidings.core.filters import Filter, SubscriptionIndex
from tidings.core.inputs import LogRead
from tidings.core.multicast.local_trees import LocalTrees, TreeEffect
from tidings.core.subscription.leases import EndSubscription
from tidings.core.subscription.memberships import TreeMemberships
from tidings.core.subscription.subscription import Subscription, Taken
from tidings.core.synced import Synced, SyncedBatch
from tidings.core.wire import messages

_TICK, _RECORD = itemgetter(0), itemgetter(3)  # of a delivery (tick, channel, attributes, record)

if TYPE_CHECKING:  # what the trees' streams answer (reliability/node.py imports what this table does)
    from tidings.core.reliability.node import DeliverRecords, NodeEffect


class Reader(StrEnum):
    """Who a log read (ReadLog / LogRead / ReadFailed) is for."""

    SUBSCRIPTION = "subscription"  # a key this table gave: a subscription's catch-up read
    GONE = "gone"  # one of its keys whose subscription ended while its read was in flight
    PUBEND = "pubend"  # not this table's: the pubend answering a nack (reliability/source.py)


class TreeStreams(Protocol):
    """The trees' streams for local subscriptions (reliability/node.py ReliabilityNode)."""

    def delivered_through(self, key: int, tree: str) -> dict[str, int]: ...

    def lag(self, key: int, tree: str) -> dict[str, int]: ...

    def local_flow(self, now: int, key: int, tree: str, blocked: bool) -> list[NodeEffect]: ...

    @property
    def wall_us(self) -> int: ...


@dataclass(frozen=True, slots=True)
class Settle:
    """The trees' streams answered a call of this table: their effects, for the cluster member
    to carry out (core/broker/cluster.py `settle`) where they stand in the table's output."""

    effects: list[NodeEffect]


class LeaveStreams(NamedTuple):
    """Subscription `key` leaves the trees' streams of `tree` (reliability/node.py `local_unsubscribe`)."""

    key: int
    tree: str


TableEffect = Effect | Settle | EndSubscription | TreeEffect | LeaveStreams


def _matched(match: Callable[[str, Mapping[str, Any]], list[int]],
             by_one: dict[tuple[str, OneAttribute], list[int]], channel: str,
             attributes: Mapping[str, Any]) -> list[int]:
    """`match(channel, attributes)`; an event with one attribute (an MQTT QoS 0 event's `mqtt.qos`)
    matched once per (channel, name, value, type of value) into `by_one`, the one sync's."""
    key = one_attribute(attributes)
    if key is None:
        return match(channel, attributes)
    one = (channel, key)
    found = by_one.get(one)
    if found is None:
        found = by_one[one] = match(channel, attributes)
    return found


class LocalSubscriptions:
    __slots__ = ("_next_key", "events_delivered", "index", "memberships", "read_span_bytes", "records_rejected",
                 "remote_delivered", "subends", "trees")

    def __init__(self, guard: Guard) -> None:
        self.subends: dict[int, Subscription] = {}
        self.index = SubscriptionIndex()  # this broker's own events: which subscriptions they match
        self._next_key = 0
        self.memberships = TreeMemberships()  # the trees this broker is a member of, for whom
        self.trees = LocalTrees(guard, self.memberships)  # joining them under access lists (multicast/)
        self.events_delivered = 0
        self.remote_delivered = 0  # of them, other pubends' events from the trees
        self.records_rejected = 0  # malformed records in knowledge from peers
        self.read_span_bytes = 0  # the log's bytes read for READs as spans (their events are not counted)

    # ---- the table -------------------------------------------------------------------------------

    def open(self, conn: int, sub: int, own: str, pattern: str, flt: Filter | None, position: int,
             end: int | None, from_oldest: bool, total: bool, bulk: bool, spans: bool) -> Subscription:
        """A new subscription `sub` of connection `conn`, under a key of its own."""
        self._next_key += 1
        s = Subscription(self._next_key, conn, sub, own, pattern, flt, position, end, from_oldest=from_oldest,
                         total=total, bulk=bulk, spans=spans)
        self.subends[s.key] = s
        return s

    def joined(self, s: Subscription) -> None:
        """`s` joined its tree: unless in total order (the merge takes this broker's own events
        too), the index finds it for this broker's own events."""
        if not s.total:
            self.index.add(s.key, s.pattern, s.filter)

    def drop(self, s: Subscription) -> bool:
        """`s` leaves the table; whether it had a tree to leave (it was not bounded)."""
        del self.subends[s.key]
        if s.end is not None:
            return False
        if not s.total:
            self.index.remove(s.key)
        return True

    def leave(self, key: int, held: bool, in_overlay: bool) -> list[TableEffect]:
        """Subscription `key` leaves its tree (`held`: its durable registration is a member in its
        place): its streams there, then what the broker's SUBSCRIBE and membership become."""
        tree, effects = self.trees.leave(key, held)
        if not in_overlay:
            return []
        return [LeaveStreams(key, tree), *effects]

    def durable(self) -> list[Subscription]:
        return [s for s in self.subends.values() if s.durable]

    def tree_of(self, key: int) -> str | None:
        return self.memberships.tree_of.get(key)

    def reader(self, reader: int) -> Reader:
        """Who read `reader` is for (keys are given from 1 up; the pubend's readers are not)."""
        if not 1 <= reader <= self._next_key:
            return Reader.PUBEND
        s = self.subends.get(reader)
        return Reader.GONE if s is None else Reader.SUBSCRIPTION

    # ---- moves -----------------------------------------------------------------------------------

    def advance(self, s: Subscription, blocked: bool, synced_tick: int, read_bytes_max: int) -> list[TableEffect]:
        """Move a subscription that is not live on (`Subscription.advance`); one that finished ends."""
        effects: list[TableEffect] = []
        moves, ended = s.advance(synced_tick, blocked, read_bytes_max)
        effects += moves
        if ended:
            effects.append(EndSubscription(s.conn, s.sub, ended=True))
        return effects

    def flow(self, now: int, subs: Iterable[Subscription], blocked: bool, synced_tick: int, read_bytes_max: int,
             streams: TreeStreams | None) -> list[TableEffect]:
        """The connection of `subs` blocked (its live events turn into log reads) or drained (those
        not live move on); the trees' streams hold or push their events alike."""
        out: list[TableEffect] = []
        for s in subs:
            if blocked:
                s.blocked(synced_tick)
            elif not s.live:
                out += self.advance(s, blocked, synced_tick, read_bytes_max)
            tree = self.memberships.tree_of.get(s.key)
            if tree is not None and streams is not None:
                out.append(Settle(streams.local_flow(now, s.key, tree, blocked)))
        return out

    # ---- delivery --------------------------------------------------------------------------------

    def synced(self, synced: Synced, pubend: str, synced_tick: int) -> list[Effect]:
        """This broker's own events, durable now: to each live subscription they match, past its
        position (live ones: every tick to the durable tail passed).

        Matched per event, handed out per run: consecutive events that match the same keys (the
        events of one channel without attributes share one list of keys) go to each of those
        subscriptions in one piece (`Subscription.fresh`), so the cost per event does not grow
        with the subscriptions it reaches. A sync on one channel without attributes is one run:
        the sync's own columns (`Synced.columns`, which the trees read too) and their bytes,
        counted once for every frame made of the whole run. A broker without local
        subscriptions (a publisher's broker) looks at nothing."""
        if not self.subends:  # (the index holds some of them)
            return []
        fan: dict[int, list[bytes]] = {}
        owned: set[int] = set()  # keys whose list in `fan` is theirs alone (else a run's, shared)
        if synced.channel is not None:
            found = self.index.match(synced.channel, {})
            if not found:
                return []
            ticks, records = synced.columns()
            self._hand_out(found, ticks, records, fan, owned)
            return self.fan_out(fan, pubend, synced_tick, (records, synced.size()))
        self._runs(synced.batches, fan, owned)
        return self.fan_out(fan, pubend, synced_tick)

    def _runs(self, batches: Iterable[SyncedBatch], fan: dict[int, list[bytes]], owned: set[int]) -> None:
        """`synced`'s pass over a sync of several channels, or with attributes: each event matched
        (a batch on one channel without attributes once, `_whole`), runs of events that match the
        same keys handed out (`_hand_out`) into `fan`."""
        match = self.index.match
        by_channel: dict[str, list[int]] = {}  # events without attributes match by channel alone
        by_one: dict[tuple[str, OneAttribute], list[int]] = {}  # (channel, its one attribute)
        keys: list[int] = []  # the run's
        ticks: list[int] = []
        records: list[bytes] = []
        for batch in batches:
            if batch.channel is not None:  # one channel, no attributes (core/publish/batch.py): matched once
                keys, ticks, records = self._whole(batch, batch.channel, by_channel, keys, ticks, records, fan, owned)
                continue
            for tick, channel, attributes, record in batch.deliveries:
                if attributes:
                    found = _matched(match, by_one, channel, attributes)
                elif channel in by_channel:
                    found = by_channel[channel]
                else:
                    found = by_channel[channel] = match(channel, attributes)
                if not found:
                    continue
                if found is not keys and found != keys:
                    if records:
                        self._hand_out(keys, ticks, records, fan, owned)
                    keys, ticks, records = found, [], []
                ticks.append(tick)
                records.append(record)
        if records:
            self._hand_out(keys, ticks, records, fan, owned)

    def _whole(self, batch: SyncedBatch, channel: str, by_channel: dict[str, list[int]], keys: list[int],
               ticks: list[int], records: list[bytes], fan: dict[int, list[bytes]],
               owned: set[int]) -> tuple[list[int], list[int], list[bytes]]:
        """`synced`'s step for a batch whose events are all on `channel` without attributes: its
        keys looked up once, its events added to the run (keys, ticks, records) whole, without a
        Python step per event, as event by event; the run, or the one that follows it."""
        found = by_channel.get(channel)
        if found is None:
            found = by_channel[channel] = self.index.match(channel, {})
        if not found:
            return keys, ticks, records
        if found is not keys and found != keys:
            if records:
                self._hand_out(keys, ticks, records, fan, owned)
            keys, ticks, records = found, [], []
        batch_ticks, batch_records = batch.columns()
        ticks += batch_ticks
        records += batch_records
        return keys, ticks, records

    def _hand_out(self, keys: list[int], ticks: list[int], records: list[bytes], fan: dict[int, list[bytes]],
                  owned: set[int]) -> None:
        """A run of events (ascending `ticks`) matched by `keys`: each one's share into `fan`, the
        keys new to `fan` in the order of their first event, as event by event."""
        subends = self.subends
        late: list[tuple[int, int, int, list[bytes]]] = []  # (first event, order, key, share)
        for order, key in enumerate(keys):
            share = subends[key].fresh(ticks, records)
            if not share:
                continue
            got = fan.get(key)
            if got is None:
                if share is records:
                    fan[key] = share
                else:
                    late.append((len(records) - len(share), order, key, share))
            elif key in owned:
                got += share
            else:
                fan[key] = got + share
                owned.add(key)
        for _, _, key, share in sorted(late):
            fan[key] = share
            owned.add(key)

    def fan_out(self, fan: Mapping[int, list[bytes]], pubend: str, through: int,
                sized: tuple[list[bytes], int] | None = None) -> list[Effect]:
        """This broker's own records for subscriptions, `pubend` passed `through`; subscriptions
        handed the same list of records under the same sub id (one per connection, as clients
        number them) share its frames. `sized`: a list of records whose bytes the caller counted,
        and their count, for the frames of a subscription handed that very list."""
        out: list[Effect] = []
        subends = self.subends
        framed: dict[tuple[int, int], list[bytes]] = {}  # lists of `fan` stay alive: their ids are theirs
        for key, records in fan.items():
            self.events_delivered += len(records)
            size = sized[1] if sized is not None and records is sized[0] else None
            out += subends[key].deliver(records, pubend, through, framed, size)
        return out

    def delivered(self, deliver: DeliverRecords) -> list[Effect]:
        """Other pubends' records from the trees: each checked once, then each subscription named
        (still here) takes its share; their effects in the order of each one's first record."""
        records = deliver.records
        routed = records_routing_fields(deliver.pubends, records)  # all good: checked as a batch
        if routed is None:
            routed, records = self._checked(deliver)
        if not records:
            return []
        subends = self.subends
        framed: dict[tuple[int, int], list[bytes]] | None = {} if len(deliver.keys) > 1 else None
        taken: list[tuple[int, int, Taken]] = []
        for order, key in enumerate(deliver.keys):
            s = subends.get(key)
            share = None if s is None else s.take(routed, records, framed)
            if share is not None:
                self.remote_delivered += share.delivered
                self.events_delivered += share.delivered
                taken.append((share.first, order, share))
        if len(taken) == 1:
            return taken[0][2].effects
        taken.sort(key=lambda t: t[:2])
        out: list[Effect] = []
        for _, _, share in taken:
            out += share.effects
        return out

    def _checked(self, deliver: DeliverRecords) -> tuple[list[tuple[str, dict[str, Any]]], list[bytes]]:
        """(channel, attributes) of each well-formed record of `deliver` from its pubend, and those
        records; the others counted in `records_rejected`."""
        routed: list[tuple[str, dict[str, Any]]] = []
        records: list[bytes] = []
        for pubend, record in zip(deliver.pubends, deliver.records, strict=True):
            fields = record_routing_fields(record)
            if fields is None or fields.pubend != pubend:
                self.records_rejected += 1
                continue
            routed.append((fields.channel, fields.attributes))
            records.append(record)
        return routed, records

    def lost(self, keys: Iterable[int], pubend: str, after: int, through: int) -> list[Effect]:
        """Ticks (after, through] of `pubend` were released before the trees gave them to `keys`."""
        out: list[Effect] = []
        for key in keys:
            s = self.subends.get(key)
            if s is not None:
                out += s.lost(pubend, after, through)
        return out

    def log_read(self, inp: LogRead) -> tuple[list[Effect], Subscription | None]:
        """A subscription's catch-up read came back: what it delivers, and the subscription (to
        move on), None when it ended while its read was in flight."""
        s = self.subends.get(inp.reader)
        if s is None or s.reading is None:
            return [], None
        effects, delivered = s.on_read(inp.records, inp.log, inp.span)
        self.events_delivered += delivered
        self.read_span_bytes += 0 if inp.span is None else len(inp.span[1])
        return effects, s

    def read_failed(self, reader: int, reason: str) -> list[TableEffect]:
        """The log cannot serve subscription `reader`: it is told so and ends (away, when durable: it
        may resume elsewhere), rather than stall or skip."""
        s = self.subends.get(reader)
        if s is None:
            return []
        return [Send(s.conn, messages.error(errors.LOG_UNREADABLE, f"cannot read the log: {reason}", sub=s.sub)),
                EndSubscription(s.conn, s.sub, ended=False)]

    def silence(self, synced_tick: int, positions: TreeStreams | None) -> list[Effect]:
        """Each durable subscription's SILENCE, with what the trees passed it."""
        out: list[Effect] = []
        tree_of = self.memberships.tree_of
        for s in self.durable():
            tree = tree_of.get(s.key)
            if tree is not None and positions is not None:
                s.passed(positions.delivered_through(s.key, tree))
            out += s.silence(synced_tick)
        return out

    # ---- observation -----------------------------------------------------------------------------

    def status(self, s: Subscription, own: str, synced_tick: int, positions: TreeStreams | None) -> dict[str, Any]:
        """The subend's status, with its lag on other brokers' streams: `lag_by_pubend` (ticks known
        here but not yet handed to it, per pubend, its own pubend's included) and `lag_ticks`, the
        largest of them."""
        status = s.status(synced_tick)
        tree = self.memberships.tree_of.get(s.key)
        if positions is None or tree is None:
            return status
        lags = positions.lag(s.key, tree)
        if isinstance(status["lag_ticks"], int):
            lags[own] = status["lag_ticks"]
        return {**status, "lag_by_pubend": lags, "lag_ticks": max(lags.values(), default=status["lag_ticks"])}

