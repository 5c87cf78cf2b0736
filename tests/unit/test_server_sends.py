"""The runtime's writes (aio/server.py `_send`) never raise on a connection already closed.

A dial is bounded by handshake_timeout_ns (`asyncio.wait_for` around `create_connection`). On a
loaded machine the timeout can fall after the transport called `connection_made` (so the core
heard Connected and wrote its PEER_HELLO) but before `create_connection` returned: the loop then
closes the transport itself, and uvloop does it with `tr._close()`, which closes the handle without
setting `is_closing()` and without ever calling `connection_lost` (uvloop/loop.pyx,
create_connection). The core was told ConnectFailed for a Connect it had seen answered, kept the
link in its handshake, and at its handshake timeout sent PEER_ERROR to the dead transport: uvloop
raised "the handler is closed" out of `_send`. `FakeTransport` behaves as such a transport does;
`FakeLoop.create_connection` plays that interleaving deterministically.
"""

import asyncio
from pathlib import Path

from tidings.aio.server import BrokerServer
from tidings.core.drive import Driver
from tidings.core.effects import Disconnect, Send
from tidings.core.inputs import Connected, ConnectFailed, ConnectionLost


class FakeTransport:
    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.closing = False  # close() was called
        self.alive = True  # False: the handle is closed under us (uvloop's tr._close())

    def get_extra_info(self, name: str) -> None:
        return None

    def set_write_buffer_limits(self, high: int, low: int) -> None:
        pass

    def is_closing(self) -> bool:
        return self.closing

    def write(self, data: bytes) -> None:
        if not self.alive:
            raise RuntimeError(f"unable to perform operation on {self!r}; the handler is closed")
        self.written.append(data)

    def close(self) -> None:
        self.closing = True


class FakeLoop:
    """create_connection makes the connection, then the dial's timeout falls before it returns."""

    def __init__(self, transport: FakeTransport) -> None:
        self.transport = transport

    async def create_connection(self, factory, host, port, ssl=None):
        factory().connection_made(self.transport)
        self.transport.alive = False  # uvloop's tr._close() on the cancellation: no connection_lost
        raise TimeoutError


class Recorder:
    def arm(self, deadline: int | None) -> None:
        pass

    def settled(self) -> None:
        pass


def server_with(tmp_path: Path, effects_for=None):
    """A BrokerServer (not started) whose inputs are recorded, and handed to `effects_for` through
    the real driver and the server's own effect handlers, when given."""
    server = BrokerServer(tmp_path, "127.0.0.1", 0)
    inputs = []

    def handle(inp):
        inputs.append(inp)
        return effects_for(inp) if effects_for is not None else []

    server.driver = Driver(handle, lambda: None, server._handlers(None), Recorder())  # type: ignore[arg-type]
    return server, inputs


def test_a_dial_that_times_out_after_connection_made_is_a_lost_connection_and_not_written_to(tmp_path):
    transport = FakeTransport()
    server, inputs = server_with(tmp_path)

    async def dial() -> None:
        server._loop = FakeLoop(transport)  # type: ignore[assignment]
        await server._connect(7, "127.0.0.1:9")

    asyncio.run(dial())
    assert [type(i) for i in inputs] == [Connected, ConnectionLost]  # not ConnectFailed: it was answered
    assert inputs[1].conn == 7 and 7 not in server.transports
    assert not any(isinstance(i, ConnectFailed) for i in inputs)
    server._send(Send(7, b"PEER_ERROR handshake-timeout"))  # the core's late effect: dropped, no raise
    server._disconnect(Disconnect(7, "no PEER_WELCOME"))
    assert transport.written == [] and server.sends_dropped == 1


def test_a_write_to_a_handle_closed_under_us_is_dropped_and_counted(tmp_path):
    server, _ = server_with(tmp_path)
    transport = FakeTransport()
    transport.alive = False
    server.transports[3] = transport  # type: ignore[assignment]
    server._send(Send(3, b"late"))
    assert transport.written == [] and server.sends_dropped == 1


def test_sends_after_a_disconnect_in_one_batch_and_to_a_gone_connection_are_dropped(tmp_path):
    """One input whose effects close a connection and then send to it, and send to a connection
    the runtime no longer has: the driver applies them in order (coalesce_sends puts the joined
    Send before the Disconnect and the later one after it); only the first write happens."""
    transport = FakeTransport()
    server, _ = server_with(tmp_path, lambda inp: [Send(5, b"a"), Disconnect(5, "bye"), Send(5, b"b"),
                                                   Send(6, b"gone")])
    server.transports[5] = transport  # type: ignore[assignment]
    server.feed(ConnectionLost(0, 99))  # any input: the recorded core answers with the batch above
    assert transport.written == [b"a"] and transport.closing
    assert server.sends_dropped == 2
