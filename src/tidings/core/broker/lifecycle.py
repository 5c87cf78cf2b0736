"""The broker's life as a process: the join deadline, the drain before a stop, the retention cadence,
and the member it takes part in an overlay as.

Theory of operation. These three rules are about time and about when a broker stops, so they used
to live in the asyncio runtime, where the simulator could not play them. Here they are a machine
like the others: inputs in, typed effects out, time as an argument, one deadline structure.

- **Join.** A broker started with a join address (`tidings broker --join`) that is not in the
  overlay `join_timeout_ns` later gives up rather than run on alone: `JoinTimedOut`, naming the
  failed attempts to reach the address and the last reason (a connection error, or the address
  refusing the peer link, e.g. "requires a cluster credential"). The overlay's own join retries
  (core/overlay/node.py) go on meanwhile; this is only their bound.
- **Drain** (SIGTERM: `DrainRequested`). The broker advises every client to move (the broker's
  `drain`, core/broker/advice.py) and then waits, at most `timeout_ns` in all, first while advised
  clients that can move are still connected, then while what this pubend logged is still owed to
  other brokers (batches not yet synced, trees whose root has not acknowledged the stream), so a
  logged event is not delayed until the restart. It looks again after every input (`look`) and
  once at the deadline; then `Drained` tells the runtime to stop, with what was left.
- **Retention.** Every `retention_check_interval_ns` from the start, `ApplyRetention` asks the
  storage to drop the log's oldest whole segments past `retention_bytes_max` or older than
  `retention_age_ns`; the storage answers `RetentionApplied`.

- **Taking part in an overlay** (`join_overlay`): the broker's cluster member (core/broker/cluster.py)
  is built over the broker's machines as they stand when `start_overlay` is called: guaranteed
  delivery of its pubend (the trees of a channel, the durable tail and the log for answering nacks,
  what its durable registrations hold, the pubend directory it saved), peer links proving its cluster
  credential, every timer telling the broker's `Alarm`.

The drain's states form a table (`DRAIN_MOVES`): serving -> moving (clients advised) -> delivering
-> drained, where a broker without clients to advise skips moving, and the deadline may end either
wait. What it observes of the broker (joined, clients that can move, what is owed, the wall clock)
it reads through `BrokerView`, the broker's own read-only accessors.
"""

from __future__ import annotations

from enum import Enum, StrEnum
from typing import TYPE_CHECKING, NamedTuple, Protocol

from tidings.core.broker.cluster import ClusterMember, Reliability
from tidings.core.deadlines import Alarm, Deadlines
from tidings.core.effects import ApplyRetention, Drained, JoinTimedOut, PeerRefused
from tidings.core.links.peer_links import PeerLinks
from tidings.core.links.refusals import DIALLER_SIDE
from tidings.core.overlay.node_id import NodeRef, node_id_from
from tidings.core.states import Transitions

if TYPE_CHECKING:
    from tidings.core.broker.parts import BrokerParts
    from tidings.core.broker.reading import Reading
    from tidings.core.clock import WallClock
    from tidings.core.config import BrokerConfig
    from tidings.core.overlay.node import Rng
    from tidings.core.publish.pubend import Pubend

LifecycleEffect = JoinTimedOut | Drained | ApplyRetention


class BrokerView(Protocol):
    """What the lifecycle reads of the broker it belongs to."""

    @property
    def joined(self) -> bool: ...

    @property
    def wall_us(self) -> int: ...

    def movable_clients(self) -> int: ...

    def undelivered(self, now: int) -> int: ...


