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
- `LocalSubscriptions` (subscription/table.py) is the table of the local subscriptions: their index,
  their trees, the fan-outs and catch-up reads that reach them, their moves on flow control;
- `Subscription` (subscription/subscription.py) is one subscription: its start (subscription/start.py),
  its mode (catching up from the log, live, blocked, ended, away), its position per pubend and its
  durable binding; `RemoteDelivery` (subscription/remote.py) picks each one's share of other
  pubends' events; `Leases` (subscription/leases.py) end the subscriptions of a client that stopped
  renewing;
- `LocalTrees` (multicast/local_trees.py, over subscription/memberships.py) joins and leaves the
  trees for the local subscriptions under the trees' access lists;
- `DurableSubscriptions`, `Registrations` and `Constream` (durable/): durable subscriptions, their
  registrations and the PFS;
- `ClusterMember` (cluster.py) holds the peer links, the Pastry node, the Scribe agent and the
  `ReliabilityNode` once `start_overlay` has been called; the runtime's inputs on peer connections
  go to it whole. Clients and peers share the listening port: a connection whose first frame is
  PEER_HELLO is handed to the peer links.

Across brokers (DESIGN §2, docs/delivery.md) each sync's durable events become knowledge of this
pubend's stream on the trees of their channels, and the reliability node hands the broker other
pubends' events of the trees it is a member of (`DeliverRecords`), in tick order, exactly once.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from tidings.core import errors
from tidings.core.auth.guard import Guard
from tidings.core.auth.policy import AuthPolicy
from tidings.core.broker import metrics
from tidings.core.broker.advice import RouteAdvice
from tidings.core.broker.cluster import ClusterMember, Reliability
from tidings.core.broker.connection import OPEN, ClientConnection, ClientMessage, Hold, PeerHandover
from tidings.core.broker.lifecycle import Lifecycle, Retention
from tidings.core.broker.reading import Reading, Served
from tidings.core.broker.refusals import ClientErrors
from tidings.core.config import BrokerConfig
from tidings.core.deadlines import Alarm, Deadlines
from tidings.core.durable.checkpoint import Checkpoint
from tidings.core.durable.constream import Constream, Recorded
from tidings.core.durable.registrations import Registrations
from tidings.core.durable.subscriptions import DurableSubscriptions, Outcome
from tidings.core.effects import (
    Disconnect,
    Effect,
    PeerRefused,
    Send,
)
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
from tidings.core.links.peer_links import PeerLinks
from tidings.core.multicast.effects import AccessChanged
from tidings.core.multicast.local_trees import JoinTree, LeaveTree, NameMembers, TreeEffect
from tidings.core.multicast.trees import subscription_tree
from tidings.core.overlay.node import Rng
from tidings.core.overlay.node_id import NodeRef, node_id_from
from tidings.core.publish.dedup import DedupWindow
from tidings.core.publish.intake import Intake
from tidings.core.publish.pubend import Pubend
from tidings.core.reliability.node import DeliverRecords, Lost, MovedAway, ReliabilityNode
from tidings.core.subscription.leases import EndSubscription, Leases, lapsed
from tidings.core.subscription.start import check_subscribe, from_read, resolve_start
from tidings.core.subscription.subscription import Subscription
from tidings.core.subscription.table import LocalSubscriptions, Reader, Settle, TableEffect
from tidings.core.units import ns_to_us
from tidings.core.wire import messages


class DurableSilenceTimer(NamedTuple):
    """Durable subscriptions are due a SILENCE (core/durable/checkpoint.py)."""


class DurableSaveTimer(NamedTuple):
    """The durable state may be due saving, and registrations expiring (core/durable/registrations.py)."""


