"""The simulated network: TCP-like byte streams between endpoints, with latency and flow control.

Theory of operation. A `Connection` joins two `Socket`s, client side (0) and server side (1), with one
`Link` per direction. A link is what TCP gives a writer: an ordered, reliable byte stream.

- A write lands in the sender's output buffer (the asyncio transport's write buffer). A pump takes
  chunks off its head, each of a random size (1 byte up to `chunk_bytes_max`, or everything that
  fits), so frame boundaries and chunk boundaries never line up on purpose: receivers' frame
  decoders see frames split anywhere and several frames coalesced.
- A chunk arrives after a latency drawn from the `LatencyModel` (base + seeded jitter), but never
  before the chunk sent ahead of it: arrival times are clamped to be non-decreasing and the world
  breaks ties in scheduling order, so bytes are never reordered within a connection.
- A chunk takes `len(chunk) / rate` to go through, and the pump takes the next one only then: the
  link's rate is the receiver's reading speed, which is how a slow subscriber is modelled. While
  the buffer holds more than the high-water mark the writer's endpoint has heard `pause_writing`;
  when it falls back to the low-water mark it hears `resume_writing` -- exactly the asyncio
  transport's contract, which the broker runtime turns into SendBlocked / SendDrained.

`close()` is graceful: the buffer drains, then the peer reads end-of-stream (a FIN ordered after the
last byte) and both ends hear `connection_lost(reset=False)`. `abort()` is a reset, what a crashed
process or machine leaves: buffered and in-flight bytes are dropped and the peer hears
`connection_lost(reset=True)` one latency later. Connecting to an address with no listener is
refused after one latency.

Invariants: bytes written by one side arrive at the other in order, without loss or duplication,
until the connection is reset; nothing is delivered to a socket after it was closed.
"""

from __future__ import annotations

from dataclasses import dataclass

from tidings.core.units import MICROSECOND_NS, SECOND_NS
from tidings.sim.world import Timer, World

CLIENT = 0
SERVER = 1


@dataclass(frozen=True, slots=True)
class LatencyModel:
    base_ns: int = 200 * MICROSECOND_NS
    jitter_ns: int = 300 * MICROSECOND_NS

    def draw(self, rng_value: float) -> int:
        return self.base_ns + int(self.jitter_ns * rng_value)


class Endpoint:
    """What a socket reports to its owner; the asyncio.Protocol callbacks, minus the transport."""

    name = "endpoint"

    def connection_made(self, sock: Socket) -> None:
        """The client side: the connection is established (one latency after `connect`)."""

    def connection_refused(self, address: str) -> None:
        """The client side: nobody listens at `address`."""

    def data_received(self, sock: Socket, data: bytes) -> None:
        raise NotImplementedError

    def connection_lost(self, sock: Socket, reset: bool) -> None:
        raise NotImplementedError

    def pause_writing(self, sock: Socket) -> None:
        """The output buffer passed its high-water mark."""

    def resume_writing(self, sock: Socket) -> None:
        """The output buffer fell back to its low-water mark."""


class Listener:
    def accept(self, sock: Socket) -> Endpoint:
        raise NotImplementedError


class Socket:
    """One side of a connection, as its owner sees it (the asyncio transport)."""

    __slots__ = ("conn", "endpoint", "held", "open", "reading_paused", "side")

    def __init__(self, conn: Connection, side: int, endpoint: Endpoint | None) -> None:
        self.conn = conn
        self.side = side
        self.endpoint = endpoint
        self.open = True
        self.reading_paused = False
        self.held: list[bytes] = []  # chunks that arrived while reading was paused, in order

    def pause_reading(self) -> None:
        self.reading_paused = True

    def resume_reading(self) -> None:
        """Deliver what was held, in order, as a later step (never from inside the caller)."""
        if self.reading_paused:
            self.reading_paused = False
            self.conn.net.world.call_later(0, self._release)

    def _release(self) -> None:
        while self.held and not self.reading_paused and self.open and self.endpoint is not None:
            self.endpoint.data_received(self, self.held.pop(0))

    @property
    def id(self) -> int:
        return self.conn.id

    @property
    def buffered_bytes(self) -> int:
        return len(self.conn.links[self.side].buffer)

    def set_write_buffer_limits(self, high: int, low: int) -> None:
        link = self.conn.links[self.side]
        link.high = high
        link.low = low

    def write(self, data: bytes) -> None:
        """Queue bytes; silently dropped once the socket is closed (as asyncio does)."""
        if self.open and data:
            self.conn.links[self.side].write(data)

    def close(self) -> None:
        if self.open:
            self.open = False
            self.conn.links[self.side].begin_close()

    def abort(self, notify_self: bool = True) -> None:
        self.conn.reset(self.side, notify_self)


