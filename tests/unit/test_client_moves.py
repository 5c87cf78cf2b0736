"""The client's moves under route advice, against scripted fake brokers on 127.0.0.1: the order of
the messages is the test's, not the scheduler's."""

import asyncio
from collections.abc import Callable

from tidings.client import Client
from tidings.core.wire import messages

MOVED_WITHIN_S = 5.0


class FakeBroker(asyncio.Protocol):
    """Answers a client's first bytes (its HELLO) with what `script(n)` gives for the n-th connection
    (WELCOME, then perhaps ADVICE, in one write: they arrive together); reads everything else."""

    def __init__(self, script: Callable[[int], bytes], count: list[int]) -> None:
        self.script, self.count = script, count
        self.answered = False
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.count[0] += 1
        self.n = self.count[0]

    def data_received(self, data: bytes) -> None:
        if not self.answered and self.transport is not None:
            self.answered = True
            self.transport.write(self.script(self.n))


async def serve(script: Callable[[int], bytes]) -> tuple[asyncio.Server, str]:
    count = [0]
    server = await asyncio.get_running_loop().create_server(lambda: FakeBroker(script, count), "127.0.0.1", 0)
    return server, f"127.0.0.1:{server.sockets[0].getsockname()[1]}"


def welcome(name: str, draining: bool = False) -> bytes:
    return messages.welcome({"pubend": name, "clients": 1, "draining": draining, "overloaded": False})


def test_a_client_that_moved_onto_a_broker_that_began_draining_since_its_probe_moves_on():
    """A drains and advises B. B answers the client's probe as healthy, then begins draining itself:
    the connection the move makes gets WELCOME (draining) and ADVICE draining towards C in the same
    read, while the client is still moving. It must follow that advice once the move is done, not
    stay on B until B's drain timeout disconnects it (the rolling-restart publisher's failure)."""

    async def scenario() -> None:
        c, c_address = await serve(lambda n: welcome("pC"))
        b, b_address = await serve(lambda n: welcome("pB") if n == 1 else
                                   welcome("pB", draining=True) + messages.advice("draining", [[c_address, 100]]))
        a, a_address = await serve(lambda n: welcome("pA", draining=n > 1) + (
            messages.advice("draining", [[b_address, 100]]) if n == 1 else b""))
        client = await Client.connect(a_address)
        try:
            async with asyncio.timeout(MOVED_WITHIN_S):
                while client.address != c_address:
                    await asyncio.sleep(0.01)  # polling a condition, bounded by the timeout above
            assert client.moves == 2 and client.pubend == "pC"
        finally:
            await client.close()
            for server in (a, b, c):
                server.close()

    asyncio.run(scenario())
