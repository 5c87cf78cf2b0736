"""The message-level network of the overlay simulator: whole wire messages, one latency each.

Theory of operation. The single-broker simulator moves bytes through TCP-like streams; with
thousands of brokers that is far too much machinery, and the overlay cores speak in whole messages
anyway (`PeerSend(address, message)`). Here a message sent from host i to host j arrives after one
one-way latency: half the topology's RTT, stretched by a seeded jitter of up to `jitter_fraction`
of itself. Messages between one pair keep their order (the runtime uses one TCP connection per pair):
an arrival is never scheduled before the previous arrival on the same directed pair. The table of
last arrivals is pruned of entries already in the past whenever it has doubled since the last
pruning, so its memory follows the traffic in flight (not every pair that ever talked) at an
amortised constant cost per message.

What can happen to a message, decided by the receiver's state when it arrives:

- loss: with `loss_probability`, decided at send time, the message vanishes (a model of an
  overloaded path; TCP would retransmit, so keep it 0 unless a test wants the cores' own timeouts);
- the receiver is up and in the same incarnation the sender addressed: `on_arrival(src, dst, msg)`;
- the receiver failed silently (a hung process, a partitioned machine): no answer. The message
  sits unacknowledged, and `unanswered_timeout_ns` after it would have arrived the sender's runtime
  gives up on the connection (TCP's user timeout): `on_lost(src, dst, message)`;
- the receiver crashed (or was never started), or restarted since the message was sent: the
  connection is reset, and the sender hears `on_lost(src, dst, message)` one more one-way latency
  later (a TCP RST on the way back).

`on_lost` names the message because the runtime knows what it had written and never got through;
the simulation decides what the sender's member is told (see sim.py).

Invariants: no message arrives before it was sent plus the model's one-way latency; per directed
pair, arrivals keep sending order; nothing is delivered to a host that is not up.
"""

from __future__ import annotations

import random
from array import array
from collections.abc import Callable
from typing import Any

from tidings.core.units import SECOND_NS
from tidings.sim.overlay.topology import Topology
from tidings.sim.world import World

UP = 1
SILENT = 2
CRASHED = 3
STATE_NAMES = {UP: "up", SILENT: "silent", CRASHED: "crashed"}

PAIRS_PRUNE_AT = 200_000


class MessageNet:
    def __init__(self, world: World, topology: Topology,
                 on_arrival: Callable[[int, int, list[Any]], None],
                 on_lost: Callable[[int, int, list[Any]], None],
                 loss_probability: float = 0.0, jitter_fraction: float = 0.1,
                 unanswered_timeout_ns: int = 2 * SECOND_NS) -> None:
        if not 0.0 <= loss_probability < 1.0:
            raise ValueError("loss_probability must be in [0, 1)")
        self.world = world
        self.topology = topology
        self.rng: random.Random = world.derive_rng("overlay-net")
        self.on_arrival = on_arrival
        self.on_lost = on_lost
        self.unanswered_timeout_ns = unanswered_timeout_ns
        self.loss_probability = loss_probability
        self.jitter_fraction = jitter_fraction
        n = topology.n
        self.state = bytearray([CRASHED]) * n  # nothing listens on a host until it is started
        self.incarnation = array("I", bytes(4 * n))
        self._last_arrival: dict[tuple[int, int], int] = {}
        self._prune_at = PAIRS_PRUNE_AT
        self.messages_sent = 0
        self.messages_lost = 0
        self.messages_dropped = 0  # arrived at a host that was not there to read them
        # An experiment's view of every message sent (link stress counts copies per physical link).
        self.on_send: Callable[[int, int, list[Any]], None] | None = None

    def one_way_ns(self, src: int, dst: int) -> int:
        half = self.topology.rtt_ns(src, dst) // 2
        return half + int(half * self.jitter_fraction * self.rng.random())

    def send(self, src: int, dst: int, message: list[Any]) -> None:
        self.messages_sent += 1
        if self.on_send is not None:
            self.on_send(src, dst, message)
        if self.loss_probability and self.rng.random() < self.loss_probability:
            self.messages_lost += 1
            self.world.trace(f"n{src}", "lost", dst, message[0])
            return
        now = self.world.now
        pair = (src, dst)
        arrival = max(now + self.one_way_ns(src, dst), self._last_arrival.get(pair, 0))
        if len(self._last_arrival) >= self._prune_at:
            self._last_arrival = {k: t for k, t in self._last_arrival.items() if t > now}
            # Amortised: the next pruning waits until the table has doubled past what is in flight.
            self._prune_at = max(PAIRS_PRUNE_AT, 2 * len(self._last_arrival))
        self._last_arrival[pair] = arrival
        self.world.call_at(arrival, self._arrive, src, dst, self.incarnation[dst], message)

    def _arrive(self, src: int, dst: int, incarnation: int, message: list[Any]) -> None:
        state = self.state[dst]
        if state == UP and incarnation == self.incarnation[dst]:
            self.on_arrival(src, dst, message)
            return
        self.messages_dropped += 1
        if state == SILENT:
            self.world.call_later(self.unanswered_timeout_ns, self._lost, src, dst, message)
            return
        # Crashed, or a new incarnation that never had this connection: the sender is reset.
        self.world.trace(f"n{dst}", "reset", src)
        self.world.call_later(self.one_way_ns(dst, src), self._lost, src, dst, message)

    def _lost(self, src: int, dst: int, message: list[Any]) -> None:
        if self.state[src] == UP:
            self.on_lost(src, dst, message)

    # ---- host faults, set by the simulation ------------------------------------------------------

    def fail_silently(self, host: int) -> None:
        self.state[host] = SILENT

    def crash(self, host: int) -> None:
        self.state[host] = CRASHED

    def bring_up(self, host: int) -> None:
        """The host (re)starts: connections made to its earlier incarnation stay reset."""
        self.state[host] = UP
        self.incarnation[host] += 1

    def is_up(self, host: int) -> bool:
        return self.state[host] == UP
