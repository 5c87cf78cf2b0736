"""A simulated broker process: the `Broker` core hosted on the simulated disk and network.

Theory of operation. This is the simulator's counterpart of `tidings.aio.server.BrokerServer`, and
it drives the very same core the same way:

- every socket event becomes a core input stamped with the world's `now` (and, for Received, the
  world's wall clock in microseconds, from which the pubend takes ticks);
- the effects that come back are applied at once and in order: Sends to one connection within one
  input are joined into a single write, Disconnect flushes what was sent before and closes,
  Append / Sync / ReadLog go to the disk, whose completions come back as WriteSynced / LogRead;
- after every input the core's `next_deadline()` (re)arms the one timer, which feeds TimerFired;
- a socket's pause_writing / resume_writing become SendBlocked / SendDrained. The real transport
  calls pause_writing from inside write(); here the input is queued and handled right after the
  effects of the current input are applied, so the core never sees an input while it is inside
  `handle` (the same order the asyncio runtime produces, without the re-entrancy).

With `overlay=True` the node takes part in an overlay of simulated brokers exactly as
`tidings broker --join` does: after start it calls `start_overlay` (joining through `join`, or
starting a new overlay), and a `Connect` effect opens a simulated connection whose end reports
Connected (or ConnectFailed), then Received / ConnectionLost like an accepted one.

`crash()` is kill -9 plus power loss: the core object and every connection are discarded (peers hear
a reset), queued disk work is lost, and the disk keeps what its crash model says survives.
`restart()` builds a fresh core from what the disk holds (`LogState`, whose `last_tick` keeps ticks
monotonic), exactly as a restarted process recovers from its files. An incarnation number guards
every callback, so nothing from before a crash reaches the new core.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Protocol

from tidings.core.broker.broker import Broker
from tidings.core.config import BrokerConfig
from tidings.core.effects import (
    Append,
    Connect,
    Disconnect,
    Effect,
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
    coalesce_sends,
)
from tidings.core.inputs import (
    Accepted,
    Connected,
    ConnectFailed,
    ConnectionLost,
    Input,
    LogRead,
    LogState,
    PfsAnswered,
    Received,
    SendBlocked,
    SendDrained,
    TimerFired,
    WriteSynced,
)
from tidings.sim.disk import SURVIVE_NONE, Disk
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
                 overlay: bool = False, join: str | None = None, clock_skew_us: int = 0) -> None:
        self.world = world
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
        self._timer_at: int | None = None
        self._inputs: deque[Input] = deque()
        self._feeding = False
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
        self.disk.attach(self._synced, self._read)
        self.pfs.clear()  # as the runtime clears <data>/pfs at start
        self.network.listen(self.address, self)
        self.world.trace(self.name, "start", self.incarnation, log.last_tick, log.record_count)
        self._count("start")
        if self.overlay:
            rng = self.world.derive_rng(f"{self.name}/{self.incarnation}")
            self.apply(self.core.start_overlay(self.world.now, self.address, self.join, rng))
            self._arm_timer()

    def crash(self, survive: str = SURVIVE_NONE) -> None:
        assert self.core is not None
        self.world.trace(self.name, "crash", self.incarnation)
        self._count("crash")
        self.core = None
        self.incarnation += 1  # every callback of the old incarnation is now ignored
        self._inputs.clear()
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self._timer_at = None
        self.network.unlisten(self.address)
        if self.peer_faults is not None:
            self.peer_faults.crashed()
        for conn in sorted(self.sockets):
            self.sockets[conn].abort(notify_self=False)
        self.sockets.clear()
        self.disk.crash(survive)

    def restart(self) -> None:
        self.start()

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

    def _read(self, reader: int, records: list[tuple[int, bytes]], state: LogState) -> None:
        self.feed(LogRead(self.world.now, reader, records, state))

    def _pfs_answer(self, reader: int) -> Callable[[tuple[int, ...], int, int], None]:
        incarnation = self.incarnation

        def answer(ticks: tuple[int, ...], through: int, released: int) -> None:
            if incarnation == self.incarnation:
                self.feed(PfsAnswered(self.world.now, reader, ticks, through, released))

        return answer

    def _fire(self, incarnation: int) -> None:
        if incarnation == self.incarnation:
            self._timer = self._timer_at = None
            self.feed(TimerFired(self.world.now, self.wall_us()))

    # ---- driving the core ------------------------------------------------------------------------

    def feed(self, inp: Input) -> None:
        """Handle `inp`, then any input that applying its effects produced (flow control)."""
        if self.core is None:
            return
        self._inputs.append(inp)
        if self._feeding:
            return
        self._feeding = True
        try:
            while self._inputs and self.core is not None:
                nxt = self._inputs.popleft()
                self._trace_input(nxt)
                meter = self.meter
                if meter is None:
                    self.apply(self.core.handle(nxt))
                else:
                    meter.begin()
                    effects = self.core.handle(nxt)
                    meter.end()
                    self.apply(effects)
            if self.core is not None:
                self._arm_timer()
        finally:
            self._feeding = False

    def apply(self, effects: list[Effect]) -> None:
        disk = self.disk
        for eff in coalesce_sends(effects):
            if isinstance(eff, Append):
                self._trace_effect("Append", eff.token, len(eff.records), eff.records[-1][0])
                disk.append(eff.records, eff.keys)
            elif isinstance(eff, Sync):
                self._trace_effect("Sync", eff.token)
                disk.sync(eff.token)
            elif isinstance(eff, ReadLog):
                self._trace_effect("ReadLog", eff.reader, eff.after, eff.through)
                disk.read(eff.reader, eff.after, eff.through, eff.max_bytes)
            elif isinstance(eff, ReleaseLog):
                self._trace_effect("ReleaseLog", eff.through)
                disk.release(eff.through)
            elif isinstance(eff, SaveDurable):
                self._trace_effect("SaveDurable", len(eff.data))
                disk.save(eff.data)
            elif isinstance(eff, SaveDirectory):
                disk.directory_state = eff.data
            elif isinstance(eff, PfsAppend | PfsChop | ReadPfs):
                self._pfs_effect(eff)
            elif isinstance(eff, PeerRefused):
                continue  # counted in the core's status; only the network runtime logs it
            elif isinstance(eff, Connect):
                self._trace_effect("Connect", eff.address)
                self._next_conn += 1
                self.network.connect(eff.address, _ClientSide(self, self._next_conn, eff.address))
            else:
                self._socket_effect(eff)

    def _pfs_effect(self, eff: PfsAppend | PfsChop | ReadPfs) -> None:
        if isinstance(eff, PfsAppend):
            self.pfs.append(eff.stream, eff.entries, eff.through)
        elif isinstance(eff, PfsChop):
            self.pfs.chop(eff.stream, eff.through)
        else:
            self._trace_effect("ReadPfs", eff.reader, eff.after)
            self.pfs.read(eff.stream, eff.registration, eff.after, eff.count_max, self._pfs_answer(eff.reader))

    def _socket_effect(self, eff: Send | Disconnect | PauseReading | ResumeReading) -> None:
        sock = self.sockets.get(eff.conn)
        if isinstance(eff, Send):
            self._trace_effect("Send", eff.conn, len(eff.data))
            data = eff.data
            faults = self.peer_faults
            peers = None if self.core is None or self.core.cluster is None else self.core.cluster.peers
            if faults is not None and peers is not None and peers.owns(eff.conn):
                data = faults.filter(eff.conn, data, peers.address_of(eff.conn))
            if sock is not None and sock.open and data:
                sock.write(data)
            return
        self._trace_effect(type(eff).__name__, eff.conn)
        if sock is None:
            return
        if isinstance(eff, Disconnect):
            sock.close()
        elif isinstance(eff, PauseReading):
            sock.pause_reading()
        else:
            sock.resume_reading()

    def _arm_timer(self) -> None:
        assert self.core is not None
        deadline = self.core.next_deadline()
        if deadline == self._timer_at:
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timer_at = deadline
        if deadline is not None:
            self._timer = self.world.call_at(max(deadline, self.world.now), self._fire, self.incarnation)

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