class BrokerMachines:
    """The `BrokerView` of a broker's machines: its wall clock, its client connections, its pubend
    and, once the broker is in an overlay (`cluster`, set then), its cluster member."""

    __slots__ = ("clock", "cluster", "pubend", "reading")

    def __init__(self, clock: WallClock, reading: Reading, pubend: Pubend) -> None:
        self.clock = clock
        self.reading = reading
        self.pubend = pubend
        self.cluster: ClusterMember | None = None

    @property
    def joined(self) -> bool:
        """Whether the broker is in an overlay (its Pastry join completed)."""
        return self.cluster is not None and self.cluster.overlay.joined

    @property
    def wall_us(self) -> int:
        return self.clock.us

    def movable_clients(self) -> int:
        """Open client connections: on drain, the client library moves every one, its durable
        subscriptions with their tokens and its plain ones from "now" (tidings.client)."""
        return self.reading.open_clients()

    def undelivered(self, now: int) -> int:
        """While draining, once the clients have gone: what is still owed to other brokers (batches
        not yet synced, trees whose root has not acknowledged this pubend's stream); 0 when stopping
        now delays no logged event until a restart."""
        return self.pubend.pending_batches + (0 if self.cluster is None else self.cluster.unacknowledged(now))


def join_overlay(broker: BrokerParts, now: int, address: str, join: str | None, rng: Rng,
                 join_timeout_ns: int | None) -> ClusterMember:
    """The broker's member of an overlay at `address` (`rng`: a seeded random.Random), with peer
    links proving the guard's cluster credential and guaranteed delivery, joining through `join`
    (None: a new overlay) for at most `join_timeout_ns` (None: unbounded): the lifecycle and the
    alarm watch it from now on."""
    b = broker
    assert b.cluster is None
    b.lifecycle.join_through(now, join, join_timeout_ns)
    reliability = Reliability(b.pubend.pubend_id, b.config.reliability_config(), b.intake.trees_of,
                              lambda: (b.pubend.synced_tick, b.log), b.registrations.held,
                              b.directory_saved, b.config.directory_config())
    me = NodeRef(node_id_from(b.pubend.pubend_id), address)  # its node id is its pubend's
    member_alarm = Alarm(b.alarm)  # its machines' earliest deadline, told to the broker's (core/deadlines.py)
    peers = PeerLinks(me, b.config.peer_config(), b.guard.cluster_auth(), member_alarm)
    member = b.machines.cluster = ClusterMember(me, b.config.overlay_config(), b.config.scribe_config(), rng,
                                                reliability, peers, member_alarm)
    b.alarm.watch(member)
    return member


class Retention(NamedTuple):
    bytes_max: int
    age_ns: int
    check_interval_ns: int

    @classmethod
    def of(cls, config: BrokerConfig) -> Retention:
        return cls(config.retention_bytes_max, config.retention_age_ns, config.retention_check_interval_ns)


class DrainState(StrEnum):
    SERVING = "serving"
    MOVING = "moving"  # clients were advised to move: waiting until those that can have gone
    DELIVERING = "delivering"  # waiting until nothing this pubend logged is owed to other brokers
    DRAINED = "drained"


DRAIN_MOVES: Transitions[DrainState] = Transitions("drain", {
    DrainState.SERVING: frozenset({DrainState.MOVING, DrainState.DELIVERING, DrainState.DRAINED}),
    DrainState.MOVING: frozenset({DrainState.DELIVERING, DrainState.DRAINED}),
    DrainState.DELIVERING: frozenset({DrainState.DRAINED}),
    DrainState.DRAINED: frozenset(),
})


class LifecycleTimer(Enum):
    JOIN = "join"  # the broker owes being in the overlay by now
    DRAIN = "drain"  # the drain waits no longer
    RETENTION = "retention"  # the log's retention is due a check


NO_ANSWER = "no answer"


