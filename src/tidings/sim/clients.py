"""Simulated clients: publishers and subscribers driving the real `ClientSession` over the network.

Theory of operation. A `SimClient` owns one connection at a time and a fresh `ClientSession` for it:
it connects, sends HELLO, and once WELCOME arrives it is ready. When the connection is lost (the
broker crashed, closed it, or the client dropped it on purpose) it waits a seeded backoff and
connects again; a refused connection (the broker is down) is retried the same way. Everything a
client learns is recorded for the checker; a client never decides whether the broker was right.

A `Publisher` publishes seeded random monitoring events (channels `nodes/h<k>/load|mem`, attributes
host, site, load) in batches, pipelined up to `window` unacknowledged frames. Each event's payload
is a unique id (`<publisher>:<n>`), so the checker can find it in the log. An ACK records id -> tick;
a batch outstanding when its connection is lost is in doubt (it may or may not be in the log) and is
not published again: at-most-once from the publisher's side keeps "an ACKed event is in the log
exactly once" checkable. A few events are malformed on purpose (a wildcard in the channel, bypassing
the session's checks) and must be rejected with a nil tick.

A `Subscriber` subscribes with a pattern, an optional filter and a start (`now` or `start`), and
records every event it receives. Its resume point is the last tick it received (or the position the
broker confirmed in SUBSCRIBED): after a reconnection it subscribes again with start = that tick,
which is how a durable subscriber continues its stream across broker crashes. Its interval begins at
the position of its first SUBSCRIBED. A slow subscriber reads its connection at a low rate.
"""

from __future__ import annotations

import random
from typing import Any

from tidings.core import errors
from tidings.core.durable.checkpoint import Checkpoint
from tidings.core.event import EventRecord
from tidings.core.session.client_session import ClientSession
from tidings.core.units import MILLISECOND_NS
from tidings.core.wire import messages
from tidings.sim.network import Endpoint, Network, Socket
from tidings.sim.world import Timer, World

DOWN = "down"
CONNECTING = "connecting"
HELLO_SENT = "hello-sent"
READY = "ready"


