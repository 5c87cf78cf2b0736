"""Roaming: which broker a client is connected to, and when it goes to another one.

Theory of operation. A client serves the application over one connection at a time. It leaves
that broker in two ways (docs/operations.md, docs/durable.md#failover):

- **a move on route advice** (core/broker/advice.py): the broker says a candidate may serve better
  (`closer`), or that it is `overloaded` or `draining`. The client probes the candidates and the
  current broker alike (`Follow`), chooses by the advice rules (`probed`), and moves (`MoveTo`):
  requests in flight are answered first, new ones wait, the subscriptions subscribe again at the
  new broker (core/session/cursor.py says from where). Advice that arrives while the client is
  busy following earlier advice, or on the connection a move is making, is *held* and followed
  once the move is done; a `closer` hint is then dropped (the client has just measured).
- **a failover** when the connection is lost (the broker was killed, the network cut, or the broker
  went silent: below): the client tries its `failover` brokers in turn and the lost one last (it
  may restart), in rounds separated by a growing backoff, for at most `failover_ns`; the first
  that answers gets the subscriptions again (`TryBroker`, `switched`), else everything ends
  (`GiveUp`).

**The movability rule.** A durable subscription resumes exactly where its token says on any broker;
a plain one in publisher order resumes after what it received from each pubend, dropping what
comes twice (core/session/cursor.py): a client whose subscriptions are all of these follows every
kind of advice and fails over. A plain one in total order can only start again from now and may
miss what was published meanwhile: a client holding one moves only when its broker is draining (it
would lose the connection anyway) and never fails over. A bulk read is of its broker's own log: a
client reading one never moves. A client without subscriptions (a publisher) moves and fails over;
its publishes in flight when the connection broke fail (their outcome is unknown), later ones go to
the new broker.

**A broker that went silent.** A broker whose host froze or whose link was cut without a reset
leaves a TCP connection that looks open. With `failover` brokers to go to, the client expects to
hear from its broker: after `heartbeat_interval_ns` without a byte it sends a HEARTBEAT
(`SendHeartbeat`; the broker answers HEARTBEAT_REPLY at once), and after `broker_silence_ns` without a byte it
drops the connection (`Abandon`) and fails over. While the client itself stops reading (its
buffer is full) silence is not the broker's: the count starts again when reading resumes.
`heard(now)` only records the time; the heartbeat deadline checks it when it fires, so a busy
connection costs nothing per read.

**Cadences.** While connected, the broker's lease on the subscriptions is renewed every
`renew_interval_ns` (`SendRenew`, a third of the lease), and durable subscriptions acknowledge
what the application took every `ack_interval_ns` (`AckDurable`).

Every change of mode goes through the table `ROAMING`, keyed by what happened: a move the table
does not list is our bug (ForbiddenTransition). Time is `now` in nanoseconds; `next_deadline()` and
`handle_timeout(now)` over one `Deadlines`. No I/O: the drivers (tidings.client, tidings.sim.clients)
connect, probe and write.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from enum import StrEnum

from tidings.core.broker import advice
from tidings.core.deadlines import Deadlines
from tidings.core.states import ForbiddenTransition

SECOND_NS = 1_000_000_000
PROBE_TIMEOUT_NS = 3 * SECOND_NS  # to connect to one broker (advised, or to fail over to) and get its WELCOME
FAILOVER_NS = 60 * SECOND_NS  # a lost connection's subscriptions resume on another broker within this
FAILOVER_BACKOFF_NS = (100_000_000, 200_000_000, 500_000_000, SECOND_NS, 2 * SECOND_NS)  # between rounds
ACK_INTERVAL_NS = SECOND_NS  # durable subscriptions acknowledge what the application took this often
HEARTBEAT_INTERVAL_NS = 2 * SECOND_NS  # without a byte from the broker this long, send HEARTBEAT
BROKER_SILENCE_NS = 5 * SECOND_NS  # without a byte from the broker this long, it is gone: fail over


class Mode(StrEnum):
    CONNECTING = "connecting"  # HELLO sent, WELCOME awaited
    SERVING = "serving"  # connected, nothing under way
    FOLLOWING = "following"  # probing the brokers an advice named
    MOVING = "moving"  # going to the broker chosen: requests wait
    FAILING_OVER = "failing-over"  # the connection is lost: trying the failover brokers; requests wait
    CLOSED = "closed"


class Happened(StrEnum):
    WELCOMED = "welcomed"
    FOLLOWED = "followed"  # advice to weigh
    ASKED = "asked"  # the application asks for a move to a broker it names
    CHOSE = "chose"  # a broker to move to
    STAYED = "stayed"  # no better broker, or the move failed
    SWITCHED = "switched"  # on at the new broker
    LOST = "lost"  # the connection, with subscriptions that may resume elsewhere
    ENDED = "ended"  # closed by the application, lost for good, or no failover broker answered


ROAMING: dict[Mode, dict[Happened, Mode]] = {
    Mode.CONNECTING: {Happened.WELCOMED: Mode.SERVING, Happened.ENDED: Mode.CLOSED},
    Mode.SERVING: {Happened.FOLLOWED: Mode.FOLLOWING, Happened.ASKED: Mode.MOVING,
                   Happened.LOST: Mode.FAILING_OVER, Happened.ENDED: Mode.CLOSED},
    Mode.FOLLOWING: {Happened.CHOSE: Mode.MOVING, Happened.STAYED: Mode.SERVING,
                     Happened.LOST: Mode.FAILING_OVER, Happened.ENDED: Mode.CLOSED},
    Mode.MOVING: {Happened.SWITCHED: Mode.SERVING, Happened.STAYED: Mode.SERVING,
                  Happened.LOST: Mode.FAILING_OVER, Happened.ENDED: Mode.CLOSED},
    Mode.FAILING_OVER: {Happened.SWITCHED: Mode.SERVING, Happened.ENDED: Mode.CLOSED},
    Mode.CLOSED: {},
}
LIVE = (Mode.SERVING, Mode.FOLLOWING, Mode.MOVING)  # the connection serves the application


class SubKind(StrEnum):
    PLAIN = "plain"  # in publisher order: resumes after what it received (core/session/cursor.py)
    TOTAL = "total"  # plain, in total order: resumes from now
    DURABLE = "durable"
    BULK = "bulk"  # a bulk read of the broker's own log


class RoamTimer(StrEnum):
    RENEW = "renew"
    AUTO_ACK = "auto-ack"
    HEARTBEAT = "heartbeat"
    BACKOFF = "backoff"  # the next failover round


@dataclass(frozen=True, slots=True)
class SendRenew:
    """RENEW the broker's lease, when the connection holds subscriptions."""


