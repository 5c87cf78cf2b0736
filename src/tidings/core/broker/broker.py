"""The broker core: the composer of one broker's machines. It hands each input to the machine that
owns it, dispatches each client message by type, routes each effect by type, gives the runtime the
earliest deadline and reports the machines' figures (metrics.py). It never blocks: each `handle`
returns effects for the runtime to apply.

- `Reading` (reading.py) reads the client connections (`ClientConnection`, connection.py: framing
  and the handshake): the one owner of whether a connection is read, and of what it may cost;
- `RouteAdvice` (advice.py): WELCOME's info and the route advice to clients;
- `Intake` (publish/intake.py) checks, ticks and logs each PUBLISH (`DedupWindow`: idempotent ones),
  and `Pubend` holds batches until the runtime reports them synced: only then are publishers
  acknowledged and events fanned out;
- `Subscribers` (subscription/subscribers.py) admits SUBSCRIBE and READ and ends subscriptions,
  over `LocalSubscriptions` (subscription/table.py: the subscriptions, their index, their trees
  under the access lists, the fan-outs and reads that reach them), `Leases` and the durable binding
  (`DurableSubscriptions`, durable/); `Constream` (durable/) records in the PFS what matched the
  durable registrations;
- `ClusterMember` (cluster.py) holds the peer links, the Pastry node, the Scribe agent and the
  `ReliabilityNode` once `start_overlay` has been called; the runtime's inputs on peer connections
  go to it whole. Clients and peers share the listening port: a connection whose first frame is
  PEER_HELLO is handed to the peer links.

Across brokers (DESIGN §2, docs/delivery.md) each sync's durable events become knowledge of this
pubend's stream on the trees of their channels, and the reliability node hands the broker other
pubends' events of the trees it is a member of (`DeliverRecords`), in tick order, exactly once.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import partial
from typing import Any, cast

from tidings.core import errors
from tidings.core.auth.guard import Guard
from tidings.core.auth.policy import AuthPolicy
from tidings.core.broker import metrics
from tidings.core.broker.advice import RouteAdvice
from tidings.core.broker.cluster import ClusterEffect, ClusterMember, Reliability, Settleable, broker_member
from tidings.core.broker.connection import OPEN, ClientConnection, ClientMessage, Hold, PeerHandover
from tidings.core.broker.lifecycle import BrokerMachines, Lifecycle, Retention
from tidings.core.broker.reading import Reading, Served
from tidings.core.broker.refusals import ClientErrors
from tidings.core.clock import WallClock
from tidings.core.config import BrokerConfig
from tidings.core.deadlines import Alarm
from tidings.core.durable.constream import Constream, Recorded
from tidings.core.durable.registrations import Registrations
from tidings.core.durable.subscriptions import DurableSubscriptions, Registered, Resume, TellHome
from tidings.core.effects import Disconnect, Effect, PeerRefused, Send
from tidings.core.errors import TidingsError
from tidings.core.inputs import (
    Accepted,
    Connected,
    ConnectFailed,
    ConnectionLost,
    DrainRequested,
    Input,
    LogRead,
    LogState,
    PfsAnswered,
    ReadFailed,
    Received,
    RetentionApplied,
    SendBlocked,
    SendDrained,
    TimerFired,
    WriteSynced,
)
from tidings.core.multicast.effects import AccessChanged
from tidings.core.multicast.local_trees import CreateTree, JoinTree, LeaveTree, NameMembers
from tidings.core.overlay.node import Rng
from tidings.core.publish.dedup import DedupWindow
from tidings.core.publish.intake import Intake
from tidings.core.publish.pubend import Pubend
from tidings.core.reliability.node import DeliverRecords, Lost, MovedAway, ReliabilityNode
from tidings.core.subscription import subscribers as sub
from tidings.core.subscription.leases import EndSubscription, Leases
from tidings.core.subscription.table import LeaveStreams, LocalSubscriptions, Reader, Settle
from tidings.core.units import ns_to_us
from tidings.core.wire import messages


def _due(deadline: int | None, now: int) -> bool:
    return deadline is not None and deadline <= now


class Broker:
    def __init__(self, config: BrokerConfig, pubend_id: str, log: LogState, guard: Guard | None = None,
                 durable: bytes | None = None, directory: bytes | None = None) -> None:
        """`durable`: the state the last SaveDurable saved (StateError when it does not decode);
        `directory`: the pubend directory the last SaveDirectory saved (core/broker/directory.py)."""
        self._directory_saved = directory
        self.config = config
        self.guard = guard or Guard.open()  # identities, access rules and limits (core/auth/)
        self.pubend = Pubend(pubend_id, log.last_tick)
        self.log = log
        self.client_errors = ClientErrors()  # what clients were refused, by reason (core/broker/refusals.py)
        self.advice = RouteAdvice(pubend_id, config)  # WELCOME's info and route advice (core/broker/advice.py)
        self.alarm = Alarm()  # the earliest deadline of every machine, kept as their timers move (core/deadlines.py)
        self.reading = Reading(config, self.guard, self.client_errors, self.advice, self.alarm)  # broker/reading.py
        self.connections = self.reading.connections
        self.local = LocalSubscriptions(self.guard)  # the subends, their index and trees (core/subscription/table.py)
        self.leases = Leases(config.lease_ns, self.reading.unread, self.alarm)
        self.now = 0
        self.clock = WallClock()  # the last wall clock an input brought, for messages handled without one
        self.cluster: ClusterMember | None = None
        expiry_us = ns_to_us(config.durable_expiry_ns)
        self.dedup = DedupWindow(ns_to_us(config.dedup_window_ns), config.dedup_entries_max,
                                 config.dedup_producers_max)  # idempotent publish (core/publish/dedup.py)
        self.intake = Intake(config, self.guard, self.pubend, self.dedup)  # PUBLISH to the log (core/publish/intake.py)
        self.registrations = (Registrations(expiry_us, config.durable_registrations_max) if durable is None
                              else Registrations.decode(durable, expiry_us, config.durable_registrations_max))
        self.durable = DurableSubscriptions(pubend_id, self.registrations)  # core/durable/subscriptions.py
        self.subscribers = sub.Subscribers(config, self.guard, self.local, self.leases, self.durable, self.alarm)
        self.timers = self.subscribers.timers  # its SILENCE and durable save
        self.constream = Constream()  # what matched the durable registrations (reliability/constream.py)
        # the join deadline, the drain and the retention cadence (core/broker/lifecycle.py)
        self.machines = BrokerMachines(self.clock, self.reading, self.pubend)  # what the lifecycle reads
        self.lifecycle = Lifecycle(self.machines, Retention(config.retention_bytes_max, config.retention_age_ns,
                                                   config.retention_check_interval_ns), self.alarm)
        self.alarm.watch(self.timers, self.leases, self.reading, self.lifecycle)  # (and the cluster, once started)

    # ---- the runtime's interface -----------------------------------------------------------------

    def handle(self, inp: Input) -> list[Effect]:  # noqa: PLR0912 - one branch per input type
        out: list[Effect] = []
        self.now = inp.now
        if isinstance(inp, Received | TimerFired) and inp.wall_us:
            self.clock.us = inp.wall_us
            if self.cluster is not None:  # the clock its machines read (core/clock.py): no call through them
                self.cluster.clock.us = inp.wall_us
        peer = None  # a client's connection is in the table; the cluster member is asked about the others
        if self.cluster is not None and (isinstance(inp, Connected | ConnectFailed) or (
                isinstance(inp, Received | ConnectionLost | SendBlocked | SendDrained)
                and inp.conn not in self.connections)):
            if type(inp) is ConnectFailed:
                self.lifecycle.join_attempt_failed(inp.address, inp.reason)
            peer = self.cluster.peer_input(inp)  # None: not a peer connection either
        if peer is not None:
            self._cluster_effects(peer.effects, out)
            if type(inp) is Received:
                self._peer_partial(inp.now, inp.conn, peer.held_bytes, out)
            elif type(inp) is ConnectionLost:
                self.reading.lost(inp.conn)
        elif isinstance(inp, Received):
            self._serve(self.reading.received(inp.now, inp.conn, inp.data, out), out)
            if inp.conn not in self.connections and self.cluster is not None and self.cluster.owns(inp.conn):
                # it was another broker's (PEER_HELLO): the peer links took it over
                self._peer_partial(inp.now, inp.conn, self.cluster.peers_held_bytes(inp.conn), out)
        elif isinstance(inp, WriteSynced):
            self.log = inp.log
            self._synced(inp.token, out)
        elif isinstance(inp, LogRead):
            self._log_read(inp, out)
        elif isinstance(inp, Accepted):
            self.reading.accept(inp.now, inp.conn, out)
        elif isinstance(inp, ConnectionLost):
            self._lost(inp.conn, out)
        elif isinstance(inp, SendBlocked | SendDrained):
            self._flow(inp.conn, isinstance(inp, SendBlocked), out)
        elif isinstance(inp, TimerFired):
            self._timeouts(inp.now, inp.wall_us, out)
        elif isinstance(inp, RetentionApplied):
            self.log = inp.log
        elif isinstance(inp, ReadFailed):
            self._read_failed(inp, out)
        elif isinstance(inp, PfsAnswered):
            self._reliability(self.constream.pfs_answered(inp), out)
        elif isinstance(inp, DrainRequested):
            self.advice.drain()  # the broker is stopping: every client is advised to move to a neighbour
            advice = self._advise(self.reading.open_conns())
            out += advice
            out += self.lifecycle.drain_requested(inp.now, inp.timeout_ns, bool(advice))
        if self.lifecycle.draining:  # the drain looks again after every input
            out += self.lifecycle.look(inp.now)
        return out

    def _timeouts(self, now: int, wall_us: int, out: list[Effect]) -> None:
        """TimerFired: the handle_timeout of each machine whose deadline is due, in a fixed order."""
        if _due(self.timers.next_deadline(), now):  # SILENCE and the durable save
            self._carry(self.subscribers.timed_out(self._at(), wall_us), out)
        reading_due = _due(self.reading.next_deadline(), now)
        if reading_due:
            self._serve(self.reading.timed_out(now, out), out)
        if _due(self.leases.next_deadline(), now):
            self._carry(self.subscribers.leases_expired(now, self.connections), out)
        if reading_due:
            for conn, text in self.reading.frames_overdue(now, out):
                if self.cluster is not None and self.cluster.owns(conn):
                    self._cluster_effects(self.cluster.refuse(now, conn, errors.FRAME_STALLED, text), out)
        if self.cluster is not None and _due(self.cluster.next_deadline(), now):
            self.pubend.declare_silence(wall_us)  # what the streams' timers announce runs to the present
            self._cluster_effects(self.cluster.handle_timeout(now), out)
        if _due(self.lifecycle.next_deadline(), now):
            out += self.lifecycle.handle_timeout(now)

    def next_deadline(self) -> int | None:
        alarm = self.alarm  # the machines' earliest deadline, kept as their timers move (core/deadlines.py)
        return alarm.earliest if alarm.known else alarm.next_deadline()

    def start(self, now: int) -> None:
        """The broker process is up (a runtime calls this once, before any input): the deadlines
        of the process's life begin (core/broker/lifecycle.py: retention)."""
        self.lifecycle.start(now)

    def start_overlay(self, now: int, address: str, bootstrap: str | None, rng: Rng,
                      join_timeout_ns: int | None = None) -> list[Effect]:
        """Take part in the overlay as `address` (what peers connect to): start a new overlay, or
        join the one `bootstrap` (any member's address) belongs to, giving up (JoinTimedOut) after
        `join_timeout_ns` (None: never). `rng` is a seeded random.Random."""
        assert self.cluster is None
        self.now = now
        self.lifecycle.join_through(now, bootstrap, join_timeout_ns)
        reliability = Reliability(self.pubend.pubend_id, self.config.reliability_config(), self.intake.trees_of,
                                  lambda: (self.pubend.synced_tick, self.log), self.registrations.held,
                                  self._directory_saved, self.config.directory_config())
        self.cluster = broker_member(address, self.config, self.guard.cluster_auth(), rng, reliability, self.alarm)
        self.machines.cluster = self.cluster
        self.alarm.watch(self.cluster)
        out: list[Effect] = []
        self._cluster_effects(self.cluster.start(now, bootstrap), out)
        self._reliability(self._gd().start(now, self.log.last_tick, self.registrations.held_trees), out)
        # away durable subscriptions hold their trees
        joins = self.subscribers.start(now, self.cluster.access_lists, self._gd().source.held_trees)
        self.constream.start(now, self._gd(), self.config.durable_pfs, self.registrations.all(),
                             lambda effects: self._reliability(effects, out))
        self._cluster_effects(self.cluster.trees(now, joins), out)
        return out

    def settle(self, now: int, effects: Sequence[Settleable]) -> list[Effect]:
        """The reliability node's `effects` (an event from a parent, say) carried out across the broker."""
        out: list[Effect] = []
        self.now = now
        self._reliability(effects, out)
        return out

    def _reliability(self, effects: Sequence[Settleable], out: list[Effect]) -> None:
        """Effects of the reliability node, once what they ask of Pastry and Scribe is carried out."""
        if not effects:
            return
        assert self.cluster is not None
        self._cluster_effects(self.cluster.settle(self.now, effects), out)

    def _gd(self) -> ReliabilityNode:
        assert self.cluster is not None and self.cluster.reliability is not None
        return self.cluster.reliability

    # ---- connections -----------------------------------------------------------------------------

    def _lost(self, conn: int, out: list[Effect]) -> None:
        self.intake.lost(conn)
        self.leases.release(conn)
        c = self.reading.lost(conn)
        if c is not None:  # each of its subscriptions ends here, one after the other (a durable one is away)
            for s in list(c.subs.values()):
                self._carry(self.subscribers.drop(self._at(), c, s, ended=False), out)

    def _advise(self, conns: list[int]) -> list[Effect]:
        """ADVICE to `conns` (core/broker/advice.py): this broker's nearest neighbours, and why to move."""
        if self.cluster is None:
            return []
        return list(self.advice.advise(conns, self.reading.open_clients(), self.cluster.me.address,
                                       self.cluster.neighbours()))

    @property
    def draining(self) -> bool:
        return self.advice.draining

    @property
    def joined(self) -> bool:
        """Whether this broker is in an overlay (its Pastry join completed)."""
        return self.machines.joined

    def _serve(self, served: Served, out: list[Effect]) -> None:
        """Each message the reading machine pulls, to the machine that owns it (core/broker/reading.py)."""
        for c, msg in served:
            if msg is None:  # its handshake is done
                out += self._advise([c.conn])
            else:
                self._dispatch(c, msg, out)

    def _dispatch(self, c: ClientConnection, msg: ClientMessage, out: list[Effect]) -> None:
        if isinstance(msg, PeerHandover):
            self._adopt_peer(c, msg, out)
        elif isinstance(msg, messages.Publish):
            wait_ns = self.intake.publish(self.now, c, msg, self.clock.us, out)
            if wait_ns:  # over its rate: the PUBLISH waits unread, and so does the connection
                c.put_back(msg)
                self.reading.hold(c, Hold.RATE, self.now + max(wait_ns, self.config.publish_wait_ns_min))
        elif isinstance(msg, messages.Subscribe | messages.Read | messages.Unsubscribe | messages.Renew
                        | messages.Release):
            self._carry(self.subscribers.message(self._at(), c, msg), out)
        elif isinstance(msg, messages.Heartbeat):  # a client checks that its broker is there (core/session/roaming.py)
            out.append(Send(c.conn, messages.heartbeat_reply()))
        else:
            out.append(Send(c.conn, messages.status_reply(msg.req, self.status())))

    def _peer_partial(self, now: int, conn: int, held: int, out: list[Effect]) -> None:
        """Bytes arrived on a peer connection: charge its partial frame (`held` bytes) to the common budget."""
        assert self.cluster is not None
        refusal = self.reading.peer_partial(now, conn, held)
        if refusal is not None:
            self._cluster_effects(self.cluster.refuse(now, conn, errors.PARTIAL_FRAMES_BUDGET, refusal), out)

    # ---- publishing ------------------------------------------------------------------------------

    def _synced(self, token: int, out: list[Effect]) -> None:
        """Acknowledge the batches now durable, fan their events out to live subends and send each
        durable event to the trees that may hold its subscribers (reliability/source.py)."""
        pid = self.pubend.pubend_id
        batches = self.pubend.synced(token)
        for batch in batches:
            c = self.connections.get(batch.conn)
            if c is not None and c.state == OPEN:
                c.ack(self.now, messages.ack(batch.seq, pid, batch.ticks, batch.duplicates), out)
        out += self.local.synced(batches, pid, self.pubend.synced_tick)
        deliveries = [d for batch in batches for d in batch.deliveries]
        if self.cluster is not None and deliveries:  # as knowledge of this pubend's stream on their trees
            self._reliability(self._gd().published(self.now, deliveries, self.pubend.synced_tick), out)
        for conn in self.intake.synced():  # publishers paused for the disk: read again
            self._serve(self.reading.release(self.now, conn, Hold.DISK, out), out)

    # ---- subscribing (core/subscription/subscribers.py) --------------------------------------------

    def _at(self) -> sub.At:
        gd = None if self.cluster is None else self._gd()
        return sub.At(self.now, self.clock.us, self.pubend.synced_tick, self.log.released_through,
                      None if self.cluster is None else self.cluster.me.address, gd)

    def _join(self, j: sub.JoinStreams, out: list[Effect]) -> list[sub.SubscriberEffect]:
        """A subscription's streams in the reliability node and the broker's membership of its tree,
        then its opening; refused, with nothing changed, when this broker cannot join one more tree."""
        gd, c = self._gd(), self.connections[j.then.s.conn]
        assert self.cluster is not None
        effects: list[Settleable] = [
            *gd.local_subscribe(self.now, j.key, j.tree, j.start, j.total, j.pattern, j.filter_text, j.positions)]
        try:
            effects += self.cluster.trees(self.now, j.joins)
        except TidingsError as exc:  # a local limit reached on the client's behalf
            gd.local_unsubscribe(self.now, j.key, j.tree)
            return [self.subscribers.join_refused(c, j.then, exc)]
        self._reliability(effects, out)
        return self.subscribers.opened(self._at(), c, j.then)

    def _carry(self, effects: Iterable[sub.SubscriberEffect], out: list[Effect]) -> None:  # noqa: PLR0912 - by type
        """Carry out, in order, what the subscriber's side decided, each effect by its owner."""
        for eff in effects:
            if isinstance(eff, Settle):
                self._reliability(eff.effects, out)
            elif isinstance(eff, EndSubscription):
                c = self.connections[eff.conn]
                self._carry(self.subscribers.drop(self._at(), c, c.subs[eff.sub], ended=eff.ended), out)
            elif isinstance(eff, sub.JoinStreams):
                self._carry(self._join(eff, out), out)
            elif isinstance(eff, sub.Advance):
                blocked = self.connections[eff.s.conn].blocked
                self._carry(self.subscribers.advance(eff.s, blocked, self.pubend.synced_tick), out)
            elif isinstance(eff, JoinTree | NameMembers | LeaveTree | CreateTree):
                assert self.cluster is not None  # (only in an overlay do the trees decide anything)
                self._cluster_effects(self.cluster.trees(self.now, [eff]), out)
            elif isinstance(eff, LeaveStreams):
                self._reliability(self._gd().local_unsubscribe(self.now, eff.key, eff.tree), out)
            elif isinstance(eff, TellHome):
                self._reliability(self._gd().moved(eff.home.address, eff.home.pubend, eff.home.registration), out)
            elif isinstance(eff, Registered):
                self.constream.registered(self.now, eff.added, eff.dropped, partial(self._reliability, out=out))
            elif isinstance(eff, Resume):
                out += self.constream.resume(self.now, eff.key, eff.registration, eff.checkpoint, eff.pattern,
                                             eff.filter)
            elif isinstance(eff, sub.Refuse):
                self.connections[eff.conn].refuse(self.now, eff.code, eff.text, out, sub=eff.sub)
            elif isinstance(eff, sub.HoldRefusals):
                self.reading.hold_refusals(self.connections[eff.conn], out)
            elif isinstance(eff, sub.Chop):  # after a durable save
                out += self.constream.chop(self.registrations.get)
            else:
                out.append(eff)

    def _log_read(self, inp: LogRead, out: list[Effect]) -> None:
        if self.local.reader(inp.reader) is Reader.PUBEND:  # the pubend answering a nack
            if self.cluster is not None:
                self._reliability(self._gd().log_read(inp.now, inp.reader, inp.records, inp.log), out)
            return
        self._carry(self.subscribers.log_read(inp), out)

    def _read_failed(self, inp: ReadFailed, out: list[Effect]) -> None:
        if self.local.reader(inp.reader) is Reader.PUBEND:
            if self.cluster is not None:
                self._gd().source.read_failed(inp.reader)  # the nack will be repeated
            return
        self._carry(self.local.read_failed(inp.reader, inp.reason), out)

    def _flow(self, conn: int, blocked: bool, out: list[Effect]) -> None:
        """The connection's send queue passed send_queue_bytes_max (`blocked`) or drained: it is not
        read meanwhile (core/broker/reading.py); once drained, what waited unread is handled."""
        c = self.reading.flow(conn, blocked, out)
        if c is not None:
            self._carry(self.subscribers.flow(self._at(), c, blocked), out)
            if not blocked:
                self._serve(self.reading.release(self.now, conn, Hold.SEND, out), out)

    # ---- across brokers --------------------------------------------------------------------------

    def reload_auth(self, now: int, guard_policy: AuthPolicy) -> list[Effect]:
        """SIGHUP: the new rules apply to the next request, and to the access lists of the trees
        this broker created (CREATE again; the rendez-vous point passes them down)."""
        self.now = now
        self.guard.reload(guard_policy)
        out: list[Effect] = []
        self._carry(self.local.trees.recreations(), out)  # (none outside an overlay)
        return out

    def _adopt_peer(self, c: ClientConnection, msg: PeerHandover, out: list[Effect]) -> None:
        self.reading.handed_over(c)
        if self.cluster is None:  # not in an overlay (yet): nobody to talk to
            out.append(Send(c.conn, messages.error(errors.HANDSHAKE, "this broker is not in an overlay")))
            out.append(Disconnect(c.conn, "peer before overlay start"))
            return
        self._cluster_effects(self.cluster.adopt(self.now, c.conn, c.decoder, msg.hello, msg.rest), out)

    def _cluster_effects(self, effects: list[ClusterEffect], out: list[Effect]) -> None:
        """The cluster member's output: remote events for local subscriptions, effects for the runtime."""
        for eff in effects:
            if type(eff) is DeliverRecords:
                out += self.local.delivered(eff)
            elif type(eff) is Lost:
                out += self.local.lost(eff.keys, eff.pubend, eff.after, eff.through)
            elif type(eff) is AccessChanged:
                self._carry(self.subscribers.access_changed(eff), out)
            elif type(eff) is Recorded:
                out += self.constream.recorded(eff)
            elif type(eff) is MovedAway:
                self._carry(self.subscribers.moved_away(eff.registration), out)
            else:  # for the runtime; the driver fails loudly on one no runtime carries out (core/drive.py)
                if type(eff) is PeerRefused:
                    self.lifecycle.peer_refused(eff)
                out.append(cast(Effect, eff))  # (peer sends, probes and Scribe's upcalls stay in the member)

    # ---- observation -----------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """The machines' figures (core/broker/metrics.py) and what else an operator reads."""
        at = self._at()
        return metrics.status(self, lambda s: self.subscribers.status(at, s))
