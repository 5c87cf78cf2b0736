"""The asyncio client: a driver over the client's sans-IO machines, on one TCP connection at a time.

The protocol's rules live in `core/session/`: the session (handshake, checks, framing), publish
tracking (which ACK or refusal answers which event), each subscription's cursor (its checkpoint,
and where it resumes after a move) and roaming (route advice, moves, failover, the lease's renewal,
the automatic ack, the heartbeat that notices a silent broker). This module does their I/O: it
writes their frames, turns answers into the application's futures, arms one timer for roaming's
next deadline, and runs the connections a move, a probe or a failover makes.

Publishing is pipelined: every `publish` call made in the same event-loop iteration goes out in one
PUBLISH frame and one write, at the end of that iteration, so concurrent publishers share frames
without any added delay. Each call's future resolves when the broker's ACK says the event is on disk.

Each subscription buffers what arrives in a deque; when the buffered events of all subscriptions
pass `buffer_events_max`, the client stops reading the socket until the application catches up, so
a slow consumer pushes back on the broker (which then serves it from its log) instead of growing
memory here.
"""

from __future__ import annotations

import asyncio
import collections
import os
import secrets
import socket
import ssl
from collections.abc import AsyncIterator, Callable, Collection, Iterable, Sequence
from typing import Any

from tidings.core import errors
from tidings.core.auth.credentials import NONCE_BYTES, Credential, parse_credential
from tidings.core.broker import advice
from tidings.core.durable.checkpoint import Checkpoint
from tidings.core.errors import (
    AUTH_FAILED,
    AddressError,
    BrokerError,
    BrokerNotProven,
    BrokerUnreachable,
    ConnectionClosed,
    EventError,
    GapError,
    NotABroker,
    ProtocolError,
    StartError,
    TidingsError,
)
from tidings.core.event import Event, event_from_fields
from tidings.core.session import roaming
from tidings.core.session.client_session import ClientSession, PublishEvent, Start
from tidings.core.session.cursor import Cursor, Gap, advance, silence_of
from tidings.core.session.publish_tracker import DuplicateResult, PublishResult, PublishTracker, Result
from tidings.core.session.roaming import Mode, Roamer, SubKind
from tidings.core.wire import messages

__all__ = ["Client", "DuplicateResult", "Gap", "PublishResult", "Subscription", "advance", "parse_address"]

NS_PER_S = 1e9
BUFFER_EVENTS_MAX = 50_000
SPAN_BYTES_PER_EVENT = 128  # a SPAN item counts as one event per this many bytes in the buffer
ACK_INTERVAL_S = roaming.ACK_INTERVAL_NS / NS_PER_S  # durable subscriptions acknowledge what the application took
WELCOME_TIMEOUT_S = 3.0  # a broker answers HELLO at once; silence this long means something else listens
FIRST_BYTES_SHOWN = 16  # of an answer that is not a tidings frame, quoted in NotABroker
PROBE_TIMEOUT_S = roaming.PROBE_TIMEOUT_NS / NS_PER_S  # to connect to one advised broker and get its WELCOME
MOVE_WAIT_S = 10.0  # for the requests in flight on the old connection to be answered before a move
FAILOVER_S = roaming.FAILOVER_NS / NS_PER_S  # a lost connection's subscriptions resume elsewhere within this
BROKER_SILENCE_S = roaming.BROKER_SILENCE_NS / NS_PER_S  # with failover brokers: a broker silent this long is gone


class _PendingFrame:
    """A PUBLISH frame awaiting its ACK: one future per event (publish) or one for all (publish_many)."""

    __slots__ = ("batch", "futures")

    def __init__(self, futures: list[asyncio.Future[PublishResult]] | None = None,
                 batch: asyncio.Future[list[Result]] | None = None) -> None:
        self.futures = futures
        self.batch = batch

    def waiting(self) -> list[asyncio.Future[Any]]:
        return [self.batch] if self.batch is not None else list(self.futures or [])

    def resolve(self, results: list[Result]) -> None:
        if self.batch is not None:
            if not self.batch.done():
                self.batch.set_result(results)
            return
        for fut, res in zip(self.futures or [], results, strict=False):
            if fut.done():
                continue
            if isinstance(res, BrokerError):
                fut.set_exception(res)
            else:
                fut.set_result(res)

    def fail(self, exc: BaseException) -> None:
        for fut in self.waiting():
            if not fut.done():
                fut.set_exception(exc)


def _not_idempotent(item: tuple[Any, ...]) -> PublishEvent:
    raise EventError(f"with a producer, each item is (channel, payload, attributes, seq), got {len(item)} fields")