class Link:
    """One direction of a connection: the sender's buffer, the pump, and in-order arrival."""

    __slots__ = ("_pump_timer", "buffer", "bytes_buffered_max", "bytes_sent", "chunks_sent", "closing",
                 "conn", "high", "last_arrival", "low", "paused", "rate_bytes_per_s", "side")

    def __init__(self, conn: Connection, side: int, rate_bytes_per_s: int) -> None:
        self.conn = conn
        self.side = side  # the sending side
        self.rate_bytes_per_s = rate_bytes_per_s
        self.buffer = bytearray()
        self.high = 1 << 62
        self.low = 0
        self.paused = False
        self.closing = False
        self.last_arrival = 0
        self._pump_timer: Timer | None = None
        self.bytes_sent = 0
        self.chunks_sent = 0
        self.bytes_buffered_max = 0

    def write(self, data: bytes) -> None:
        self.buffer += data
        size = len(self.buffer)
        self.bytes_buffered_max = max(self.bytes_buffered_max, size)
        if not self.paused and size > self.high:
            self.paused = True
            self.conn.notify_writer(self.side, paused=True)
        self._schedule_pump(0)

    def begin_close(self) -> None:
        self.closing = True
        if not self.buffer and self._pump_timer is None:
            self.conn.finish_close(self.side, self._arrival_time())

    def stop(self) -> None:
        self.buffer.clear()
        if self._pump_timer is not None:
            self._pump_timer.cancel()
            self._pump_timer = None

    def _schedule_pump(self, delay_ns: int) -> None:
        if self._pump_timer is None and self.buffer:
            self._pump_timer = self.conn.net.world.call_later(delay_ns, self._pump)

    def _arrival_time(self, transmit_ns: int = 0) -> int:
        net = self.conn.net
        arrival = max(net.world.now + transmit_ns + net.latency.draw(net.rng.random()), self.last_arrival)
        self.last_arrival = arrival
        return arrival

    def _pump(self) -> None:
        self._pump_timer = None
        net = self.conn.net
        if not self.conn.alive or not self.buffer:
            return
        size = len(self.buffer)
        cap = min(size, net.chunk_bytes_max)
        n = cap if net.rng.random() < net.coalesce_probability else net.rng.randint(1, cap)
        chunk = bytes(self.buffer[:n])
        del self.buffer[:n]
        self.bytes_sent += n
        self.chunks_sent += 1
        transmit_ns = max(1, n * SECOND_NS // self.rate_bytes_per_s)
        net.world.call_at(self._arrival_time(transmit_ns), self.conn.arrive, self.side, chunk)
        if self.paused and len(self.buffer) <= self.low:
            self.paused = False
            self.conn.notify_writer(self.side, paused=False)
        if self.buffer:
            self._schedule_pump(transmit_ns)
        elif self.closing:
            self.conn.finish_close(self.side, self._arrival_time())


class Connection:
    __slots__ = ("address", "alive", "established", "id", "links", "net", "sockets")

    def __init__(self, net: Network, cid: int, address: str, client: Endpoint,
                 client_rate: int, server_rate: int) -> None:
        self.net = net
        self.id = cid
        self.address = address
        self.alive = True
        self.established = False  # the client heard connection_made
        self.sockets = (Socket(self, CLIENT, client), Socket(self, SERVER, None))
        self.links = (Link(self, CLIENT, client_rate), Link(self, SERVER, server_rate))

    def notify_writer(self, side: int, paused: bool) -> None:
        sock = self.sockets[side]
        if sock.endpoint is None or not self.alive:
            return
        if paused:
            sock.endpoint.pause_writing(sock)
        else:
            sock.endpoint.resume_writing(sock)

    def arrive(self, sender: int, chunk: bytes) -> None:
        receiver = self.sockets[1 - sender]
        if not self.alive or not receiver.open or receiver.endpoint is None:
            return
        self.net.world.trace("net", "chunk", self.id, sender, len(chunk))
        if receiver.reading_paused or receiver.held:
            receiver.held.append(chunk)
            return
        receiver.endpoint.data_received(receiver, chunk)

    def finish_close(self, closer: int, fin_at: int) -> None:
        """The closer's buffer is flushed: it hears connection_lost now, the peer reads EOF at fin_at."""
        world = self.net.world
        sock = self.sockets[closer]
        if sock.endpoint is not None:
            world.call_soon(self._lost, closer, False)
        world.call_at(fin_at, self._fin, 1 - closer)

    def _fin(self, side: int) -> None:
        sock = self.sockets[side]
        if not self.alive or not sock.open:
            self.alive = False
            return
        sock.open = False
        self.links[side].stop()
        self.alive = False
        self._lost(side, False)

    def _lost(self, side: int, reset: bool) -> None:
        sock = self.sockets[side]
        sock.open = False
        if side == CLIENT and not self.established:
            if sock.endpoint is not None:
                sock.endpoint.connection_refused(self.address)
            return
        if sock.endpoint is not None:
            self.net.world.trace("net", "lost", self.id, side, int(reset))
            sock.endpoint.connection_lost(sock, reset)

    def reset(self, side: int, notify_self: bool) -> None:
        """Abort from `side`: drop every buffered and in-flight byte; the peer hears it later."""
        if not self.alive:
            return
        self.alive = False
        world = self.net.world
        world.trace("net", "reset", self.id, side)
        for link in self.links:
            link.stop()
        me, peer = self.sockets[side], self.sockets[1 - side]
        if peer.open:
            peer.open = False  # the RST is ordered after whatever the resetting side sent before
            world.call_at(self.links[side]._arrival_time(), self._lost_reset, 1 - side)
        if me.open:
            me.open = False
            if notify_self:
                world.call_soon(self._lost_reset, side)

    def _lost_reset(self, side: int) -> None:
        sock = self.sockets[side]
        if side == CLIENT and not self.established:
            if sock.endpoint is not None:
                sock.endpoint.connection_refused(self.address)
            return
        if sock.endpoint is not None:
            self.net.world.trace("net", "lost", self.id, side, 1)
            sock.endpoint.connection_lost(sock, True)


class Network:
    def __init__(self, world: World, latency: LatencyModel | None = None, chunk_bytes_max: int = 16_384,
                 coalesce_probability: float = 0.3, rate_bytes_per_s: int = 1_000_000_000) -> None:
        self.world = world
        self.rng = world.derive_rng("network")
        self.latency = latency or LatencyModel()
        self.chunk_bytes_max = chunk_bytes_max
        self.coalesce_probability = coalesce_probability
        self.rate_bytes_per_s = rate_bytes_per_s
        self.listeners: dict[str, Listener] = {}
        self.connections: list[Connection] = []
        self._next_id = 0

    def listen(self, address: str, listener: Listener) -> None:
        assert address not in self.listeners, f"{address} is already listening"
        self.listeners[address] = listener

    def unlisten(self, address: str) -> None:
        self.listeners.pop(address, None)

    def connect(self, address: str, client: Endpoint, client_rate_bytes_per_s: int | None = None,
                server_rate_bytes_per_s: int | None = None) -> None:
        """Open a connection; `client` hears connection_made or connection_refused.

        `server_rate_bytes_per_s` is how fast the client reads what the server sends (a slow reader
        has a low one); `client_rate_bytes_per_s` the other way round.
        """
        delay = self.latency.draw(self.rng.random())
        self.world.call_later(delay, self._syn, address, client,
                              client_rate_bytes_per_s or self.rate_bytes_per_s,
                              server_rate_bytes_per_s or self.rate_bytes_per_s)

    def _syn(self, address: str, client: Endpoint, client_rate: int, server_rate: int) -> None:
        listener = self.listeners.get(address)
        world = self.world
        if listener is None:
            world.trace("net", "refused", address, client.name)
            world.call_later(self.latency.draw(self.rng.random()), client.connection_refused, address)
            return
        self._next_id += 1
        conn = Connection(self, self._next_id, address, client, client_rate, server_rate)
        self.connections.append(conn)
        world.trace("net", "accept", conn.id, address, client.name)
        server = conn.sockets[SERVER]
        server.endpoint = listener.accept(server)
        # the SYN-ACK travels like data, so nothing the server sends can overtake it
        world.call_at(conn.links[SERVER]._arrival_time(), self._established, conn)

    def _established(self, conn: Connection) -> None:
        sock = conn.sockets[CLIENT]
        if conn.alive and sock.open and sock.endpoint is not None:
            conn.established = True
            sock.endpoint.connection_made(sock)
