"""The broker process: asyncio TCP server, real clock, real storage, driving `core.broker.Broker`.

Each connection is an asyncio.Protocol whose events become core inputs; the effects that come back
are applied at once. Connections to other brokers use the same protocol class: an accepted one is
reported as Accepted (the core finds out from its first frame whether a client or a broker is
speaking), one the core asked for with `Connect(address)` as Connected, or ConnectFailed when the
dial is refused or takes longer than handshake_timeout_ns. Once listening, the broker takes part in
the overlay as the address it advertises (by default the bound host and port): it starts a new
overlay, or joins the one the `join` address belongs to. Each failed attempt to reach the join
address is logged (the core retries with backoff), and a broker not in the overlay after
`join_timeout_s` stops with JoinFailed rather than run on alone, naming the last failure: a
connection error, or the join address refusing the link (e.g. "HOST:PORT requires a cluster
credential"). That bound, the drain on SIGTERM and the retention cadence are the core's deadlines
(core/broker/lifecycle.py: JoinTimedOut, Drained, ApplyRetention); this runtime does their I/O.
Every peer handshake refused at either end (PeerRefused, counted in the core's status) is logged as
a warning, at most once a second per remote host.

The core is driven by the one driver both runtimes share (core/drive.py): this module supplies a
handler per effect type and the timer (an asyncio TimerHandle), nothing of the loop itself.

Sends to one connection within one input are joined into a single write, so a burst of events
leaves in few syscalls, while a lone event is written immediately (no added latency). The
transport's write-buffer high-water mark is `send_queue_bytes_max`: past it the core hears
SendBlocked and stops queueing live events for that connection (they are read back from the log
later), which keeps memory bounded however slow a subscriber is.

Reading follows the core: PauseReading and ResumeReading (core/broker/connection.py Hold: the disk, the
identity's publish rate, a refusal window) stop and resume the transport's reads. Every refusal of
a client the core reports (core/broker/refusals.py, at most one line per connection and second) is logged
as a warning with the client's remote address and how many refusals went unlogged before it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import secrets
import signal
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from tidings.aio import collector
from tidings.aio.auth_file import load_policy
from tidings.aio.loop import new_event_loop
from tidings.aio.pfs_worker import PfsWorker
from tidings.aio.ratelog import RateLimitedLog
from tidings.aio.storage_worker import StorageWorker, log_state, restore_dedup
from tidings.aio.tls import TlsFiles
from tidings.core import event
from tidings.core.auth.guard import Guard
from tidings.core.auth.policy import AuthFileError, AuthPolicy
from tidings.core.broker.broker import Broker
from tidings.core.broker.refusals import RefusalLine
from tidings.core.config import BrokerConfig
from tidings.core.drive import Driver, Handlers
from tidings.core.effects import (
    Append,
    ApplyRetention,
    Connect,
    Disconnect,
    Drained,
    Effect,
    JoinTimedOut,
    PauseReading,
    PeerRefused,
    PfsAppend,
    PfsChop,
    ReadLog,
    ReadPfs,
    ReleaseLog,
    ResumeReading,
    SaveDirectory,
    SaveDurable,
    Send,
    Sync,
)
from tidings.core.errors import TidingsError
from tidings.core.inputs import (
    Accepted,
    Connected,
    ConnectFailed,
    ConnectionLost,
    DrainRequested,
    Input,
    LogRead,
    LogState,
    PfsAnswered,
    ReadFailed,
    Received,
    RetentionApplied,
    SendBlocked,
    SendDrained,
    WriteSynced,
)
from tidings.core.links.refusals import DIALLER_SIDE
from tidings.core.overlay.node_id import id_hex
from tidings.core.publish import batch
from tidings.storage import DataDirectoryLock, EventLog, load_or_create_identity
from tidings.storage.files import read_small_file

if TYPE_CHECKING:

    from tidings.aio.http import HttpEndpoint
    from tidings.aio.mqtt import MqttListeners, MqttOptions

log = logging.getLogger("tidings.broker")
GIL_SWITCH_INTERVAL_S = 0.0005
DURABLE_FILE = "durable.state"  # the durable subscriptions this broker hosts (core/durable/registrations.py)
DIRECTORY_FILE = "directory.state"  # the overlay's pubends as this broker knows them (core/broker/directory.py)
JOIN_TIMEOUT_S = 60.0  # default bound on joining the overlay through --join
DRAIN_TIMEOUT_S = 5.0  # default bound on waiting for advised clients to move after SIGTERM


class _Connection(asyncio.Protocol):
    __slots__ = ("address", "conn", "server", "transport")

    def __init__(self, server: BrokerServer, conn: int, address: str | None = None) -> None:
        self.server = server
        self.conn = conn
        self.address = address  # the broker we dialled; None for an accepted connection
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)  # uvloop's transports are not subclasses
        self.transport = transport
        sock = transport.get_extra_info("socket")
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple) and len(peer) >= 2:
            host = str(peer[0])
            self.server.remotes[self.conn] = f"[{host}]:{peer[1]}" if ":" in host else f"{host}:{peer[1]}"
        if sock is not None:  # acks and events are small frames: never wait for Nagle
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        high = self.server.config.send_queue_bytes_max
        transport.set_write_buffer_limits(high=high, low=high // 4)
        self.server.transports[self.conn] = transport
        if self.address is None:
            self.server.feed(self.accepted(time.monotonic_ns(), transport))
        else:
            self.server.feed(Connected(time.monotonic_ns(), self.conn, self.address))

    def accepted(self, now: int, transport: asyncio.Transport) -> Accepted:
        """The input an accepted connection is reported with (aio/mqtt.py's tells its gateway first)."""
        return Accepted(now, self.conn)

    def data_received(self, data: bytes) -> None:
        self.server.feed(Received(time.monotonic_ns(), time.time_ns() // 1000, self.conn, data))

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.gone(self.conn)

    def pause_writing(self) -> None:
        self.server.feed(SendBlocked(time.monotonic_ns(), self.conn))

    def resume_writing(self) -> None:
        self.server.feed(SendDrained(time.monotonic_ns(), self.conn))


class JoinFailed(TidingsError):
    """The broker could not join the overlay through its join address within its bound."""

    code = "join-failed"


class BrokerServer:
    def __init__(self, data_dir: Path, host: str, port: int, config: BrokerConfig | None = None,
                 join: str | None = None, advertise: str | None = None,
                 join_timeout_s: float = JOIN_TIMEOUT_S, http: tuple[str, int] | None = None,
                 auth: Path | None = None, allow_anonymous: bool = False, tls: TlsFiles | None = None,
                 mqtt: MqttOptions | None = None) -> None:
        self.data_dir = Path(data_dir)
        self._mqtt_options = mqtt  # MQTT listeners (aio/mqtt.py); None: none
        self.mqtt: MqttListeners | None = None
        self.tls = tls  # TLS on the port, and on dials to other brokers (aio/tls.py)
        self._dial_tls = None if tls is None else tls.dial_context()
        self.auth = auth  # the auth file; None lets anonymous clients in (the CLI allows that on loopback)
        self.allow_anonymous = allow_anonymous
        self.host = host
        self.port = port
        self.config = config or BrokerConfig()
        self.join = join  # a member's address to join the overlay through; None starts a new one
        self.join_timeout_s = join_timeout_s
        self._refusals_log = RateLimitedLog(log)  # refused peer handshakes, per remote host
        self.failure: TidingsError | None = None  # why the broker stopped on its own, if it did
        self._advertise = advertise
        self._dials: set[asyncio.Task[None]] = set()
        self.transports: dict[int, asyncio.Transport] = {}
        self.sends_dropped = 0  # writes to a connection already gone or closing (_send)
        self.remotes: dict[int, str] = {}  # each connection's remote address, for the log
        self._next_conn = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._stopped = asyncio.Event()
        self._stopping: asyncio.Future[None] | None = None
        self._stop_began: float | None = None
        self._drained: asyncio.Future[None] | None = None  # a drain's end (the core's Drained)
        self.core: Broker | None = None
        self.driver: Driver | None = None  # feeds the core, applies its effects, arms its timer (core/drive.py)
        self.worker: StorageWorker | None = None
        self.pfs_worker: PfsWorker | None = None
        self._lock: DataDirectoryLock | None = None
        self._http_at = http  # (host, port) for /metrics and /status; None serves no HTTP
        self.http: HttpEndpoint | None = None

    # ---- lifecycle -------------------------------------------------------------------------------

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._lock = DataDirectoryLock.acquire(self.data_dir)  # before anything there is read
        try:
            pubend = load_or_create_identity(self.data_dir, lambda: "p" + secrets.token_hex(8))
            durable = read_small_file(self.data_dir / DURABLE_FILE)
            directory = read_small_file(self.data_dir / DIRECTORY_FILE)
            event_log = await asyncio.to_thread(
                EventLog.open, self.data_dir / "log", segment_bytes_max=self.config.segment_bytes_max
            )
            self.core = Broker(self.config, pubend, log_state(event_log), Guard(self._policy(), secrets.token_bytes),
                               durable, directory)
            restored = await asyncio.to_thread(restore_dedup, self.core.dedup, event_log, time.time_ns() // 1000)
        except BaseException:
            self._lock.release()
            raise
        in_loop = os.environ.get("TIDINGS_SYNC_IN_LOOP") != "0"
        self.worker = StorageWorker(
            event_log,
            on_synced=lambda token, st: loop.call_soon_threadsafe(self._synced, token, st),
            # a quiet broker's commit made in the loop, fed in the same turn (TIDINGS_SYNC_IN_LOOP=0: always the
            # writer's; aio/storage_worker.py, docs/benchmarks.md "(d) above the disk's fsync")
            on_synced_here=self._synced_here if in_loop else None,
            on_retained=lambda st: loop.call_soon_threadsafe(self._retained, st),
            on_failed=lambda exc: loop.call_soon_threadsafe(self._log_failed, exc),
            defer=loop.call_soon,  # the loop's commit at the end of the turn: one fsync for its Syncs
        )
        log.info("log commits: %s", "a quiet broker's in its loop thread, else the writer thread" if in_loop
                 else "the writer thread")
        self.worker.start()
        self.core.start(time.monotonic_ns())
        handle, next_deadline = self.core.handle, self.core.next_deadline
        if self._mqtt_options is not None:  # MQTT sessions composed around the core (core/mqtt/gateway.py)
            from tidings.aio.mqtt import MqttListeners  # noqa: PLC0415 - only a broker asked to serve MQTT

            self.mqtt = MqttListeners(self, self._mqtt_options)
            handle, next_deadline = self.mqtt.handle, self.mqtt.gateway.next_deadline
        self.driver = Driver(handle, next_deadline, self._handlers(self.worker), self)
        self.pfs_worker = PfsWorker(self.data_dir / "pfs")
        self.pfs_worker.start()
        self._server = await loop.create_server(self._new_connection, self.host, self.port,
                                               reuse_address=True, backlog=1024,
                                               ssl=None if self.tls is None else self.tls.server_context())
        sock = self._server.sockets[0]
        self.port = sock.getsockname()[1]
        if self.mqtt is not None:
            await self.mqtt.start()
        if self._http_at is not None:
            from tidings.aio.http import HttpEndpoint  # noqa: PLC0415 - only a broker asked to serve HTTP loads aiohttp

            self.http = HttpEndpoint(self.status, *self._http_at, broker_address=self.advertised,
                                     client_tls=self._dial_tls)
            await self.http.start()
            log.info("serving /metrics, /status and the dashboard on http://%s", self.http.address)
        log.info("broker %s listening on %s:%d, log holds %d events (%d in the dedup window)", pubend, self.host,
                 self.port, event_log.record_count, restored)
        self._run(self.core.start_overlay(time.monotonic_ns(), self.advertised, self.join,
                                          random.Random(secrets.randbits(64)), round(self.join_timeout_s * 1e9)))

    @property
    def joined(self) -> bool:
        return self.core is not None and self.core.machines.joined

    def _join_timed_out(self, eff: JoinTimedOut) -> None:
        """The core's join deadline passed (core/broker/lifecycle.py): stop, saying why."""
        self.failure = JoinFailed(f"could not join the overlay through {eff.address} within "
                                  f"{eff.timeout_ns / 1e9:g} s ({eff.attempts_failed} failed attempts; "
                                  f"last: {eff.last_failure})")
        log.error("%s; stopping", self.failure)
        self._stopping = asyncio.ensure_future(self.stop())

    def _policy(self) -> AuthPolicy:
        return AuthPolicy.open() if self.auth is None else load_policy(self.auth, self.allow_anonymous)

    def reload_auth(self) -> None:
        """Read the auth file again (SIGHUP): new rules and limits apply to the next request. A
        file that does not parse is reported and the rules in force stay."""
        if self.auth is None or self.core is None:
            return
        try:
            policy = self._policy()
        except AuthFileError as exc:
            log.error("auth file not reloaded, the previous rules stay in force: %s", exc)
            return
        self._run(self.core.reload_auth(time.monotonic_ns(), policy))  # trees it created: new lists
        log.info("auth file %s reloaded", self.auth)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def status(self) -> dict[str, Any]:
        """The core's status, each client connection with the bytes its transport holds unsent (only
        the runtime knows them; the core sees SendBlocked past `send_queue_bytes_max`)."""
        assert self.core is not None
        status = self.core.status()
        for c in status["connections"]:
            transport = self.transports.get(c["conn"])
            c["queued_bytes"] = None if transport is None else transport.get_write_buffer_size()
        return status

    @property
    def advertised(self) -> str:
        """The address other brokers connect to: --advertise, else the bound host and port."""
        return self._advertise or self.address

    @property
    def node_id(self) -> str | None:
        cluster = self.core.cluster if self.core is not None else None
        return None if cluster is None else id_hex(cluster.me.node_id)

    @property
    def draining(self) -> bool:
        return self.core is not None and self.core.advice.draining

    async def wait_stopped(self) -> None:
        await self._stopped.wait()

    async def drain(self, timeout_s: float) -> None:
        """SIGTERM: the core advises every client to move to a neighbour (core/broker/advice.py) and
        says Drained once those that can move have gone and the trees have acknowledged what this
        pubend logged, at most `timeout_s` later (core/broker/lifecycle.py); then stop."""
        if self.core is not None and self._stop_began is None and self._drained is None and timeout_s > 0:
            self._drained = asyncio.get_running_loop().create_future()
            self.feed(DrainRequested(time.monotonic_ns(), round(timeout_s * 1e9)))
            await self._drained
        await self.stop()

    def _drain_over(self, eff: Drained) -> None:
        log.info("drained in %.3f s; %d clients that could move did not; %d trees or batches still owed",
                 eff.elapsed_ns / 1e9, eff.clients_left, eff.owed)
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)

    async def stop(self) -> None:
        """Stop accepting, close every connection, finish pending syncs, close the log; log one final
        line. A second call (a second signal) waits for the first."""
        if self._stop_began is not None:
            await self._stopped.wait()
            return
        self._stop_began = time.monotonic()
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)  # stopped before the drain ended (a second signal, a failure)
        if self.http is not None:
            await self.http.stop()
        if self._server is not None:
            self._server.close()
        if self.mqtt is not None:
            self.mqtt.close()
        for task in list(self._dials):
            task.cancel()
        for transport in list(self.transports.values()):
            transport.close()
        if self._timer is not None:
            self._timer.cancel()
        if self.worker is not None:
            self.worker.commit_held()  # in the loop's thread: the stop runs in another
            await asyncio.to_thread(self.worker.stop)
            worker = self.worker
            log.info("the log's commits: %d fsyncs, %.0f us each on average (%d in the loop's thread, %d by the "
                     "writer's syncer, the rest the writer's), %d of them fdatasyncs over prefilled space",
                     worker.syncs, worker.fsync_mean_us(), worker.syncs_here, worker.syncs_pipelined,
                     worker.log.fdatasyncs)
            self.worker.log.close()
        if self.pfs_worker is not None:
            await asyncio.to_thread(self.pfs_worker.stop)
        if self._lock is not None:
            self._lock.release()  # only now may another broker open this directory
        records = self.worker.log.record_count if self.worker is not None else 0
        log.info("broker %s stopped in %.3f s; its log holds %d events",
                 self.core.pubend.pubend_id if self.core is not None else "-",
                 time.monotonic() - self._stop_began, records)
        self._stopped.set()

    def _new_connection(self) -> _Connection:
        return _Connection(self, self.new_conn())

    def new_conn(self) -> int:
        """A number for a new connection, of any listener."""
        self._next_conn += 1
        return self._next_conn

    def gone(self, conn: int) -> None:
        """`conn`'s transport is closed: forget it and tell the core, once (a dial that timed out
        after its connection_made reports it here itself, since uvloop then closes the transport
        without calling connection_lost)."""
        if self.transports.pop(conn, None) is None:
            return
        self.feed(ConnectionLost(time.monotonic_ns(), conn))
        # its address is kept until the lines the core owes about it are logged
        asyncio.get_running_loop().call_soon(self.remotes.pop, conn, None)

    # ---- driving the core ------------------------------------------------------------------------

    def feed(self, inp: Input) -> None:
        """Hand one input to the core through the driver (core/drive.py): an input raised while
        effects are being applied (asyncio calls pause_writing from inside transport.write) waits
        its turn."""
        assert self.driver is not None
        self.driver.feed(inp)

    def _run(self, effects: list[Effect]) -> None:
        """Apply what a call on the core other than `handle` returned, through the driver."""
        assert self.driver is not None
        self.driver.run(effects)

    def settled(self) -> None:
        """The driver handled every queued input: log what the core noted."""
        core = self.core
        assert core is not None
        for identity, code, message in core.guard.take_notes():
            log.warning("%s: %s (%s)", identity, message, code)
        self._log_refusals(*core.reading.client_errors.take_log())

    def _log_refusals(self, lines: list[RefusalLine], dropped: int) -> None:
        """The core's refusal lines (core/broker/refusals.py: at most one per connection and second)."""
        if dropped:
            log.warning("%d more lines about refused clients were not logged (too many at once)", dropped)
        for line in lines:
            remote = self.remotes.get(line.conn, f"connection {line.conn}")
            who = (line.who if line.who.isascii() and line.who.isprintable() else ascii(line.who)) or "-"  # a claim
            unlogged = (f"; {line.suppressed} earlier refusals of this connection were not logged"
                        if line.suppressed else "")
            if not line.count:
                log.warning("client %s (%s) gone%s", remote, who, unlogged)
            else:
                many = f" [{line.count} refusals]" if line.count > 1 else ""
                log.warning("refused client %s (%s): %s (%s)%s%s", remote, who, line.message, line.code, many,
                            unlogged)

    def _synced(self, token: int, state: LogState) -> None:
        self.feed(WriteSynced(time.monotonic_ns(), token, state))

    def _synced_here(self, token: int, state: LogState) -> Callable[[bool], None]:
        """A commit in the loop's thread is about to be fsynced: the core hears of it now, while the
        disk writes, and its answer is held (aio/storage_worker.py, "The core hears of a commit
        early"). The call returned runs it once the fsync returned (True), or drops it with the
        core if the fsync failed (False: the broker stops without the core, as after a crash). When
        the core cannot hear it out of turn (a commit asked for while effects are applied) it
        hears it after the fsync, as a writer's commit."""
        driver = self.driver
        assert driver is not None
        effects = driver.hold(WriteSynced(time.monotonic_ns(), token, state))
        if effects is None:
            return lambda ok: self._synced(token, state) if ok else None
        held = effects
        return lambda ok: driver.run(held) if ok else driver.close()

    def _retained(self, state: LogState) -> None:
        self.feed(RetentionApplied(time.monotonic_ns(), state))

    def _log_failed(self, exc: BaseException) -> None:
        """The disk failed: stop rather than acknowledge what cannot be stored."""
        log.critical("the event log failed: %r; stopping", exc)
        self._stopping = asyncio.ensure_future(self.stop())

    def _handlers(self, worker: StorageWorker) -> Handlers:
        """The I/O of each effect the core asks for (core/drive.py checks every one has its own)."""
        return {
            Send: self._send, Append: lambda eff: worker.append(eff.records, eff.keys),
            Sync: lambda eff: worker.sync(eff.token),
            ReadLog: lambda eff: worker.read(eff.after, eff.through, eff.max_bytes, *self._read_callbacks(eff.reader),
                                             span=eff.span),
            ReleaseLog: lambda eff: worker.release(eff.through),
            SaveDurable: lambda eff: worker.save(self.data_dir / DURABLE_FILE, eff.data, wait=eff.before_replies),
            SaveDirectory: lambda eff: worker.save(self.data_dir / DIRECTORY_FILE, eff.data),
            PfsAppend: self._pfs_apply, PfsChop: self._pfs_apply, ReadPfs: self._pfs_apply,
            Connect: lambda eff: self._dial(eff.address), Disconnect: self._disconnect,
            PauseReading: lambda eff: self._reading(eff.conn, False),
            ResumeReading: lambda eff: self._reading(eff.conn, True),
            PeerRefused: self._peer_refused,
            ApplyRetention: lambda eff: worker.retain(eff.now_us, eff.bytes_max, eff.age_us),
            JoinTimedOut: self._join_timed_out, Drained: self._drain_over,
        }

    def _send(self, eff: Send) -> None:
        """Write to the connection, or drop the write (counted in `sends_dropped`, logged at debug)
        when its transport is gone or closing: a Send the core produced after its Disconnect in
        one input, or one for a connection whose close the core has not heard of yet."""
        transport = self.transports.get(eff.conn)
        if transport is not None and not transport.is_closing():
            try:
                transport.write(eff.data)
                return
            except RuntimeError as exc:  # uvloop: "the handler is closed" (is_closing() said no)
                self.sends_dropped += 1
                log.debug("dropped %d bytes to connection %d: %s", len(eff.data), eff.conn, exc)
                return
        self.sends_dropped += 1
        log.debug("dropped %d bytes to connection %d: its transport is %s", len(eff.data), eff.conn,
                  "gone" if transport is None else "closing")

    def _disconnect(self, eff: Disconnect) -> None:
        transport = self.transports.get(eff.conn)
        if transport is not None:
            transport.close()

    def _peer_refused(self, eff: PeerRefused) -> None:
        """Log a refused peer handshake, at most once a second per remote host; a refusal by the
        broker we join through is also what a failed join reports."""
        if eff.side == DIALLER_SIDE:
            if eff.address == self.join and not self.joined:
                self._refusals_log.log(logging.WARNING, eff.address, "cannot join the overlay through %s: %s; "
                                       "retrying", eff.address, eff.detail)
            else:
                self._refusals_log.log(logging.WARNING, eff.address, "peer link to %s refused (%s): %s",
                                       eff.address, eff.reason, eff.detail)
            return
        transport = self.transports.get(eff.conn)
        peername = None if transport is None else transport.get_extra_info("peername")
        host = str(peername[0]) if peername else "?"
        remote = f"{host}:{peername[1]}" if peername else "an unknown address"
        announced = f" announcing {eff.address!r}" if eff.address else ""
        self._refusals_log.log(logging.WARNING, host, "refused a peer link from %s%s (%s): %s", remote, announced,
                               eff.reason, eff.detail)

    def _reading(self, conn: int, on: bool) -> None:
        transport = self.transports.get(conn)
        if transport is not None and not transport.is_closing():
            if on:
                transport.resume_reading()
            else:
                transport.pause_reading()

    def _dial(self, address: str) -> None:
        """Open a connection to another broker; the core hears Connected or ConnectFailed."""
        assert self._loop is not None
        self._next_conn += 1
        task = self._loop.create_task(self._connect(self._next_conn, address))
        self._dials.add(task)
        task.add_done_callback(self._dials.discard)

    async def _connect(self, conn: int, address: str) -> None:
        assert self._loop is not None
        host, _, port = address.rpartition(":")
        protocol = _Connection(self, conn, address)
        try:
            await asyncio.wait_for(
                self._loop.create_connection(lambda: protocol, host.strip("[]"), int(port), ssl=self._dial_tls),
                self.config.handshake_timeout_ns / 1e9)
        except (OSError, ValueError, TimeoutError) as exc:
            if protocol.transport is not None:
                # the timeout fell between connection_made (the core heard Connected and wrote its
                # PEER_HELLO) and create_connection's return: the loop closed that transport, and
                # uvloop without connection_lost (is_closing() stays False). The core hears the
                # connection lost, not a dial that failed (its Connect was answered already).
                self.gone(conn)
                return
            reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            if address == self.join and not self.joined:
                log.warning("cannot reach %s to join the overlay (%s); retrying", address, reason)
            self.feed(ConnectFailed(time.monotonic_ns(), address, reason))

    def _pfs_apply(self, eff: PfsAppend | PfsChop | ReadPfs) -> None:
        """The PFS's work goes to its own thread; a read's answer comes back to the event loop."""
        pfs, loop = self.pfs_worker, self._loop
        assert pfs is not None and loop is not None
        if type(eff) is PfsAppend:
            pfs.append(eff.stream, eff.entries, eff.through)
        elif type(eff) is PfsChop:
            pfs.chop(eff.stream, eff.through)
        elif type(eff) is ReadPfs:
            reader = eff.reader

            def done(ticks: tuple[int, ...], through: int, released: int) -> None:
                loop.call_soon_threadsafe(
                    lambda: self.feed(PfsAnswered(time.monotonic_ns(), reader, ticks, through, released)))

            pfs.read(eff.stream, eff.registration, eff.after, eff.count_max, done)

    def _read_callbacks(self, reader: int) -> tuple[Any, Any]:
        """Callbacks for a reader thread: hand the result (or the failure) to the event loop."""
        loop = self._loop
        assert loop is not None

        def done(records: list[tuple[int, bytes]], state: LogState, span: tuple[int, bytes] | None) -> None:
            loop.call_soon_threadsafe(
                lambda: self.feed(LogRead(time.monotonic_ns(), reader, records, state, span))
            )

        def failed(reason: str) -> None:
            log.error("log read for subscription %d failed: %s", reader, reason)
            loop.call_soon_threadsafe(lambda: self.feed(ReadFailed(time.monotonic_ns(), reader, reason)))

        return done, failed

    def arm(self, deadline: int | None) -> None:
        """The driver's one timer, at the core's next deadline (monotonic ns)."""
        assert self._loop is not None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if deadline is not None:
            delay = max(0.0, (deadline - time.monotonic_ns()) / 1e9)
            self._timer = self._loop.call_later(delay, self._fire)

    def _fire(self) -> None:
        self._timer = None
        assert self.driver is not None
        self.driver.fired(time.monotonic_ns(), time.time_ns() // 1000)


def run_broker(data_dir: Path, host: str, port: int, config: BrokerConfig,
               ready: Any = None, join: str | None = None, advertise: str | None = None,
               join_timeout_s: float = JOIN_TIMEOUT_S, http: tuple[str, int] | None = None,
               auth: Path | None = None, allow_anonymous: bool = False, tls: TlsFiles | None = None,
               drain_timeout_s: float = DRAIN_TIMEOUT_S, mqtt: MqttOptions | None = None) -> None:
    """Run a broker in the foreground until SIGINT or SIGTERM (which drains first: clients are advised
    to move, for at most `drain_timeout_s`; a second SIGTERM stops at once); `ready(server)` is called once listening
    (and in the overlay: a new one, or joining through the member at `join`). SIGHUP rereads `auth`.
    Raises the broker's `failure` (JoinFailed) when it stopped on its own."""
    async def main() -> None:
        server = BrokerServer(data_dir, host, port, config, join=join, advertise=advertise,
                              join_timeout_s=join_timeout_s, http=http, auth=auth,
                              allow_anonymous=allow_anonymous, tls=tls, mqtt=mqtt)
        await server.start()
        collector.settle()  # the collector set for a loop that allocates per event (aio/collector.py)
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGINT, lambda: asyncio.ensure_future(server.stop()))
        loop.add_signal_handler(signal.SIGTERM, lambda: asyncio.ensure_future(
            server.stop() if server.draining else server.drain(drain_timeout_s)))
        loop.add_signal_handler(signal.SIGHUP, server.reload_auth)
        if ready is not None:
            ready(server)
        await server.wait_stopped()
        if server.failure is not None:
            raise server.failure

    # The log writer thread gives up the GIL in every write and fsync; at CPython's default 5 ms
    # switch interval it then waits behind the busy event loop for up to 5 ms each time (a convoy
    # that halved group-commit throughput in our measurements). 0.5 ms keeps both threads moving.
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
    batch.use_native(os.environ.get("TIDINGS_NATIVE_PUBLISH") != "0")  # the intake's compiled pass (batch.py)
    event.use_native(os.environ.get("TIDINGS_NATIVE_RECORDS") != "0")  # peers' records checked in C (event.py)
    with asyncio.Runner(loop_factory=new_event_loop) as runner, contextlib.suppress(KeyboardInterrupt):
        runner.run(main())
