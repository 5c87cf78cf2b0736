"""The asyncio client, driving `core.session.ClientSession` over one TCP connection.

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
import contextlib
import os
import secrets
import socket
import ssl
from collections.abc import AsyncIterator, Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

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
from tidings.core.session.client_session import ClientSession, Start
from tidings.core.wire import messages

BUFFER_EVENTS_MAX = 50_000
SPAN_BYTES_PER_EVENT = 128  # a SPAN item counts as one event per this many bytes in the buffer
ACK_INTERVAL_S = 1.0  # durable subscriptions acknowledge what the application took this often
WELCOME_TIMEOUT_S = 3.0  # a broker answers HELLO at once; silence this long means something else listens
FIRST_BYTES_SHOWN = 16  # of an answer that is not a tidings frame, quoted in NotABroker
PROBE_TIMEOUT_S = 3.0  # to connect to one advised broker and get its WELCOME
MOVE_WAIT_S = 10.0  # for the requests in flight on the old connection to be answered before a move
FAILOVER_S = 60.0  # a lost connection's durable subscriptions are resumed on another broker within this
FAILOVER_BACKOFF_S = (0.1, 0.2, 0.5, 1.0, 2.0)  # between rounds over the failover brokers (then the last)


class PublishResult(NamedTuple):
    """Where an event was logged: its pubend and tick."""

    pubend: str
    tick: int

    @property
    def duplicate(self) -> bool:
        """True when an idempotent publish was logged before (within the broker's dedup window)
        and this is the original's pubend and tick: nothing was logged this time."""
        return False


class DuplicateResult(PublishResult):
    """The PublishResult of an idempotent publish the broker had logged before: equal to the
    original's, with `duplicate` True."""

    __slots__ = ()

    @property
    def duplicate(self) -> bool:
        return True


@dataclass(frozen=True, slots=True)
class Gap:
    """Events of `pubend` after tick `after` up to tick `through` may have matched but were released
    before this subscription read them (a durable subscription's token moves past them)."""

    after: int
    through: int
    pubend: str | None = None


class _PendingFrame:
    """A PUBLISH frame awaiting its ACK: one future per event (publish) or one for all (publish_many)."""

    __slots__ = ("batch", "futures")

    def __init__(self, futures: list[asyncio.Future[PublishResult]] | None = None,
                 batch: asyncio.Future[list[PublishResult | BrokerError]] | None = None) -> None:
        self.futures = futures
        self.batch = batch

    def fail(self, exc: BaseException) -> None:
        for fut in self.futures or [self.batch]:
            if fut is not None and not fut.done():
                fut.set_exception(exc)


def _not_idempotent(item: tuple[Any, ...]) -> list[Any]:
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


class _Protocol(asyncio.Protocol):
    def __init__(self, client: Client) -> None:
        self.client: Client | _Detached = client

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        self.client._data(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.client._lost(exc)


class _Silence(NamedTuple):
    """A SILENCE for a durable subscription, in line with its events: applied, never returned."""

    positions: dict[str, int]


def advance(checkpoint: Checkpoint | None, items: list[Any]) -> list[Event | Gap]:
    """Apply `items` (as the application takes them) to a durable subscription's `checkpoint`;
    the items without the SILENCE markers."""
    if checkpoint is None:
        return items
    out: list[Event | Gap] = []
    for item in items:
        if type(item) is _Silence:
            checkpoint.silence(item.positions)
            continue
        if type(item) is Event:
            checkpoint.delivered(item.pubend, item.tick)
        elif type(item) is Gap and item.pubend is not None:
            checkpoint.delivered(item.pubend, item.through)
        out.append(item)
    return out


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
        self._seen: dict[str, int] = {}  # a plain one's newest tick per pubend (a moved one drops repeats)
        self._floor: dict[str, int] | None = None  # after a move: what it had before, per pubend
        self.position: int | None = None
        self.checkpoint: Checkpoint | None = None  # a durable subscription's (core/durable/checkpoint.py)
        # a durable one's checkpoint after every item received, taken by the application or not
        # (the blocking client's buffer included): where a move or failover resumes it
        self._received: Checkpoint | None = None
        # a durable one acknowledges, every ACK_INTERVAL_S, what the application had taken before it
        # last asked for more (it asked again: it is done with those)
        self.auto_ack = True
        self._done: list[Any] | None = None  # that checkpoint
        self._acked: list[Any] | None = None  # the checkpoint last acknowledged
        self._items: collections.deque[Any] = collections.deque()
        self._wakeup = asyncio.Event()
        self._ready: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.ended = False
        self._error: BaseException | None = None

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
        if self.checkpoint is None:
            raise StartError("only a durable subscription has a checkpoint token (subscribe with durable=True)")
        return self.checkpoint.encode()

    async def next_batch(self, max_items: int = 4096) -> list[Event | Gap]:
        """Wait for at least one item and return up to `max_items` (raw Gap markers included);
        an empty list means the subscription ended."""
        if self.checkpoint is not None:
            self._done = self.checkpoint.to_wire()[:2]
        while True:
            raw = await self._take(max_items)
            items = advance(self.checkpoint, raw)
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
        if self.checkpoint is None:
            raise StartError("only a durable subscription is acknowledged (subscribe with durable=True)")
        checkpoint = self.checkpoint if token is None else Checkpoint.decode(token)
        self._client._release(self, checkpoint.to_wire()[:2])

    def _auto_ack(self) -> None:
        if self.auto_ack and self._done is not None and self._done != self._acked and not self.ended:
            self._client._release(self, self._done)

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
        if self._received is not None:
            advance(self._received, items)
        self._items.extend(items)
        self._wakeup.set()

    def _fail(self, exc: BaseException) -> None:
        if not self._ready.done():
            self._ready.set_exception(exc)
        self._error = exc
        self._wakeup.set()


class Client:
    """A connection to one tidings broker. Use `await Client.connect(...)`."""

    def __init__(self, session: ClientSession) -> None:
        self._session = session
        self._transport: asyncio.Transport | None = None
        self._loop = asyncio.get_running_loop()
        self._welcome: asyncio.Future[None] = self._loop.create_future()
        self._frames: dict[int, _PendingFrame] = {}  # by the frame's first sequence number
        self._rejections: dict[int, BrokerError] = {}
        self._outbox: list[list[Any]] = []
        self._outbox_futures: list[asyncio.Future[PublishResult]] = []
        self._flush_scheduled = False
        self._subs: dict[int, Subscription] = {}
        self._status: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._buffered = 0
        self._reading_paused = False
        self._closed: BaseException | None = None
        self.buffer_events_max = BUFFER_EVENTS_MAX
        self._first_bytes = b""  # what arrived before WELCOME, to say what answered instead
        self._renewal: asyncio.TimerHandle | None = None  # the next RENEW of the broker's lease
        self._acking: asyncio.TimerHandle | None = None  # the next automatic ack of durable subscriptions
        self._connect_args: dict[str, Any] = {}
        self.address = ""
        self.rtt_ns = 0  # HELLO to WELCOME when this connection was made
        self.info: dict[str, Any] = {}  # the broker's WELCOME info
        self.follow_advice = True  # move to a broker the current one advises (core/broker/advice.py)
        self.moves = 0
        # called (old address, new address, why) each time the client goes on at another broker:
        # route advice ("route advice: closer") or failover; the `tidings` command says it on stderr
        self.on_move: Callable[[str, str, str], None] | None = None
        self._moving: asyncio.Future[None] | None = None
        self._following: asyncio.Task[None] | None = None
        self._advice_held: tuple[advice.Reason, list[advice.Candidate]] | None = None  # see _advised
        self.failover: list[str] = []  # brokers a lost connection's durable subscriptions resume on
        self._failing_over: asyncio.Task[None] | None = None
        self.failovers = 0

    @classmethod
    async def connect(cls, address: str, *, service: str = "tidings-client", instance: str | None = None,
                      timeout: float = 10.0, credential: str | Credential | None = None,
                      tls: ssl.SSLContext | bool = False, follow_advice: bool = True,
                      failover: Sequence[str] = ()) -> Client:
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
        the network cut) and every subscription is durable, they resume on the first of these (or
        `address` again) that answers, from their tokens, within FAILOVER_S: the application's
        iterators go on, with nothing lost and nothing twice; see docs/durable.md#failover."""
        host, port = parse_address(address)
        if isinstance(credential, str):
            credential = parse_credential(credential)
        instance = instance or f"{socket.gethostname()}-{os.getpid()}"
        client = cls(ClientSession(service, instance, credential, secrets.token_bytes(NONCE_BYTES)))
        client.address, client.follow_advice = address, follow_advice
        client.failover = [a for a in failover if a != address]
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
        client._transport = transport  # type: ignore[assignment]
        wait_s = max(0.0, min(WELCOME_TIMEOUT_S, timeout - (loop.time() - started)))
        try:
            async with asyncio.timeout(wait_s):
                hello_at = loop.time()
                transport.write(client._session.hello())  # type: ignore[attr-defined]
                await client._welcome
                client.rtt_ns = int((loop.time() - hello_at) * 1e9)
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
    def reading_paused(self) -> bool:
        """True while the connection is not read: the subscriptions hold more than buffer_events_max."""
        return self._reading_paused

    @property
    def advice_held(self) -> bool:
        """True while a route advice waits for the client to weigh where to go (see _advised)."""
        return self._advice_held is not None

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
        if self._moving is not None:
            await asyncio.shield(self._moving)
        check = self._session.check_event
        if producer is None:
            events = [check(*item) for item in items]
        else:
            events = [check(*item[:3], producer=producer, seq=item[3]) if len(item) == 4
                      else _not_idempotent(item) for item in items]
        if self._outbox:
            self._flush()  # keep the order of earlier single publishes
        batches: list[asyncio.Future[list[PublishResult | BrokerError]]] = []
        frames = self._session.publish(events)
        for seq, _, _ in frames:
            fut: asyncio.Future[list[PublishResult | BrokerError]] = self._loop.create_future()
            self._frames[seq] = _PendingFrame(batch=fut)
            batches.append(fut)
        assert self._transport is not None
        self._transport.write(b"".join(wire for _, _, wire in frames))
        results: list[PublishResult | BrokerError] = []
        for fut in batches:
            results += await fut
        for r in results:
            if isinstance(r, BrokerError):
                r.results = results  # type: ignore[attr-defined]
                raise r
        return results  # type: ignore[return-value]

    def _flush(self) -> None:
        self._flush_scheduled = False
        if self._moving is not None:
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
            self._frames[seq] = _PendingFrame(futures=futures[i:i + count])
            i += count
        assert self._transport is not None
        self._transport.write(b"".join(f for _, _, f in frames))

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
        if self._moving is not None:
            await asyncio.shield(self._moving)
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
        assert self._transport is not None
        self._transport.write(frame)
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
        picks from itself (storage.record.records_in; core/subscription/subend.py). Returns once
        the broker confirmed. For readers that turn records into columns; everyone else wants
        `subscribe`. BrokerError at once from a broker of an older version, which cannot serve it."""
        self._check_open()
        if self._moving is not None:
            await asyncio.shield(self._moving)
        if not self.info.get("bulk_read"):
            raise BrokerError(f"the broker at {self.address} is of an older version, without bulk reads (READ): "
                              "upgrade it", errors.UNKNOWN_MESSAGE)
        sub_id, frame = self._session.read(pattern, filter, after, end, spans and bool(self.info.get("read_spans")))
        sub = Subscription(self, sub_id, "raise", pattern, filter, bulk=True)
        self._subs[sub_id] = sub
        assert self._transport is not None
        self._transport.write(frame)
        sub.position = await sub._ready
        return sub

    def _unsubscribe(self, sub: Subscription, forget: bool) -> None:
        self._subs.pop(sub.id, None)
        self._consumed(sub._events_in(sub._items))
        sub._items.clear()
        if self._closed is None and self._transport is not None:
            self._transport.write(self._session.unsubscribe(sub.id, forget))

    def _release(self, sub: Subscription, checkpoint: list[Any]) -> None:
        if self._closed is None and self._transport is not None and sub.id in self._subs:
            self._transport.write(self._session.release(sub.id, checkpoint))
            sub._acked = checkpoint

    def _ack_durable(self) -> None:
        """Every ACK_INTERVAL_S while the connection is open: durable subscriptions acknowledge
        what the application has taken since the last time."""
        if self._closed is not None:
            return
        for sub in list(self._subs.values()):
            sub._auto_ack()
        self._acking = self._loop.call_later(ACK_INTERVAL_S, self._ack_durable)

    async def status(self) -> dict[str, Any]:
        self._check_open()
        if self._moving is not None:
            await asyncio.shield(self._moving)
        req, frame = self._session.status()
        fut: asyncio.Future[dict[str, Any]] = self._loop.create_future()
        self._status[req] = fut
        assert self._transport is not None
        self._transport.write(frame)
        return await fut

    async def close(self) -> None:
        if self._outbox:
            self._flush()
        if self._failing_over is not None:
            self._failing_over.cancel()
        closing = self._closed is None
        if closing:  # (so that losing the connection now is no reason to fail over)
            self._closed = ConnectionClosed("the connection to the broker is closed")
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
        if sub is None:
            return
        items = [event_from_fields(f) for f in msg.records]
        if sub.checkpoint is None:
            if sub._floor:  # moved: what came from the old broker does not come twice
                floor = sub._floor
                items = [e for e in items if e.tick > floor.get(e.pubend, -1)]
            seen = sub._seen
            for e in items:
                seen[e.pubend] = e.tick
        sub._push(items)
        self._buffer(len(items))

    def _records(self, msg: messages.Records | messages.Span) -> None:
        sub = self._subs.get(msg.sub)
        if sub is not None and sub.bulk:
            sub._push([msg])
            self._buffer(bulk_events(msg))

    def _buffer(self, n: int) -> None:
        """`n` more events wait for the application; past buffer_events_max, stop reading the socket."""
        self._buffered += n
        if self._buffered > self.buffer_events_max and not self._reading_paused:
            self._reading_paused = True
            assert self._transport is not None
            self._transport.pause_reading()

    def _dispatch(self, msg: Any) -> None:  # noqa: PLR0912 - one branch per message type
        if isinstance(msg, messages.Events):
            self._events(msg)
        elif isinstance(msg, messages.Records | messages.Span):
            self._records(msg)
        elif isinstance(msg, messages.Ack):
            self._acked(msg)
        elif isinstance(msg, messages.Subscribed):
            self._subscribed(msg)
        elif isinstance(msg, messages.Silence):
            self._silence(msg)
        elif isinstance(msg, messages.Gap):
            sub = self._subs.get(msg.sub)
            if sub is not None:
                sub._push([Gap(msg.after, msg.through, msg.pubend)])
                self._buffered += 1
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
            self._renew()
        elif isinstance(msg, messages.Advice):
            self._advised(msg)
        elif isinstance(msg, messages.Challenge) and self._transport is not None:
            try:
                self._transport.write(self._session.answer(msg))
            except ProtocolError as exc:
                self._closed = exc
                self._lost(None)
                self._abort()

    # ---- route advice (core/broker/advice.py) ----------------------------------------------------------

    def _advised(self, msg: messages.Advice) -> None:
        decoded = advice.decode(msg.reason, msg.entries)
        if decoded is None or not decoded[1] or self._closed is not None:
            return
        if self._following is not None or not self.follow_advice:
            # Busy following earlier advice, or this is the connection a move is making: a broker
            # says `draining` (or `overloaded`) once, right after WELCOME, so the newest such advice
            # is held and acted on once the move is done (_follow_held), never dropped: a client
            # that moved onto a broker which began draining after it was probed would otherwise
            # stay there until the drain timeout disconnects it. A `closer` hint was just measured.
            if decoded[0] is not advice.Reason.CLOSER:
                self._advice_held = decoded
            return
        if self._movable(decoded[0]):
            self._following = self._loop.create_task(self._follow(*decoded))

    def _follow_held(self) -> None:
        """After a move (or a failover), or a follow that stayed: the advice held meanwhile."""
        held, self._advice_held = self._advice_held, None
        if (held is not None and self.follow_advice and self._closed is None and self._following is None
                and self._failing_over is None and self._movable(held[0])):
            self._following = self._loop.create_task(self._follow(*held))

    def _movable(self, reason: advice.Reason) -> bool:
        """Durable subscriptions move with their tokens (exactly once); plain ones only when the
        broker is draining (they go on from "now" at the new broker: docs/operations.md); a bulk
        read never."""
        subs = self._subs.values()
        if any(s.bulk for s in subs):
            return False  # a bulk read is of this broker's own log
        return reason is advice.Reason.DRAINING or all(s.checkpoint is not None for s in subs)

    async def _follow(self, reason: advice.Reason, candidates: list[advice.Candidate]) -> None:
        try:
            # the current broker is timed again beside the candidates, the same way and at the same
            # moment: a busy host's connect-time RTT alone would make any candidate look closer
            *probes, current = await asyncio.gather(*(self._probe(c.address) for c in candidates),
                                                    self._probe(self.address))
            rtt = self.rtt_ns if current is None else min(self.rtt_ns, current.rtt_ns)
            target = advice.choose(reason, rtt, [p for p in probes if p is not None], self.address)
            if target is not None and self._movable(reason) and self._closed is None:
                await self._move(target, f"route advice: {reason.value}")
        finally:
            self._following = None
            self._follow_held()

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

    async def _move(self, address: str, why: str = "route advice") -> None:
        """Go on at `address`: requests in flight here are answered first, new ones wait, and the
        application sees one client throughout (later events carry the new broker's pubend)."""
        self._moving = moving = self._loop.create_future()
        try:
            async with asyncio.timeout(MOVE_WAIT_S):
                while self._frames or self._status:
                    pending = [f for frame in self._frames.values()
                               for f in ([frame.batch] if frame.batch is not None else frame.futures or [])]
                    await asyncio.wait([*pending, *self._status.values()])
                other = await Client.connect(address, **self._connect_args, follow_advice=False)
            if self._closed is None:
                self._switch(address, other, why)
                self._resubscribe()
            else:
                await other.close()
        except (TidingsError, OSError, TimeoutError):
            pass  # stay here
        finally:
            self._moving = None
            moving.set_result(None)
            if self._outbox and not self._flush_scheduled:
                self._flush_scheduled = True
                self._loop.call_soon(self._flush)

    def _switch(self, address: str, other: Client, why: str) -> None:
        """Take over `other`'s connection and session; the old connection is closed quietly."""
        if other._renewal is not None:
            other._renewal.cancel()
        old = self._transport
        assert old is not None and other._transport is not None
        moved_from = self.address
        protocol = old.get_protocol()  # (None once the connection was lost: a failover)
        if protocol is not None:
            protocol.client = _Detached()  # type: ignore[attr-defined]
        other._transport.get_protocol().client = self  # type: ignore[attr-defined]
        self._session, self._transport = other._session, other._transport
        self.address, self.rtt_ns, self.info = address, other.rtt_ns, other.info
        self._advice_held = other._advice_held  # the new broker's; what the old one advised is moot
        self.moves += 1
        old.close()
        if self.on_move is not None:
            self.on_move(moved_from, address, why)

    def _resubscribe(self) -> None:
        """After a move: each subscription again on the new connection, the application's iterator
        unchanged. A durable one resumes after every item received, buffered here or in the
        blocking client's own buffer (the old broker is forgotten in the middle of its stream, the
        new one starts where the buffers end: nothing lost, nothing twice); a plain one from now,
        repeats dropped."""
        for old_id, sub in list(self._subs.items()):
            if sub.checkpoint is not None:
                received = sub._received or sub.checkpoint
                after = Checkpoint(received.default, dict(received.positions), received.home)
                home = None if after.home is None else list(after.home)
                new_id, frame = self._session.subscribe(sub.pattern, sub.filter, after.default, None, sub.order,
                                                        after.to_wire()[1], home)
            else:
                sub._floor = dict(sub._seen)
                new_id, frame = self._session.subscribe(sub.pattern, sub.filter, "now", None, sub.order)
            del self._subs[old_id]
            sub.id = new_id
            self._subs[new_id] = sub
            assert self._transport is not None
            self._transport.write(frame)

    def _renew(self) -> None:
        """Keep the broker's lease on this connection's subscriptions (core/subscription/leases.py) while the
        connection is open: whether the application reads or not, the client is alive."""
        interval = self._session.renew_interval_ns
        if interval is None or self._closed is not None or self._transport is None:
            return
        if self._subs:
            self._transport.write(self._session.renew())
        self._renewal = self._loop.call_later(interval / 1e9, self._renew)

    def _subscribed(self, msg: messages.Subscribed) -> None:
        sub = self._subs.get(msg.sub)
        if sub is None:
            return
        if sub._ready.done():  # subscribed again after a move: its new home
            if msg.checkpoint is not None and sub.checkpoint is not None:
                with contextlib.suppress(TidingsError):
                    sub.checkpoint.home = Checkpoint.from_wire(msg.checkpoint).home
                    if sub._received is not None:
                        sub._received.home = sub.checkpoint.home
            return
        if msg.checkpoint is not None:
            try:
                sub.checkpoint = Checkpoint.from_wire(msg.checkpoint)
            except TidingsError as exc:
                sub._fail(exc)
                return
            sub._acked = sub.checkpoint.to_wire()[:2]  # what it starts from is released already
            sub._received = Checkpoint(sub.checkpoint.default, dict(sub.checkpoint.positions), sub.checkpoint.home)
            if self._acking is None:
                self._acking = self._loop.call_later(ACK_INTERVAL_S, self._ack_durable)
        sub._ready.set_result(msg.position)

    def _silence(self, msg: messages.Silence) -> None:
        """A durable subscription's token moves up, in line with its events."""
        sub = self._subs.get(msg.sub)
        if sub is not None and sub.checkpoint is not None:
            positions = {p[0]: p[1] for p in msg.positions
                         if type(p) is list and len(p) == 2 and type(p[0]) is str and type(p[1]) is int}
            sub._push([_Silence(positions)])
            self._buffered += 1

    def _acked(self, msg: messages.Ack) -> None:
        frame = self._frames.pop(msg.seq, None)
        if frame is None:
            return
        pubend = msg.pubend
        results: list[PublishResult | BrokerError] = [
            PublishResult(pubend, tick) if tick is not None
            else self._rejections.pop(msg.seq + k, None) or BrokerError("event rejected", "rejected")
            for k, tick in enumerate(msg.ticks)
        ]
        for k in msg.duplicates:
            res = results[k] if 0 <= k < len(results) else None
            if isinstance(res, PublishResult):
                results[k] = DuplicateResult(*res)
        if frame.batch is not None:
            if not frame.batch.done():
                frame.batch.set_result(results)
            return
        for fut, res in zip(frame.futures or [], results, strict=False):
            if fut.done():
                continue
            if isinstance(res, BrokerError):
                fut.set_exception(res)
            else:
                fut.set_result(res)

    def _error(self, msg: messages.Error) -> None:
        exc = BrokerError(msg.message, msg.code)
        context = msg.context  # a coalesced ERROR may name several events and subscriptions (core/broker/refusals.py)
        if "seq" in context and self._frames:  # refused events of a PUBLISH; its ACK, after this, answers them
            for seq in self._session.refused_seqs(context, next(iter(self._frames))):
                self._rejections[seq] = exc
        if "sub" in context:
            subs = context.get("subs")
            for key in subs if isinstance(subs, list) else [context["sub"]]:
                sub = self._subs.pop(key, None) if type(key) is int else None
                if sub is not None:
                    sub._fail(exc)
        if "seq" not in context and "sub" not in context:
            self._closed = exc
            if not self._welcome.done():
                self._welcome.set_exception(exc)

    def _consumed(self, n: int) -> None:
        self._buffered -= n
        if self._reading_paused and self._buffered <= self.buffer_events_max // 2:
            self._reading_paused = False
            if self._transport is not None and not self._transport.is_closing():
                self._transport.resume_reading()

    def _closed_error(self) -> BaseException:
        if isinstance(self._closed, TidingsError):
            return self._closed
        return ConnectionClosed("the connection to the broker is closed")

    def _lost(self, exc: Exception | None) -> None:
        if self._following is not None:
            self._following.cancel()
        if self._renewal is not None:
            self._renewal.cancel()
            self._renewal = None
        if self._acking is not None:
            self._acking.cancel()
            self._acking = None
        lost = ConnectionClosed(f"the connection to the broker was lost: {exc}" if exc
                                else "the connection to the broker is closed")
        if self._closed is None and self._can_fail_over():
            self._fail_requests(lost)  # their outcome is unknown: the application decides
            self._moving = self._loop.create_future()  # new requests wait for the new connection
            self._failing_over = self._loop.create_task(self._fail_over(lost, self._moving))
            return
        if self._closed is None:
            self._closed = lost
        err = self._closed_error()
        if not self._welcome.done():
            self._welcome.set_exception(err)
        self._fail_requests(err)
        for sub in self._subs.values():
            sub._fail(err)
        self._subs.clear()

    def _fail_requests(self, err: BaseException) -> None:
        """Publishes and status requests in flight get `err`."""
        for frame in self._frames.values():
            frame.fail(err)
        self._frames.clear()
        for fut in self._status.values():
            if not fut.done():
                fut.set_exception(err)
        self._status.clear()

    # ---- failover ----------------------------------------------------------------------------

    def _can_fail_over(self) -> bool:
        """Durable subscriptions resume exactly where their tokens say on any broker; a plain one
        cannot, so a connection holding one fails as before."""
        return (self._welcome.done() and bool(self.failover) and bool(self._subs) and self._failing_over is None
                and all(sub.checkpoint is not None for sub in self._subs.values()))

    async def _fail_over(self, lost: ConnectionClosed, moving: asyncio.Future[None]) -> None:
        """Resume every subscription on the first failover broker (or the lost one, restarted) that
        answers; new requests wait (`moving`) meanwhile. After FAILOVER_S, fail as a lost
        connection does."""
        dead = self.address
        candidates = [*self.failover, dead]
        deadline = self._loop.time() + FAILOVER_S
        try:
            for attempt in range(10_000):
                for address in candidates:
                    left = deadline - self._loop.time()
                    if left <= 0 or self._closed is not None:
                        break
                    try:
                        other = await Client.connect(address, **{**self._connect_args,
                                                                 "timeout": min(left, PROBE_TIMEOUT_S)},
                                                     follow_advice=False)
                    except (TidingsError, OSError, TimeoutError):
                        continue
                    if self._closed is not None:
                        await other.close()
                        break
                    self._switch(address, other, f"failover: {lost}")
                    self.failover = [a for a in candidates if a != address]
                    self.failovers += 1
                    self._resubscribe()
                    self._renew()
                    if self._acking is None:
                        self._acking = self._loop.call_later(ACK_INTERVAL_S, self._ack_durable)
                    self._loop.call_soon(self._follow_held)  # once failing over has ended
                    return
                if self._closed is not None or self._loop.time() >= deadline:
                    break
                await asyncio.sleep(FAILOVER_BACKOFF_S[min(attempt, len(FAILOVER_BACKOFF_S) - 1)])
            self._closed = self._closed or ConnectionClosed(f"{lost}; no broker of {candidates} answered "
                                                            f"within {FAILOVER_S:g} s")
            err = self._closed_error()
            for sub in self._subs.values():
                sub._fail(err)
            self._subs.clear()
        finally:
            self._failing_over = None
            self._moving = None
            moving.set_result(None)
            if self._outbox and not self._flush_scheduled:
                self._flush_scheduled = True
                self._loop.call_soon(self._flush)

    def _abort(self) -> None:
        if self._transport is not None:
            self._transport.abort()

    def _check_open(self) -> None:
        if self._closed is not None:
            raise self._closed_error()