DURABLE_SILENCE = DurableSilenceTimer()
DURABLE_SAVE = DurableSaveTimer()
BrokerTimer = DurableSilenceTimer | DurableSaveTimer


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
        # reading the client connections, what it may cost, and who holds them (core/broker/reading.py)
        self.reading = Reading(config, self.guard, self.client_errors, self.advice, self.alarm)
        self.connections = self.reading.connections
        self.local = LocalSubscriptions(self.guard)  # the subends, their index and trees (core/subscription/table.py)
        self.subends = self.local.subends
        self.memberships, self.trees = self.local.memberships, self.local.trees
        self.timers: Deadlines[BrokerTimer] = Deadlines(self.alarm)
        self.leases = Leases(config.lease_ns, self.reading.unread, self.alarm)
        self.now = 0
        self.wall_us = 0  # the last wall clock an input brought, for messages handled without one
        self.cluster: ClusterMember | None = None
        expiry_us = ns_to_us(config.durable_expiry_ns)
        self.dedup = DedupWindow(ns_to_us(config.dedup_window_ns), config.dedup_entries_max,
                                 config.dedup_producers_max)  # idempotent publish (core/publish/dedup.py)
        self.intake = Intake(config, self.guard, self.pubend, self.dedup)  # PUBLISH to the log (core/publish/intake.py)
        self.registrations = (Registrations(expiry_us, config.durable_registrations_max) if durable is None
                              else Registrations.decode(durable, expiry_us, config.durable_registrations_max))
        self.durable = DurableSubscriptions(pubend_id, self.registrations)  # core/durable/subscriptions.py
        self.constream = Constream()  # what matched the durable registrations (reliability/constream.py)
        # the join deadline, the drain and the retention cadence (core/broker/lifecycle.py)
        self.lifecycle = Lifecycle(self, Retention(config.retention_bytes_max, config.retention_age_ns,
                                                   config.retention_check_interval_ns), self.alarm)

    # ---- the runtime's interface -----------------------------------------------------------------

    def handle(self, inp: Input) -> list[Effect]:  # noqa: PLR0912 - one branch per input type
        out: list[Effect] = []
        self.now = inp.now
        if isinstance(inp, Received | TimerFired) and inp.wall_us:
            self.wall_us = inp.wall_us
            if self.cluster is not None:
                self.cluster.wall_clock(inp.wall_us)
        if isinstance(inp, Connected | ConnectFailed) or (
                isinstance(inp, Received | ConnectionLost | SendBlocked | SendDrained)
                and self.cluster is not None and self.cluster.owns(inp.conn)):
            assert self.cluster is not None  # only the peer links dial
            if type(inp) is ConnectFailed:
                self.lifecycle.join_attempt_failed(inp.address, inp.reason)
            self._cluster_effects(self.cluster.peer_input(inp), out)
            if type(inp) is Received:
                self._peer_partial(inp.now, inp.conn, out)
            elif type(inp) is ConnectionLost:
                self.reading.lost(inp.conn)
        elif isinstance(inp, Received):
            c = self.reading.received(inp.conn, inp.data)
            if c is not None:
                self._serve(self.reading.serve(inp.now, c, out), out)
                self.reading.read_done(inp.now, c, out)
            if self.cluster is not None and self.cluster.owns(inp.conn):  # it was another broker's
                self._peer_partial(inp.now, inp.conn, out)
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
            advice = self.drain(inp.now)
            out += advice
            out += self.lifecycle.drain_requested(inp.now, inp.timeout_ns, bool(advice))
        if self.lifecycle.draining:  # the drain looks again after every input
            out += self.lifecycle.look(inp.now)
        return out

    def _timeouts(self, now: int, wall_us: int, out: list[Effect]) -> None:
        """TimerFired: the handle_timeout of each machine whose deadline is due, in a fixed order."""
        if _due(self.timers.next_deadline(), now):
            self._timers(now, wall_us, out)
        reading_due = _due(self.reading.next_deadline(), now)
        if reading_due:
            for eff in self.reading.handle_timeout(now):
                self._serve(self.reading.carry_out(now, eff, out), out)
        if _due(self.leases.next_deadline(), now):
            self._leases_expired(now, out)
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
        """The earliest deadline of the machines: known without asking them unless one that was at
        the earliest moved or fell due since (core/deadlines.py `Alarm`)."""
        alarm = self.alarm
        if not alarm.known:
            alarm.walked(self.walk_deadlines())
        return alarm.earliest

    def walk_deadlines(self) -> int | None:
        """The earliest deadline, asked of every machine (what `alarm` holds while it is known)."""
        deadlines = [self.timers.next_deadline(), self.leases.next_deadline(), self.reading.next_deadline(),
                     self.lifecycle.next_deadline()]
        if self.cluster is not None:
            deadlines.append(self.cluster.next_deadline())
        live = [d for d in deadlines if d is not None]
        return min(live) if live else None

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
        me = NodeRef(node_id_from(self.pubend.pubend_id), address)
        peers = PeerLinks(me, self.config.peer_config(), self.guard.cluster_auth(), self.alarm)
        reliability = Reliability(self.pubend.pubend_id, self.config.reliability_config(), self.intake.trees_of,
                                  lambda: (self.pubend.synced_tick, self.log), self.registrations.held,
                                  self._directory_saved, self.config.directory_config())
        self.cluster = ClusterMember(me, self.config.overlay_config(), self.config.scribe_config(), rng,
                                     reliability, peers, self.alarm)
        out: list[Effect] = []
        self._cluster_effects(self.cluster.start(now, bootstrap), out)
        self._reliability(self._gd().start(now, self.log.last_tick, self.registrations.held_trees), out)
        for tree, count in self.registrations.trees().items():  # away durable subscriptions hold their trees
            self.memberships.hold(tree, count)
        self.constream.start(now, self._gd(), self.config.durable_pfs, self.registrations.all(),
                             lambda effects: self._reliability(effects, out))
        self._cluster_effects(self._tree_effects(self.trees.start(self.cluster.access_lists)), out)
        self.timers.set(DURABLE_SAVE, now + self.config.durable_save_interval_ns)
        return out

    def _reliability(self, effects: list[Any], out: list[Effect]) -> None:
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
        if c is not None:
            for s in list(c.subs.values()):
                self._drop_subend(c, s, out, ended=False)

    def _timers(self, now: int, wall_us: int, out: list[Effect]) -> None:
        for key in self.timers.pop_due(now):
            if type(key) is DurableSilenceTimer:
                self._durable_silence(now, out)
            else:
                self._durable_save(now, wall_us, out)

    def _advise(self, conns: list[int]) -> list[Effect]:
        """ADVICE to `conns` (core/broker/advice.py): this broker's nearest neighbours, and why to move."""
        if self.cluster is None:
            return []
        return list(self.advice.advise(conns, self.reading.open_clients(), self.cluster.me.address,
                                       self.cluster.neighbours()))

    @property
    def draining(self) -> bool:
        return self.advice.draining

    def drain(self, now: int) -> list[Effect]:
        """The broker is stopping: every client is advised to move to a neighbour."""
        self.now = now
        self.advice.drain()
        return self._advise(self.reading.open_conns())

    @property
    def joined(self) -> bool:
        """Whether this broker is in an overlay (its Pastry join completed)."""
        return self.cluster is not None and self.cluster.overlay.joined

    def movable_clients(self) -> int:
        """Open client connections: on drain, the client library moves every one, its durable
        subscriptions with their tokens and its plain ones from "now" (tidings.client)."""
        return self.reading.open_clients()

    def undelivered(self, now: int) -> int:
        """While draining, once the clients have gone: what is still owed to other brokers (batches
        not yet synced, trees whose root has not acknowledged this pubend's stream); 0 when stopping
        now delays no logged event until a restart."""
        self.now = now
        return self.pubend.pending_batches + (0 if self.cluster is None else self.cluster.unacknowledged(now))

    def _leases_expired(self, now: int, out: list[Effect]) -> None:
        """Connections that stopped renewing: each of their subscriptions ends, everywhere."""
        for expired in self.leases.handle_timeout(now):
            conn = expired.conn
            c = self.connections.get(conn)
            if c is None:
                continue
            for eff in lapsed(conn, list(c.subs)):
                if isinstance(eff, EndSubscription):
                    self._drop_subend(c, c.subs[eff.sub], out, ended=eff.ended)
                else:
                    out.append(eff)

    def _serve(self, served: Served, out: list[Effect]) -> None:
        """Each message the reading machine pulls, to the machine that owns it (core/broker/reading.py)."""
        for c, msg in served:
            if msg is None:  # its handshake is done
                out += self._advise([c.conn])
            else:
                self._dispatch(c, msg, out)

    def _dispatch(self, c: ClientConnection, msg: ClientMessage, out: list[Effect]) -> None:
        wall_us = self.wall_us
        if isinstance(msg, PeerHandover):
            self._adopt_peer(c, msg, out)
        elif isinstance(msg, messages.Publish):
            wait_ns = self.intake.publish(self.now, c, msg, wall_us, out)
            if wait_ns:  # over its rate: the PUBLISH waits unread, and so does the connection
                c.put_back(msg)
                self.reading.hold(c, Hold.RATE, self.now + max(wait_ns, self.config.publish_wait_ns_min))
        elif isinstance(msg, messages.Subscribe):
            self._subscribe(c, msg, wall_us, out)
        elif isinstance(msg, messages.Read):  # a bounded subscription that answers in bulk
            self._subscribe(c, from_read(msg), wall_us, out, bulk=True,
                            spans=msg.spans and self.config.spans_fit_frames and self.trees.may_read_everything(
                                c.identity))
        elif isinstance(msg, messages.Unsubscribe):
            self._unsubscribe(c, msg.sub, msg.forget, out)
        elif isinstance(msg, messages.Renew):
            self.leases.renew(self.now, c.conn)
        elif isinstance(msg, messages.Heartbeat):  # a client checks that its broker is there (core/session/roaming.py)
            out.append(Send(c.conn, messages.heartbeat_reply()))
        elif isinstance(msg, messages.Release):
            try:
                s = c.subs.get(msg.sub)
                self.durable.release(s is not None and s.durable, None if s is None else s.registration, msg.sub,
                                     msg.checkpoint)
            except TidingsError as exc:
                c.refuse(self.now, exc.code, str(exc), out, sub=msg.sub)
        else:
            out.append(Send(c.conn, messages.status_reply(msg.req, self.status())))

    def _peer_partial(self, now: int, conn: int, out: list[Effect]) -> None:
        """Bytes arrived on a peer connection: charge its partial frame to the common budget."""
        assert self.cluster is not None
        refusal = self.reading.peer_partial(now, conn, self.cluster.peers_held_bytes(conn))
        if refusal is not None:
            self._cluster_effects(self.cluster.refuse(now, conn, errors.PARTIAL_FRAMES_BUDGET, refusal), out)

    # ---- publishing ------------------------------------------------------------------------------

    def _synced(self, token: int, out: list[Effect]) -> None:
        """Acknowledge the batches now durable and fan their events out to live subends."""
        pid = self.pubend.pubend_id
        batches = self.pubend.synced(token)
        for batch in batches:
            c = self.connections.get(batch.conn)
            if c is not None and c.state == OPEN:
                self._ack(c, messages.ack(batch.seq, pid, batch.ticks, batch.duplicates), out)
        out += self.local.synced(batches, pid, self.pubend.synced_tick)
        if self.cluster is not None:
            self._publish_to_trees(batches, out)
        for conn in self.intake.synced():  # publishers paused for the disk: read again
            self._serve(self.reading.release(self.now, conn, Hold.DISK, out), out)

    def _ack(self, c: ClientConnection, ack: bytes, out: list[Effect]) -> None:
        """An ACK, after the ERRORs held for the refusal window (charged with them when they go);
        sent now to a blocked connection, which does not read it, it counts like any reply."""
        if c.reply(ack, out) and c.blocked:
            out += c.charge(self.now, len(ack))

    # ---- subscribing -----------------------------------------------------------------------------

    def _subscribe(self, c: ClientConnection, msg: messages.Subscribe, wall_us: int, out: list[Effect],
                   bulk: bool = False, spans: bool = False) -> None:
        """Open subscription `msg` (core/subscription/): its machine, its tree, its index entry, its
        lease and its durable binding; SUBSCRIBED, then its first move."""
        def refuse(code: str, text: str) -> None:
            c.refuse(self.now, code, text, out, sub=msg.sub)

        try:
            pattern, flt = check_subscribe(msg, c.subs, self.config.subscriptions_per_connection_max,
                                           self.cluster is not None)
        except TidingsError as exc:
            return refuse(exc.code, str(exc))
        denied = (self.guard.check_subscribe(c.identity, pattern)  # access rules, subscriptions_max
                  or self._tree_refusal(c.identity, pattern))  # the tree's creator's, when held here
        if denied is not None:
            return refuse(denied.code, str(denied))
        begin = resolve_start(msg, self.pubend.synced_tick, self.log.released_through, wall_us,
                              self.config.clock_skew_allowance_ns)
        try:
            checkpoint = self.durable.checkpoint(c.service, msg, begin.position, begin.remote, self._me())
        except TidingsError as exc:
            return refuse(exc.code, str(exc))
        position = begin.position if checkpoint is None else checkpoint.position(self.pubend.pubend_id)
        s = self.local.open(c.conn, msg.sub, self.pubend.pubend_id, pattern, flt, position, begin.end,
                            begin.from_oldest, msg.order == messages.ORDER_TOTAL, bulk, spans)
        c.subs[msg.sub] = s
        if begin.end is None:
            remote = None if checkpoint is None else checkpoint.positions
            try:
                self._join_tree(s, subscription_tree(pattern), begin.remote, out, remote)
            except TidingsError as exc:  # a local limit reached on the client's behalf
                del self.subends[s.key], c.subs[msg.sub]
                return refuse(exc.code, str(exc))
            self.local.joined(s)
        self.leases.hold(self.now, c.conn)
        if checkpoint is not None:
            try:
                name = (c.service, msg.home) if type(msg.home) is str else None
                self._start_durable(s, checkpoint, out, name)
            except TidingsError as exc:
                self._drop_subend(c, s, out)
                return refuse(exc.code, str(exc))
        out.append(Send(c.conn, messages.subscribed(msg.sub, position,
                                                    None if checkpoint is None else checkpoint.to_wire())))
        self._advance(c, s, out)
        return None

    def _me(self) -> str | None:
        return None if self.cluster is None else self.cluster.me.address

    def _start_durable(self, s: Subscription, checkpoint: Checkpoint, out: list[Effect],
                       name: tuple[str, str] | None) -> None:
        positions = dict(checkpoint.positions)
        outcome = self.durable.begin(s.key, s.pattern, "" if s.filter is None else s.filter.text, checkpoint,
                                     self.memberships.tree_of[s.key], name, self._me())
        s.bind(outcome.registration, positions)
        self._durable(outcome, out)
        # a resumed one's catchup asks the PFS what matched it while it was away
        out += self.constream.resume(self.now, s.key, outcome.resumed, checkpoint, s.pattern, s.filter)
        if DURABLE_SILENCE not in self.timers:
            self.timers.set(DURABLE_SILENCE, self.now + self.config.durable_silence_interval_ns)

    def _durable(self, outcome: Outcome, out: list[Effect]) -> None:
        """Carry out what the durable machine decided (core/durable/subscriptions.py)."""
        out += outcome.effects
        for key in outcome.unbound:
            bound = self.subends.get(key)
            if bound is not None:
                bound.unbind()
        self.constream.registered(self.now, outcome.added, outcome.dropped,
                                  lambda effects: self._reliability(effects, out))
        for tree in outcome.gone:
            self._member_gone(tree, out)
        for home in outcome.moved:
            self._reliability(self._gd().moved(home.address, home.pubend, home.registration), out)

    def _durable_save(self, now: int, wall_us: int, out: list[Effect]) -> None:
        self.timers.set(DURABLE_SAVE, now + self.config.durable_save_interval_ns)
        self._durable(self.durable.save(wall_us, self._gd().source.held_trees()), out)
        out += self.constream.chop(self.registrations.get)

    def _durable_silence(self, now: int, out: list[Effect]) -> None:
        """Each durable subscription's SILENCE, with what the trees passed it (reliability/node.py)."""
        if self.local.durable():
            self.timers.set(DURABLE_SILENCE, now + self.config.durable_silence_interval_ns)
        out += self.local.silence(self.pubend.synced_tick, self._positions())

    def _positions(self) -> ReliabilityNode | None:
        """What the trees know of the local subscriptions (None outside an overlay)."""
        return None if self.cluster is None else self._gd()

    def _unsubscribe(self, c: ClientConnection, sub: int, forget: bool, out: list[Effect]) -> None:
        """A durable subscription is away after UNSUBSCRIBE, as after a closed connection, unless
        `forget` ends it for good. One that is not open (the broker ended it, or it never was) is
        left as it is, unanswered: what the client asks for holds already."""
        s = c.subs.get(sub)
        if s is not None:
            self._drop_subend(c, s, out, ended=forget)

    def _drop_subend(self, c: ClientConnection, s: Subscription, out: list[Effect], ended: bool = True) -> None:
        """Subscription `s` ends (`ended`: unsubscribed, refused, expired), or its connection went
        (a durable one's registration then holds its place in the tree while it is away)."""
        del c.subs[s.sub]
        if not c.subs:
            self.leases.release(c.conn)
        away = False
        if self.local.drop(s):
            away, outcome = self.durable.end(s.key, s.registration, ended,
                                             self._gd().wall_us if self.cluster else 0)
            self._durable(outcome, out)
            self._carry(self.local.leave(self.now, s.key, away, self._positions()), out)
        s.close(away)

    def _advance(self, c: ClientConnection, s: Subscription, out: list[Effect]) -> None:
        """Move a subscription that is not live on (core/subscription/subscription.py `advance`)."""
        self._carry(self.local.advance(s, c.blocked, self.pubend.synced_tick, self.config.log_read_bytes_max), out)

    def _carry(self, effects: list[TableEffect], out: list[Effect]) -> None:
        """Carry out, in order, what the local subscriptions decided (core/subscription/table.py)."""
        for eff in effects:
            if isinstance(eff, Settle):
                self._reliability(eff.effects, out)
            elif isinstance(eff, EndSubscription):
                c = self.connections[eff.conn]
                self._drop_subend(c, c.subs[eff.sub], out, ended=eff.ended)
            elif isinstance(eff, JoinTree | NameMembers | LeaveTree):
                self._cluster_effects(self._tree_effects([eff]), out)
            else:
                out.append(eff)

    def _log_read(self, inp: LogRead, out: list[Effect]) -> None:
        if self.local.reader(inp.reader) is Reader.PUBEND:  # the pubend answering a nack
            if self.cluster is not None:
                self._reliability(self._gd().log_read(inp.now, inp.reader, inp.records, inp.log), out)
            return
        effects, s = self.local.log_read(inp)
        out += effects
        if s is not None:
            self._advance(self.connections[s.conn], s, out)

    def _read_failed(self, inp: ReadFailed, out: list[Effect]) -> None:
        if self.local.reader(inp.reader) is Reader.PUBEND:
            if self.cluster is not None:
                self._gd().source.read_failed(inp.reader)  # the nack will be repeated
            return
        self._carry(self.local.read_failed(inp.reader, inp.reason), out)

    def _flow(self, conn: int, blocked: bool, out: list[Effect]) -> None:
        """The connection's send queue passed send_queue_bytes_max (`blocked`) or drained: its live
        events turn into log reads, and it is not read meanwhile (core/broker/reading.py); once
        drained, what waited unread is handled, unless something else holds it."""
        c = self.reading.flow(conn, blocked, out)
        if c is None:
            return
        self._carry(self.local.flow(self.now, list(c.subs.values()), blocked, self.pubend.synced_tick,
                                    self.config.log_read_bytes_max, self._positions()), out)
        if not blocked:
            self._serve(self.reading.release(self.now, conn, Hold.SEND, out), out)

    # ---- across brokers --------------------------------------------------------------------------

    def _join_tree(self, s: Subscription, tree: str, start: int, out: list[Effect],
                   positions: dict[str, int] | None = None) -> None:
        """Make subscription `s` a member of `tree` (from `positions` for the pubends a durable
        subscription's token names); TidingsError (and nothing changed) when this
        broker cannot join one more tree."""
        joins = self.trees.join(s.key, tree, (self.connections[s.conn].identity, s.pattern))
        if self.cluster is None:
            return
        gd = self._gd()
        effects = gd.local_subscribe(self.now, s.key, tree, start, s.total, s.pattern,
                                     "" if s.filter is None else s.filter.text, positions)
        try:
            effects += self._tree_effects(joins)
        except TidingsError:
            gd.local_unsubscribe(self.now, s.key, tree)
            self.trees.undo(s.key)
            raise
        self._reliability(effects, out)

    def _tree_refusal(self, identity: str, pattern: str) -> TidingsError | None:
        return self.trees.refusal(identity, pattern)

    def _access_changed(self, eff: AccessChanged, out: list[Effect]) -> None:
        """A tree's access list reached this broker: its subscriptions there that the list does
        not admit end, each with a `forbidden` error to its client."""
        for key, error in self.trees.excluded(eff.tree, eff.metadata.acl, eff.metadata.creator):
            s = self.subends[key]
            c = self.connections[s.conn]
            c.refuse(self.now, error.code, str(error), out, sub=s.sub)
            self._drop_subend(c, s, out)
            self.reading.hold_refusals(c, out)

    def reload_auth(self, now: int, guard_policy: AuthPolicy) -> list[Effect]:
        """SIGHUP: the new rules apply to the next request, and to the access lists of the trees
        this broker created (CREATE again; the rendez-vous point passes them down)."""
        self.now = now
        self.guard.reload(guard_policy)
        out: list[Effect] = []
        if self.cluster is not None:
            for tree, creator, acl in self.trees.recreations():
                self._cluster_effects(self.cluster.create(now, tree, creator, acl), out)
        return out

    def _member_gone(self, tree: str, out: list[Effect]) -> None:
        """An away durable registration of `tree` ended (or its subscriber is back on a subend)."""
        self._cluster_effects(self._tree_effects(self.trees.member_gone(tree)), out)

    def _tree_effects(self, effects: list[TreeEffect]) -> list[Any]:
        """Carry out what the local trees decided (core/multicast/local_trees.py): the cluster member's output."""
        out: list[Any] = []
        for eff in effects:
            assert self.cluster is not None  # (only in an overlay do they decide anything)
            if isinstance(eff, JoinTree):
                out += self.cluster.subscribe(self.now, eff.tree, eff.members, eff.creation)
            elif isinstance(eff, NameMembers):
                self.cluster.name_members(eff.tree, eff.gone, eff.members)
            else:
                out += self.cluster.unsubscribe(self.now, eff.tree)
        return out

    def _publish_to_trees(self, batches: list[Any], out: list[Effect]) -> None:
        """Each durable event goes to the trees that may hold its subscribers, as knowledge of this
        pubend's stream on each (reliability/source.py)."""
        deliveries = [d for batch in batches for d in batch.deliveries]
        if deliveries:
            self._reliability(self._gd().published(self.now, deliveries, self.pubend.synced_tick), out)

    def _adopt_peer(self, c: ClientConnection, msg: PeerHandover, out: list[Effect]) -> None:
        self.reading.handed_over(c)
        if self.cluster is None:  # not in an overlay (yet): nobody to talk to
            out.append(Send(c.conn, messages.error(errors.HANDSHAKE, "this broker is not in an overlay")))
            out.append(Disconnect(c.conn, "peer before overlay start"))
            return
        self._cluster_effects(self.cluster.adopt(self.now, c.conn, c.decoder, msg.hello, msg.rest), out)

    def _cluster_effects(self, effects: list[Any], out: list[Effect]) -> None:
        """The cluster member's output: remote events for local subscriptions, effects for the runtime."""
        for eff in effects:
            if type(eff) is DeliverRecords:
                out += self.local.fan_out(self.local.remote.fan(eff, self.subends))
            elif type(eff) is Lost:
                out += self.local.lost(eff.keys, eff.pubend, eff.after, eff.through)
            elif type(eff) is AccessChanged:
                self._access_changed(eff, out)
            elif type(eff) is Recorded:
                out += self.constream.recorded(eff)
            elif type(eff) is MovedAway:
                self.registrations.moved_total += 1
                self._durable(self.durable.forget(eff.registration), out)
            else:  # for the runtime; the driver fails loudly on one no runtime carries out (core/drive.py)
                if type(eff) is PeerRefused:
                    self.lifecycle.peer_refused(eff)
                out.append(eff)

    # ---- observation -----------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """The machines' figures (core/broker/metrics.py) and what else an operator reads."""
        log = self.log
        return {
            "pubend": self.pubend.pubend_id,
            "draining": self.advice.draining,
            **metrics.read(self),
            **self.registrations.status(),
            "lease_ns": self.leases.lease_ns,
            "last_event_tick": log.last_tick,  # the newest logged event's (Spark: is there anything to read?)
            "tick_marks": list(log.tick_marks),
            "channels": self.intake.traffic.top(),
            "connections": self.reading.status(self._subscription_status),
            **({} if self.cluster is None else self.cluster.status()),
            **self.client_errors.status(),
            **self.guard.status(),
        }

    def _subscription_status(self, s: Subscription) -> dict[str, Any]:
        return self.local.status(s, self.pubend.pubend_id, self.pubend.synced_tick, self._positions())
