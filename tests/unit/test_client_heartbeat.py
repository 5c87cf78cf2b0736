"""The client's heartbeat against a scripted broker older than HEARTBEAT on 127.0.0.1: it answers
the first HEARTBEAT with a context-free `unknown-message` ERROR, which must neither close the client
nor stop the heartbeat (it asks STATUS instead, and the answers keep the broker alive)."""

from __future__ import annotations

import asyncio

from tests.unit.test_client_moves import until
from tidings.client import Client
from tidings.core import errors
from tidings.core.session.roaming import Mode
from tidings.core.wire import messages
from tidings.core.wire.frames import FrameDecoder
from tidings.core.wire.types import ClientType

SILENCE_S = 0.4  # the client's broker_silence: a heartbeat every 0.2 s of quiet


class OldBroker(asyncio.Protocol):
    def __init__(self, seen: list[str]) -> None:
        self.seen = seen
        self.decoder = FrameDecoder(1 << 20)
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        assert self.transport is not None
        for body in self.decoder.feed(data):
            if body[1] == ClientType.HEARTBEAT:  # (a one-element array: 0x91, then the type)
                self.seen.append("heartbeat")
                self.transport.write(messages.error(errors.UNKNOWN_MESSAGE, "unknown message type 10"))
                continue
            msg = messages.decode_client_message(body)
            self.seen.append(type(msg).__name__)
            if isinstance(msg, messages.Hello):
                self.transport.write(messages.welcome({"pubend": "old"}))
            elif isinstance(msg, messages.StatusRequest):
                self.transport.write(messages.status_reply(msg.req, {"old": True}))


def test_a_broker_older_than_heartbeat_is_asked_status_and_the_client_stays_open():
    async def scenario() -> None:
        seen: list[str] = []
        server = await asyncio.get_running_loop().create_server(lambda: OldBroker(seen), "127.0.0.1", 0)
        address = f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
        client = await Client.connect(address, failover=["127.0.0.1:1"], broker_silence=SILENCE_S,
                                      follow_advice=False)
        try:
            await until(lambda: seen.count("StatusRequest") >= 3)  # several silences, each answered
            assert seen.count("heartbeat") == 1 and seen.index("heartbeat") < seen.index("StatusRequest")
            assert client.mode is Mode.SERVING and client.failovers == 0
            assert await client.status() == {"old": True}  # the ERROR did not close the client
        finally:
            await client.close()
            server.close()

    asyncio.run(scenario())