@dataclass(frozen=True, slots=True)
class AckDurable:
    """Durable subscriptions acknowledge (RELEASE) what the application took (Cursor.ack_due)."""


@dataclass(frozen=True, slots=True)
class SendHeartbeat:
    """Ask the broker for a byte (HEARTBEAT; STATUS to a broker older than it)."""


@dataclass(frozen=True, slots=True)
class Abandon:
    """Drop the connection as lost (the broker went silent); then report `lost`."""

    reason: str


@dataclass(frozen=True, slots=True)
class Follow:
    """Probe the current broker and `candidates` alike, then report `probed`."""

    reason: advice.Reason
    candidates: tuple[advice.Candidate, ...]


@dataclass(frozen=True, slots=True)
class MoveTo:
    """Move to `address` (requests in flight answered first), then report `switched` or `stayed`."""

    address: str
    why: str


@dataclass(frozen=True, slots=True)
class TryBroker:
    """Connect to `address` within `timeout_ns` to fail over; report `switched` or `attempt_failed`."""

    address: str
    timeout_ns: int


@dataclass(frozen=True, slots=True)
class GiveUp:
    """No failover broker answered in time: everything ends with `message`."""

    message: str


RoamEffect = SendRenew | AckDurable | SendHeartbeat | Abandon | Follow | MoveTo | TryBroker | GiveUp
Advice = tuple[advice.Reason, tuple[advice.Candidate, ...]]


RESUMABLE = (SubKind.PLAIN, SubKind.DURABLE)  # resume on another broker with nothing lost or twice


