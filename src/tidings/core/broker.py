"""The broker core: a thin composer routing inputs between the machines of one broker.

- `ClientConnection` (connection.py) turns bytes into messages and owns the handshake;
- `Pubend` (reliability/pubend.py) gives ticks, and holds batches until the runtime reports them
  synced; only then are publishers acknowledged and events fanned out (knowledge is durable);
- `SubscriptionIndex` (filters/) finds the subscriptions an event matches without testing each;
- `Subend` (subend.py) delivers one subscription in tick order, live or catching up from the log.

The broker holds no protocol rule beyond checking published events (channel, attributes, size),
which every path shares. It never blocks: each `handle` returns effects for the runtime to apply.
"""

from __future__ import annotations

import heapq
from typing import Any

import msgpack

from tidings.core import errors
from tidings.core.channels import validate_channel, validate_pattern
from tidings.core.config import BrokerConfig
from tidings.core.connection import AWAITING_HELLO, OPEN, ClientConnection
from tidings.core.effects import Append, Disconnect, Effect, PauseReading, ResumeReading, Send, Sync
from tidings.core.errors import ProtocolError, TidingsError
from tidings.core.event import validate_attributes
from tidings.core.filters import Filter, SubscriptionIndex, parse_filter
from tidings.core.inputs import (
    Accepted,
    ConnectionLost,
    Input,
    LogRead,
    LogState,
    ReadFailed,
    Received,
    RetentionApplied,
    SendBlocked,
    SendDrained,
    TimerFired,
    WriteSynced,
)
from tidings.core.reliability.pubend import Pubend
from tidings.core.subend import Subend
from tidings.core.wire import messages

CHANNEL_CACHE_MAX = 65_536


