"""A minimal synchronous driver for the broker core in unit tests: an in-memory log, explicit syncs."""

from __future__ import annotations

import bisect
from typing import Any

from tidings.core.auth.guard import Guard
from tidings.core.broker.broker import Broker
from tidings.core.config import BrokerConfig
from tidings.core.effects import Append, Disconnect, ReadLog, Send, Sync
from tidings.core.inputs import (
    Accepted,
    ConnectionLost,
    LogRead,
    LogState,
    Received,
    SendBlocked,
    SendDrained,
    TimerFired,
    WriteSynced,
)
from tidings.core.publish.pubend import PendingBatch
from tidings.core.session.client_session import ClientSession
from tidings.core.synced import Synced
from tidings.core.wire import messages


class Harness:
    def __init__(self, config: BrokerConfig | None = None, wall_us: int = 1_000_000,
                 guard: Guard | None = None) -> None:
        self.broker = Broker(config or BrokerConfig(), "p-test", LogState(), guard)
        self.now = 0
        self.wall_us = wall_us
        self.records: list[tuple[int, bytes]] = []
        self.released_through = 0
        self.unsynced: list[int] = []  # tokens appended, not synced
        self.reads: list[ReadLog] = []
        self.sent: dict[int, list[bytes]] = {}
        self.closed: set[int] = set()
        self.sessions: dict[int, ClientSession] = {}

    def state(self) -> LogState:
        return LogState(self.records[-1][0] if self.records else 0,
                        self.records[0][0] if self.records else None,
                        self.released_through, 0, len(self.records))

    def apply(self, effects: list[Any]) -> None:
        for e in effects:
            if isinstance(e, Send):
                self.sent.setdefault(e.conn, []).append(e.data)
            elif isinstance(e, Disconnect):
                self.closed.add(e.conn)
            elif isinstance(e, Append):
                self.records += e.records
            elif isinstance(e, Sync):
                self.unsynced.append(e.token)
            elif isinstance(e, ReadLog):
                self.reads.append(e)

    def feed(self, inp: Any) -> None:
        self.apply(self.broker.handle(inp))

    def sync(self) -> None:
        if self.unsynced:
            token = max(self.unsynced)
            self.unsynced.clear()
            self.feed(WriteSynced(self.now, token, self.state()))

    def serve_reads(self) -> None:
        while self.reads:
            r = self.reads.pop(0)
            ticks = [t for t, _ in self.records]
            lo = bisect.bisect_right(ticks, r.after)
            hi = bisect.bisect_right(ticks, r.through)
            got, size = [], 0
            for t, rec in self.records[lo:hi]:
                if t <= self.released_through:
                    continue
                got.append((t, rec))
                size += len(rec)
                if size >= r.max_bytes:
                    break
            self.feed(LogRead(self.now, r.reader, got, self.state()))

    def connect(self, conn: int, hello: bool = True, service: str = "svc") -> ClientSession:
        self.feed(Accepted(self.now, conn))
        s = ClientSession(service, f"i{conn}")
        self.sessions[conn] = s
        if hello:
            self.send(conn, s.hello())
        return s

    def send(self, conn: int, data: bytes) -> None:
        self.wall_us += 1
        self.feed(Received(self.now, self.wall_us, conn, data))

    def lost(self, conn: int) -> None:
        self.feed(ConnectionLost(self.now, conn))

    def block(self, conn: int, blocked: bool) -> None:
        self.feed((SendBlocked if blocked else SendDrained)(self.now, conn))

    def timer(self, now: int) -> None:
        self.now = now
        self.feed(TimerFired(now))

    def run_until(self, now: int) -> None:
        """Fire each timer due up to `now`, at its time, in order; then the clock reads `now`."""
        while (due := self.broker.next_deadline()) is not None and due <= now:
            self.timer(max(due, self.now))
        self.now = now

    def inbox(self, conn: int) -> list[Any]:
        """Decode and clear what was sent to `conn`."""
        data = b"".join(self.sent.pop(conn, []))
        return self.sessions[conn].receive(data) if data else []

    def publish(self, conn: int, *events: tuple[str, bytes, dict[str, Any]]) -> int:
        s = self.sessions[conn]
        frames = s.publish([s.check_event(c, p, a) for c, p, a in events])
        for _, _, wire in frames:
            self.send(conn, wire)
        return frames[0][0]

    def subscribe(self, conn: int, pattern: str, flt: str | None = None, start: Any = "now",
                  end: int | None = None) -> int:
        sub, wire = self.sessions[conn].subscribe(pattern, flt, start, end)
        self.send(conn, wire)
        return sub


def as_batches(deliveries: list[tuple[int, str, Any, bytes]]) -> Synced:
    """A sync's events, each (tick, channel, attributes, record), as the one durable batch the
    pubend hands the trees (reliability/source.py `published`)."""
    return Synced([PendingBatch(0, 0, 0, [], list(deliveries), 0)])


def delivered(msgs: list[Any]) -> list[tuple[int, int]]:
    """(subscription, tick) for every event in EVENTS messages."""
    return [(m.sub, f[1]) for m in msgs if isinstance(m, messages.Events) for f in m.records]


def refused(msgs: list[Any]) -> dict[int, Any]:
    """Each refused event's seq -> the ERROR naming it (one ERROR per reason and PUBLISH names
    its events' seqs as ranges: core/broker/refusals.py)."""
    out: dict[int, Any] = {}
    for e in of_type(msgs, messages.Error):
        ranges = e.context.get("seqs") or [[e.context["seq"], e.context["seq"]]]
        assert e.context.get("count", 1) == sum(hi - lo + 1 for lo, hi in ranges)
        out.update(dict.fromkeys((s for lo, hi in ranges for s in range(lo, hi + 1)), e))
    return out


def of_type(msgs: list[Any], kind: type) -> list[Any]:
    return [m for m in msgs if isinstance(m, kind)]