def movable(reason: advice.Reason, kinds: Collection[SubKind]) -> bool:
    """Whether a client holding subscriptions of `kinds` may follow advice for `reason`."""
    if SubKind.BULK in kinds:
        return False
    return reason is advice.Reason.DRAINING or resumable(kinds)


def resumable(kinds: Collection[SubKind]) -> bool:
    """Whether a lost connection holding subscriptions of `kinds` may fail over (none: a publisher)."""
    return all(k in RESUMABLE for k in kinds)


class Roamer:
    __slots__ = ("_acks", "_candidates", "_give_up_at", "_index", "_last_heard", "_lost_reason", "_paused",
                 "_round", "ack_interval_ns", "address", "broker_silence_ns", "deadlines", "failover",
                 "failover_ns", "failovers", "follow_advice", "heartbeat_interval_ns", "held", "mode", "moves",
                 "renew_interval_ns")

    def __init__(self, address: str = "", failover: Collection[str] = (), follow_advice: bool = True,
                 broker_silence_ns: int | None = BROKER_SILENCE_NS,
                 heartbeat_interval_ns: int = HEARTBEAT_INTERVAL_NS, ack_interval_ns: int = ACK_INTERVAL_NS,
                 failover_ns: int = FAILOVER_NS) -> None:
        self.mode = Mode.CONNECTING
        self.address = address
        self.failover = [a for a in failover if a != address]  # brokers to go on at when the connection is lost
        self.follow_advice = follow_advice
        self.broker_silence_ns = broker_silence_ns  # None: never judge the broker by its silence
        # a HEARTBEAT is due before the broker counts as silent, with time left for its answer
        self.heartbeat_interval_ns = (heartbeat_interval_ns if broker_silence_ns is None
                                      else max(1, min(heartbeat_interval_ns, broker_silence_ns // 2)))
        self.ack_interval_ns = ack_interval_ns
        self.failover_ns = failover_ns
        self.renew_interval_ns: int | None = None  # from WELCOME's lease (ClientSession.renew_interval_ns)
        self.moves = 0  # to another broker, by advice or failover
        self.failovers = 0
        self.held: Advice | None = None  # advice received while busy, followed once the move is done
        self.deadlines: Deadlines[RoamTimer] = Deadlines()
        self._acks = False  # durable subscriptions were confirmed: the automatic ack runs
        self._last_heard = 0
        self._paused = False
        self._candidates: list[str] = []  # of the failover under way, in the order tried
        self._index = 0
        self._round = 0
        self._give_up_at = 0
        self._lost_reason = ""

    def _go(self, happened: Happened) -> None:
        new = ROAMING[self.mode].get(happened)
        if new is None:
            raise ForbiddenTransition(f"roaming: {happened} in {self.mode}")
        self.mode = new

    @property
    def waiting(self) -> bool:
        """New requests wait: the client is changing brokers."""
        return self.mode in (Mode.MOVING, Mode.FAILING_OVER)

    @property
    def watching(self) -> bool:
        """Whether the broker's silence is watched (the heartbeat runs)."""
        return self.broker_silence_ns is not None and bool(self.failover) and self.mode in LIVE

    # ---- the connection --------------------------------------------------------------------------

    def welcomed(self, now: int, renew_interval_ns: int | None) -> None:
        """WELCOME arrived on the first connection."""
        self._go(Happened.WELCOMED)
        self._serve(now, renew_interval_ns)

    def _serve(self, now: int, renew_interval_ns: int | None) -> None:
        self.renew_interval_ns = renew_interval_ns
        if renew_interval_ns is not None:
            self.deadlines.set(RoamTimer.RENEW, now + renew_interval_ns)
        if self._acks:
            self.deadlines.set_earliest(RoamTimer.AUTO_ACK, now + self.ack_interval_ns)
        self._last_heard = now
        self._paused = False
        self._watch(now)

    def _watch(self, now: int) -> None:
        if self.watching and not self._paused:
            self.deadlines.set(RoamTimer.HEARTBEAT, self._last_heard + self.heartbeat_interval_ns)
        else:
            self.deadlines.cancel(RoamTimer.HEARTBEAT)

    def failover_to(self, now: int, brokers: Collection[str]) -> None:
        """The brokers a lost connection goes on at (the application changed them)."""
        self.failover = [a for a in brokers if a != self.address]
        self._watch(now)

    def heard(self, now: int) -> None:
        """Bytes arrived from the broker."""
        self._last_heard = now

    def reading_paused(self, now: int) -> None:
        """The client stopped reading (its buffer is full): the broker's silence is not counted."""
        self._paused = True
        self.deadlines.cancel(RoamTimer.HEARTBEAT)

    def reading_resumed(self, now: int) -> None:
        self._paused = False
        self._last_heard = now
        self._watch(now)

    def durable_confirmed(self, now: int) -> None:
        """A durable subscription was confirmed: the automatic ack runs from now on."""
        self._acks = True
        if self.mode in LIVE:
            self.deadlines.set_earliest(RoamTimer.AUTO_ACK, now + self.ack_interval_ns)

    def close(self) -> None:
        """The application closed the client (no failover follows)."""
        if self.mode is not Mode.CLOSED:
            self._go(Happened.ENDED)
        self._stop()

    def _stop(self) -> None:
        for key in RoamTimer:
            self.deadlines.cancel(key)

    # ---- route advice ----------------------------------------------------------------------------

    def advised(self, now: int, reason: advice.Reason, candidates: Collection[advice.Candidate],
                kinds: Collection[SubKind]) -> list[RoamEffect]:
        """ADVICE arrived: follow it now, hold it for later, or drop it."""
        if self.mode is Mode.CLOSED or not candidates:
            return []
        if self.mode is not Mode.SERVING or not self.follow_advice:
            # busy, or the connection a move is making: the newest draining/overloaded advice is held
            # (said once, right after WELCOME, it must not be lost); a closer hint was just measured
            if reason is not advice.Reason.CLOSER:
                self.held = (reason, tuple(candidates))
            return []
        if not movable(reason, kinds):
            return []
        self._go(Happened.FOLLOWED)
        return [Follow(reason, tuple(candidates))]

    def probed(self, now: int, reason: advice.Reason, rtt_ns: int, probes: list[advice.Probe],
               kinds: Collection[SubKind]) -> list[RoamEffect]:
        """The probes of a `Follow` answered (those that did not are left out); `rtt_ns` is the
        current broker's, timed beside them."""
        if self.mode is not Mode.FOLLOWING:
            return []
        target = advice.choose(reason, rtt_ns, probes, self.address)
        if target is not None and movable(reason, kinds):
            self._go(Happened.CHOSE)
            return [MoveTo(target, f"route advice: {reason.value}")]
        self._go(Happened.STAYED)
        return self.follow_held(kinds)

    def move_asked(self, address: str) -> list[RoamEffect]:
        """The application asks to go on at `address` now (nothing when the client is busy or closed)."""
        if self.mode is not Mode.SERVING:
            return []
        self._go(Happened.ASKED)
        return [MoveTo(address, "asked by the application")]

    def move_failed(self, kinds: Collection[SubKind]) -> list[RoamEffect]:
        """The broker a `MoveTo` chose did not answer: the client stays."""
        if self.mode is not Mode.MOVING:
            return []
        self._go(Happened.STAYED)
        return self.follow_held(kinds)

    def follow_held(self, kinds: Collection[SubKind]) -> list[RoamEffect]:
        """Advice held while busy, now that the client is not."""
        held, self.held = self.held, None
        if held is None or not self.follow_advice or self.mode is not Mode.SERVING or not movable(held[0], kinds):
            return []
        self._go(Happened.FOLLOWED)
        return [Follow(*held)]

    def take_held(self) -> Advice | None:
        """The advice this connection held (a move's new connection hands it to the client it joins)."""
        held, self.held = self.held, None
        return held

    # ---- the other broker answered -----------------------------------------------------------

    def switched(self, now: int, address: str, renew_interval_ns: int | None, held: Advice | None,
                 kinds: Collection[SubKind]) -> list[RoamEffect]:
        """The client goes on at `address` (a move, or a failover), whose connection held `held`."""
        if self.mode is Mode.FAILING_OVER:
            self.failovers += 1
        if self.failover:  # the brokers to fail over to from here: the others, the one left last
            pool = self._candidates if self.mode is Mode.FAILING_OVER else [*self.failover, self.address]
            self.failover = list(dict.fromkeys(a for a in pool if a != address))
        self._go(Happened.SWITCHED)
        self.address = address
        self.moves += 1
        self.held = held  # the new broker's; what the old one advised is moot
        self.deadlines.cancel(RoamTimer.BACKOFF)
        self._serve(now, renew_interval_ns)
        return self.follow_held(kinds)

    # ---- failover ----------------------------------------------------------------------------

    def lost(self, now: int, kinds: Collection[SubKind], reason: str) -> list[RoamEffect]:
        """The connection was lost (not by `close`). With failover brokers and subscriptions that
        resume anywhere (or none), the failover starts; else the client is closed (`mode`)."""
        if self.mode in (Mode.CLOSED, Mode.FAILING_OVER):
            return []
        self._stop()
        if self.mode not in LIVE or not self.failover or not resumable(kinds):
            self._go(Happened.ENDED)
            return []
        self._go(Happened.LOST)
        self._candidates = [*self.failover, self.address]
        self._index = self._round = 0
        self._give_up_at = now + self.failover_ns
        self._lost_reason = reason
        return [self._attempt(now)]

    def attempt_failed(self, now: int) -> list[RoamEffect]:
        """The broker of a `TryBroker` did not answer: the next one, or after a backoff the next round."""
        if self.mode is not Mode.FAILING_OVER:
            return []
        self._index += 1
        if self._index < len(self._candidates):
            return [self._attempt(now)]
        if now >= self._give_up_at:
            return [self._give_up()]
        self.deadlines.set(RoamTimer.BACKOFF, now + FAILOVER_BACKOFF_NS[min(self._round, len(FAILOVER_BACKOFF_NS) - 1)])
        self._round += 1
        self._index = 0
        return []

    def _attempt(self, now: int) -> RoamEffect:
        left = self._give_up_at - now
        if left <= 0:
            return self._give_up()
        return TryBroker(self._candidates[self._index], min(left, PROBE_TIMEOUT_NS))

    def _give_up(self) -> GiveUp:
        self._go(Happened.ENDED)
        self._stop()
        return GiveUp(f"{self._lost_reason}; no broker of {self._candidates} answered within "
                      f"{self.failover_ns / SECOND_NS:g} s")

    # ---- time ----------------------------------------------------------------------------------

    def next_deadline(self) -> int | None:
        return self.deadlines.next_deadline()

    def handle_timeout(self, now: int) -> list[RoamEffect]:
        out: list[RoamEffect] = []
        for key in self.deadlines.pop_due(now):
            if key is RoamTimer.RENEW and self.renew_interval_ns is not None:
                out.append(SendRenew())
                self.deadlines.set(key, now + self.renew_interval_ns)
            elif key is RoamTimer.AUTO_ACK:
                out.append(AckDurable())
                self.deadlines.set(key, now + self.ack_interval_ns)
            elif key is RoamTimer.HEARTBEAT:
                out += self._heartbeat(now)
            elif key is RoamTimer.BACKOFF and self.mode is Mode.FAILING_OVER:
                out.append(self._attempt(now))
        return out

    def _heartbeat(self, now: int) -> list[RoamEffect]:
        silence_ns = self.broker_silence_ns
        if silence_ns is None or not self.watching or self._paused:
            return []
        quiet = now - self._last_heard
        if quiet >= silence_ns:
            return [Abandon(f"the broker at {self.address} sent nothing for {quiet / SECOND_NS:.1f} s "
                            f"(broker_silence={silence_ns / SECOND_NS:g} s)")]
        if quiet < self.heartbeat_interval_ns:  # heard since: wait from then
            self.deadlines.set(RoamTimer.HEARTBEAT, self._last_heard + self.heartbeat_interval_ns)
            return []
        self.deadlines.set(RoamTimer.HEARTBEAT, min(now + self.heartbeat_interval_ns, self._last_heard + silence_ns))
        return [SendHeartbeat()]