class Broker:
    def __init__(self, config: BrokerConfig, pubend_id: str, log: LogState) -> None:
        self.config = config
        self.pubend = Pubend(pubend_id, log.last_tick)
        self.log = log
        self.connections: dict[int, ClientConnection] = {}
        self.subends: dict[int, Subend] = {}
        self.index = SubscriptionIndex()
        self._next_key = 0
        self._handshakes: list[tuple[int, int]] = []  # heap of (deadline, conn)
        self._valid_channels: set[str] = set()
        self._packer = msgpack.Packer()  # reused: packb would build a Packer per event
        self._welcome = {"pubend": pubend_id, "frame_bytes_max": config.frame_bytes_max,
                         "event_bytes_max": config.event_bytes_max}
        self._paused: dict[int, None] = {}  # connections not read until the pending bytes drain
        self.events_published = 0
        self.events_rejected = 0
        self.events_delivered = 0

    # ---- the runtime's interface -----------------------------------------------------------------

    def handle(self, inp: Input) -> list[Effect]:
        out: list[Effect] = []
        if isinstance(inp, Received):
            self._received(inp, out)
        elif isinstance(inp, WriteSynced):
            self.log = inp.log
            self._synced(inp.token, out)
        elif isinstance(inp, LogRead):
            self._log_read(inp, out)
        elif isinstance(inp, Accepted):
            self._accepted(inp, out)
        elif isinstance(inp, ConnectionLost):
            self._lost(inp.conn)
        elif isinstance(inp, SendBlocked | SendDrained):
            self._flow(inp.conn, isinstance(inp, SendBlocked), out)
        elif isinstance(inp, TimerFired):
            self._timers(inp.now, out)
        elif isinstance(inp, RetentionApplied):
            self.log = inp.log
        elif isinstance(inp, ReadFailed):
            self._read_failed(inp, out)
        return out

    def next_deadline(self) -> int | None:
        heap = self._handshakes
        while heap:
            deadline, conn = heap[0]
            c = self.connections.get(conn)
            if c is not None and c.state == AWAITING_HELLO:
                return deadline
            heapq.heappop(heap)
        return None

    # ---- connections -----------------------------------------------------------------------------

    def _accepted(self, inp: Accepted, out: list[Effect]) -> None:
        assert inp.conn not in self.connections
        if len(self.connections) >= self.config.connections_max:
            out.append(Send(inp.conn, messages.error(errors.HANDSHAKE, "too many connections")))
            out.append(Disconnect(inp.conn, "connections_max reached"))
            return
        deadline = inp.now + self.config.handshake_timeout_ns
        self.connections[inp.conn] = ClientConnection(inp.conn, self.config.frame_bytes_max, deadline)
        heapq.heappush(self._handshakes, (deadline, inp.conn))

    def _lost(self, conn: int) -> None:
        self._paused.pop(conn, None)
        c = self.connections.pop(conn, None)
        if c is not None:
            for s in list(c.subs.values()):
                self._drop_subend(c, s)

    def _timers(self, now: int, out: list[Effect]) -> None:
        heap = self._handshakes
        while heap and heap[0][0] <= now:
            _, conn = heapq.heappop(heap)
            c = self.connections.get(conn)
            if c is not None and c.state == AWAITING_HELLO:
                out += c.fail(errors.HANDSHAKE_TIMEOUT, "no HELLO within the handshake timeout")

    def _received(self, inp: Received, out: list[Effect]) -> None:
        c = self.connections.get(inp.conn)
        if c is None:
            return
        msgs, effects = c.receive(inp.data, self._welcome)
        out += effects
        for msg in msgs:
            if isinstance(msg, messages.Publish):
                self._publish(c, msg, inp.wall_us, out)
            elif isinstance(msg, messages.Subscribe):
                self._subscribe(c, msg, out)
            elif isinstance(msg, messages.Unsubscribe):
                self._unsubscribe(c, msg.sub, out)
            else:
                out.append(Send(c.conn, messages.status_reply(msg.req, self.status())))

    # ---- publishing ------------------------------------------------------------------------------

    def _check_event(self, ev: Any) -> tuple[str, dict[str, Any], bytes]:
        if type(ev) is not list or len(ev) != 3:
            raise ProtocolError(errors.BAD_MESSAGE, "a published event is [channel, attributes, payload]")
        channel, attributes, payload = ev
        if type(channel) is not str:
            raise ProtocolError(errors.BAD_CHANNEL, "the channel must be a string")
        if channel not in self._valid_channels:
            validate_channel(channel)
            if len(self._valid_channels) >= CHANNEL_CACHE_MAX:
                self._valid_channels.clear()
            self._valid_channels.add(channel)
        if type(payload) is not bytes:
            raise ProtocolError(errors.BAD_MESSAGE, "the payload must be binary")
        if len(payload) > self.config.event_bytes_max:
            raise TidingsError(f"payload of {len(payload)} bytes exceeds event_bytes_max="
                               f"{self.config.event_bytes_max}", errors.EVENT_TOO_LARGE)
        return channel, validate_attributes(attributes) if attributes else {}, payload

    def _publish(self, c: ClientConnection, msg: messages.Publish, wall_us: int, out: list[Effect]) -> None:
        """Check each event, give the good ones consecutive ticks, encode each once, log the batch."""
        valid: list[tuple[str, dict[str, Any], bytes]] = []
        rejected: set[int] = set()
        known_channels = self._valid_channels
        size_max = self.config.event_bytes_max
        for i, ev in enumerate(msg.events):
            # fast path: a well-formed event on a channel seen before, without attributes to check
            if type(ev) is list and len(ev) == 3:
                channel, attributes, payload = ev
                if (type(channel) is str and channel in known_channels and type(payload) is bytes
                        and len(payload) <= size_max and attributes == {}):
                    valid.append((channel, attributes, payload))
                    continue
            try:
                valid.append(self._check_event(ev))
            except TidingsError as exc:
                rejected.add(i)
                out.append(Send(c.conn, messages.error(exc.code, str(exc), seq=msg.seq + i)))
        pubend = self.pubend
        pid = pubend.pubend_id
        self.events_rejected += len(rejected)
        if not valid:
            out.append(Send(c.conn, messages.ack(msg.seq, pid, [None] * len(msg.events))))
            return
        first = pubend.reserve(len(valid), wall_us)
        pack = self._packer.pack
        service, instance = c.service, c.instance
        tick = first + len(valid)
        records = [(t, pack([pid, t, ch, at, service, instance, pl]))
                   for t, (ch, at, pl) in zip(range(first, tick), valid, strict=True)]
        deliveries = [(t, ch, at, rec) for (t, rec), (ch, at, _) in zip(records, valid, strict=True)]
        if rejected:
            it = iter(range(first, tick))
            ticks: list[int | None] = [None if i in rejected else next(it) for i in range(len(msg.events))]
        else:
            ticks = list(range(first, tick))
        self.events_published += len(records)
        token = pubend.log(c.conn, msg.seq, ticks, deliveries, sum(len(rec) for _, rec in records))
        if pubend.pending_bytes > self.config.pending_sync_bytes_max and c.conn not in self._paused:
            self._paused[c.conn] = None  # intake waits for the disk: memory stays bounded
            out.append(PauseReading(c.conn))
        out.append(Append(token, records))
        out.append(Sync(token))

    def _synced(self, token: int, out: list[Effect]) -> None:
        """Acknowledge the batches now durable and fan their events out to live subends."""
        pid = self.pubend.pubend_id
        fan: dict[int, list[bytes]] = {}
        match = self.index.match
        subends = self.subends
        by_channel: dict[str, list[int]] = {}  # events without attributes match by channel alone
        batches = self.pubend.synced(token)
        if self._paused and self.pubend.pending_bytes <= self.config.pending_sync_bytes_max // 2:
            out.extend(ResumeReading(conn) for conn in self._paused)
            self._paused.clear()
        for batch in batches:
            c = self.connections.get(batch.conn)
            if c is not None and c.state == OPEN:
                out.append(Send(batch.conn, messages.ack(batch.seq, pid, batch.ticks)))
            for tick, channel, attributes, record in batch.deliveries:
                if attributes:
                    keys = match(channel, attributes)
                elif channel in by_channel:
                    keys = by_channel[channel]
                else:
                    keys = by_channel[channel] = match(channel, attributes)
                for key in keys:
                    s = subends[key]
                    if s.live and tick > s.position:
                        if key in fan:
                            fan[key].append(record)
                        else:
                            fan[key] = [record]
        for key, records in fan.items():
            s = subends[key]
            self.events_delivered += len(records)
            out.extend(Send(s.conn, frame) for frame in messages.events_frames(s.sub, records))

    # ---- subscribing -----------------------------------------------------------------------------

    def _subscribe(self, c: ClientConnection, msg: messages.Subscribe, out: list[Effect]) -> None:
        def refuse(code: str, text: str) -> None:
            out.append(Send(c.conn, messages.error(code, text, sub=msg.sub)))

        if msg.sub in c.subs:
            return refuse(errors.SUBSCRIPTION_EXISTS, f"subscription {msg.sub} already exists")
        if len(c.subs) >= self.config.subscriptions_per_connection_max:
            return refuse(errors.TOO_MANY_SUBSCRIPTIONS, "subscriptions_per_connection_max reached")
        try:
            pattern = validate_pattern(msg.pattern)
            flt: Filter | None = parse_filter(msg.filter) if msg.filter else None
        except TidingsError as exc:
            return refuse(exc.code, str(exc))
        synced = self.pubend.synced_tick
        if msg.start == messages.START_NOW:
            position = synced
        elif msg.start == messages.START_OLDEST:
            position = self.log.released_through
        else:
            position = msg.after
        end = None if msg.end is None else min(msg.end, synced)
        self._next_key += 1
        s = Subend(self._next_key, c.conn, msg.sub, pattern, flt, position, end,
                   from_oldest=msg.start == messages.START_OLDEST)
        self.subends[s.key] = s
        c.subs[msg.sub] = s
        if end is None:
            self.index.add(s.key, pattern, flt)
        out.append(Send(c.conn, messages.subscribed(msg.sub, position)))
        self._advance(c, s, out)
        return None

    def _unsubscribe(self, c: ClientConnection, sub: int, out: list[Effect]) -> None:
        s = c.subs.get(sub)
        if s is None:
            out.append(Send(c.conn, messages.error(errors.UNKNOWN_SUBSCRIPTION, f"no subscription {sub}",
                                                   sub=sub)))
            return
        self._drop_subend(c, s)

    def _drop_subend(self, c: ClientConnection, s: Subend) -> None:
        del c.subs[s.sub]
        del self.subends[s.key]
        if s.end is None:
            self.index.remove(s.key)

    def _advance(self, c: ClientConnection, s: Subend, out: list[Effect]) -> None:
        """Move a subend that is not live on: finish it, turn it live, or read the log further."""
        synced = self.pubend.synced_tick
        if s.caught_up(synced) and s.end is not None:
            out.append(Send(c.conn, messages.end(s.sub, s.end)))
            self._drop_subend(c, s)
        elif c.blocked:
            return  # a blocked connection gets nothing more; SendDrained brings us back here
        elif s.caught_up(synced):
            s.go_live(synced)
        else:
            out += s.next_read(synced, self.config.log_read_bytes_max)

    def _log_read(self, inp: LogRead, out: list[Effect]) -> None:
        s = self.subends.get(inp.reader)
        if s is None or s.reading is None:
            return  # the subscription ended while its read was in flight
        c = self.connections[s.conn]
        effects, delivered = s.on_read(inp.records, inp.log)
        self.events_delivered += delivered
        out += effects
        self._advance(c, s, out)

    def _read_failed(self, inp: ReadFailed, out: list[Effect]) -> None:
        """The log cannot serve this subscription: say so and end it, rather than stall or skip."""
        s = self.subends.get(inp.reader)
        if s is None:
            return
        c = self.connections[s.conn]
        out.append(Send(c.conn, messages.error(errors.LOG_UNREADABLE, f"cannot read the log: {inp.reason}",
                                               sub=s.sub)))
        self._drop_subend(c, s)

    def _flow(self, conn: int, blocked: bool, out: list[Effect]) -> None:
        c = self.connections.get(conn)
        if c is None or c.blocked == blocked:
            return
        c.blocked = blocked
        synced = self.pubend.synced_tick
        for s in list(c.subs.values()):
            if blocked:
                s.fall_behind(synced)
            elif not s.live:
                self._advance(c, s, out)

    # ---- observation -----------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        log = self.log
        return {
            "pubend": self.pubend.pubend_id,
            "clients": sum(1 for c in self.connections.values() if c.state == OPEN),
            "subscriptions": len(self.subends),
            "subscriptions_live": sum(1 for s in self.subends.values() if s.live),
            "catchup_readers": sum(1 for s in self.subends.values() if not s.live),
            "blocked_connections": sum(1 for c in self.connections.values() if c.blocked),
            "events_published": self.events_published,
            "events_rejected": self.events_rejected,
            "events_delivered": self.events_delivered,
            "pending_sync_batches": self.pubend.pending_batches,
            "pending_sync_bytes": self.pubend.pending_bytes,
            "paused_publishers": len(self._paused),
            "first_tick": log.first_tick,
            "last_tick": self.pubend.synced_tick,
            "released_through": log.released_through,
            "log_bytes": log.log_bytes,
            "log_records": log.record_count,
        }
