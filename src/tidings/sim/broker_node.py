"""A simulated broker process: the `Broker` core hosted on the simulated disk and network.

Theory of operation. This is the simulator's counterpart of `tidings.aio.server.BrokerServer`, and
it drives the very same core with the very same loop (core/drive.py `Driver`); what it supplies is
only its I/O:

- every socket event becomes a core input stamped with the world's `now` (and, for Received, the
  world's wall clock in microseconds, from which the pubend takes ticks);
- each effect type has a handler here: Send writes to the simulated socket (through the peer
  faults), Disconnect flushes what was sent before and closes, Append / Sync / ReadLog go to the
  disk, whose completions come back as WriteSynced / LogRead;
- the driver's one timer is a World timer, at the core's `next_deadline()`, which feeds TimerFired;
- a socket's pause_writing / resume_writing become SendBlocked / SendDrained, queued by the driver
  behind the input being handled, as in the asyncio runtime.

With `overlay=True` the node takes part in an overlay of simulated brokers exactly as
`tidings broker --join` does: after start it calls `start_overlay` (joining through `join`, or
starting a new overlay), and a `Connect` effect opens a simulated connection whose end reports
Connected (or ConnectFailed), then Received / ConnectionLost like an accepted one.

`drain(timeout_ns)` is SIGTERM (DrainRequested), and `join_timeout_ns` the `--join-timeout`: when
the core says Drained or JoinTimedOut the node stops (`stopped` says why) as a clean exit does.
`crash()` is kill -9 plus power loss: the core object and every connection are discarded (peers hear
a reset), queued disk work is lost, and the disk keeps what its crash model says survives.
`restart()` builds a fresh core from what the disk holds (`LogState`, whose `last_tick` keeps ticks
monotonic), exactly as a restarted process recovers from its files. An incarnation number guards
every callback, so nothing from before a crash reaches the new core.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from tidings.core.broker.broker import Broker
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
    TimerFired,
    WriteSynced,
)
from tidings.sim.disk import SURVIVE_ALL, SURVIVE_NONE, Disk
from tidings.sim.network import Endpoint, Listener, Network, Socket
from tidings.sim.peer_faults import PeerFaults
from tidings.sim.pfs import SimPfs
from tidings.sim.world import Timer, World


class WorkMeter(Protocol):
    """Measures the work done between `begin` and `end` (one input handled by the core)."""

    def begin(self) -> None: ...

    def end(self) -> None: ...


class _ServerSide(Endpoint):
    """One accepted connection, reporting to the incarnation of the node that accepted it."""

    def __init__(self, node: BrokerNode, conn: int) -> None:
        self.node = node
        self.conn = conn
        self.incarnation = node.incarnation
        self.name = f"{node.name}#{conn}"

    def data_received(self, sock: Socket, data: bytes) -> None:
        node = self.node
        if node.incarnation == self.incarnation:
            node.feed(Received(node.world.now, node.wall_us(), self.conn, data))

    def connection_lost(self, sock: Socket, reset: bool) -> None:
        node = self.node
        if node.incarnation == self.incarnation and node.sockets.pop(self.conn, None) is not None:
            node.feed(ConnectionLost(node.world.now, self.conn))

    def pause_writing(self, sock: Socket) -> None:
        node = self.node
        if node.incarnation == self.incarnation:
            node.feed(SendBlocked(node.world.now, self.conn))

    def resume_writing(self, sock: Socket) -> None:
        node = self.node
        if node.incarnation == self.incarnation:
            node.feed(SendDrained(node.world.now, self.conn))


class _ClientSide(_ServerSide):
    """An outgoing connection to another broker (a `Connect` effect)."""

    def __init__(self, node: BrokerNode, conn: int, address: str) -> None:
        super().__init__(node, conn)
        self.address = address

    def connection_made(self, sock: Socket) -> None:
        node = self.node
        if node.incarnation == self.incarnation:
            node.sockets[self.conn] = sock
            node.feed(Connected(node.world.now, self.conn, self.address))
        else:
            sock.abort(notify_self=False)

    def connection_refused(self, address: str) -> None:
        node = self.node
        if node.incarnation == self.incarnation:
            node.feed(ConnectFailed(node.world.now, address, "refused"))


class BrokerNode(Listener):
    def __init__(self, world: World, network: Network, disk: Disk, address: str,
                 config: BrokerConfig | None = None, pubend_id: str = "p-sim", name: str = "broker",
                 overlay: bool = False, join: str | None = None, clock_skew_us: int = 0,
                 join_timeout_ns: int | None = None) -> None:
        self.world = world
        self.join_timeout_ns = join_timeout_ns  # as `tidings broker --join-timeout` (None: no bound)
        self.stopped: JoinTimedOut | Drained | None = None  # why the node stopped on its own, if it did
        self.clock_skew_us = clock_skew_us  # this broker's wall clock runs this far ahead of the world's
        self.peer_faults: PeerFaults | None = None  # loss, duplication, reordering, stalls towards peers
        self.overlay = overlay
        self.join = join
        self.network = network
        self.disk = disk
        self.pfs = SimPfs(disk.world, f"{name}/pfs")
        self.address = address
        self.config = config or BrokerConfig()
        self.pubend_id = pubend_id
        self.name = name
        self.core: Broker | None = None
        self.incarnation = 0
        self.sockets: dict[int, Socket] = {}
        self._next_conn = 0
        self._timer: Timer | None = None
        self.driver: Driver | None = None  # the one driver of this incarnation's core (core/drive.py)
        self.stats: dict[str, int] = {}
        # what the caller may hang around every `handle` of the core to measure the broker's own
        # work (src/tidings/sim/scalability.py: CPU time, or function calls). It only measures:
        # nothing here reads it back, so a run's trace does not depend on it.
        self.meter: WorkMeter | None = None

    def heal_partition(self) -> None:
        """Send what the peer faults held back across a partition, now that it is over."""
        assert self.peer_faults is not None
        for conn, data in self.peer_faults.heal().items():
            sock = self.sockets.get(conn)
            if sock is not None and sock.open and data:
                sock.write(data)

    def wall_us(self) -> int:
        return self.world.wall_us() + self.clock_skew_us

    @property
    def up(self) -> bool:
        return self.core is not None

    # ---- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        assert self.core is None
        self.incarnation += 1
        self._next_conn = 0
        log: LogState = self.disk.state()
        self.core = Broker(self.config, self.pubend_id, log, durable=self.disk.durable_state,
                           directory=self.disk.directory_state)
        wall_us = self.wall_us()  # the dedup window comes back from the log's tail, as in aio/server.py
        self.core.dedup.restore(self.disk.keyed_since(wall_us - self.core.dedup.window_us), wall_us)
        self.core.start(self.world.now)
        self.driver = Driver(self._handle, self._next_deadline, self._handlers(), self)
        self.disk.attach(self._synced, self._read, self._read_failed, self._retained)
        self.pfs.clear()  # as the runtime clears <data>/pfs at start
        self.network.listen(self.address, self)
        self.world.trace(self.name, "start", self.incarnation, log.last_tick, log.record_count)
        self._count("start")
        if self.overlay:
            rng = self.world.derive_rng(f"{self.name}/{self.incarnation}")
            self.driver.run(self.core.start_overlay(self.world.now, self.address, self.join, rng,
                                                    self.join_timeout_ns))

    def crash(self, survive: str = SURVIVE_NONE) -> None:
        assert self.core is not None
        self.world.trace(self.name, "crash", self.incarnation)
        self._count("crash")
        self.core = None
        self.incarnation += 1  # every callback of the old incarnation is now ignored
        if self.driver is not None:
            self.driver.close()
            self.driver = None
        if self._timer is not None:
            self._timer.cancel()
        self._timer = None
        self.network.unlisten(self.address)
        if self.peer_faults is not None:
            self.peer_faults.crashed()
        for conn in sorted(self.sockets):
            self.sockets[conn].abort(notify_self=False)
        self.sockets.clear()
        self.disk.crash(survive)

    def restart(self) -> None:
        self.start()

    def drain(self, timeout_ns: int) -> None:
        """SIGTERM: the core drains (core/broker/lifecycle.py) and the node stops when it says Drained."""
        self.feed(DrainRequested(self.world.now, timeout_ns))

    def _stop(self, why: JoinTimedOut | Drained) -> None:
        """The core asked the process to stop: it exits cleanly, so what it wrote survives (the page
        cache is flushed as the process's files close)."""
        self.world.trace(self.name, "stop", type(why).__name__)
        self.stopped = why
        self.crash(SURVIVE_ALL)

    # ---- the network's and the disk's callbacks --------------------------------------------------

    def accept(self, sock: Socket) -> Endpoint:
        self._next_conn += 1
        conn = self._next_conn
        side = _ServerSide(self, conn)
        sock.set_write_buffer_limits(self.config.send_queue_bytes_max, self.config.send_queue_bytes_max // 4)
        self.sockets[conn] = sock
        self.feed(Accepted(self.world.now, conn))
        return side

    def _synced(self, token: int, state: LogState) -> None:
        self.feed(WriteSynced(self.world.now, token, state))

    def _read(self, reader: int, records: list[tuple[int, bytes]], state: LogState,
              span: tuple[int, bytes] | None = None) -> None:
        self.feed(LogRead(self.world.now, reader, records, state, span))

    def _read_failed(self, reader: int, reason: str) -> None:
        self.feed(ReadFailed(self.world.now, reader, reason))

    def _retained(self, state: LogState) -> None:
        self.feed(RetentionApplied(self.world.now, state))

    def _pfs_answer(self, reader: int) -> Callable[[tuple[int, ...], int, int], None]:
        incarnation = self.incarnation

        def answer(ticks: tuple[int, ...], through: int, released: int) -> None:
            if incarnation == self.incarnation:
                self.feed(PfsAnswered(self.world.now, reader, ticks, through, released))

        return answer

    def _fire(self, incarnation: int) -> None:
        if incarnation == self.incarnation and self.driver is not None:
            self._timer = None
            self.driver.fired(self.world.now, self.wall_us())

    # ---- driving the core (core/drive.py) --------------------------------------------------------

    def feed(self, inp: Input) -> None:
        """Hand `inp` to the core (queued behind the input being handled, if any: core/drive.py)."""
        if self.driver is not None:
            self.driver.feed(inp)

    def _handle(self, inp: Input) -> list[Effect]:
        """The core's `handle`, traced and, when a meter is hung here, measured."""
        core = self.core
        assert core is not None
        self._trace_input(inp)
        meter = self.meter
        if meter is None:
            return core.handle(inp)
        meter.begin()
        effects = core.handle(inp)
        meter.end()
        return effects

    def _next_deadline(self) -> int | None:
        assert self.core is not None
        return self.core.next_deadline()

    def arm(self, deadline: int | None) -> None:
        """The driver's timer: one World timer per incarnation, at the core's next deadline."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if deadline is not None:
            self._timer = self.world.call_at(max(deadline, self.world.now), self._fire, self.incarnation)

    def settled(self) -> None:
        """Nothing of the runtime's own waits on the core's progress here."""

    def _handlers(self) -> Handlers:
        return {
            Append: self._append, Sync: self._sync, ReadLog: self._read_log, ReleaseLog: self._release,
            SaveDurable: self._save_durable, SaveDirectory: self._save_directory,
            PfsAppend: self._pfs_effect, PfsChop: self._pfs_effect, ReadPfs: self._pfs_effect,
            PeerRefused: lambda eff: None,  # counted in the core's status; only the network runtime logs it
            Connect: self._connect,
            Send: self._send, Disconnect: self._socket_effect, PauseReading: self._socket_effect,
            ResumeReading: self._socket_effect,
            ApplyRetention: self._retain, JoinTimedOut: self._stop, Drained: self._stop,
        }

    def _append(self, eff: Append) -> None:
        self._trace_effect("Append", eff.token, len(eff.records), eff.records[-1][0])
        self.disk.append(eff.records, eff.keys)

    def _sync(self, eff: Sync) -> None:
        self._trace_effect("Sync", eff.token)
        self.disk.sync(eff.token)

    def _read_log(self, eff: ReadLog) -> None:
        self._trace_effect("ReadLog", eff.reader, eff.after, eff.through)
        self.disk.read(eff.reader, eff.after, eff.through, eff.max_bytes, eff.span)

    def _release(self, eff: ReleaseLog) -> None:
        self._trace_effect("ReleaseLog", eff.through)
        self.disk.release(eff.through)

    def _retain(self, eff: ApplyRetention) -> None:
        self._trace_effect("ApplyRetention", eff.bytes_max, eff.age_us)
        self.disk.retain(eff.now_us, eff.bytes_max, eff.age_us)

    def _save_durable(self, eff: SaveDurable) -> None:
        self._trace_effect("SaveDurable", len(eff.data))
        self.disk.save(eff.data)

    def _save_directory(self, eff: SaveDirectory) -> None:
        self.disk.directory_state = eff.data

    def _connect(self, eff: Connect) -> None:
        self._trace_effect("Connect", eff.address)
        self._next_conn += 1
        self.network.connect(eff.address, _ClientSide(self, self._next_conn, eff.address))

    def _pfs_effect(self, eff: PfsAppend | PfsChop | ReadPfs) -> None:
        if isinstance(eff, PfsAppend):
            self.pfs.append(eff.stream, eff.entries, eff.through)
        elif isinstance(eff, PfsChop):
            self.pfs.chop(eff.stream, eff.through)
        else:
            self._trace_effect("ReadPfs", eff.reader, eff.after)
            self.pfs.read(eff.stream, eff.registration, eff.after, eff.count_max, self._pfs_answer(eff.reader))

    def _send(self, eff: Send) -> None:
        sock = self.sockets.get(eff.conn)
        self._trace_effect("Send", eff.conn, len(eff.data))
        data = eff.data
        faults = self.peer_faults
        peers = None if self.core is None or self.core.cluster is None else self.core.cluster.peers
        if faults is not None and peers is not None and peers.owns(eff.conn):
            data = faults.filter(eff.conn, data, peers.address_of(eff.conn))
        if sock is not None and sock.open and data:
            sock.write(data)

    def _socket_effect(self, eff: Disconnect | PauseReading | ResumeReading) -> None:
        sock = self.sockets.get(eff.conn)
        self._trace_effect(type(eff).__name__, eff.conn)
        if sock is None:
            return
        if isinstance(eff, Disconnect):
            sock.close()
        elif isinstance(eff, PauseReading):
            sock.pause_reading()
        else:
            sock.resume_reading()

    # ---- the trace -------------------------------------------------------------------------------

    def _count(self, key: str) -> None:
        self.stats[key] = self.stats.get(key, 0) + 1

    def _trace_input(self, inp: Input) -> None:
        kind = type(inp).__name__
        self._count(kind)
        if isinstance(inp, Received):
            self.world.trace(self.name, kind, inp.conn, len(inp.data))
        elif isinstance(inp, WriteSynced):
            self.world.trace(self.name, kind, inp.token, inp.log.last_tick)
        elif isinstance(inp, LogRead):
            self.world.trace(self.name, kind, inp.reader, len(inp.records))
        elif isinstance(inp, TimerFired):
            self.world.trace(self.name, kind)
        else:
            self.world.trace(self.name, kind, getattr(inp, "conn", ""))

    def _trace_effect(self, kind: str, *fields: object) -> None:
        self._count(kind)
        self.world.trace(self.name, kind, *fields)
