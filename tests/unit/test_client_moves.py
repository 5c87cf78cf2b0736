"""The client's moves under route advice, against scripted fake brokers on 127.0.0.1: the order of
the messages is the test's, not the scheduler's."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

from tidings.client import Client
from tidings.core.event import EventRecord
from tidings.core.wire import messages
from tidings.core.wire.decoders import decode_client_message
from tidings.core.wire.frames import FrameDecoder

WAIT_S = 5.0  # for a move, or any step of one


class FakeBroker(asyncio.Protocol):
    """Answers a client's first bytes (its HELLO) with what `script(n)` gives for the n-th connection
    (WELCOME, then perhaps ADVICE, in one write: they arrive together); reads everything else."""

    def __init__(self, script: Callable[[int], bytes], count: list[int], held: dict[int, asyncio.Event],
                 connections: list[FakeBroker]) -> None:
        self.script, self.count, self.held = script, count, held
        self.answered = False
        self.transport: asyncio.Transport | None = None
        connections.append(self)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.count[0] += 1
        self.n = self.count[0]

    def data_received(self, data: bytes) -> None:
        if not self.answered and self.transport is not None:
            self.answered = True
            asyncio.get_running_loop().create_task(self._answer())

    async def _answer(self) -> None:
        if self.n in self.held:  # this connection's answer waits until the test releases it
            await self.held[self.n].wait()
        assert self.transport is not None
        self.transport.write(self.script(self.n))


async def serve(script: Callable[[int], bytes], held: dict[int, asyncio.Event] | None = None
                ) -> tuple[asyncio.Server, str, list[FakeBroker]]:
    count: list[int] = [0]
    connections: list[FakeBroker] = []
    server = await asyncio.get_running_loop().create_server(
        lambda: FakeBroker(script, count, held or {}, connections), "127.0.0.1", 0)
    return server, f"127.0.0.1:{server.sockets[0].getsockname()[1]}", connections


async def until(condition: Callable[[], object]) -> None:
    """Poll `condition` until it holds, bounded by WAIT_S (TimeoutError)."""
    async with asyncio.timeout(WAIT_S):
        while not condition():
            await asyncio.sleep(0.01)


@contextlib.asynccontextmanager
async def client_of(address: str, *servers: asyncio.Server) -> AsyncIterator[Client]:
    """A client connected to `address`; it and the fake brokers are closed on the way out."""
    client = await Client.connect(address)
    try:
        yield client
    finally:
        await client.close()
        for server in servers:
            server.close()


def welcome(name: str, draining: bool = False) -> bytes:
    return messages.welcome({"pubend": name, "clients": 1, "draining": draining, "overloaded": False})


def test_a_client_that_moved_onto_a_broker_that_began_draining_since_its_probe_moves_on():
    """A drains and advises B. B answers the client's probe as healthy, then begins draining itself:
    the connection the move makes gets WELCOME (draining) and ADVICE draining towards C in the same
    read, while the client is still moving. It must follow that advice once the move is done, not
    stay on B until B's drain timeout disconnects it (the rolling-restart publisher's failure)."""

    async def scenario() -> None:
        c, c_address, _ = await serve(lambda n: welcome("pC"))
        b, b_address, _ = await serve(lambda n: welcome("pB") if n == 1 else
                                      welcome("pB", draining=True) + messages.advice("draining", [[c_address, 100]]))
        a, a_address, _ = await serve(lambda n: welcome("pA", draining=n > 1) + (
            messages.advice("draining", [[b_address, 100]]) if n == 1 else b""))
        async with client_of(a_address, a, b, c) as client:
            moved: list[tuple[str, str, str]] = []
            client.on_move = lambda *move: moved.append(move)  # before the probes can have answered
            await until(lambda: client.address == c_address)
            assert client.moves == 2 and client.pubend == "pC"
            assert moved == [(a_address, b_address, "route advice: draining"),
                             (b_address, c_address, "route advice: draining")]

    asyncio.run(scenario())


def test_draining_advice_that_arrives_while_the_client_weighs_a_closer_hint_is_followed_after_it():
    """A's `closer` hint sends the client probing B; while B's probe is held unanswered, A starts
    draining and says so (once). The client stays for `closer` (B is not clearly closer) and must
    then follow the draining advice it received meanwhile, to C."""

    async def scenario() -> None:
        release = asyncio.Event()
        c, c_address, _ = await serve(lambda n: welcome("pC"))
        b, b_address, b_connections = await serve(lambda n: welcome("pB"), held={1: release})
        a, a_address, a_connections = await serve(lambda n: welcome("pA", draining=n > 1) + (
            messages.advice("closer", [[b_address, 100]]) if n == 1 else b""))
        async with client_of(a_address, a, b, c) as client:
            await until(lambda: b_connections)  # the client is probing B for the closer hint
            first = a_connections[0].transport
            assert first is not None
            first.write(messages.advice("draining", [[c_address, 100]]))
            await until(lambda: client.advice_held)  # read while the closer hint is weighed
            release.set()
            await until(lambda: client.address == c_address)
            assert client.moves == 1 and client.pubend == "pC"

    asyncio.run(scenario())


class SubscribingBroker(asyncio.Protocol):
    """A fake broker that answers HELLO with WELCOME and records each SUBSCRIBE; the test writes
    the rest (SUBSCRIBED, EVENTS) itself, in the order it wants."""

    def __init__(self, name: str, connections: list[SubscribingBroker]) -> None:
        self.name = name
        self.decoder = FrameDecoder(1 << 20)
        self.subscribes: list[messages.Subscribe] = []
        self.transport: asyncio.Transport | None = None
        self.closed = asyncio.Event()
        connections.append(self)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        assert self.transport is not None
        for body in self.decoder.feed(data):
            msg = decode_client_message(body)
            if isinstance(msg, messages.Hello):
                self.transport.write(welcome(self.name))
            elif isinstance(msg, messages.Subscribe):
                self.subscribes.append(msg)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed.set()

    def send(self, frame: bytes) -> None:
        assert self.transport is not None
        self.transport.write(frame)


def record(pubend: str, tick: int) -> bytes:
    return EventRecord(pubend, tick, "m/x", {}, "svc", "i", b"").encode()


def test_a_moved_plain_subscription_is_served_by_the_old_connection_until_the_new_subscribed():
    """Dial first, leave after SUBSCRIBED: on a move the old connection goes on delivering a plain
    subscription's events until the new broker confirmed it there; what comes from both once is
    taken once; then the old connection is closed."""

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        olds: list[SubscribingBroker] = []
        news: list[SubscribingBroker] = []
        a = await loop.create_server(lambda: SubscribingBroker("pA", olds), "127.0.0.1", 0)
        b = await loop.create_server(lambda: SubscribingBroker("pB", news), "127.0.0.1", 0)
        a_address = f"127.0.0.1:{a.sockets[0].getsockname()[1]}"
        b_address = f"127.0.0.1:{b.sockets[0].getsockname()[1]}"
        async with client_of(a_address, a, b) as client:
            subscribing = asyncio.ensure_future(client.subscribe("m/#"))
            await until(lambda: olds and olds[0].subscribes)
            old = olds[0]
            old.send(messages.subscribed(1, 1_000) + messages.events(1, [record("p", 1_001)]))
            sub = await asyncio.wait_for(subscribing, WAIT_S)
            assert [e.tick for e in await asyncio.wait_for(sub.next_batch(), WAIT_S)] == [1_001]
            moving = asyncio.ensure_future(client.move(b_address))
            await until(lambda: news and news[-1].subscribes)
            new = news[-1]
            assert new.subscribes[0].start == messages.START_AFTER and new.subscribes[0].after <= 1_001
            old.send(messages.events(1, [record("p", 1_002)]))  # the old connection still serves
            assert [e.tick for e in await asyncio.wait_for(sub.next_batch(), WAIT_S)] == [1_002]
            assert not old.closed.is_set()
            new.send(messages.subscribed(1, 1_001) + messages.events(1, [record("p", t) for t in (1_002, 1_003)]))
            assert [e.tick for e in await asyncio.wait_for(sub.next_batch(), WAIT_S)] == [1_003]  # 1_002 once
            await asyncio.wait_for(old.closed.wait(), WAIT_S)  # confirmed at the new broker: the old one goes
            assert await asyncio.wait_for(moving, WAIT_S) and client.address == b_address

    asyncio.run(scenario())
