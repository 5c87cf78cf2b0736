"""The simulated world: one discrete-event scheduler, virtual time, the seeded randomness, the trace.

Theory of operation. Everything that happens in a simulation is an action scheduled at a virtual
instant `now` (integer nanoseconds since the world began). The world keeps a heap of
(time, seq, timer): `seq` is a counter taken when the action is scheduled, so actions due at the same
instant run in the order they were scheduled, never in an order that depends on object identity or
hashing. Running an action may schedule more; time never goes backwards (`call_at` in the past is an
error, not a silent clamp, because it would hide a bug in a model).

All randomness comes from the world: `rng` is seeded with the world's seed, and `derive_rng(name)`
gives a component its own stream (seeded from the seed and the name) so that, for instance, the disk's
latencies do not shift when a client draws one more number. No module of the simulator keeps a
random generator of its own or reads a clock.

The trace is a compact line per interesting fact (a core input or effect, a delivered message, a
crash) written by the components through `trace()`; `trace_digest()` is the sha256 of every line in
order. Two runs with the same seed produce the same digest: that is the test that the simulation is
deterministic, and a failing seed therefore replays exactly. Only a bounded tail of lines is kept in
memory, for a failure report.

Invariants: `now` never decreases; an action runs at most once, and never after it was cancelled.
"""

from __future__ import annotations

import hashlib
import heapq
import random
from collections import deque
from collections.abc import Callable
from typing import Any

from tidings.core.units import MICROSECOND_NS

# The wall clock the world shows to runtimes that need one (the pubend derives ticks from it):
# 2024-01-01T00:00:00Z in microseconds, plus virtual time.
WALL_EPOCH_US = 1_704_067_200_000_000


class Timer:
    """A scheduled action; `cancel()` makes it a no-op (it stays in the heap until its time)."""

    __slots__ = ("action", "args", "cancelled", "when")

    def __init__(self, when: int, action: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.when = when
        self.action = action
        self.args = args
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class World:
    def __init__(self, seed: int, trace_tail_lines: int = 200) -> None:
        self.seed = seed
        self.now = 0
        self.rng = random.Random(seed)
        self.steps = 0
        self.last_step_ns = 0
        self._heap: list[tuple[int, int, Timer]] = []
        self._seq = 0
        self._digest = hashlib.sha256()
        self.trace_lines = 0
        self.trace_tail: deque[str] = deque(maxlen=trace_tail_lines)

    # ---- randomness and clocks -------------------------------------------------------------------

    def derive_rng(self, name: str) -> random.Random:
        """An independent, reproducible stream for one component (string seeds hash with sha512)."""
        return random.Random(f"{self.seed}/{name}")

    def wall_us(self) -> int:
        return WALL_EPOCH_US + self.now // MICROSECOND_NS

    # ---- scheduling ------------------------------------------------------------------------------

    def call_at(self, when: int, action: Callable[..., Any], *args: Any) -> Timer:
        if when < self.now:
            raise ValueError(f"cannot schedule at {when} ns, the world is at {self.now} ns")
        timer = Timer(when, action, args)
        self._seq += 1
        heapq.heappush(self._heap, (when, self._seq, timer))
        return timer

    def call_later(self, delay_ns: int, action: Callable[..., Any], *args: Any) -> Timer:
        return self.call_at(self.now + max(0, delay_ns), action, *args)

    def call_soon(self, action: Callable[..., Any], *args: Any) -> Timer:
        """Run after every action already due now (the asyncio loop's call_soon)."""
        return self.call_at(self.now, action, *args)

    def next_time(self) -> int | None:
        """When the next live action is due, or None when nothing is scheduled."""
        heap = self._heap
        while heap and heap[0][2].cancelled:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    @property
    def idle(self) -> bool:
        return self.next_time() is None

    def step(self) -> bool:
        """Run the next action; False when nothing is left."""
        when = self.next_time()
        if when is None:
            return False
        _, _, timer = heapq.heappop(self._heap)
        assert when >= self.now
        self.now = self.last_step_ns = when
        self.steps += 1
        timer.cancelled = True  # ran: a late cancel() is harmless
        timer.action(*timer.args)
        return True

    def run(self, until_ns: int | None = None, steps_max: int | None = None) -> int:
        """Run actions due at or before `until_ns` (all when None), at most `steps_max` of them.

        Returns the number of steps taken. When stopped by `until_ns`, `now` moves to `until_ns`
        (time passes even where nothing happens).
        """
        taken = 0
        while steps_max is None or taken < steps_max:
            when = self.next_time()
            if when is None or (until_ns is not None and when > until_ns):
                if until_ns is not None and until_ns > self.now:
                    self.now = until_ns
                break
            self.step()
            taken += 1
        return taken

    def run_until(self, condition: Callable[[], bool], deadline_ns: int,
                  steps_max: int | None = None) -> bool:
        """Run until `condition()` holds (checked after every step) or `deadline_ns`; returns it."""
        taken = 0
        while not condition():
            if steps_max is not None and taken >= steps_max:
                return False
            when = self.next_time()
            if when is None or when > deadline_ns:
                return condition()
            self.step()
            taken += 1
        return True

    # ---- the trace -------------------------------------------------------------------------------

    def trace(self, node: str, kind: str, *fields: object) -> None:
        line = " ".join([str(self.now), node, kind, *map(str, fields)])
        self._digest.update(line.encode())
        self._digest.update(b"\n")
        self.trace_lines += 1
        self.trace_tail.append(line)

    def trace_digest(self) -> str:
        return self._digest.hexdigest()