class SimClient(Endpoint):
    def __init__(self, world: World, network: Network, address: str, name: str,
                 read_rate_bytes_per_s: int | None = None,
                 backoff_ns: tuple[int, int] = (5 * MILLISECOND_NS, 50 * MILLISECOND_NS)) -> None:
        self.world = world
        self.network = network
        self.address = address
        self.name = name
        self.rng: random.Random = world.derive_rng(name)
        self.read_rate_bytes_per_s = read_rate_bytes_per_s
        self.backoff_ns = backoff_ns
        self.state = DOWN
        self.sock: Socket | None = None
        self.session: ClientSession | None = None
        self.connections = 0
        self.downs = 0  # connections lost without the client dropping them itself
        self.violations: list[str] = []
        self.errors: list[tuple[str, dict[str, Any]]] = []

    # ---- connection lifecycle --------------------------------------------------------------------

    def start(self, at_ns: int = 0) -> None:
        self.world.call_at(max(at_ns, self.world.now), self._connect)

    def _connect(self) -> None:
        if self.state != DOWN:
            return
        self.state = CONNECTING
        self.network.connect(self.address, self, server_rate_bytes_per_s=self.read_rate_bytes_per_s)

    def _retry(self, delay_ns: int | None = None) -> None:
        self.state = DOWN
        self.world.call_later(self.rng.randint(*self.backoff_ns) if delay_ns is None else delay_ns, self._connect)

    def connection_refused(self, address: str) -> None:
        if self.state == CONNECTING:
            self._retry()

    def connection_made(self, sock: Socket) -> None:
        assert self.state == CONNECTING
        self.sock = sock
        self.connections += 1
        self.session = ClientSession("sim", self.name)
        self.state = HELLO_SENT
        sock.write(self.session.hello())

    def connection_lost(self, sock: Socket, reset: bool) -> None:
        if sock is not self.sock:
            return
        self.downs += 1
        self.world.trace(self.name, "lost", int(reset))
        self.sock = None
        self.session = None
        self.on_down()
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

    def data_received(self, sock: Socket, data: bytes) -> None:
        if sock is not self.sock or self.session is None:
            return
        for msg in self.session.receive(data):
            if self.sock is not sock:
                return  # dropped while handling an earlier message
            if isinstance(msg, messages.Welcome):
                self.state = READY
                self.world.trace(self.name, "welcome")
                self.on_ready()
            elif isinstance(msg, messages.Error):
                self.world.trace(self.name, "error", msg.code)
                self.errors.append((msg.code, msg.context))
                self.on_error(msg)
            elif isinstance(msg, messages.Advice):
                self.world.trace(self.name, "advice", msg.reason)  # simulated clients stay put
            else:
                self.on_message(msg)

    def send(self, frame: bytes) -> None:
        assert self.sock is not None
        self.sock.write(frame)

    # ---- for subclasses --------------------------------------------------------------------------

    def on_ready(self) -> None:
        pass

    def on_down(self) -> None:
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
        self._outstanding: dict[int, list[str]] = {}  # first seq of a frame -> its event ids
        self._last_tick = 0  # of the last event ACKed, over every connection (ticks only grow)
        self._timer: Timer | None = None

    @property
    def finished(self) -> bool:
        return self.produced >= self.events_total and not self._outstanding

    def on_ready(self) -> None:
        if self.idempotent and self.in_doubt:
            retry, self.in_doubt = self.in_doubt, []
            self._send([(ident, [*self.sent[ident], int(ident.rsplit(":", 1)[1]), self.name]) for ident in retry])
        self._schedule(0)

    def on_down(self) -> None:
        for ids in self._outstanding.values():
            self.in_doubt.extend(ids)
        self._outstanding.clear()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _schedule(self, delay_ns: int) -> None:
        if self._timer is None and self.produced < self.events_total:
            self._timer = self.world.call_later(delay_ns, self._publish_some)

    def _event(self) -> tuple[str, list[Any]]:
        rng = self.rng
        n = self.produced
        self.produced += 1
        ident = f"{self.name}:{n}"
        payload = ident.encode()
        if rng.random() < self.bad_event_probability:
            bad = ["nodes/+/bad", {}, payload]  # the broker must reject it
            return ident, [*bad, n, self.name] if self.idempotent else bad
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
        self._timer = None
        if self.state != READY or self.session is None:
            return
        if len(self._outstanding) < self.window:
            count = min(self.rng.randint(1, self.batch_max), self.events_total - self.produced)
            batch = [self._event() for _ in range(count)]
            for ident, ev in batch:
                self.sent[ident] = (ev[0], ev[1], ev[2])
            self._send(batch)
        self._schedule(self.rng.randint(*self.interval_ns))

    def _send(self, batch: list[tuple[str, list[Any]]]) -> None:
        assert self.session is not None
        ids = [ident for ident, _ in batch]
        done = 0
        for seq, n, frame in self.session.publish([ev for _, ev in batch]):
            self._outstanding[seq] = ids[done : done + n]
            done += n
            self.world.trace(self.name, "publish", seq, n)
            self.send(frame)

    def on_message(self, msg: Any) -> None:
        if not isinstance(msg, messages.Ack):
            super().on_message(msg)
            return
        self.world.trace(self.name, "ack", msg.seq, len(msg.ticks))
        ids = self._outstanding.pop(msg.seq, None)
        if ids is None:
            self.violations.append(f"{self.name}: ACK for seq {msg.seq}, which is not outstanding")
            return
        if len(ids) != len(msg.ticks):
            self.violations.append(f"{self.name}: ACK {msg.seq} has {len(msg.ticks)} ticks for {len(ids)}")
        # ACKs may overtake one another (a batch rejected whole is answered at once, before the
        # sync of earlier batches), but the ticks of logged events follow publish order
        duplicates = set(msg.duplicates)
        for k, (ident, tick) in enumerate(zip(ids, msg.ticks, strict=False)):
            if tick is None:
                self.rejected.append(ident)
                continue
            if k in duplicates:  # logged before the crash: the original's tick, older than new ones
                self.duplicates += 1
                self.acked[ident] = tick
                self.acked_at[ident] = self.world.now
                self.pubend_of[ident] = msg.pubend
                continue
            if tick <= self._last_tick:
                self.violations.append(f"{self.name}: {ident} ACKed at tick {tick} after {self._last_tick}")
            self._last_tick = tick
            self.acked[ident] = tick
            self.acked_at[ident] = self.world.now
            self.pubend_of[ident] = msg.pubend
        if self.state == READY:
            self._schedule(0)

    def on_error(self, msg: messages.Error) -> None:
        seq = msg.context.get("seq")
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
        self._renew_later(self.sock)

    def _renew_later(self, sock: Socket | None) -> None:
        """Renew the broker's lease on the subscription, as the client library does, while this
        connection lasts."""
        interval = None if self.session is None else self.session.renew_interval_ns
        if interval is not None and self.renews:
            self.world.call_later(interval, self._renew, sock)

    def _renew(self, sock: Socket | None) -> None:
        if sock is self.sock and self.session is not None:
            self.send(self.session.renew())
            self._renew_later(sock)

    def on_down(self) -> None:
        self._sub = None

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


