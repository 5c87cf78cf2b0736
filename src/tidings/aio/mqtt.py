"""The broker's MQTT listeners (`--mqtt HOST:PORT`, `--mqtt-tls HOST:PORT`): MQTT clients on ports of
their own, driving the same core (core/mqtt/gateway.py composes their sessions around the broker).

Each accepted connection is the server's own protocol class (aio/server.py `_Connection`: the same
write buffer limits, TCP_NODELAY, reads paused and resumed by the core), numbered from the same
counter as every other connection; before its `Accepted` reaches the core the gateway is told that
it is an MQTT connection, and whether a password may travel on it (TLS, or a loopback peer, or the
broker's --allow-plain-password: the core decides with that). 1883 is MQTT's port by convention,
8883 with TLS; TLS uses the broker's certificate (--tls-cert, --tls-key).

A password's scrypt (about 80 ms) never runs on the event loop: the gateway asks for it
(`DeriveKey`, core/mqtt/derivations.py, which bounds how many are asked for at once), a pool of
`DERIVE_WORKERS` threads runs it (hashlib.scrypt releases the GIL) and the result comes back to the
gateway on the loop (`KeyDerived`), through the driver like any input. The persistent sessions'
QoS 2 keys (core/mqtt/exactly_once.py) are saved the same way: `SaveMqttState` written by one thread
(so in order) into the data directory's `mqtt.state` slots (storage/slots.py: one fdatasync a save),
`MqttStateSaved` back on the loop, and the PUBCOMPs that waited for it go.

A publisher's runs of plain PUBLISH packets are read in C where core/mqtt/_publishes.c was built
(the same fields as the Python reader's: core/mqtt/codec.py); TIDINGS_NATIVE_MQTT=0 reads them in
Python.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import os
import secrets
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tidings.aio.server import _Connection
from tidings.core.auth.credentials import salted_key
from tidings.core.effects import Effect
from tidings.core.errors import TidingsError
from tidings.core.inputs import Accepted, Input
from tidings.core.mqtt import codec
from tidings.core.mqtt.bridge import MqttSettings
from tidings.core.mqtt.derivations import DeriveKey, KeyDerived
from tidings.core.mqtt.exactly_once import MqttStateSaved, SaveMqttState
from tidings.core.mqtt.gateway import MqttGateway
from tidings.storage.slots import SlotPair

DERIVE_WORKERS = max(1, min(4, (os.cpu_count() or 2) - 1))  # scrypt threads (16 MiB each while running),
# a core left for the event loop
STATE_FILE = "mqtt.state"  # the persistent sessions' QoS 2 keys (core/mqtt/exactly_once.py): its slots .0, .1
log = logging.getLogger("tidings.mqtt")

if TYPE_CHECKING:
    from tidings.aio.server import BrokerServer


@dataclass(frozen=True, slots=True)
class MqttListen:
    host: str
    port: int
    tls: bool = False


@dataclass(frozen=True, slots=True)
class MqttOptions:
    """What `tidings broker` was asked to serve MQTT on, and how."""

    listens: tuple[MqttListen, ...]
    settings: MqttSettings = field(default_factory=MqttSettings)


class _MqttConnection(_Connection):
    __slots__ = ("gateway", "tls")

    def __init__(self, server: BrokerServer, conn: int, gateway: MqttGateway, tls: bool) -> None:
        super().__init__(server, conn)
        self.gateway = gateway
        self.tls = tls

    def accepted(self, now: int, transport: asyncio.Transport) -> Accepted:
        peer = transport.get_extra_info("peername")
        loopback = False
        if isinstance(peer, tuple) and peer:
            try:
                loopback = ipaddress.ip_address(str(peer[0])).is_loopback
            except ValueError:
                loopback = False
        source = str(peer[0]) if isinstance(peer, tuple) and peer else ""
        self.gateway.expect(self.conn, self.tls or loopback, source)
        return super().accepted(now, transport)


class MqttListeners:
    """The MQTT ports of one broker server: started after its own, closed before it stops."""

    def __init__(self, server: BrokerServer, options: MqttOptions) -> None:
        assert server.core is not None
        codec.use_native(os.environ.get("TIDINGS_NATIVE_MQTT") != "0")  # PUBLISH runs read in C (_publishes.c)
        self.server = server
        self.options = options
        self.state = SlotPair(server.data_dir / STATE_FILE)
        self.gateway = MqttGateway(server.core, options.settings, secrets.token_bytes, self.state.load())
        self.servers: list[asyncio.Server] = []
        self.addresses: list[tuple[str, bool]] = []  # (host:port as bound, tls)
        self.pool = ThreadPoolExecutor(DERIVE_WORKERS, thread_name_prefix="tidings-mqtt-scrypt")
        self.saver = ThreadPoolExecutor(1, thread_name_prefix="tidings-mqtt-state")
        self.loop: asyncio.AbstractEventLoop | None = None
        self.closed = False

    def handle(self, inp: Input) -> list[Effect]:
        """The gateway's `handle` for the driver; the derivations it asked for go to the workers."""
        effects = self.gateway.handle(inp)
        self._derive()
        self._save()
        return effects

    def _save(self) -> None:
        if self.closed:  # (connections lost while stopping: the saver is shut down)
            return
        for save in self.gateway.take_saves():
            self.saver.submit(self._write, save)

    def _write(self, save: SaveMqttState) -> None:
        """On the saver thread: the state on disk, then its completion on the loop."""
        try:
            self.state.save(save.data)
        except OSError as exc:  # its PUBCOMPs are not sent: the clients retry their PUBREL on reconnect
            log.error("the MQTT state could not be saved to %s: %s", self.state.path, exc)
            return
        loop = self.loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._saved, save.version)

    def _saved(self, version: int) -> None:
        driver = self.server.driver
        if driver is None:
            return
        driver.run(self.gateway.state_saved(MqttStateSaved(time.monotonic_ns(), version)))
        self._derive()
        self._save()

    def _derive(self) -> None:
        for ask in self.gateway.take_derivations():
            self.pool.submit(self._run, ask)

    def _run(self, ask: DeriveKey) -> None:
        """On a worker thread: the scrypt, handed back to the loop."""
        try:
            salted: bytes | None = salted_key(ask.secret, ask.salt, ask.kdf)
        except (TidingsError, ValueError, MemoryError):
            salted = None
        loop = self.loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._derived, ask, salted)

    def _derived(self, ask: DeriveKey, salted: bytes | None) -> None:
        driver = self.server.driver
        if driver is None:
            return
        driver.run(self.gateway.derived(KeyDerived(time.monotonic_ns(), ask.conn, ask.ticket, salted)))
        self._derive()
        self._save()

    async def start(self) -> None:
        loop = self.loop = asyncio.get_running_loop()
        tls_context = None if self.server.tls is None else self.server.tls.server_context()
        for listen in self.options.listens:
            if listen.tls and tls_context is None:
                raise ValueError("--mqtt-tls needs the broker's certificate (--tls-cert, --tls-key)")

            def factory(tls: bool = listen.tls) -> _MqttConnection:
                return _MqttConnection(self.server, self.server.new_conn(), self.gateway, tls)

            srv = await loop.create_server(factory, listen.host, listen.port, reuse_address=True, backlog=1024,
                                           ssl=tls_context if listen.tls else None)
            self.servers.append(srv)
            port = srv.sockets[0].getsockname()[1]
            self.addresses.append((f"{listen.host}:{port}", listen.tls))

    def address(self, tls: bool) -> str | None:
        """The first bound address of the plain (or TLS) MQTT listeners."""
        return next((a for a, t in self.addresses if t == tls), None)

    def close(self) -> None:
        for srv in self.servers:
            srv.close()
        self.closed = True
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.saver.shutdown(wait=True)  # (a save under way finishes)
        self.state.close()
