"""The persistent filtering subsystem of a simulated broker, in memory.

It does what the runtime's `PfsWorker` (aio/pfs_worker.py) does with `storage/pfs.py`, on the
simulated clock: PfsAppend records which registrations each tick matched, PfsChop drops a prefix (or
the stream), ReadPfs is answered after a random disk delay with the ticks after `after` that matched
the registration (at most `count_max`) and how far the answer is complete. A read sees everything
appended before it (the runtime syncs a stream before reading it). Like the runtime's, it starts
empty at each start of its broker (`clear`): the core keeps the coverage in memory.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable

from tidings.core.units import MICROSECOND_NS
from tidings.sim.world import World

Answer = Callable[[tuple[int, ...], int, int], None]  # ticks, through, released_through


class SimPfs:
    def __init__(self, world: World, name: str, read_ns_min: int = 50 * MICROSECOND_NS,
                 read_ns_max: int = 500 * MICROSECOND_NS) -> None:
        self.world = world
        self.rng = world.derive_rng(name)
        self.read_ns_min = read_ns_min
        self.read_ns_max = read_ns_max
        self._ticks: dict[str, list[int]] = {}
        self._matches: dict[str, list[frozenset[int]]] = {}
        self._through: dict[str, int] = {}
        self._released: dict[str, int] = {}
        self.reads = 0

    def clear(self) -> None:
        self._ticks.clear()
        self._matches.clear()
        self._through.clear()
        self._released.clear()

    def append(self, stream: str, entries: list[tuple[int, list[int]]], through: int) -> None:
        ticks = self._ticks.setdefault(stream, [])
        matches = self._matches.setdefault(stream, [])
        for tick, registrations in entries:
            assert not ticks or tick > ticks[-1], "PFS ticks rise per stream"
            assert tick > self._through.get(stream, 0), "a PFS stream is appended after what it knows"
            ticks.append(tick)
            matches.append(frozenset(registrations))
        self._through[stream] = max(through, self._through.get(stream, 0))

    def chop(self, stream: str, through: int | None) -> None:
        if through is None:
            for table in (self._ticks, self._matches, self._through, self._released):
                table.pop(stream, None)
            return
        ticks = self._ticks.get(stream)
        if ticks is None:
            return
        count = bisect.bisect_right(ticks, through)
        del ticks[:count]
        del self._matches[stream][:count]
        self._released[stream] = max(through, self._released.get(stream, 0))

    def read(self, stream: str, registration: int, after: int, count_max: int, answer: Answer) -> None:
        """Answer after a disk delay (through -1 when the stream is unknown)."""
        delay = self.rng.randint(self.read_ns_min, self.read_ns_max)
        self.world.call_later(delay, self._answer, stream, registration, after, count_max, answer)

    def _answer(self, stream: str, registration: int, after: int, count_max: int, answer: Answer) -> None:
        self.reads += 1
        ticks = self._ticks.get(stream)
        if ticks is None:
            answer((), -1, 0)
            return
        matches = self._matches[stream]
        found: list[int] = []
        through = max(self._through[stream], after)
        for i in range(bisect.bisect_right(ticks, after), len(ticks)):
            if registration in matches[i]:
                if len(found) == count_max:
                    through = found[-1]
                    break
                found.append(ticks[i])
        answer(tuple(found), through, self._released.get(stream, 0))