class DurableSubscriber(Subscriber):
    """A durable subscriber (docs/durable.md) that keeps its checkpoint as the client library does
    (SUBSCRIBED's start, each event, each SILENCE) and, when told to `move`, drops its connection
    and subscribes at another broker with its token. Each SUBSCRIBED after the first carries a
    checkpoint: it must be the token it sent."""

    def __init__(self, world: World, network: Network, address: str, name: str, pattern: str,
                 filter: str | None = None, ack_interval_ns: int = 200_000_000) -> None:
        super().__init__(world, network, address, name, pattern, filter)
        self.durable = True
        self.gaps_judged = True
        self.checkpoint: Checkpoint | None = None
        self.moves = 0
        self.ack_interval_ns = ack_interval_ns  # RELEASE of its checkpoint this often, as the library does
        self.kept: Checkpoint | None = None  # the token it had at its first move: an older one to rewind to
        self.forgotten = 0  # events a rewind dropped from its records (they must come again, or a gap)

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
            self.checkpoint = Checkpoint(old.default, dict(old.positions), ck.home)
            self.rewound = True
            self.world.trace(self.name, "rewind")
        self.address = address
        self.moves += 1
        self.world.trace(self.name, "move", address)
        self.drop(away_ns)

    def on_ready(self) -> None:
        assert self.session is not None
        ck = self.checkpoint
        if ck is None:
            self._sub, frame = self.session.subscribe(self.pattern, self.filter, "now", positions=[])
        else:
            self._sub, frame = self.session.subscribe(self.pattern, self.filter, ck.default, positions=ck.to_wire()[1],
                                                      home=None if ck.home is None else list(ck.home))
        self.subscriptions += 1
        self.world.trace(self.name, "subscribe", "token" if ck else "now")
        self.send(frame)
        self._renew_later(self.sock)
        self.world.call_later(self.ack_interval_ns, self._ack, self.sock)

    def _ack(self, sock: Socket | None) -> None:
        """RELEASE what it has consumed (it consumes each event as it arrives), while connected."""
        if sock is not self.sock or self.session is None:
            return
        if self._sub is not None and self.checkpoint is not None:
            self.send(self.session.release(self._sub, self.checkpoint.to_wire()[:2]))
        self.world.call_later(self.ack_interval_ns, self._ack, sock)

    def on_message(self, msg: Any) -> None:
        ck = self.checkpoint
        if isinstance(msg, messages.Events) and msg.sub == self._sub and ck is not None:
            for fields in map(EventRecord.of, msg.records):
                self.received.append((fields.tick, fields))
                ck.delivered(fields.pubend, fields.tick)
            self.world.trace(self.name, "events", len(msg.records))
        elif isinstance(msg, messages.Subscribed) and msg.sub == self._sub:
            start = Checkpoint.from_wire(msg.checkpoint)
            if ck is None:
                self.checkpoint = start
                self.subscribed_at = self.world.now
            elif start.default != ck.default or any(start.positions.get(p) != t for p, t in ck.positions.items()):
                self.violations.append(f"{self.name}: resumed at {start} for the token {ck}")
            else:
                ck.home = start.home  # its home is where it is now
        elif isinstance(msg, messages.Silence) and msg.sub == self._sub and ck is not None:
            ck.silence(dict(msg.positions))
        elif isinstance(msg, messages.Gap) and msg.sub == self._sub and ck is not None and msg.pubend is not None:
            self.gaps.append((msg.pubend, msg.after, msg.through, self.world.now))
            ck.delivered(msg.pubend, msg.through)
        else:
            super().on_message(msg)
