"""Fault injectors: broker crashes (often between a write and its sync) and clients' own disconnections.

Theory of operation. A `CrashInjector` draws its crash instants from its own seeded stream, within a
window of virtual time. At each instant it either crashes the broker at once, or -- the interesting
case -- arms itself and waits for the disk to start a sync, then crashes at a random instant before
that sync completes: the records of the batches under that sync are written but not durable, their
publishers are not yet acknowledged, and the disk's crash model decides which prefix of them
survives. After a seeded downtime the broker restarts from its disk. An observer hears every crash
right after the disk lost its volatile tail, which is when "acknowledged means durable" must hold.

A `DropInjector` makes clients drop their own connection at random instants; they reconnect and
resume, which exercises resubscription without any broker fault.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tidings.core.units import MILLISECOND_NS
from tidings.sim.broker_node import BrokerNode
from tidings.sim.clients import SimClient
from tidings.sim.disk import SURVIVE_ALL, SURVIVE_NONE, SURVIVE_PREFIX
from tidings.sim.world import Timer, World


class CrashInjector:
    def __init__(self, world: World, node: BrokerNode, crashes: int, window_ns: tuple[int, int],
                 downtime_ns: tuple[int, int] = (2 * MILLISECOND_NS, 20 * MILLISECOND_NS),
                 during_sync_probability: float = 0.75, first_during_sync: bool = True,
                 survive: Sequence[str] = (SURVIVE_NONE, SURVIVE_PREFIX, SURVIVE_ALL),
                 sync_wait_ns_max: int = 50 * MILLISECOND_NS,
                 on_crash: Callable[[], None] | None = None) -> None:
        self.world = world
        self.node = node
        self.rng = world.derive_rng("crashes")
        self.downtime_ns = downtime_ns
        self.during_sync_probability = during_sync_probability
        self.first_during_sync = first_during_sync
        self.survive = tuple(survive)
        self.sync_wait_ns_max = sync_wait_ns_max
        self.on_crash = on_crash
        self.crashes = 0
        self.crashes_during_sync = 0
        self._armed: Timer | None = None
        for when in sorted(self.rng.randint(*window_ns) for _ in range(crashes)):
            world.call_at(when, self._due)

    def _due(self) -> None:
        if not self.node.up or self._armed is not None:
            self.world.call_later(self.downtime_ns[1], self._due)  # let the previous one finish
            return
        draw = self.rng.random()
        if draw < self.during_sync_probability or (self.first_during_sync and self.crashes == 0):
            # wait for the next sync to start; give up waiting (and crash anyway) after a while
            self._armed = self.world.call_later(self.sync_wait_ns_max, self._give_up)
            self.node.disk.on_sync_started.append(self._sync_started)
        else:
            self._crash(during_sync=False)

    def _disarm(self) -> None:
        if self._armed is not None:
            self._armed.cancel()
            self._armed = None
        if self._sync_started in self.node.disk.on_sync_started:
            self.node.disk.on_sync_started.remove(self._sync_started)

    def _give_up(self) -> None:
        self._armed = None
        self._disarm()
        self._crash(during_sync=False)

    def _sync_started(self, done_at: int) -> None:
        self._disarm()
        when = self.rng.randint(self.world.now, done_at - 1)
        self._armed = self.world.call_at(when, self._crash_armed)

    def _crash_armed(self) -> None:
        self._armed = None
        self._crash(during_sync=True)

    def _crash(self, during_sync: bool) -> None:
        if not self.node.up:
            return
        self.crashes += 1
        if during_sync:
            self.crashes_during_sync += 1
        self.node.crash(self.rng.choice(self.survive))
        if self.on_crash is not None:
            self.on_crash()
        self.world.call_later(self.rng.randint(*self.downtime_ns), self.node.restart)


class DropInjector:
    def __init__(self, world: World, clients: Sequence[SimClient], drops: int,
                 window_ns: tuple[int, int]) -> None:
        self.world = world
        self.clients = list(clients)
        self.rng = world.derive_rng("drops")
        self.drops = 0
        if not self.clients:
            return
        for when in sorted(self.rng.randint(*window_ns) for _ in range(drops)):
            world.call_at(when, self._drop, self.rng.randrange(len(self.clients)))

    def _drop(self, index: int) -> None:
        client = self.clients[index]
        if client.sock is not None:
            self.drops += 1
            client.drop()
