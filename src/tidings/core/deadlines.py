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

The one timer contract: every machine with time-driven rules holds one `Deadlines` of its typed
keys and exposes `next_deadline() -> int | None` and `handle_timeout(now) -> list[<its effects>]`;
its composer calls `handle_timeout` only when its deadline is due.
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable
from typing import Any, Generic, TypeVar

K = TypeVar("K", bound=Hashable)


class Deadlines(Generic[K]):
    __slots__ = ("_due", "_heap", "_seq")

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, K]] = []
        self._due: dict[tuple[type[Any], K], tuple[int, int]] = {}  # (type, key) -> (when, seq) of its live entry
        self._seq = 0

    def set(self, key: K, when: int) -> None:
        """Fire `key` at `when` (replacing any earlier setting of the same key)."""
        self._seq += 1
        self._due[key.__class__, key] = (when, self._seq)
        heapq.heappush(self._heap, (when, self._seq, key))

    def set_earliest(self, key: K, when: int) -> None:
        """Fire `key` at `when` unless it is already due earlier."""
        current = self._due.get((key.__class__, key))
        if current is None or when < current[0]:
            self.set(key, when)

    def cancel(self, key: K) -> None:
        self._due.pop((key.__class__, key), None)

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
        while heap and heap[0][0] <= now:
            when, seq, key = heapq.heappop(heap)
            typed = key.__class__, key
            if self._due.get(typed) == (when, seq):
                del self._due[typed]
                out.append(key)
        return out
