"""The broker core: the composer of one broker's machines (DESIGN §4; docs/architecture.md draws them
and the event's path). It keeps the connection table, hands each input to the machine that owns it,
dispatches each client message by type, routes each effect by type (the subscriber side's by the table
of core/subscription/router.py), gives the runtime the earliest deadline (core/deadlines.py `Alarm`) and
reports the machines' figures (metrics.py). It holds no protocol rule and never blocks: each `handle`
returns effects for the runtime to apply (core/drive.py). The inputs of peer connections go whole to the
`ClusterMember` (cluster.py) that `start_overlay` made (core/broker/lifecycle.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, cast

from tidings.core import errors
from tidings.core.auth.guard import Guard
from tidings.core.auth.policy import AuthPolicy
from tidings.core.broker import metrics, refusals
from tidings.core.broker.advice import RouteAdvice
from tidings.core.broker.cluster import ClusterEffect, ClusterMember, Settleable
from tidings.core.broker.connection import OPEN, ClientConnection, ClientMessage, Hold, Opened, PeerHandover
from tidings.core.broker.lifecycle import BrokerMachines, Lifecycle, Retention, join_overlay
from tidings.core.broker.reading import Reading
from tidings.core.broker.refusals import ClientErrors
from tidings.core.clock import WallClock
from tidings.core.config import BrokerConfig
from tidings.core.deadlines import Alarm
from tidings.core.durable.constream import Constream
from tidings.core.durable.registrations import Registrations
from tidings.core.durable.subscriptions import DurableSubscriptions
from tidings.core.effects import Effect, PeerRefused, Send
from tidings.core.inputs import (
    CLOCKED,
    DIALS,
    ON_A_CONNECTION,
    SEND_FLOW,
    Accepted,
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
    TimerFired,
    WriteSynced,
)
from tidings.core.overlay.node import Rng
from tidings.core.publish.dedup import DedupWindow
from tidings.core.publish.intake import Intake
from tidings.core.publish.pubend import Pubend
from tidings.core.reliability.node import DeliverRecords
from tidings.core.subscription import subscribers as sub
from tidings.core.subscription.leases import Leases
from tidings.core.subscription.router import SubscriberRouter
from tidings.core.subscription.table import LocalSubscriptions
from tidings.core.synced import Synced
from tidings.core.units import ns_to_us
from tidings.core.wire import messages


def _due(deadline: int | None, now: int) -> bool:
    return deadline is not None and deadline <= now


class Broker:
    def __init__(self, config: BrokerConfig, pubend_id: str, log: LogState, guard: Guard | None = None,
                 durable: bytes | None = None, directory: bytes | None = None) -> None:
        """`durable`: the state the last SaveDurable saved (StateError when it does not decode);
        `directory`: the pubend directory the last SaveDirectory saved (core/broker/directory.py)."""
        self.directory_saved = directory  # (for the overlay's member, core/broker/lifecycle.py)
        self.config = config
        self.guard = guard or Guard.open()  # identities, access rules and limits (core/auth/)
        self.pubend = Pubend(pubend_id, log.last_tick)
        self.log = log
        self.advice = RouteAdvice(pubend_id, config)  # WELCOME's info and route advice (core/broker/advice.py)
        self.alarm = Alarm()  # the earliest deadline of every machine, kept as their timers move (core/deadlines.py)
        self.reading = Reading(config, self.guard, ClientErrors(), self.advice, self.alarm)  # broker/reading.py
        self.connections = self.reading.connections
        self.local = LocalSubscriptions(self.guard)  # the subends, their index and trees (core/subscription/table.py)
        self.leases = Leases(config.lease_ns, self.reading.unread, self.alarm)
        self.now = 0
        self.clock = WallClock()  # the last wall clock an input brought, for messages handled without one
        self.cluster: ClusterMember | None = None
        expiry_us = ns_to_us(config.durable_expiry_ns)
        self.dedup = DedupWindow(ns_to_us(config.dedup_window_ns), config.dedup_entries_max,
                                 config.dedup_producers_max)  # idempotent publish (core/publish/dedup.py)
        self.intake = Intake(config, self.guard, self.pubend, self.dedup, self.clock)  # PUBLISH to the log (publish/)
        self.reading.serve_to(self._dispatch, {messages.Publish: self.intake.publish})  # each message as it is read
        self.registrations = (Registrations(expiry_us, config.durable_registrations_max) if durable is None
                              else Registrations.decode(durable, expiry_us, config.durable_registrations_max))
        self.durable = DurableSubscriptions(pubend_id, self.registrations)  # core/durable/subscriptions.py
        self.subscribers = sub.Subscribers(config, self.guard, self.local, self.leases, self.durable, self.alarm)
        self.constream = Constream()  # what matched the durable registrations (reliability/constream.py)
        self.router = SubscriberRouter(self, self._reliability, self._cluster_effects)  # subscription/router.py
        self.machines = BrokerMachines(self.clock, self.reading, self.pubend)  # what the lifecycle reads
        self.lifecycle = Lifecycle(self.machines, Retention.of(config), self.alarm)  # join, drain, retention
        self.alarm.watch(self.subscribers.timers, self.leases, self.reading, self.lifecycle)  # (the cluster's later)
        self.sections: list[Callable[[], dict[str, Any]]] = []  # more of the status (core/mqtt/gateway.py's)

    def handle(self, inp: Input) -> list[Effect]:  # noqa: PLR0912 - one branch per input type
        out: list[Effect] = []
        self.now = inp.now
        if isinstance(inp, CLOCKED) and inp.wall_us:
            self.clock.us = inp.wall_us
            if self.cluster is not None:  # the clock its machines read (core/clock.py): no call through them
                self.cluster.clock.us = inp.wall_us
        peer = None  # a client's connection is in the table; the cluster member is asked about the others
        if self.cluster is not None and (isinstance(inp, DIALS) or (
                isinstance(inp, ON_A_CONNECTION)
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
            self.reading.received(inp.now, inp.conn, inp.data, out)  # each message to its owner (serve_to)
            if inp.conn not in self.connections and self.cluster is not None and self.cluster.owns(inp.conn):
                # it was another broker's (PEER_HELLO): the peer links took it over
                self._peer_partial(inp.now, inp.conn, self.cluster.peers_held_bytes(inp.conn), out)
        elif isinstance(inp, WriteSynced):
            self.log = inp.log
            self._synced(inp.token, out)
        elif isinstance(inp, LogRead):
            self.router.log_read(inp, out)
        elif isinstance(inp, Accepted):
            self.reading.accept(inp.now, inp.conn, out)
        elif isinstance(inp, ConnectionLost):
            self._lost(inp.conn, out)
        elif isinstance(inp, SEND_FLOW):
            self._flow(inp.conn, isinstance(inp, SendBlocked), out)
        elif isinstance(inp, TimerFired):
            self._timeouts(inp.now, inp.wall_us, out)
        elif isinstance(inp, RetentionApplied):
            self.log = inp.log
        elif isinstance(inp, ReadFailed):
            self.router.read_failed(inp, out)
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
        if _due(self.subscribers.timers.next_deadline(), now):  # SILENCE and the durable save
            self.router.carry(self.subscribers.timed_out(self.router.at(), wall_us), out)
        reading_due = _due(self.reading.next_deadline(), now)
        if reading_due:
            self.reading.timed_out(now, out)
        if _due(self.leases.next_deadline(), now):
            self.router.carry(self.subscribers.leases_expired(now, self.connections), out)
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
        return self.alarm.earliest if self.alarm.known else self.alarm.next_deadline()  # (kept as timers move)

    def start(self, now: int) -> None:
        """The broker process is up (a runtime calls this once, before any input): retention's cadence begins."""
        self.lifecycle.start(now)

    def start_overlay(self, now: int, address: str, bootstrap: str | None, rng: Rng,
                      join_timeout_ns: int | None = None) -> list[Effect]:
        """Take part in an overlay as `address` (what peers connect to): a new one, or the one of `bootstrap` (any
        member's address), given up (JoinTimedOut) after `join_timeout_ns` (None: never); `rng`: a seeded Random."""
        self.now = now
        self.cluster = join_overlay(self, now, address, bootstrap, rng, join_timeout_ns)  # core/broker/lifecycle.py
        out: list[Effect] = []
        self._cluster_effects(self.cluster.start(now, bootstrap), out)
        self.router.start(now, out)  # the reliability node and the durable registrations' trees, the constream
        return out

    def settle(self, now: int, effects: Sequence[Settleable]) -> list[Effect]:
        """The reliability node's `effects` (an event from a parent, say) carried out across the broker."""
        self.now = now
        return self._reliability(effects, [])

    def _reliability(self, effects: Sequence[Settleable], out: list[Effect]) -> list[Effect]:
        """Effects of the reliability node, once what they ask of Pastry and Scribe is carried out (into `out`)."""
        if effects:
            assert self.cluster is not None
            self._cluster_effects(self.cluster.settle(self.now, effects), out)
        return out

    def _lost(self, conn: int, out: list[Effect]) -> None:
        self.intake.lost(conn)
        self.router.lost(conn, out)  # its lease, its reading, its subscriptions (core/subscription/router.py)

    def _advise(self, conns: list[int]) -> list[Effect]:
        """ADVICE to `conns` (core/broker/advice.py): this broker's nearest neighbours, and why to move."""
        if self.cluster is None:
            return []
        return list(self.advice.advise(conns, self.reading.open_clients(), self.cluster.me.address,
                                       self.cluster.neighbours()))

    def _dispatch(self, now: int, c: ClientConnection, msg: ClientMessage, out: list[Effect]) -> int:
        """A client's message the reading machine read (core/broker/reading.py: a PUBLISH goes to the
        intake), to the machine that owns it; 0: it never waits."""
        if isinstance(msg, Opened):  # its handshake is done
            out += self._advise([c.conn])
        elif isinstance(msg, PeerHandover):
            self._adopt_peer(c, msg, out)
        elif isinstance(msg, messages.Subscribe | messages.Read | messages.Unsubscribe | messages.Renew
                        | messages.Release):
            self.router.carry(self.subscribers.message(self.router.at(), c, msg), out)
        elif isinstance(msg, messages.Heartbeat):  # a client checks that its broker is there (core/session/roaming.py)
            out.append(Send(c.conn, messages.heartbeat_reply()))
        else:  # (a PUBLISH is the intake's: serve_to)
            assert isinstance(msg, messages.StatusRequest), msg
            out.append(Send(c.conn, messages.status_reply(msg.req, self.status())))
        return 0

    def _peer_partial(self, now: int, conn: int, held: int, out: list[Effect]) -> None:
        """Bytes arrived on a peer connection: charge its partial frame (`held` bytes) to the common budget."""
        assert self.cluster is not None
        refusal = self.reading.peer_partial(now, conn, held)
        if refusal is not None:
            self._cluster_effects(self.cluster.refuse(now, conn, errors.PARTIAL_FRAMES_BUDGET, refusal), out)

    def _synced(self, token: int, out: list[Effect]) -> None:
        """Acknowledge the batches now durable, fan their events out to live subends and send each
        durable event to the trees that may hold its subscribers (reliability/source.py)."""
        pid = self.pubend.pubend_id
        batches = self.pubend.synced(token)
        for batch in batches:
            c = self.connections.get(batch.conn)
            if c is not None and c.state == OPEN:
                c.ack(self.now, batch.ack(pid), out)
        synced = Synced(batches)  # (their columns built once for both: core/synced.py)
        out += self.local.synced(synced, pid, self.pubend.synced_tick)
        if self.cluster is not None and synced.logged:  # as knowledge on their trees
            self._cluster_effects(self.cluster.published(self.now, synced, self.pubend.synced_tick), out)
        for conn in self.intake.synced():  # publishers paused for the disk: read again
            self.reading.release(self.now, conn, Hold.DISK, out)

    def _flow(self, conn: int, blocked: bool, out: list[Effect]) -> None:
        """The connection's send queue passed send_queue_bytes_max (`blocked`) or drained (reading.py)."""
        c = self.reading.flow(conn, blocked, out)
        if c is not None:
            self.router.carry(self.subscribers.flow(self.router.at(), c, blocked), out)
            if not blocked:
                self.reading.release(self.now, conn, Hold.SEND, out)

    def reload_auth(self, now: int, guard_policy: AuthPolicy) -> list[Effect]:
        """SIGHUP: the new rules apply to the next request, and to the trees this broker created (CREATE again)."""
        self.now = now
        self.guard.reload(guard_policy)
        return self.router.carry(self.local.trees.recreations(), [])  # (none outside an overlay)

    def _adopt_peer(self, c: ClientConnection, msg: PeerHandover, out: list[Effect]) -> None:
        self.reading.handed_over(c)
        if self.cluster is None:  # not in an overlay (yet): nobody to talk to
            out += refusals.not_in_overlay(c.conn)
        else:
            self._cluster_effects(self.cluster.adopt(self.now, c.conn, c.decoder, msg.hello, msg.rest), out)

    def _cluster_effects(self, effects: list[ClusterEffect], out: list[Effect]) -> None:
        """The cluster member's output: remote events to the fan-out, the subscriber side's (router.py), the rest."""
        routes = self.router.routes
        for eff in effects:
            if type(eff) is DeliverRecords:
                out += self.local.delivered(eff)
            elif type(eff) in routes:  # a tree's lost ticks, its new access list, a PFS record, MOVED
                routes[type(eff)](eff, out)
            else:  # for the runtime; the driver fails loudly on one no runtime carries out (core/drive.py)
                if type(eff) is PeerRefused:
                    self.lifecycle.peer_refused(eff)
                out.append(cast(Effect, eff))  # (peer sends, probes and Scribe's upcalls stay in the member)

    def status(self) -> dict[str, Any]:
        """The machines' figures (core/broker/metrics.py) and what else an operator reads."""
        status = metrics.status(self, self.router.status)
        for section in self.sections:
            status |= section()
        return status
