"""One deadline structure for a machine's timers, keyed by typed timer keys.

A machine sets a timer under a key (a small frozen value naming what the timer is for, e.g.
`GapTimer(tree, pubend)`), replaces it by setting the same key again, and cancels it by key. The
runtime asks `next_deadline()` and calls the machine's `handle_timeout(now)`, which takes the due
keys with `pop_due(now)` and acts on each. Entries live in a heap with lazy deletion: a replaced or
cancelled entry stays in the heap until it surfaces, and is skipped then, so every operation is
O(log n). Ties are broken by insertion order, so the same inputs always fire timers in the same
order (no dependence on hashing).

Keys are typed: a key is told from another by its type as well as its value, so two key types
whose values compare equal (two field-less NamedTuples are both `()`) are two timers, not one.

The one timer contract (`TimedMachine`): every machine with time-driven rules holds its timers in
`Deadlines` of its typed keys and exposes `next_deadline() -> int | None` and
`handle_timeout(now: int) -> list[<its typed effects>]`; nothing else (a wall clock, an output
list) is passed to `handle_timeout`: what a machine needs besides `now` is an input it was given
before. Its composer calls `handle_timeout` when its deadline is due, in a fixed order (the broker
calls only the due ones, and so does the cluster member, but for Pastry and the links, which it
calls at any of its deadlines).

The earliest deadline, kept as it changes (`Alarm`). A runtime arms one timer at the broker's
earliest deadline after every input. Asking each machine for its `next_deadline()` after every input
would walk them all (a dozen machines, through two composers) although most inputs move no timer.
So every `Deadlines` of a broker's machines is given the broker's one `Alarm`, and tells it when an
entry is set, replaced, cancelled or popped: a deadline set earlier than the known minimum lowers
it at once; an entry that leaves at or below the minimum (replaced, cancelled, due) makes the
minimum unknown, and only then does the next ask walk the machines (`watch`, `walk`). The
walk asks each machine's `next_deadline()` as before, so the minimum is exactly what the walk would
give after every input (a test compares both after every input of a simulated run), at the cost
of one comparison per timer operation.

A composer of machines may keep their earliest deadline in an alarm of its own whose `parent` is
the broker's (the cluster member's five machines, core/broker/cluster.py): every change is told to
both, so the composer answers `next_deadline()` from its alarm and walks its machines only when
that minimum is unknown, while the broker's alarm stays exact.
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable
from typing import Any, Generic, Protocol, TypeVar

K = TypeVar("K", bound=Hashable)
E = TypeVar("E")


class TimedMachine(Protocol[E]):
    """The one timer contract; `E` is the machine's typed effect union (core/broker/timed.py
    names every machine of a broker with its `E`, for mypy to check)."""

    def next_deadline(self) -> int | None:
        """When the machine next needs `handle_timeout` (monotonic ns), or None."""

    def handle_timeout(self, now: int) -> list[E]:
        """What the timers due at `now` do; a composer calls it when `next_deadline()` is due (the
        cluster member calls Pastry and the links at any of its deadlines: core/broker/cluster.py)."""


class HasDeadline(Protocol):
    def next_deadline(self) -> int | None: ...


class Alarm:
    """The earliest deadline of a broker's machines, kept as their `Deadlines` change (see the
    module doc): `earliest` holds while `known`; when not, `next_deadline` walks the machines the
    composer named (`watch`). `walks` counts those walks."""

    __slots__ = ("_watched", "earliest", "known", "parent", "walks")

    def __init__(self, parent: Alarm | None = None) -> None:
        """`parent`: the alarm above, told of every change too (see the module doc)."""
        self.parent = parent
        self.earliest: int | None = None
        self.known = False  # nothing is known before the first walk
        self.walks = 0
        self._watched: list[HasDeadline] = []

    def watch(self, *machines: HasDeadline) -> None:
        """Walk `machines` too (each of their `Deadlines` was given this alarm)."""
        self._watched += machines
        self.known = False

    def next_deadline(self) -> int | None:
        """The earliest deadline of the machines watched: walked only when not known."""
        if not self.known:
            self.earliest = self.walk()
            self.known = True
            self.walks += 1
        return self.earliest

    def walk(self) -> int | None:
        """The earliest deadline, asked of every machine watched (what `earliest` holds while known)."""
        live = [d for d in (m.next_deadline() for m in self._watched) if d is not None]
        return min(live) if live else None

    def set_at(self, when: int) -> None:
        """An entry was set at `when`: it may be the earliest now."""
        if self.known and (self.earliest is None or when < self.earliest):
            self.earliest = when
        if self.parent is not None:
            self.parent.set_at(when)

    def left(self, when: int) -> None:
        """An entry at `when` left (replaced, cancelled, due): at or below the minimum, the minimum
        is unknown until the next walk."""
        if self.known and self.earliest is not None and when <= self.earliest:
            self.known = False
        if self.parent is not None:
            self.parent.left(when)


class Deadlines(Generic[K]):
    __slots__ = ("_alarm", "_due", "_heap", "_seq")

    def __init__(self, alarm: Alarm | None = None) -> None:
        """`alarm`: told of every change (the broker's earliest deadline), if any."""
        self._heap: list[tuple[int, int, K]] = []
        self._due: dict[tuple[type[Any], K], tuple[int, int]] = {}  # (type, key) -> (when, seq) of its live entry
        self._seq = 0
        self._alarm = alarm

    @property
    def alarm(self) -> Alarm | None:
        """The alarm told of every change, if any."""
        return self._alarm

    def set(self, key: K, when: int) -> None:
        """Fire `key` at `when` (replacing any earlier setting of the same key)."""
        self._seq += 1
        typed = key.__class__, key
        alarm = self._alarm
        if alarm is not None:
            old = self._due.get(typed)
            if old is not None:
                alarm.left(old[0])
            alarm.set_at(when)
        self._due[typed] = (when, self._seq)
        heapq.heappush(self._heap, (when, self._seq, key))

    def set_earliest(self, key: K, when: int) -> None:
        """Fire `key` at `when` unless it is already due earlier."""
        current = self._due.get((key.__class__, key))
        if current is None or when < current[0]:
            self.set(key, when)

    def cancel(self, key: K) -> None:
        old = self._due.pop((key.__class__, key), None)
        if old is not None and self._alarm is not None:
            self._alarm.left(old[0])

    def when(self, key: K) -> int | None:
        current = self._due.get((key.__class__, key))
        return None if current is None else current[0]

    def __contains__(self, key: K) -> bool:
        return (key.__class__, key) in self._due

    def __len__(self) -> int:
        return len(self._due)

    def next_deadline(self) -> int | None:
        heap = self._heap
        while heap:
            when, seq, key = heap[0]
            if self._due.get((key.__class__, key)) == (when, seq):
                return when
            heapq.heappop(heap)
        return None

    def pop_due(self, now: int) -> list[K]:
        """The keys due at or before `now`, earliest first; they are no longer set."""
        out: list[K] = []
        heap = self._heap
        first = None
        while heap and heap[0][0] <= now:
            when, seq, key = heapq.heappop(heap)
            typed = key.__class__, key
            if self._due.get(typed) == (when, seq):
                del self._due[typed]
                out.append(key)
                if first is None:
                    first = when
        if first is not None and self._alarm is not None:
            self._alarm.left(first)  # (the earliest entry that left: the others are later)
        return out
