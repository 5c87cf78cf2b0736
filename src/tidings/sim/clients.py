"""Simulated clients: publishers and subscribers driving the real `ClientSession` over the network.

Theory of operation. A `SimClient` owns one connection at a time, with a fresh `ClientSession` and
a fresh roaming machine (core/session/roaming.py) for it, as the client library has: it connects,
sends HELLO (the machine is `connecting`), and once WELCOME arrives it is `serving`; the machine's
deadlines (one world timer at `next_deadline()`) renew the lease and acknowledge a durable
subscription, and the connection's loss closes it. When the connection is lost (the
broker crashed, closed it, or the client dropped it on purpose) it waits a seeded backoff and
connects again; a refused connection (the broker is down) is retried the same way. Everything a
client learns is recorded for the checker; a client never decides whether the broker was right.

A `Publisher` publishes seeded random monitoring events (channels `nodes/h<k>/load|mem`, attributes
host, site, load) in batches, its frames tracked by the library's `PublishTracker`, pipelined up to
`window` unacknowledged frames. Each event's payload is a unique id (`<publisher>:<n>`), so the
checker can find it in the log. An ACK records id -> tick; a batch outstanding when its connection
is lost is in doubt (it may or may not be in the log) and is not published again: at-most-once from
the publisher's side keeps "an ACKed event is in the log exactly once" checkable. A few events are
malformed on purpose (a wildcard in the channel, bypassing the session's checks) and must be
rejected with a nil tick.

A `Subscriber` subscribes with a pattern, an optional filter and a start (`now` or `start`), and
records every event it receives. Its resume point is the last tick it received (or the position the
broker confirmed in SUBSCRIBED): after a reconnection it subscribes again with start = that tick,
which is how a durable subscriber continues its stream across broker crashes. Its interval begins at
the position of its first SUBSCRIBED. A slow subscriber reads its connection at a low rate. A
`DurableSubscriber` keeps its token with the library's `Cursor`.

With `failover` brokers a client keeps its roaming machine across a lost connection and goes on at
the first of them that answers (`TryBroker`; the simulated network refuses a dead broker at once,
so no attempt needs a timeout); with `follow_advice` it weighs route advice as the library does,
probing the candidates and its own broker alike (`Prober`: HELLO to WELCOME), and moves where the
machine chooses (`MoveTo`) as the client library does: it dials the new broker while the old
connection goes on serving, and drops the old one only once the new one serves (a subscriber: at
its SUBSCRIBED there; what comes twice meanwhile its cursor drops); a new broker that does not
answer leaves it where it was. Without either (the default), a client reconnects to the broker it
was told to.

A `RoamingSubscriber` is a plain subscriber that roams so (route advice, drains, failover) with the
library's `Cursor`: after a move it subscribes after what it received (core/session/cursor.py),
and the checker holds it to the same promise across its connections as a durable one.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable
from typing import Any

from tidings.core import errors
from tidings.core.broker import advice
from tidings.core.durable.checkpoint import Checkpoint
from tidings.core.errors import BrokerError
from tidings.core.event import EventRecord, event_from_fields
from tidings.core.session.client_session import ClientSession, PlainEvent, PublishEvent
from tidings.core.session.cursor import Cursor, Gap, silence_of
from tidings.core.session.publish_tracker import DuplicateResult, PublishTracker
from tidings.core.session.roaming import (
    PROBE_TIMEOUT_NS,
    AckDurable,
    Follow,
    GiveUp,
    Mode,
    MoveTo,
    RoamEffect,
    Roamer,
    SendRenew,
    SubKind,
    TryBroker,
)
from tidings.core.units import MILLISECOND_NS
from tidings.core.wire import messages
from tidings.sim.network import Endpoint, Network, Socket
from tidings.sim.world import Timer, World


class Prober(Endpoint):
    """One probe of route advice, as the client library makes it: connect, HELLO, time the WELCOME,
    read its load, close; `done(probe or None)` once."""

    def __init__(self, client: SimClient, address: str, done: Callable[[advice.Probe | None], None]) -> None:
        self.client, self.address, self.done = client, address, done
        self.session = ClientSession("sim", f"{client.name}-probe")
        self.sent_at = 0
        self.finished = False
        client.network.connect(address, self)

    def _finish(self, probe: advice.Probe | None) -> None:
        if not self.finished:
            self.finished = True
            self.done(probe)

    def connection_refused(self, address: str) -> None:
        self._finish(None)

    def connection_made(self, sock: Socket) -> None:
        self.sent_at = self.client.world.now
        sock.write(self.session.hello())

    def data_received(self, sock: Socket, data: bytes) -> None:
        for msg in self.session.receive(data):
            if isinstance(msg, messages.Welcome) and not self.finished:
                sock.abort(notify_self=False)
                self._finish(advice.Probe(self.address, self.client.world.now - self.sent_at,
                                          bool(msg.info.get("overloaded")), bool(msg.info.get("draining"))))
                return

    def connection_lost(self, sock: Socket, reset: bool) -> None:
        self._finish(None)


class SimClient(Endpoint):
    def __init__(self, world: World, network: Network, address: str, name: str,
                 read_rate_bytes_per_s: int | None = None,
                 backoff_ns: tuple[int, int] = (5 * MILLISECOND_NS, 50 * MILLISECOND_NS),
                 failover: tuple[str, ...] = ()) -> None:
        self.world = world
        self.network = network
        self.address = address
        self.name = name
        self.rng: random.Random = world.derive_rng(name)
        self.read_rate_bytes_per_s = read_rate_bytes_per_s
        self.backoff_ns = backoff_ns
        self.dialing = False  # a connection is being made
        # the connection's roaming machine, from connection_made to its loss, or to the end of the
        # failover it starts (to the `failover` brokers, as the client library's `failover`)
        self.roamer: Roamer | None = None
        self.failover = failover
        self.failovers = 0
        self.advice_moves = 0  # moves on route advice
        self._trying: str | None = None  # the broker a failover or a move connects to
        # a move's old connection, serving until the new one does: its socket and session
        self._old: tuple[Socket, ClientSession] | None = None
        self.follow_advice = False  # follow route advice with the roaming machine (the library's default)
        self.rtt_ns = 0  # HELLO to WELCOME of the connection
        self._hello_at = 0
        self._timer: Timer | None = None  # at the roamer's next deadline
        self.renews = False  # RENEW the broker's lease as the client library does (a subscriber)
        self.ack_interval_ns: int | None = None  # a durable subscriber's automatic ack
        self.sock: Socket | None = None
        self.session: ClientSession | None = None
        self.connections = 0
        self.downs = 0  # connections lost without the client dropping them itself
        self.violations: list[str] = []
        self.errors: list[tuple[str, dict[str, Any]]] = []

    # ---- connection lifecycle --------------------------------------------------------------------

    def start(self, at_ns: int = 0) -> None:
        self.world.call_at(max(at_ns, self.world.now), self._connect)

    @property
    def ready(self) -> bool:
        return self.roamer is not None and self.roamer.mode is Mode.SERVING

    def _connect(self) -> None:
        if self.dialing or self.roamer is not None:
            return
        self.dialing = True
        self.network.connect(self.address, self, server_rate_bytes_per_s=self.read_rate_bytes_per_s)

    def _retry(self, delay_ns: int | None = None) -> None:
        self.dialing = False
        if self.roamer is not None:
            self.roamer.close()
            self.roamer = None
            self._arm()
        self.world.call_later(self.rng.randint(*self.backoff_ns) if delay_ns is None else delay_ns, self._connect)

    def connection_refused(self, address: str) -> None:
        if not self.dialing:
            return
        if self._failing_over():
            self.dialing = False
            self._apply(self.roamer.attempt_failed(self.world.now) if self.roamer is not None else [])
        elif self._moving():
            self._move_failed()
        else:
            self._retry()

    def _failing_over(self) -> bool:
        return self.roamer is not None and self.roamer.mode is Mode.FAILING_OVER

    def _moving(self) -> bool:
        return self.roamer is not None and self.roamer.mode is Mode.MOVING

    def connection_made(self, sock: Socket) -> None:
        assert self.dialing and (self.roamer is None or self._trying is not None)
        self.dialing = False
        self.sock = sock
        self.connections += 1
        self.session = ClientSession("sim", self.name)
        if self.roamer is None:
            self.roamer = Roamer(self.address, self.failover, self.follow_advice, None,
                                 **({} if self.ack_interval_ns is None else {"ack_interval_ns": self.ack_interval_ns}))
        self._hello_at = self.world.now
        sock.write(self.session.hello())

    def kinds(self) -> list[SubKind]:
        """The kinds of its subscriptions (roaming's movability rule): a publisher holds none."""
        return []

    def connection_lost(self, sock: Socket, reset: bool) -> None:
        if self._old is not None and sock is self._old[0]:  # a move's old connection: the new one is coming
            self.world.trace(self.name, "lost-old", int(reset))
            self._old = None
            self.on_old_down(now=self.world.now)
            return
        if sock is not self.sock:
            return
        self.downs += 1
        self.world.trace(self.name, "lost", int(reset))
        self.sock = None
        self.session = None
        self.on_down()
        if self._moving():  # the connection a move made, lost before its WELCOME
            self._move_failed()
            return
        if self.roamer is not None and self.failover:
            failing = self._failing_over()  # (a failover's own connection, lost before its WELCOME)
            self._apply(self.roamer.attempt_failed(self.world.now) if failing
                        else self.roamer.lost(self.world.now, self.kinds(), "the connection was lost"))
            if self._failing_over():
                return
        self._retry()

    def drop(self, away_ns: int | None = None) -> None:
        """Drop the connection on purpose (the client's own disconnection), then reconnect (after
        `away_ns` when given)."""
        sock = self.sock
        if sock is None:
            return
        self.world.trace(self.name, "drop")
        self.sock = None
        self.session = None
        sock.abort(notify_self=False)
        self.on_down()
        self._retry(away_ns)

    def _old_data(self, sock: Socket, session: ClientSession, data: bytes) -> None:
        for msg in session.receive(data):
            if self._old is None or self._old[0] is not sock:
                return  # dropped while handling an earlier message
            self.on_old_message(msg)

    def data_received(self, sock: Socket, data: bytes) -> None:
        if self._old is not None and sock is self._old[0]:
            self._old_data(sock, self._old[1], data)
            return
        if sock is not self.sock or self.session is None:
            return
        for msg in self.session.receive(data):
            if self.sock is not sock:
                return  # dropped while handling an earlier message
            if isinstance(msg, messages.Welcome):
                assert self.roamer is not None
                renew_ns = self.session.renew_interval_ns if self.renewing() else None
                self.rtt_ns = self.world.now - self._hello_at
                if self._failing_over() or self._moving():
                    assert self._trying is not None
                    self.world.trace(self.name, "failover" if self._failing_over() else "moved", self._trying)
                    self.failovers += self._failing_over()
                    self.advice_moves += self._moving()
                    self.address, self._trying = self._trying, None
                    if not self.keeps_old():
                        self.drop_old()
                    self._apply(self.roamer.switched(self.world.now, self.address, renew_ns, None, self.kinds()))
                else:
                    self.roamer.welcomed(self.world.now, renew_ns)
                self.world.trace(self.name, "welcome")
                self.on_ready()
                self._arm()
            elif isinstance(msg, messages.Error):
                self.world.trace(self.name, "error", msg.code)
                self.errors.append((msg.code, msg.context))
                self.on_error(msg)
            elif isinstance(msg, messages.Advice):
                self.world.trace(self.name, "advice", msg.reason)
                decoded = advice.decode(msg.reason, msg.entries)
                if self.follow_advice and self.roamer is not None and decoded is not None:
                    self._apply(self.roamer.advised(self.world.now, *decoded, self.kinds()))
            else:
                self.on_message(msg)

    def send(self, frame: bytes) -> None:
        assert self.sock is not None
        self.sock.write(frame)

    def _arm(self) -> None:
        """One world timer, at the roaming machine's next deadline."""
        at = None if self.roamer is None else self.roamer.next_deadline()
        if self._timer is not None and (at is None or self._timer.when != at):
            self._timer.cancel()
            self._timer = None
        if at is not None and self._timer is None:
            self._timer = self.world.call_at(max(at, self.world.now), self._timeout)

    def _timeout(self) -> None:
        self._timer = None
        if self.roamer is not None:
            self._apply(self.roamer.handle_timeout(self.world.now))
        self._arm()

    def _apply(self, effects: list[RoamEffect]) -> None:
        for effect in effects:
            if isinstance(effect, TryBroker):  # (the simulated network refuses a dead broker at once)
                self._trying = effect.address
                self.dialing = True
                self.network.connect(effect.address, self, server_rate_bytes_per_s=self.read_rate_bytes_per_s)
            elif isinstance(effect, Follow):
                self._follow(effect)
            elif isinstance(effect, MoveTo):  # (the simulated clients have nothing in flight to wait for)
                self.world.trace(self.name, "move", effect.address)
                self._trying = effect.address
                if self.sock is not None and self.session is not None:  # it serves on until the new one does
                    self._old = (self.sock, self.session)
                    self.sock, self.session = None, None
                    self.on_moving()
                self.dialing = True
                self.network.connect(effect.address, self, server_rate_bytes_per_s=self.read_rate_bytes_per_s)
            elif isinstance(effect, GiveUp):
                self.violations.append(f"{self.name}: {effect.message}")
                self._retry()
            elif self.sock is None or self.session is None:
                continue
            elif isinstance(effect, SendRenew):
                self.on_renew()
            elif isinstance(effect, AckDurable):
                self.on_ack()
        self._arm()

    def _follow(self, follow: Follow) -> None:
        """Probe the candidates and the current broker alike, then let the roaming machine choose."""
        here = self.address
        addresses = list(dict.fromkeys([*(c.address for c in follow.candidates), here]))
        probes: dict[str, advice.Probe | None] = {}
        roamer = self.roamer

        def done(address: str, probe: advice.Probe | None) -> None:
            if len(probes) == len(addresses):
                return  # weighed already (the rest are the timeout's)
            probes.setdefault(address, probe)
            if len(probes) == len(addresses) and roamer is self.roamer and roamer is not None:
                current = probes[here]
                rtt = self.rtt_ns if current is None else min(self.rtt_ns, current.rtt_ns)
                answered = [probes[a] for a in addresses if a != here]
                self._apply(roamer.probed(self.world.now, follow.reason, rtt,
                                          [p for p in answered if p is not None], self.kinds()))

        def expire() -> None:
            for address in addresses:
                done(address, None)

        for address in addresses:
            Prober(self, address, functools.partial(done, address))
        self.world.call_later(PROBE_TIMEOUT_NS, expire)

    def _move_failed(self) -> None:
        """The broker a move chose did not answer: it stays on the old connection; when that one
        was lost meanwhile, as after any loss."""
        assert self.roamer is not None
        self.dialing, self._trying = False, None
        effects = self.roamer.move_failed(self.kinds())
        if self._old is not None:
            (self.sock, self.session), self._old = self._old, None
            self.on_stayed()
            self._apply(effects)
            return
        if self.failover:
            self._apply(self.roamer.lost(self.world.now, self.kinds(), "the connection was lost during a move"))
            if self._failing_over():
                return
        self._retry()

    def drop_old(self) -> None:
        """A move's new connection serves: the old one goes."""
        if self._old is not None:
            sock, self._old = self._old[0], None
            self.world.trace(self.name, "drop-old")
            sock.abort(notify_self=False)
            self.on_old_down(now=self.world.now)

    # ---- for subclasses --------------------------------------------------------------------------

    def on_ready(self) -> None:
        pass

    def keeps_old(self) -> bool:
        """Whether a move's old connection serves on past the new one's WELCOME (until `drop_old`)."""
        return False

    def on_moving(self) -> None:
        """A move began: the connection is the old one now."""

    def on_stayed(self) -> None:
        """A move failed: the old connection is the connection again."""

    def on_old_message(self, msg: Any) -> None:
        """What a move's old connection still brings (only a roaming subscriber reads it)."""

    def on_old_down(self, now: int) -> None:
        """A move's old connection is gone (what was in flight on it is in doubt)."""
        self.on_down()

    def on_down(self) -> None:
        pass

    def renewing(self) -> bool:
        """Whether this connection renews the broker's lease."""
        return self.renews

    def on_renew(self) -> None:
        assert self.session is not None
        self.send(self.session.renew())

    def on_ack(self) -> None:
        pass

    def on_message(self, msg: Any) -> None:
        self.violations.append(f"{self.name}: unexpected {type(msg).__name__}")

    def on_error(self, msg: messages.Error) -> None:
        self.violations.append(f"{self.name}: ERROR {msg.code}: {msg.message}")


class Publisher(SimClient):
    def __init__(self, world: World, network: Network, address: str, name: str, events_total: int,
                 hosts: int = 4, batch_max: int = 6, window: int = 4,
                 interval_ns: tuple[int, int] = (200_000, 3 * MILLISECOND_NS),
                 bad_event_probability: float = 0.02, idempotent: bool = False) -> None:
        super().__init__(world, network, address, name)
        # idempotent: each event carries producer = the publisher's name and seq = its number, and
        # what was in doubt when the connection went down is published again once it is back
        self.idempotent = idempotent
        self.duplicates = 0  # events ACKed as duplicates
        self.events_total = events_total
        self.hosts = hosts
        self.batch_max = batch_max
        self.window = window
        self.interval_ns = interval_ns
        self.bad_event_probability = bad_event_probability
        self.produced = 0
        self.sent: dict[str, tuple[str, dict[str, Any], bytes]] = {}  # id -> what was published
        self.acked: dict[str, int] = {}  # id -> tick
        self.acked_at: dict[str, int] = {}  # id -> when its ACK arrived (virtual ns)
        self.pubend_of: dict[str, str] = {}  # id -> the pubend its ACK named
        self.rejected: list[str] = []
        self.in_doubt: list[str] = []
        self.tracker: PublishTracker[tuple[str, ...]] = PublishTracker()  # each frame's event ids
        self._last_tick = 0  # of the last event ACKed, over every connection (ticks only grow)
        self._publishing: Timer | None = None

    @property
    def finished(self) -> bool:
        return self.produced >= self.events_total and not self.tracker

    def on_ready(self) -> None:
        if self.idempotent and self.in_doubt:
            retry, self.in_doubt = self.in_doubt, []
            self._send([(ident, (*self.sent[ident], int(ident.rsplit(":", 1)[1]), self.name)) for ident in retry])
        self._schedule(0)

    def on_down(self) -> None:
        for ids in self.tracker.clear():
            self.in_doubt.extend(ids)
        if self._publishing is not None:
            self._publishing.cancel()
            self._publishing = None

    def on_stayed(self) -> None:
        self._schedule(0)  # (it paused while the move was under way)

    def _schedule(self, delay_ns: int) -> None:
        if self._publishing is None and self.produced < self.events_total:
            self._publishing = self.world.call_later(delay_ns, self._publish_some)

    def _event(self) -> tuple[str, PublishEvent]:
        rng = self.rng
        n = self.produced
        self.produced += 1
        ident = f"{self.name}:{n}"
        payload = ident.encode()
        if rng.random() < self.bad_event_probability:
            bad: PlainEvent = ("nodes/+/bad", {}, payload)  # the broker must reject it
            return ident, (*bad, n, self.name) if self.idempotent else bad
        k = rng.randrange(self.hosts)
        kind = rng.choice(("load", "mem"))
        attributes: dict[str, Any] = {"host": f"h{k}", "site": f"s{k % 3}"}
        if kind == "load":
            attributes["load"] = round(rng.uniform(0.0, 4.0), 2)
        else:
            attributes["mem"] = rng.randint(0, 1 << 20)
        assert self.session is not None
        if self.idempotent:
            return ident, self.session.check_event(f"nodes/h{k}/{kind}", payload, attributes, self.name, n)
        return ident, self.session.check_event(f"nodes/h{k}/{kind}", payload, attributes)

    def _publish_some(self) -> None:
        self._publishing = None
        if not self.ready or self.session is None:
            return
        if len(self.tracker) < self.window:
            count = min(self.rng.randint(1, self.batch_max), self.events_total - self.produced)
            batch = [self._event() for _ in range(count)]
            for ident, ev in batch:
                self.sent[ident] = (ev[0], ev[1], ev[2])
            self._send(batch)
        self._schedule(self.rng.randint(*self.interval_ns))

    def _send(self, batch: list[tuple[str, PublishEvent]]) -> None:
        assert self.session is not None
        ids = [ident for ident, _ in batch]
        done = 0
        for seq, n, frame in self.session.publish([ev for _, ev in batch]):
            self.tracker.sent(seq, n, tuple(ids[done : done + n]))
            done += n
            self.world.trace(self.name, "publish", seq, n)
            self.send(frame)

    def on_message(self, msg: Any) -> None:
        if not isinstance(msg, messages.Ack):
            super().on_message(msg)
            return
        self.world.trace(self.name, "ack", msg.seq, len(msg.ticks))
        answered = self.tracker.acked(msg)
        if answered is None:
            self.violations.append(f"{self.name}: ACK for seq {msg.seq}, which is not outstanding")
            return
        ids, results = answered
        if len(ids) != len(msg.ticks):
            self.violations.append(f"{self.name}: ACK {msg.seq} has {len(msg.ticks)} ticks for {len(ids)}")
        # ACKs may overtake one another (a batch rejected whole is answered at once, before the
        # sync of earlier batches), but the ticks of logged events follow publish order
        for ident, res in zip(ids, results, strict=False):
            if isinstance(res, BrokerError):
                self.rejected.append(ident)
                continue
            if isinstance(res, DuplicateResult):  # logged before the crash: the original's tick, older than new ones
                self.duplicates += 1
            else:
                if res.tick <= self._last_tick:
                    self.violations.append(f"{self.name}: {ident} ACKed at tick {res.tick} after {self._last_tick}")
                self._last_tick = res.tick
            self.acked[ident] = res.tick
            self.acked_at[ident] = self.world.now
            self.pubend_of[ident] = res.pubend
        if self.ready:
            self._schedule(0)

    def on_error(self, msg: messages.Error) -> None:
        seq = msg.context.get("seq")
        self.tracker.refused(msg.context, BrokerError(msg.message, msg.code))
        if msg.code == errors.BAD_CHANNEL and isinstance(seq, int):
            return  # the event made malformed on purpose; its ACK carries nil
        super().on_error(msg)


class Subscriber(SimClient):
    def __init__(self, world: World, network: Network, address: str, name: str, pattern: str,
                 filter: str | None = None, start: str = "now",
                 read_rate_bytes_per_s: int | None = None, order: str = "publisher", renews: bool = True) -> None:
        super().__init__(world, network, address, name, read_rate_bytes_per_s)
        self.renews = renews  # RENEW the lease as the client library does
        self.pattern = pattern
        self.filter = filter
        self.order = order
        self.start_spec = start
        self.interval_start: int | None = None  # the position of the first SUBSCRIBED
        self.subscribed_at: int | None = None  # when the first SUBSCRIBED arrived (virtual ns)
        self.position: int | None = None  # resume point: every tick <= it was seen to
        self.received: list[tuple[int, EventRecord]] = []
        self.gaps: list[tuple[str | None, int, int, int]] = []  # pubend, after, through, when
        self.gaps_judged = False  # the checker judges GAPs (the overlay's release protocol); else each is a violation
        self.subscriptions = 0
        self.quit_at: int | None = None  # when it unsubscribed for good
        self.start_tick: int | None = None  # the broker's start point for other pubends, as the scenario knows it
        self._sub: int | None = None
        self._old_sub: int | None = None  # its id on a move's old connection
        self.roams = False  # RoamingSubscriber: resumes with its cursor, checked across connections
        self.durable = False  # DurableSubscriber: reconnects with its token, checked across them
        self.rewound = False  # a DurableSubscriber that resumed from an older token than it acknowledged

    def quit(self) -> None:
        """Unsubscribe for good (the connection stays up)."""
        if self.quit_at is None:
            self.quit_at = self.world.now
            if self._sub is not None and self.session is not None:
                self.send(self.session.unsubscribe(self._sub))
            self._sub = None

    def on_ready(self) -> None:
        assert self.session is not None
        if self.quit_at is not None:
            return
        # total order cannot resume at a tick: a total-order subscriber starts again from now
        start: str | int = self.start_spec if self.position is None or self.order == "total" else self.position
        self._sub, frame = self.session.subscribe(self.pattern, self.filter, start, order=self.order)
        self.subscriptions += 1
        self.world.trace(self.name, "subscribe", start)
        self.send(frame)

    def renewing(self) -> bool:
        return self.renews and self.quit_at is None  # (one that quit subscribes no more)

    def kinds(self) -> list[SubKind]:
        return [SubKind.DURABLE if self.durable else SubKind.PLAIN]

    def on_down(self) -> None:
        self._sub = None

    def on_moving(self) -> None:
        self._old_sub, self._sub = self._sub, None

    def on_stayed(self) -> None:
        self._sub, self._old_sub = self._old_sub, None

    def on_old_down(self, now: int) -> None:
        self._old_sub = None

    def on_message(self, msg: Any) -> None:
        if isinstance(msg, messages.Events) and msg.sub == self._sub:
            for fields in map(EventRecord.of, msg.records):
                tick = fields.tick
                self.received.append((tick, fields))
                if self.position is None or tick > self.position:
                    self.position = tick
            self.world.trace(self.name, "events", len(msg.records), self.position)
        elif isinstance(msg, messages.Subscribed) and msg.sub == self._sub:
            self.world.trace(self.name, "subscribed", msg.position)
            if self.interval_start is None:
                self.interval_start = msg.position
                self.subscribed_at = self.world.now
            elif self.position is not None and msg.position != self.position:
                self.violations.append(f"{self.name}: resumed after {self.position}, "
                                       f"SUBSCRIBED says {msg.position}")
            if self.position is None:
                self.position = msg.position
        elif isinstance(msg, messages.Gap) and msg.sub == self._sub:
            self.gaps.append((msg.pubend, msg.after, msg.through, self.world.now))
            if not self.gaps_judged:
                self.violations.append(f"{self.name}: GAP ({msg.after}, {msg.through}] without retention")
        else:
            super().on_message(msg)


class RoamingSubscriber(Subscriber):
    """A plain subscriber that roams as the client library does: it follows route advice (a drain's
    among it), fails over to its `failover` brokers when its own dies, and keeps its place with the
    library's `Cursor` (core/session/cursor.py): after a move it subscribes after what it received
    from each pubend, and drops what comes twice, from the new broker or from the old connection
    that serves on until the new SUBSCRIBED. The checker holds it to its promise across its
    connections, as a durable subscriber."""

    def __init__(self, world: World, network: Network, address: str, name: str, pattern: str,
                 filter: str | None = None, failover: tuple[str, ...] = (),
                 read_rate_bytes_per_s: int | None = None) -> None:
        super().__init__(world, network, address, name, pattern, filter, read_rate_bytes_per_s=read_rate_bytes_per_s)
        self.failover = failover
        self.follow_advice = True
        self.roams = True
        self.gaps_judged = True
        self.cursor = Cursor()
        self.repeats_dropped = 0  # events that came again after a move, dropped by the cursor

    def keeps_old(self) -> bool:
        return True

    def on_ready(self) -> None:
        assert self.session is not None
        if self.quit_at is not None:
            return
        start = self.cursor.resume(self.world.now).start if self.subscribed_at is not None else self.start_spec
        self._sub, frame = self.session.subscribe(self.pattern, self.filter, start)
        self.subscriptions += 1
        self.world.trace(self.name, "subscribe", start)
        self.send(frame)

    def on_down(self) -> None:
        self.cursor.lost(self.world.now)  # it resumes after what this connection served
        super().on_down()

    def _arrived(self, msg: messages.Events | messages.Gap) -> None:
        if isinstance(msg, messages.Gap):
            gap = self.cursor.gap(Gap(msg.after, msg.through, msg.pubend))
            if gap is not None:
                self.gaps.append((gap.pubend, gap.after, gap.through, self.world.now))
            return
        records = [EventRecord.of(fields) for fields in msg.records]
        kept = {(e.pubend, e.tick) for e in self.cursor.arrived([event_from_fields(f) for f in msg.records],
                                                                self.world.now)}
        self.repeats_dropped += len(records) - len(kept)
        self.received += [(r.tick, r) for r in records if (r.pubend, r.tick) in kept]
        self.world.trace(self.name, "events", len(records), len(kept))

    def on_message(self, msg: Any) -> None:
        if isinstance(msg, messages.Events | messages.Gap) and msg.sub == self._sub:
            self._arrived(msg)
        elif isinstance(msg, messages.Subscribed) and msg.sub == self._sub:
            self.world.trace(self.name, "subscribed", msg.position)
            if self.subscribed_at is None:
                self.interval_start, self.subscribed_at = msg.position, self.world.now
                self.cursor.confirmed(None, msg.position, self.world.now)
            self.drop_old()  # the new connection serves
        else:
            super().on_message(msg)

    def on_old_message(self, msg: Any) -> None:
        if isinstance(msg, messages.Events | messages.Gap) and msg.sub == self._old_sub:
            self._arrived(msg)


class DurableSubscriber(Subscriber):
    """A durable subscriber (docs/durable.md) that keeps its checkpoint with the client library's
    `Cursor` (SUBSCRIBED's start, each event, each GAP and SILENCE, taken as they arrive) and
    acknowledges it on the roaming machine's AUTO_ACK deadline; when told to `move`, it drops its
    connection and subscribes at another broker from where the cursor says. Each SUBSCRIBED after
    the first carries a checkpoint: it must be the token it sent."""

    def __init__(self, world: World, network: Network, address: str, name: str, pattern: str,
                 filter: str | None = None, ack_interval_ns: int = 200_000_000,
                 failover: tuple[str, ...] = ()) -> None:
        super().__init__(world, network, address, name, pattern, filter)
        self.failover = failover  # when its broker dies: go on at one of these, from its token
        self.durable = True
        self.gaps_judged = True
        self.cursor = Cursor()
        self.moves = 0
        self.ack_interval_ns = ack_interval_ns  # RELEASE of its checkpoint this often, as the library does
        self.kept: Checkpoint | None = None  # the token it had at its first move: an older one to rewind to
        self.forgotten = 0  # events a rewind dropped from its records (they must come again, or a gap)

    @property
    def checkpoint(self) -> Checkpoint | None:
        return self.cursor.checkpoint

    def move(self, address: str, away_ns: int | None = None, rewind: bool = False) -> None:
        """Drop the connection and subscribe at `address` with the token (after `away_ns`); with
        `rewind`, with the older token it had at its first move instead, as an application that
        lost its latest state does: what it received after that token is forgotten here, and must
        come again (or be covered by a gap, where it was released meanwhile)."""
        ck = self.checkpoint
        if ck is not None and self.kept is None:
            self.kept = Checkpoint(ck.default, dict(ck.positions), ck.home)
        if rewind and self.kept is not None and ck is not None:
            old = self.kept
            kept = [(tick, f) for tick, f in self.received if tick <= old.position(f.pubend)]
            self.forgotten += len(self.received) - len(kept)
            self.received = kept
            self.gaps = [g for g in self.gaps if g[0] is None or g[2] <= old.position(g[0])]
            self.cursor.rewind(Checkpoint(old.default, dict(old.positions), ck.home))
            self.rewound = True
            self.world.trace(self.name, "rewind")
        self.address = address
        self.moves += 1
        self.world.trace(self.name, "move", address)
        self.drop(away_ns)

    def on_ready(self) -> None:
        assert self.session is not None and self.roamer is not None
        if not self.cursor.durable:
            self._sub, frame = self.session.subscribe(self.pattern, self.filter, "now", positions=[])
        else:
            start, positions, home = self.cursor.resume()
            self._sub, frame = self.session.subscribe(self.pattern, self.filter, start, positions=positions, home=home)
        self.subscriptions += 1
        self.world.trace(self.name, "subscribe", "token" if self.cursor.durable else "now")
        self.send(frame)
        self.roamer.durable_confirmed(self.world.now)  # its acks run while connected, as the library's

    def on_ack(self) -> None:
        """RELEASE what it has consumed (it consumes each item as it arrives)."""
        ck = self.checkpoint
        if self._sub is not None and ck is not None and self.session is not None:
            wire = ck.to_wire()[:2]
            self.send(self.session.release(self._sub, wire))
            self.cursor.acked(wire)

    def _took(self, items: list[Any]) -> None:
        self.cursor.received_items(items)
        self.cursor.taken(items)

    def on_message(self, msg: Any) -> None:
        ck = self.checkpoint
        if isinstance(msg, messages.Events) and msg.sub == self._sub and ck is not None:
            records = [EventRecord.of(fields) for fields in msg.records]
            self.received += [(r.tick, r) for r in records]
            self._took([event_from_fields(fields) for fields in msg.records])
            self.world.trace(self.name, "events", len(msg.records))
        elif isinstance(msg, messages.Subscribed) and msg.sub == self._sub:
            start = Checkpoint.from_wire(msg.checkpoint)
            if ck is None:
                self.cursor.confirmed(msg.checkpoint)
                self.subscribed_at = self.world.now
            elif start.default != ck.default or any(start.positions.get(p) != t for p, t in ck.positions.items()):
                self.violations.append(f"{self.name}: resumed at {start} for the token {ck}")
            else:
                self.cursor.rehomed(msg.checkpoint)  # its home is where it is now
        elif isinstance(msg, messages.Silence) and msg.sub == self._sub and ck is not None:
            self._took([silence_of(msg)])
        elif isinstance(msg, messages.Gap) and msg.sub == self._sub and ck is not None and msg.pubend is not None:
            self.gaps.append((msg.pubend, msg.after, msg.through, self.world.now))
            self._took([Gap(msg.after, msg.through, msg.pubend)])
        else:
            super().on_message(msg)
