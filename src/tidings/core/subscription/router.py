"""The subscriber's side's routing at a broker: what `Subscribers` (subscribers.py) and the local
subscriptions' table (table.py) decide, carried out in order, each effect by the machine that owns it.

Theory of operation. The composer (core/broker/broker.py) hands the subscriber's side its inputs (a
client's SUBSCRIBE, READ, UNSUBSCRIBE, RENEW and RELEASE, a connection that went or whose send queue
filled or drained, the SILENCE, save and lease timers, a tree's new access list, MOVED) and gives
what comes back to `carry`, which looks each effect's owner up in a table by type (`routes`) and
carries the effects out one after the other, since each may change what the next one reads:

- the reliability node's (`Settle`, `LeaveStreams`, `TellHome`): its calls, whose effects the
  composer settles across the broker (the cluster member, then the broker's routing of its output);
- the trees' (`JoinTree`, `NameMembers`, `LeaveTree`, `CreateTree`): the cluster member's;
- the constream's (`Registered`, `Resume`, `Chop`: durable/constream.py);
- the client connection's (`Refuse`, `HoldRefusals`: connection.py, reading.py);
- those that come back to the subscriber's side once what precedes them is carried out
  (`EndSubscription`, `Advance`), and a subscription's join (`JoinStreams`): its streams in the
  reliability node and the broker's membership of its tree, which Scribe may refuse at once (a
  local limit reached on the client's behalf; then `join_refused`, with the streams taken back),
  else `opened`;
- any other effect is the runtime's, and goes out in its place.

The composer routes what the cluster member hands it for the local subscriptions (a tree's lost
ticks, a tree's new access list, a PFS record, MOVED) by the same table; a remote event goes
straight to the fan-out (table.py), since that is the event's path.

A log read (or its failure) is the pubend's, answering a nack (the reliability node's), or a
subscription's catch-up read: whose it is, the table says by the reader's number
(`LocalSubscriptions.reader`), and the router hands it to that owner.

The router holds no state and no rule of its own: it reads the broker's present (`At`, the wall
clock, the synced tick, the log) through the broker's parts (core/broker/parts.py), and knows only who owns each effect.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, cast

from tidings.core.durable.constream import Recorded
from tidings.core.durable.subscriptions import Registered, Resume, TellHome
from tidings.core.effects import Effect
from tidings.core.errors import TidingsError
from tidings.core.inputs import LogRead, ReadFailed
from tidings.core.multicast.effects import AccessChanged
from tidings.core.multicast.local_trees import CreateTree, JoinTree, LeaveTree, NameMembers
from tidings.core.reliability.node import Lost, MovedAway
from tidings.core.subscription.leases import EndSubscription
from tidings.core.subscription.subscribers import (
    Advance,
    At,
    Chop,
    HoldRefusals,
    JoinStreams,
    Refuse,
    SubscriberEffect,
)
from tidings.core.subscription.subscription import Subscription
from tidings.core.subscription.table import LeaveStreams, Reader, Settle

if TYPE_CHECKING:
    from tidings.core.broker.cluster import ClusterEffect, ClusterMember, Settleable
    from tidings.core.broker.parts import BrokerParts
    from tidings.core.reliability.node import ReliabilityNode


Settles = Callable[[Sequence["Settleable"], list[Effect]], list[Effect]]  # the composer settles the node's effects
Routes = Callable[[list["ClusterEffect"], list[Effect]], None]  # the composer's routing of the cluster's output
Route = Callable[[Any, list[Effect]], None]  # (each route takes the one effect type it is filed under)


class SubscriberRouter:
    __slots__ = ("_broker", "_cluster_effects", "_settle", "routes")

    def __init__(self, broker: BrokerParts, settle: Settles, cluster_effects: Routes) -> None:
        """`settle`: how the composer carries out the reliability node's effects across the broker;
        `cluster_effects`: how it routes the cluster member's output."""
        self._broker = broker
        self._settle = settle
        self._cluster_effects = cluster_effects
        self.routes: dict[type, Route] = {
            # what the subscriber's side decides, by owner: the reliability node's,
            Settle: self._node,
            LeaveStreams: self._leave_streams,
            TellHome: self._tell_home,
            # the trees' (the cluster member's),
            JoinTree: self._trees,
            NameMembers: self._trees,
            LeaveTree: self._trees,
            CreateTree: self._trees,
            # the constream's,
            Registered: self._registered,
            Resume: self._resume,
            Chop: self._chop,
            # the client connection's,
            Refuse: self._refuse,
            HoldRefusals: self._hold_refusals,
            # and the subscriber's side's again, once what precedes them is carried out;
            EndSubscription: self._end,
            Advance: self._advance,
            JoinStreams: self._join,
            # what the cluster member hands the broker for its subscriptions (the composer reads this table)
            Lost: self._lost_ticks,
            AccessChanged: self._access_changed,
            Recorded: self._recorded,
            MovedAway: self._moved,
        }

    def at(self) -> At:
        """What the subscriber's side reads of the broker at the input being handled."""
        b = self._broker
        cluster = b.cluster
        return At(b.now, b.clock.us, b.pubend.synced_tick, b.log.released_through,
                  None if cluster is None else cluster.me.address, None if cluster is None else self._gd())

    def status(self, s: Subscription) -> dict[str, Any]:
        """What `/status` shows of subscription `s` (`Subscribers.status`)."""
        return self._broker.subscribers.status(self.at(), s)

    def carry(self, effects: Iterable[SubscriberEffect], out: list[Effect]) -> list[Effect]:
        """Carry out, in order, what the subscriber's side decided, each effect by its owner (into `out`)."""
        routes = self.routes
        for eff in effects:
            route = routes.get(type(eff))
            if route is None:  # the runtime's
                out.append(cast(Effect, eff))
            else:
                route(eff, out)
        return out

    # ---- inputs ----------------------------------------------------------------------------------

    def start(self, now: int, out: list[Effect]) -> None:
        """The broker takes part in an overlay: the reliability node starts with what the durable
        registrations hold, the away ones it saved hold their trees, the constream records them (durable_pfs)."""
        b, gd = self._broker, self._gd()
        cluster = self._member()
        self._settle(gd.start(now, b.log.last_tick, b.registrations.held_trees), out)
        joins = b.subscribers.start(now, cluster.access_lists, gd.source.held_trees)
        b.constream.start(now, gd, b.config.durable_pfs, b.registrations.all(),
                          lambda effects: self._settle(effects, out))
        self._cluster_effects(cluster.trees(now, joins), out)

    def lost(self, conn: int, out: list[Effect]) -> None:
        """Client connection `conn` went: its lease and its reading go, and each of its
        subscriptions ends here, one after the other (a durable one is away)."""
        b = self._broker
        b.leases.release(conn)
        c = b.reading.lost(conn)
        if c is not None:
            for s in list(c.subs.values()):
                self.carry(b.subscribers.drop(self.at(), c, s, ended=False), out)

    def log_read(self, inp: LogRead, out: list[Effect]) -> None:
        """A log read came back: the pubend's answers a nack, a subscription's delivers and moves it on."""
        b = self._broker
        if b.local.reader(inp.reader) is Reader.PUBEND:
            if b.cluster is not None:
                self._settle(self._gd().log_read(inp.now, inp.reader, inp.records, inp.log, inp.span), out)
            return
        self.carry(b.subscribers.log_read(inp), out)

    def read_failed(self, inp: ReadFailed, out: list[Effect]) -> None:
        """The log could not serve a read: the pubend's nack will be repeated; a subscription ends."""
        b = self._broker
        if b.local.reader(inp.reader) is Reader.PUBEND:
            if b.cluster is not None:
                self._gd().source.read_failed(inp.now, inp.reader)
            return
        self.carry(b.local.read_failed(inp.reader, inp.reason), out)

    # ---- the routes, one per effect type ---------------------------------------------------------

    def _node(self, eff: Settle, out: list[Effect]) -> None:
        self._settle(eff.effects, out)

    def _end(self, eff: EndSubscription, out: list[Effect]) -> None:
        b = self._broker
        c = b.connections[eff.conn]
        self.carry(b.subscribers.drop(self.at(), c, c.subs[eff.sub], ended=eff.ended), out)

    def _join(self, j: JoinStreams, out: list[Effect]) -> None:
        """A subscription's streams in the reliability node and the broker's membership of its tree,
        then its opening; refused, with nothing changed, when this broker cannot join one more tree."""
        b = self._broker
        gd, cluster, c, now = self._gd(), self._member(), b.connections[j.then.s.conn], b.now
        effects: list[Settleable] = [
            *gd.local_subscribe(now, j.key, j.tree, j.start, j.total, j.pattern, j.filter_text, j.positions)]
        try:
            effects += cluster.trees(now, j.joins)
        except TidingsError as exc:  # a local limit reached on the client's behalf
            gd.local_unsubscribe(now, j.key, j.tree)
            self.carry([b.subscribers.join_refused(c, j.then, exc)], out)
            return
        self._settle(effects, out)
        self.carry(b.subscribers.opened(self.at(), c, j.then), out)

    def _advance(self, eff: Advance, out: list[Effect]) -> None:
        b = self._broker
        self.carry(b.subscribers.advance(eff.s, b.connections[eff.s.conn].blocked, b.pubend.synced_tick), out)

    def _trees(self, eff: JoinTree | NameMembers | LeaveTree | CreateTree, out: list[Effect]) -> None:
        """(Only in an overlay do the trees decide anything.)"""
        self._cluster_effects(self._member().trees(self._broker.now, [eff]), out)

    def _leave_streams(self, eff: LeaveStreams, out: list[Effect]) -> None:
        self._settle(self._gd().local_unsubscribe(self._broker.now, eff.key, eff.tree), out)

    def _tell_home(self, eff: TellHome, out: list[Effect]) -> None:
        self._settle(self._gd().moved(eff.home.address, eff.home.pubend, eff.home.registration), out)

    def _registered(self, eff: Registered, out: list[Effect]) -> None:
        b = self._broker
        b.constream.registered(b.now, eff.added, eff.dropped, lambda effects: self._settle(effects, out))

    def _resume(self, eff: Resume, out: list[Effect]) -> None:
        b = self._broker
        out += b.constream.resume(b.now, eff.key, eff.registration, eff.checkpoint, eff.pattern, eff.filter)

    def _refuse(self, eff: Refuse, out: list[Effect]) -> None:
        b = self._broker
        b.connections[eff.conn].refuse(b.now, eff.code, eff.text, out, sub=eff.sub)

    def _hold_refusals(self, eff: HoldRefusals, out: list[Effect]) -> None:
        b = self._broker
        b.reading.hold_refusals(b.connections[eff.conn], out)

    def _chop(self, eff: Chop, out: list[Effect]) -> None:
        """After a durable save."""
        b = self._broker
        out += b.constream.chop(b.registrations.get)

    def _lost_ticks(self, eff: Lost, out: list[Effect]) -> None:
        out += self._broker.local.lost(eff.keys, eff.pubend, eff.after, eff.through)

    def _access_changed(self, eff: AccessChanged, out: list[Effect]) -> None:
        self.carry(self._broker.subscribers.access_changed(eff), out)

    def _recorded(self, eff: Recorded, out: list[Effect]) -> None:
        out += self._broker.constream.recorded(eff)

    def _moved(self, eff: MovedAway, out: list[Effect]) -> None:
        self.carry(self._broker.subscribers.moved_away(eff.registration), out)

    def _member(self) -> ClusterMember:
        cluster = self._broker.cluster
        assert cluster is not None
        return cluster

    def _gd(self) -> ReliabilityNode:
        gd = self._member().reliability
        assert gd is not None
        return gd