def parse_address(address: str, port_min: int = 1) -> tuple[str, int]:
    """HOST:PORT; a listening address may use port 0 (any free port)."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not port_min <= int(port) < 65536:
        raise AddressError(f"broker address must be HOST:PORT, got {address!r}")
    return host.strip("[]"), int(port)


def _tls_context(tls: ssl.SSLContext | bool) -> ssl.SSLContext | None:
    if isinstance(tls, ssl.SSLContext):
        return tls
    return ssl.create_default_context() if tls else None


class _Detached:
    """Where a connection the client moved away from reports: nowhere."""

    def _data(self, data: bytes) -> None:
        pass

    def _lost(self, exc: Exception | None) -> None:
        pass


class _Leaving:
    """A move's old connection: it goes on serving the plain subscriptions (their events and GAPs,
    which their cursors take as from the new connection, dropping what comes twice) until each has
    its SUBSCRIBED at the new broker, or MOVE_WAIT_S passed; then the client closes it."""

    def __init__(self, client: Client, session: ClientSession, transport: asyncio.Transport,
                 subs: dict[int, Subscription]) -> None:
        self.client, self.session, self.transport = client, session, transport
        self.subs = subs  # by their ids on this connection
        self.waiting: set[int] = set()  # their ids at the new broker, until SUBSCRIBED

    def _data(self, data: bytes) -> None:
        try:
            msgs = self.session.receive(data)
        except ProtocolError:
            self.close()
            return
        for msg in msgs:
            if isinstance(msg, messages.Events | messages.Gap):
                sub = self.subs.get(msg.sub)
                if sub is not None and not sub.ended:
                    self.client._arrived(sub, msg)

    def _lost(self, exc: Exception | None) -> None:
        self.subs.clear()

    def subscribed(self, sub_id: int) -> bool:
        """A subscription has its SUBSCRIBED at the new broker; True once all have (it is closed)."""
        self.waiting.discard(sub_id)
        if not self.waiting:
            self.close()
        return not self.waiting

    def close(self) -> None:
        self.subs.clear()
        self.waiting.clear()
        self.transport.close()


class _Protocol(asyncio.Protocol):
    def __init__(self, client: Client) -> None:
        self.client: Client | _Detached | _Leaving = client

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        self.client._data(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.client._lost(exc)


def bulk_events(item: Any) -> int:
    """How many events an item of a bulk read stands for in the client's buffer: a RECORDS item
    its count; a SPAN item, whose count the broker did not take, one per SPAN_BYTES_PER_EVENT."""
    if type(item) is messages.Records:
        return item.count
    if type(item) is messages.Span:
        return max(1, len(item.blob) // SPAN_BYTES_PER_EVENT)
    return 1


class Subscription:
    """An async iterator of Events (and Gap markers when `on_gap="event"`)."""

    def __init__(self, client: Client, sub: int, on_gap: str, pattern: str = "#", filter: str | None = None,
                 order: str = "publisher", bulk: bool = False) -> None:
        self._client = client
        self.id = sub
        self.bulk = bulk  # a bulk read (Client.read_records): its items are RECORDS, each of many events
        self.on_gap = on_gap
        self.pattern, self.filter, self.order = pattern, filter, order  # to subscribe again after a move
        # its checkpoints (durable), or what it saw (plain): core/session/cursor.py
        self.cursor = Cursor(total_order=order == messages.ORDER_TOTAL)
        self.position: int | None = None
        # a durable one acknowledges, every ACK_INTERVAL_S, what the application had taken before it
        # last asked for more (it asked again: it is done with those)
        self.auto_ack = True
        self._items: collections.deque[Any] = collections.deque()
        self._wakeup = asyncio.Event()
        self._ready: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.ended = False
        self._error: BaseException | None = None

    @property
    def checkpoint(self) -> Checkpoint | None:
        """A durable subscription's checkpoint (core/durable/checkpoint.py) after the items returned so far."""
        return self.cursor.checkpoint

    @property
    def kind(self) -> SubKind:
        if self.bulk:
            return SubKind.BULK
        if self.cursor.durable:
            return SubKind.DURABLE
        return SubKind.TOTAL if self.cursor.total_order else SubKind.PLAIN

    def __aiter__(self) -> AsyncIterator[Event | Gap]:
        return self

    async def __anext__(self) -> Event | Gap:
        batch = await self.next_batch(1)
        if not batch:
            raise StopAsyncIteration
        item = batch[0]
        if isinstance(item, Gap) and self.on_gap == "raise":
            raise GapError(item.after, item.through, item.pubend)
        return item

    @property
    def buffered(self) -> list[Any]:
        """What arrived and waits to be taken, oldest first (a copy; a bulk read's are RECORDS)."""
        return list(self._items)

    @property
    def token(self) -> str:
        """A durable subscription's checkpoint token after the items returned so far: store it with
        what they produced, and pass it to `subscribe(..., token=...)` on any broker to go on."""
        if self.cursor.checkpoint is None:
            raise StartError("only a durable subscription has a checkpoint token (subscribe with durable=True)")
        return self.cursor.checkpoint.encode()

    async def next_batch(self, max_items: int = 4096) -> list[Event | Gap]:
        """Wait for at least one item and return up to `max_items` (raw Gap markers included);
        an empty list means the subscription ended."""
        self.cursor.taking()
        while True:
            raw = await self._take(max_items)
            items = self.cursor.taken(raw)
            if items or not raw:  # only SILENCE: the token moved, wait for an event
                return items

    async def _take(self, max_items: int) -> list[Any]:
        """Up to `max_items` raw items (SILENCE markers included), waiting for one."""
        while not self._items:
            if self._error is not None:
                raise self._error
            if self.ended:
                return []
            self._wakeup.clear()
            await self._wakeup.wait()
        n = min(max_items, len(self._items))
        items = [self._items.popleft() for _ in range(n)]
        self._client._consumed(self._events_in(items))
        return items

    def _events_in(self, items: Collection[Any]) -> int:
        """How many events `items` stand for in the client's buffer (a RECORDS or SPAN item for many)."""
        if not self.bulk:
            return len(items)
        return sum(bulk_events(i) for i in items)

    def ack(self, token: str | None = None) -> None:
        """A durable subscription: tell its broker that the application consumed everything up to
        `token` (default: `self.token`, after the items returned so far), so the events before it
        need not be kept for this subscription any more (docs/durable.md#release). An older token
        than one acknowledged before changes nothing."""
        if self.cursor.checkpoint is None:
            raise StartError("only a durable subscription is acknowledged (subscribe with durable=True)")
        checkpoint = self.cursor.checkpoint if token is None else Checkpoint.decode(token)
        self._client._release(self, checkpoint.to_wire()[:2])

    def _auto_ack(self) -> None:
        due = self.cursor.ack_due()
        if self.auto_ack and due is not None and not self.ended:
            self._client._release(self, due)

    async def close(self, forget: bool = False) -> None:
        """Stop receiving. A durable subscription is then away: its broker keeps holding its events
        for its token, as when the connection closes; `forget=True` ends it for good."""
        if not self.ended and self._error is None:
            self._client._unsubscribe(self, forget)
        self.ended = True
        self._wakeup.set()

    async def __aenter__(self) -> Subscription:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # called by the client
    def _push(self, items: list[Any]) -> None:
        self.cursor.received_items(items)
        self._items.extend(items)
        self._wakeup.set()

    def _fail(self, exc: BaseException) -> None:
        if not self._ready.done():
            self._ready.set_exception(exc)
        self._error = exc
        self._wakeup.set()