class Lifecycle:
    __slots__ = ("_broker", "_drain_began", "_join", "_timers", "drain", "join_attempts_failed", "join_failure",
                 "join_timeout_ns", "retention")

    def __init__(self, broker: BrokerView, retention: Retention, alarm: Alarm | None = None) -> None:
        self._broker = broker
        self.retention = retention
        self._timers: Deadlines[LifecycleTimer] = Deadlines(alarm)  # (alarm: the broker's, core/deadlines.py)
        self._join: str | None = None  # the address joined through, while the join is bounded
        self.join_timeout_ns = 0
        self.join_attempts_failed = 0
        self.join_failure = NO_ANSWER
        self.drain = DrainState.SERVING
        self._drain_began = 0

    # ---- inputs ----------------------------------------------------------------------------------

    def start(self, now: int) -> None:
        """The broker process is up: the retention cadence begins."""
        self._timers.set(LifecycleTimer.RETENTION, now + self.retention.check_interval_ns)

    def join_through(self, now: int, join: str | None, join_timeout_ns: int | None) -> None:
        """The broker takes part in the overlay now, joining through `join` (None: a new overlay),
        for at most `join_timeout_ns` (None: unbounded)."""
        if join is not None and join_timeout_ns is not None:
            self._join = join
            self.join_timeout_ns = join_timeout_ns
            self._timers.set(LifecycleTimer.JOIN, now + join_timeout_ns)

    def joining(self, address: str) -> bool:
        """Whether `address` is the join address of a join not yet complete (its failures count)."""
        return address == self._join and not self._broker.joined

    def join_attempt_failed(self, address: str, reason: str) -> None:
        """Reaching `address` failed (a dial, or the peer link refused): counted when it is the join's."""
        if self.joining(address):
            self.join_attempts_failed += 1
            self.join_failure = reason

    def peer_refused(self, eff: PeerRefused) -> None:
        """A peer link was refused: when the broker we dial for the join refused it, a failed attempt."""
        if eff.side == DIALLER_SIDE:
            self.join_attempt_failed(eff.address, eff.detail)

    def drain_requested(self, now: int, timeout_ns: int, advised: bool) -> list[LifecycleEffect]:
        """Drain for at most `timeout_ns`; `advised`: some client was advised to move."""
        if self.drain is not DrainState.SERVING:
            return []
        self._drain_began = now
        self._timers.set(LifecycleTimer.DRAIN, now + max(0, timeout_ns))
        self.drain = DRAIN_MOVES.move(self.drain, DrainState.MOVING if advised else DrainState.DELIVERING)
        return self.look(now)

    def look(self, now: int) -> list[LifecycleEffect]:
        """After an input: has the drain's wait ended?"""
        if self.drain is DrainState.MOVING and not self._broker.movable_clients():
            self.drain = DRAIN_MOVES.move(self.drain, DrainState.DELIVERING)
        if self.drain is DrainState.DELIVERING and not self._broker.undelivered(now):
            return [self._drained(now)]
        return []

    @property
    def draining(self) -> bool:
        return self.drain is DrainState.MOVING or self.drain is DrainState.DELIVERING

    # ---- time ------------------------------------------------------------------------------------

    def next_deadline(self) -> int | None:
        return self._timers.next_deadline()

    def handle_timeout(self, now: int) -> list[LifecycleEffect]:
        out: list[LifecycleEffect] = []
        for key in self._timers.pop_due(now):
            if key is LifecycleTimer.RETENTION:
                self._timers.set(LifecycleTimer.RETENTION, now + self.retention.check_interval_ns)
                out.append(ApplyRetention(self._broker.wall_us, self.retention.bytes_max,
                                          self.retention.age_ns // 1000))
            elif key is LifecycleTimer.DRAIN:
                if self.draining:
                    out.append(self._drained(now))
            elif self._join is not None and not self._broker.joined:
                out.append(JoinTimedOut(self._join, self.join_timeout_ns, self.join_attempts_failed,
                                        self.join_failure))
        return out

    def _drained(self, now: int) -> Drained:
        self.drain = DRAIN_MOVES.move(self.drain, DrainState.DRAINED)
        self._timers.cancel(LifecycleTimer.DRAIN)
        return Drained(now - self._drain_began, self._broker.movable_clients(), self._broker.undelivered(now))