class Client:
    """A connection to one tidings broker. Use `await Client.connect(...)`."""

    def __init__(self, session: ClientSession, roamer: Roamer | None = None) -> None:
        self._session = session
        self.roamer = roamer or Roamer(follow_advice=False)  # core/session/roaming.py
        self._transport: asyncio.Transport | None = None
        self._loop = asyncio.get_running_loop()
        self._welcome: asyncio.Future[None] = self._loop.create_future()
        self._publishes: PublishTracker[_PendingFrame] = PublishTracker()
        self._outbox: list[PublishEvent] = []
        self._outbox_futures: list[asyncio.Future[PublishResult]] = []
        self._flush_scheduled = False
        self._subs: dict[int, Subscription] = {}
        self._status: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._buffered = 0
        self._reading_paused = False
        self._closed: BaseException | None = None
        self._refused: BrokerError | None = None  # an ERROR about the connection: why it may close
        self.buffer_events_max = BUFFER_EVENTS_MAX
        self._first_bytes = b""  # what arrived before WELCOME, to say what answered instead
        self._timer: asyncio.TimerHandle | None = None  # at roaming's next deadline
        self._timer_at: int | None = None
        self._task: asyncio.Task[None] | None = None  # the follow, move or failover attempt under way
        self._settled: asyncio.Future[None] | None = None  # requests waiting for a move or failover to end
        self._lost_error: ConnectionClosed | None = None  # the loss a failover is for
        self._silent: str | None = None  # why the client dropped the connection itself (a silent broker)
        self._leaving: _Leaving | None = None  # a move's old connection, serving until the new one does
        self._connect_args: dict[str, Any] = {}
        self.rtt_ns = 0  # HELLO to WELCOME when this connection was made
        self.info: dict[str, Any] = {}  # the broker's WELCOME info
        # called (old address, new address, why) each time the client goes on at another broker:
        # route advice ("route advice: closer") or failover; the `tidings` command says it on stderr
        self.on_move: Callable[[str, str, str], None] | None = None

    @classmethod
    async def connect(cls, address: str, *, service: str = "tidings-client", instance: str | None = None,
                      timeout: float = 10.0, credential: str | Credential | None = None,
                      tls: ssl.SSLContext | bool = False, follow_advice: bool = True,
                      failover: Sequence[str] = (), broker_silence: float | None = BROKER_SILENCE_S) -> Client:
        """Connect and handshake within `timeout` seconds. Raises BrokerUnreachable when no connection
        can be made, NotABroker when what answers is not a tidings broker (it must answer HELLO
        within WELCOME_TIMEOUT_S), BrokerError when the broker refuses the client, BrokerNotProven
        when, with a credential, the broker's signature does not verify.

        `credential`: NAME:SECRET as `tidings auth add` printed it (the command line also reads
        it from $TIDINGS_CREDENTIAL; the library never reads the environment); with it the client
        authenticates, and NAME is the service stamped on its events. `tls`: True checks the
        broker's certificate against the system's CAs, or give an SSLContext
        (tidings.aio.tls.client_context(ca) for a private CA). `follow_advice`: move, without the
        application noticing, to a broker the current one advises (closer, or less loaded, or
        because it is stopping) while the connection holds no subscription; see docs/operations.md.
        `failover`: other brokers' addresses. When the connection is lost (the broker was killed,
        the network cut) and every subscription is durable or plain in publisher order (or there is
        none: a publisher), the client goes on at the first of these (or `address` again) that
        answers, within FAILOVER_S:
        the application's iterators go on, with nothing lost and nothing twice; see
        docs/durable.md#failover. `broker_silence` (seconds; with `failover`): a broker that sends
        nothing for this long although the client asked (HEARTBEAT) is taken as gone, and the client
        fails over; None never judges a broker by its silence."""
        host, port = parse_address(address)
        if isinstance(credential, str):
            credential = parse_credential(credential)
        instance = instance or f"{socket.gethostname()}-{os.getpid()}"
        silence_ns = None if broker_silence is None else max(1, int(broker_silence * NS_PER_S))
        client = cls(ClientSession(service, instance, credential, secrets.token_bytes(NONCE_BYTES)),
                     Roamer(address, failover, follow_advice, silence_ns))
        client._connect_args = {"service": service, "instance": instance, "timeout": timeout,
                                "credential": credential, "tls": tls}
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            async with asyncio.timeout(timeout):
                transport, _ = await loop.create_connection(lambda: _Protocol(client), host, port,
                                                            ssl=_tls_context(tls))
        except (OSError, TimeoutError) as exc:
            reason = str(exc) or f"no connection within {timeout:g} s"
            raise BrokerUnreachable(f"cannot connect to broker at {address}: {reason}") from None
        client._transport = transport
        wait_s = max(0.0, min(WELCOME_TIMEOUT_S, timeout - (loop.time() - started)))
        try:
            async with asyncio.timeout(wait_s):
                hello_at = loop.time()
                transport.write(client._session.hello())
                await client._welcome
                client.rtt_ns = int((loop.time() - hello_at) * NS_PER_S)
        except TimeoutError:
            client._abort()
            raise NotABroker(f"{address} is not a tidings broker: it accepted the connection but did not "
                             f"answer within {wait_s:g} s") from None
        except (ProtocolError, ConnectionClosed) as exc:
            client._abort()
            if exc.code == errors.VERSION:  # a tidings broker, of another version
                raise
            if isinstance(exc, ProtocolError) and exc.code == AUTH_FAILED:  # our check of the broker failed
                raise BrokerNotProven(f"refused {address}: {exc}") from None
            raise NotABroker(f"{address} is not a tidings broker: {client._first_answer()}") from None
        except BaseException:
            client._abort()
            raise
        return client

    def _first_answer(self) -> str:
        if not self._first_bytes:
            return "it closed the connection without answering"
        return f"it answered {self._first_bytes[:FIRST_BYTES_SHOWN]!r}"

    @property
    def pubend(self) -> str | None:
        return self._session.pubend

    @property
    def event_bytes_max(self) -> int:
        """The largest payload the broker accepts (from its WELCOME); a larger one is refused."""
        return self._session.event_bytes_max

    @property
    def address(self) -> str:
        """The broker this client is connected to now (route advice or failover may have moved it)."""
        return self.roamer.address

    @property
    def follow_advice(self) -> bool:
        """Move to a broker the current one advises (core/broker/advice.py)."""
        return self.roamer.follow_advice

    @follow_advice.setter
    def follow_advice(self, value: bool) -> None:
        self.roamer.follow_advice = value

    @property
    def failover(self) -> list[str]:
        """The brokers a lost connection goes on at (docs/durable.md#failover)."""
        return self.roamer.failover

    @failover.setter
    def failover(self, brokers: Sequence[str]) -> None:
        self.roamer.failover_to(self._now(), brokers)
        self._arm()

    @property
    def moves(self) -> int:
        """How many times the client went on at another broker (route advice or failover)."""
        return self.roamer.moves

    @property
    def failovers(self) -> int:
        return self.roamer.failovers

    @property
    def mode(self) -> Mode:
        """What the client is doing: serving, following advice, moving, failing over, closed."""
        return self.roamer.mode

    @property
    def reading_paused(self) -> bool:
        """Whether the client stopped reading its connection (more than `buffer_events_max` events wait)."""
        return self._reading_paused

    @property
    def advice_held(self) -> bool:
        """Whether route advice that arrived while the client was busy waits to be followed."""
        return self.roamer.held is not None

    # ---- publishing ------------------------------------------------------------------------------

    def publish(self, channel: str, payload: bytes | str = b"", attributes: dict[str, Any] | None = None,
                *, producer: str | None = None, seq: int | None = None) -> asyncio.Future[PublishResult]:
        """Publish one event; the returned future (await it) gives (pubend, tick) once it is durable.

        With `producer` (a string of at most 256 bytes) and `seq` (an integer >= 0), the publish is
        idempotent: the broker logs each (producer, seq) at most once within its dedup window, and
        answers a repeat with the original's (pubend, tick) and `duplicate` True."""
        self._check_open()
        ev = self._session.check_event(channel, payload, attributes, producer, seq)
        fut: asyncio.Future[PublishResult] = self._loop.create_future()
        self._outbox.append(ev)
        self._outbox_futures.append(fut)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)
        return fut

    async def publish_many(self, items: Iterable[tuple[Any, ...]], *, producer: str | None = None
                           ) -> list[PublishResult]:
        """Publish a batch of (channel, payload[, attributes]); returns their (pubend, tick) in order.

        With `producer`, each item is (channel, payload, attributes, seq) and the batch is an
        idempotent publish (see `publish`). If the broker rejects some events, the others are still
        logged; the first rejection is raised as a BrokerError whose `results` lists a
        PublishResult or a BrokerError per item.
        """
        self._check_open()
        await self._settle_wait()
        check = self._session.check_event
        if producer is None:
            events = [check(*item) for item in items]
        else:
            events = [check(*item[:3], producer=producer, seq=item[3]) if len(item) == 4
                      else _not_idempotent(item) for item in items]
        if self._outbox:
            self._flush()  # keep the order of earlier single publishes
        batches: list[asyncio.Future[list[Result]]] = []
        frames = self._session.publish(events)
        for seq, count, _ in frames:
            fut: asyncio.Future[list[Result]] = self._loop.create_future()
            self._publishes.sent(seq, count, _PendingFrame(batch=fut))
            batches.append(fut)
        self._write(b"".join(wire for _, _, wire in frames))
        results: list[Result] = []
        for fut in batches:
            results += await fut
        for r in results:
            if isinstance(r, BrokerError):
                r.results = results  # type: ignore[attr-defined]
                raise r
        return results  # type: ignore[return-value]

    def _flush(self) -> None:
        self._flush_scheduled = False
        if self.roamer.waiting:
            return  # the move flushes the outbox to the new connection
        events, futures = self._outbox, self._outbox_futures
        self._outbox, self._outbox_futures = [], []
        if self._closed is not None:
            for fut in futures:
                if not fut.done():
                    fut.set_exception(self._closed_error())
            return
        frames = self._session.publish(events)
        i = 0
        for seq, count, _ in frames:
            self._publishes.sent(seq, count, _PendingFrame(futures=futures[i:i + count]))
            i += count
        self._write(b"".join(f for _, _, f in frames))

    # ---- subscribing -----------------------------------------------------------------------------

    async def subscribe(self, pattern: str, *, filter: str | None = None, start: Start = "now",
                        end: int | None = None, on_gap: str = "raise", order: str = "publisher",
                        durable: bool | str = False, token: str | None = None) -> Subscription:
        """Subscribe; returns once the broker confirmed. Iterate the result for events.

        `durable=True` (or a `token`): a durable subscription. After each item it returns,
        `sub.token` is a checkpoint token (one printable string); give it back as `token=` to a new
        subscription with the same pattern and filter, on any broker of the overlay, to receive the
        matching events after it exactly once and in each publisher's order (docs/durable.md).
        `durable="NAME"`: a durable subscription whose position the broker keeps under NAME (for
        this client's service): subscribing again with the same name, pattern and filter at the
        same broker resumes after what it last acknowledged (`ack`, or the automatic ack).

        `start`: "now" (default), "start" (oldest retained event), a tick (events after it) or a
        datetime. `end`: stop after this tick (a bounded read). `on_gap`: "raise" a GapError, or
        yield a Gap "event", when retention released events this subscription asked for.
        `order`: "publisher" (each publisher's events in order) or "total" (every total-order
        subscriber of the same tree sees the same interleaving; starts now; see docs/delivery.md).
        """
        if on_gap not in ("raise", "event"):
            raise StartError("on_gap must be 'raise' or 'event'")
        self._check_open()
        await self._settle_wait()
        positions: list[Any] | None = None
        home: list[Any] | str | None = None
        if token is not None:
            checkpoint = Checkpoint.decode(token)
            start, positions = checkpoint.default, checkpoint.to_wire()[1]
            home = None if checkpoint.home is None else list(checkpoint.home)
        elif isinstance(durable, str):
            positions, home = [], durable
        elif durable:
            positions = []
        sub_id, frame = self._session.subscribe(pattern, filter, start, end, order, positions, home)
        sub = Subscription(self, sub_id, on_gap, pattern, filter, order)
        self._subs[sub_id] = sub
        self._write(frame)
        sub.position = await sub._ready
        return sub

    async def read_records(self, pattern: str, *, filter: str | None = None, after: int = 0,
                           end: int, spans: bool = False) -> Subscription:
        """A bounded read in bulk of this broker's own log: the events of its pubend with
        after < tick <= end (at most its durable tail) matching `pattern` and `filter`, as
        `messages.Records` items, each a msgpack array of many event records as logged (the reader
        decodes them: tidings.spark.arrow.records_to_batch), in tick order; Gap markers where
        retention released ticks (iterating raises GapError). With `spans`, a broker that offers
        them may also send `messages.Span` items: the log's own bytes, which the reader checks and
        picks from itself (storage.record.records_in; core/subscription/subscription.py). Returns once
        the broker confirmed. For readers that turn records into columns; everyone else wants
        `subscribe`. BrokerError at once from a broker of an older version, which cannot serve it."""
        self._check_open()
        await self._settle_wait()
        if not self.info.get("bulk_read"):
            raise BrokerError(f"the broker at {self.address} is of an older version, without bulk reads (READ): "
                              "upgrade it", errors.UNKNOWN_MESSAGE)
        # a broker older than batch records says "read_spans" (its SPANs hold single records only)
        spans = spans and bool(self.info.get("span_batch") or self.info.get("read_spans"))
        sub_id, frame = self._session.read(pattern, filter, after, end, spans)
        sub = Subscription(self, sub_id, "raise", pattern, filter, bulk=True)
        self._subs[sub_id] = sub
        self._write(frame)
        sub.position = await sub._ready
        return sub

    def _unsubscribe(self, sub: Subscription, forget: bool) -> None:
        self._subs.pop(sub.id, None)
        self._consumed(sub._events_in(sub._items))
        sub._items.clear()
        if self._closed is None:
            self._write(self._session.unsubscribe(sub.id, forget))

    def _release(self, sub: Subscription, checkpoint: list[Any]) -> None:
        if self._closed is None and self._transport is not None and sub.id in self._subs:
            self._transport.write(self._session.release(sub.id, checkpoint))
            sub.cursor.acked(checkpoint)

    async def status(self) -> dict[str, Any]:
        self._check_open()
        await self._settle_wait()
        req, frame = self._session.status()
        fut: asyncio.Future[dict[str, Any]] = self._loop.create_future()
        self._status[req] = fut
        self._write(frame)
        return await fut

    async def move(self, address: str) -> bool:
        """Go on at the broker at `address` now, as a move on route advice does (requests in flight
        answered first, subscriptions resubscribed from their cursors: a plain one after what it
        received from each pubend, without repeats). False when the client was busy moving, or that
        broker did not answer."""
        self._check_open()
        self._apply(self.roamer.move_asked(address))
        await self._settle_wait()
        return self.address == address

    async def close(self) -> None:
        if self._outbox:
            self._flush()
        if self._task is not None:
            self._task.cancel()
        closing = self._closed is None
        if closing:  # (so that losing the connection now is no reason to fail over)
            self._closed = ConnectionClosed("the connection to the broker is closed")
        self.roamer.close()
        self._arm()
        self._close_leaving()
        if self._transport is not None and not self._transport.is_closing():
            self._transport.close()
        if closing:
            self._lost(None)

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ---- incoming --------------------------------------------------------------------------------

    def _data(self, data: bytes) -> None:
        self.roamer.heard(self._now())
        if not self._welcome.done() and len(self._first_bytes) < FIRST_BYTES_SHOWN:
            self._first_bytes += data[:FIRST_BYTES_SHOWN]
        try:
            msgs = self._session.receive(data)
        except ProtocolError as exc:
            self._closed = exc
            self._abort()
            return
        for msg in msgs:
            self._dispatch(msg)

    def _events(self, msg: messages.Events) -> None:
        sub = self._subs.get(msg.sub)
        if sub is not None:
            self._arrived(sub, msg)

    def _arrived(self, sub: Subscription, msg: messages.Events | messages.Gap) -> None:
        """Events, or a GAP, for `sub` (from its connection, or from a move's old one)."""
        if isinstance(msg, messages.Gap):
            gap = sub.cursor.gap(Gap(msg.after, msg.through, msg.pubend))
            if gap is not None:  # (after a move, a plain subscription drops what it had)
                sub._push([gap])
                self._buffered += 1
            return
        items = sub.cursor.arrived([event_from_fields(f) for f in msg.records], self._now())
        sub._push(items)
        self._buffer(len(items))

    def _records(self, msg: messages.Records | messages.Span) -> None:
        sub = self._subs.get(msg.sub)
        if sub is not None and sub.bulk:
            sub._push([msg])
            self._buffer(bulk_events(msg))

    def _marker(self, sub_id: int, item: Any) -> None:
        """A GAP or SILENCE, in line with the subscription's events."""
        sub = self._subs.get(sub_id)
        if sub is not None:
            sub._push([item])
            self._buffered += 1

    def _buffer(self, n: int) -> None:
        """`n` more events wait for the application; past buffer_events_max, stop reading the socket."""
        self._buffered += n
        if self._buffered > self.buffer_events_max and not self._reading_paused:
            self._reading_paused = True
            assert self._transport is not None
            self._transport.pause_reading()
            self.roamer.reading_paused(self._now())
            self._arm()

    def _consumed(self, n: int) -> None:
        self._buffered -= n
        if self._reading_paused and self._buffered <= self.buffer_events_max // 2:
            self._reading_paused = False
            if self._transport is not None and not self._transport.is_closing():
                self._transport.resume_reading()
            self.roamer.reading_resumed(self._now())
            self._arm()

    def _dispatch(self, msg: Any) -> None:  # noqa: PLR0912 - one branch per message type
        if isinstance(msg, messages.Events):
            self._events(msg)
        elif isinstance(msg, messages.Records | messages.Span):
            self._records(msg)
        elif isinstance(msg, messages.Ack):
            answered = self._publishes.acked(msg)
            if answered is not None:
                answered[0].resolve(answered[1])
        elif isinstance(msg, messages.Subscribed):
            self._subscribed(msg)
        elif isinstance(msg, messages.Silence):
            sub = self._subs.get(msg.sub)
            if sub is not None and sub.cursor.durable:  # the token moves up, in line with its events
                self._marker(msg.sub, silence_of(msg))
        elif isinstance(msg, messages.Gap):
            sub = self._subs.get(msg.sub)
            if sub is not None:
                self._arrived(sub, msg)
        elif isinstance(msg, messages.End):
            sub = self._subs.pop(msg.sub, None)
            if sub is not None:
                sub.ended = True
                sub._wakeup.set()
        elif isinstance(msg, messages.StatusReply):
            fut = self._status.pop(msg.req, None)
            if fut is not None and not fut.done():
                fut.set_result(msg.status)
        elif isinstance(msg, messages.Error):
            self._error(msg)
        elif isinstance(msg, messages.Welcome) and not self._welcome.done():
            self.info = msg.info
            self._welcome.set_result(None)
            self.roamer.welcomed(self._now(), self._session.renew_interval_ns)
            self._arm()
        elif isinstance(msg, messages.Advice):
            decoded = advice.decode(msg.reason, msg.entries)
            if decoded is not None:
                self._apply(self.roamer.advised(self._now(), *decoded, self._kinds()))
        elif isinstance(msg, messages.Challenge) and self._transport is not None:
            try:
                self._transport.write(self._session.answer(msg))
            except ProtocolError as exc:
                self._closed = exc
                self._lost(None)
                self._abort()

    def _subscribed(self, msg: messages.Subscribed) -> None:
        sub = self._subs.get(msg.sub)
        if sub is None:
            return
        if sub._ready.done():  # subscribed again after a move: its new home
            sub.cursor.rehomed(msg.checkpoint)
            if self._leaving is not None and self._leaving.subscribed(msg.sub):
                self._leaving = None
            return
        try:
            sub.cursor.confirmed(msg.checkpoint, msg.position, self._now())
        except TidingsError as exc:
            sub._fail(exc)
            return
        if sub.cursor.durable:
            self.roamer.durable_confirmed(self._now())
            self._arm()
        sub._ready.set_result(msg.position)

    def _error(self, msg: messages.Error) -> None:
        exc = BrokerError(msg.message, msg.code)
        context = msg.context  # a coalesced ERROR may name several events and subscriptions (core/broker/refusals.py)
        if "seq" in context:  # refused events of a PUBLISH; its ACK, after this, answers them
            self._publishes.refused(context, exc)
        if "sub" in context:
            subs = context.get("subs")
            for key in subs if isinstance(subs, list) else [context["sub"]]:
                sub = self._subs.pop(key, None) if type(key) is int else None
                if sub is not None:
                    sub._fail(exc)
        if "seq" not in context and "sub" not in context:
            if not self._welcome.done():  # the broker refuses the client
                self._closed = exc
                self._welcome.set_exception(exc)
            elif msg.code == errors.UNKNOWN_MESSAGE:  # a broker older than HEARTBEAT: not fatal (core/session)
                self._session.unknown_to_broker()
            else:  # about the connection: why it may close next
                self._refused = exc

    # ---- roaming (core/session/roaming.py) -------------------------------------------------------

    def _now(self) -> int:
        return int(self._loop.time() * NS_PER_S)

    def _kinds(self) -> list[SubKind]:
        return [sub.kind for sub in self._subs.values()]

    def _arm(self) -> None:
        """One timer, at roaming's next deadline."""
        at = self.roamer.next_deadline()
        if at == self._timer_at:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = at
        self._timer = None if at is None else self._loop.call_at(at / NS_PER_S, self._timeout)

    def _timeout(self) -> None:
        self._timer, self._timer_at = None, None
        self._apply(self.roamer.handle_timeout(self._now()))

    def _apply(self, effects: list[roaming.RoamEffect]) -> None:
        for effect in effects:
            if isinstance(effect, roaming.SendRenew):
                if self._subs:
                    self._write(self._session.renew())
            elif isinstance(effect, roaming.AckDurable):
                for sub in list(self._subs.values()):
                    sub._auto_ack()
            elif isinstance(effect, roaming.SendHeartbeat):
                self._write(self._session.heartbeat())
            elif isinstance(effect, roaming.Abandon):
                self._silent = effect.reason
                self._abort()
            elif isinstance(effect, roaming.Follow):
                self._task = self._loop.create_task(self._follow(effect))
            elif isinstance(effect, roaming.MoveTo):
                self._task = self._loop.create_task(self._move(effect))
            elif isinstance(effect, roaming.TryBroker):
                self._task = self._loop.create_task(self._try(effect))
            else:
                self._end(ConnectionClosed(effect.message))
        self._arm()

    async def _follow(self, follow: roaming.Follow) -> None:
        # the current broker is timed again beside the candidates, the same way and at the same
        # moment: a busy host's connect-time RTT alone would make any candidate look closer
        *probes, current = await asyncio.gather(*(self._probe(c.address) for c in follow.candidates),
                                                self._probe(self.address))
        rtt = self.rtt_ns if current is None else min(self.rtt_ns, current.rtt_ns)
        self._task = None
        self._apply(self.roamer.probed(self._now(), follow.reason, rtt, [p for p in probes if p is not None],
                                       self._kinds()))

    async def _probe(self, address: str) -> advice.Probe | None:
        """Connect to an advised broker as this client would, timing HELLO to WELCOME."""
        try:
            async with asyncio.timeout(PROBE_TIMEOUT_S):
                other = await Client.connect(address, **{**self._connect_args, "timeout": PROBE_TIMEOUT_S},
                                             follow_advice=False)
        except (TidingsError, OSError, TimeoutError):
            return None
        await other.close()
        return advice.Probe(address, other.rtt_ns, bool(other.info.get("overloaded")),
                            bool(other.info.get("draining")))

    async def _move(self, move: roaming.MoveTo) -> None:
        """Go on at `move.address`: requests in flight here are answered first, new ones wait, and
        the application sees one client throughout (later events carry the new broker's pubend)."""
        try:
            async with asyncio.timeout(MOVE_WAIT_S):
                while self._publishes or self._status:
                    pending = [f for frame in self._publishes.pending() for f in frame.waiting()]
                    await asyncio.wait([*pending, *self._status.values()])
                other = await Client.connect(move.address, **self._connect_args, follow_advice=False)
        except (TidingsError, OSError, TimeoutError):
            self._task = None
            self._apply(self.roamer.move_failed(self._kinds()))  # stay here
            self._settle()
            return
        self._task = None
        if self.roamer.mode is not Mode.MOVING:  # closed meanwhile
            await other.close()
            return
        self._switch(move.address, other, move.why)

    async def _try(self, attempt: roaming.TryBroker) -> None:
        """One broker of a failover."""
        try:
            other = await Client.connect(attempt.address, **{**self._connect_args,
                                                             "timeout": attempt.timeout_ns / NS_PER_S},
                                         follow_advice=False)
        except (TidingsError, OSError, TimeoutError):
            self._task = None
            self._apply(self.roamer.attempt_failed(self._now()))
            return
        self._task = None
        if self.roamer.mode is not Mode.FAILING_OVER:  # closed meanwhile
            await other.close()
            return
        self._switch(attempt.address, other, f"failover: {self._lost_error}")

    def _switch(self, address: str, other: Client, why: str) -> None:
        """Take over `other`'s connection and session. Each subscription subscribes again on the new
        connection, the application's iterator unchanged, from where its cursor says
        (core/session/cursor.py). On a move, the old connection serves the plain subscriptions on
        until the new broker confirmed them (`_Leaving`); otherwise it is closed quietly."""
        other.roamer.close()
        other._arm()
        old = self._transport
        assert old is not None and other._transport is not None
        moved_from = self.address
        self._close_leaving()
        plain = {i: sub for i, sub in self._subs.items() if sub.kind in (SubKind.PLAIN, SubKind.TOTAL)}
        protocol = old.get_protocol()  # (None once the connection was lost: a failover)
        leaving = (_Leaving(self, self._session, old, plain)
                   if plain and protocol is not None and not old.is_closing() and self.roamer.mode is Mode.MOVING
                   else None)
        if protocol is not None:
            protocol.client = leaving or _Detached()  # type: ignore[attr-defined]
        other._transport.get_protocol().client = self  # type: ignore[attr-defined]
        self._session, self._transport = other._session, other._transport
        self.rtt_ns, self.info = other.rtt_ns, other.info
        self._refused = None
        if leaving is None:
            old.close()
        effects = self.roamer.switched(self._now(), address, self._session.renew_interval_ns,
                                       other.roamer.take_held(), self._kinds())
        if self._reading_paused:
            self._transport.pause_reading()
        if self.on_move is not None:
            self.on_move(moved_from, address, why)
        for old_id, sub in list(self._subs.items()):
            start, positions, home = sub.cursor.resume(self._now())
            new_id, frame = self._session.subscribe(sub.pattern, sub.filter, start, None, sub.order, positions, home)
            del self._subs[old_id]
            sub.id = new_id
            self._subs[new_id] = sub
            self._transport.write(frame)
        if leaving is not None:
            leaving.waiting = {sub.id for sub in plain.values()}
            self._leaving = leaving
            self._loop.call_later(MOVE_WAIT_S, leaving.close)  # (a refused one never confirms)
        self._apply(effects)
        self._settle()

    def _close_leaving(self) -> None:
        if self._leaving is not None:
            self._leaving.close()
            self._leaving = None

    async def _settle_wait(self) -> None:
        """While the client moves or fails over, new requests wait for it."""
        while self.roamer.waiting:
            if self._settled is None:
                self._settled = self._loop.create_future()
            await asyncio.shield(self._settled)

    def _settle(self) -> None:
        """A move or failover ended: requests that waited go on."""
        if self.roamer.waiting:
            return
        settled, self._settled = self._settled, None
        if settled is not None and not settled.done():
            settled.set_result(None)
        if self._outbox and not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    # ---- loss --------------------------------------------------------------------------------

    def _closed_error(self) -> BaseException:
        if isinstance(self._closed, TidingsError):
            return self._closed
        return ConnectionClosed("the connection to the broker is closed")

    def _lost(self, exc: Exception | None) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None
        lost = ConnectionClosed(self._silent or (f"the connection to the broker was lost: {exc}" if exc
                                                 else "the connection to the broker is closed"))
        self._silent = None
        if self._closed is None and self._refused is None:
            effects = self.roamer.lost(self._now(), self._kinds(), str(lost))
            if self.roamer.mode is Mode.FAILING_OVER:
                self._lost_error = lost
                for sub in self._subs.values():  # a plain one resumes after what this connection served
                    sub.cursor.lost(self._now())
                self._fail_requests(lost)  # their outcome is unknown: the application decides
                self._apply(effects)
                return
        self._end(self._refused or lost)

    def _end(self, exc: BaseException) -> None:
        """The client is closed: everything waiting gets `exc` (or why it was closed before)."""
        self._close_leaving()
        if self._closed is None:
            self._closed = exc
        self.roamer.close()
        self._arm()
        err = self._closed_error()
        if not self._welcome.done():
            self._welcome.set_exception(err)
        self._fail_requests(err)
        for sub in self._subs.values():
            sub._fail(err)
        self._subs.clear()
        self._settle()

    def _fail_requests(self, err: BaseException) -> None:
        """Publishes and status requests in flight get `err`."""
        for frame in self._publishes.clear():
            frame.fail(err)
        for fut in self._status.values():
            if not fut.done():
                fut.set_exception(err)
        self._status.clear()

    def _write(self, frame: bytes) -> None:
        assert self._transport is not None
        self._transport.write(frame)

    def _abort(self) -> None:
        if self._transport is not None:
            self._transport.abort()

    def _check_open(self) -> None:
        if self._closed is not None:
            raise self._closed_error()
