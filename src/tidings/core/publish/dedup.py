"""Idempotent publish: the dedup window of one pubend.

Theory of operation
-------------------
A publisher that may send the same event twice (a retry after a lost ACK, a Spark task run again,
a replayed micro-batch) names each event with a *producer* id and a *producer sequence* `pseq`.
The pubend logs a `(producer, pseq)` at most once while it is in the dedup window, and answers a
duplicate with the tick the original was logged with, exactly as the original's ACK did.

The window is a suffix of this pubend's log: the keyed events with `tick > horizon`. The horizon
only moves up, for three reasons, each forgetting the oldest entries first:

- time: events older than `window_us` (ticks are microseconds of wall clock, so age is
  `now_us - tick`);
- count: more than `entries_max` entries, where an entry is a run of consecutive `pseq`s of one
  producer logged with consecutive ticks (one PUBLISH of a batch is typically one entry);
- producers: more than `producers_max` producers with entries.

A producer id is scoped by the publishing client's service (`scoped`): the window and the log keep
the pair, so two applications that chose the same id never take each other's events for repeats
(which would acknowledge an event without logging it).

So the rule a publisher can rely on is exact: a `(producer, pseq)` whose original was logged with a
tick above the horizon is a duplicate; one below it (a late duplicate, or one whose entry the caps
evicted) is logged again, as a new event with a new tick.

Durability: `remember` is called for events whose Append is emitted, before their sync; the
composer never acknowledges a duplicate before the original's tick is durable (it waits for the
same group commit). The producer id and pseq are stored in the log record beside the event
(storage/record.py), so after a crash `restore` replays the log's keyed tail (ticks above
`now_us - window_us`) in tick order and rebuilds the same suffix.

Invariants: ticks are remembered in increasing order; the entries of one producer never overlap in
pseq; every remembered tick is above the horizon. The machine does no I/O and reads no clock.
"""

from __future__ import annotations

from bisect import bisect_right, insort
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import msgpack

from tidings.core import errors
from tidings.core.errors import TidingsError

PRODUCER_BYTES_MAX = 256  # UTF-8 bytes of a producer id
SCOPE_CHARS_MAX = 256  # a client's service name (core/broker/connection.py), the scope of its producer ids
KEY_PRODUCER_BYTES_MAX = PRODUCER_BYTES_MAX + 4 * SCOPE_CHARS_MAX + 8  # a scoped id, as the log keeps it
PSEQ_MAX = 2**64 - 1  # a pseq fits msgpack's unsigned 64-bit integer


class Verdict(StrEnum):
    """What the window says about one event of an idempotent PUBLISH."""

    NEW = "new"  # log it, then remember it
    DUPLICATE = "duplicate"  # logged before, in the window: answer with the original tick
    REPEATED = "repeated"  # its pseq appears earlier in the same PUBLISH: answer with that one's tick
    REJECTED = "rejected"  # malformed: an error to the sender


@dataclass(slots=True)
class _Entry:
    """A run of consecutive pseqs of one producer, logged with consecutive ticks."""

    producer: str
    pseq_first: int
    tick_first: int
    count: int

    @property
    def tick_last(self) -> int:
        return self.tick_first + self.count - 1


def _pseq_first(entry: _Entry) -> int:
    return entry.pseq_first


@dataclass(slots=True)
class Screen:
    """One idempotent PUBLISH, sorted out: per event, a verdict and what goes with it."""

    producer: str
    verdicts: list[Verdict]
    events: list[object]  # the [channel, attributes, payload] of each event (unchecked); None when rejected
    pseqs: list[int]  # each event's pseq (0 when rejected)
    ticks: list[int | None]  # DUPLICATE: the original's tick; REPEATED: None until resolved
    first_of: dict[int, int] = field(default_factory=dict)  # REPEATED index -> first index
    problems: dict[int, TidingsError] = field(default_factory=dict)  # REJECTED index -> why


def producer_problem(producer: object, bytes_max: int = PRODUCER_BYTES_MAX) -> str | None:
    """Why `producer` is not a valid producer id (at most `bytes_max` bytes), or None."""
    if type(producer) is not str or not producer:
        return "the producer id must be a non-empty string"
    try:
        size = len(producer.encode("utf-8"))
    except UnicodeEncodeError:
        return "the producer id must be valid UTF-8 text"
    if size > bytes_max:
        return f"the producer id is longer than {bytes_max} bytes"
    return None


def pseq_problem(pseq: object) -> str | None:
    if type(pseq) is not int or not 0 <= pseq <= PSEQ_MAX:
        return f"the producer sequence must be an integer from 0 to {PSEQ_MAX}"
    return None


def scoped(scope: str, producer: str) -> str:
    """The id the window and the log keep: `producer` within `scope` (the publishing client's
    service), so that two applications that chose the same producer id do not take each other's
    events for repeats. Length-prefixed: no two (scope, producer) pairs give the same string."""
    return f"{len(scope)}:{scope}{producer}" if scope else producer


def encode_key(producer: str, pseq: int) -> bytes:
    """The bytes the log record keeps beside the event (storage/record.py)."""
    return msgpack.packb([producer, pseq])


def decode_key(key: bytes) -> tuple[str, int] | None:
    try:
        value = msgpack.unpackb(key)
    except Exception:  # msgpack raises several types for garbage
        return None
    if (type(value) is not list or len(value) != 2 or producer_problem(value[0], KEY_PRODUCER_BYTES_MAX)
            or pseq_problem(value[1]) is not None):
        return None
    return value[0], value[1]


class DedupWindow:
    """The (producer, pseq) -> tick entries of the window, and the rules that bound it."""

    def __init__(self, window_us: int, entries_max: int, producers_max: int) -> None:
        assert window_us > 0 and entries_max > 0 and producers_max > 0
        self.window_us = window_us
        self.entries_max = entries_max
        self.producers_max = producers_max
        self.horizon = 0  # every keyed event at or below this tick is forgotten
        self.last_tick = 0  # the newest tick remembered
        self._entries: deque[_Entry] = deque()  # in tick order
        self._by_producer: dict[str, list[_Entry]] = {}  # each sorted by pseq_first
        self._packer = msgpack.Packer()  # reused: packb builds a Packer per call
        self.duplicates = 0  # answered without logging, since start
        self.forgotten_early = 0  # entries the caps evicted before their time

    # ---- the composer's interface ------------------------------------------------------------

    def screen(self, producer: Any, events: list[object], now_us: int, scope: str = "") -> Screen:
        """Sort out the events of one PUBLISH carrying `producer` from a client of service `scope`:
        each is [channel, attributes, payload, pseq]. Moves the horizon up to `now_us - window_us`
        first."""
        self.advance(now_us)
        n = len(events)
        whole = producer_problem(producer)
        if whole is None:
            producer = scoped(scope, producer)
        out = Screen(producer if type(producer) is str else "", [Verdict.REJECTED] * n, [None] * n,
                     [0] * n, [None] * n)
        seen: dict[int, int] = {}
        entries = self._by_producer.get(producer) if whole is None else None
        # pseqs above every entry of the producer (the usual case: a producer counting up) are new
        above = entries[-1].pseq_first + entries[-1].count if entries else 0
        verdicts, pseqs, evs, lookup = out.verdicts, out.pseqs, out.events, self.lookup
        for i, ev in enumerate(events):
            if whole is None and type(ev) is list and len(ev) == 4 and type(ev[3]) is int and 0 <= ev[3] <= PSEQ_MAX:
                pseq = pseqs[i] = ev[3]
                evs[i] = ev[:3]
            else:
                problem = whole or pseq_problem(ev[3] if type(ev) is list and len(ev) == 4 else None)
                if type(ev) is not list or len(ev) != 4:
                    problem = whole or "an event with a producer is [channel, attributes, payload, pseq]"
                out.problems[i] = TidingsError(problem or "", errors.BAD_MESSAGE)
                continue
            tick = lookup(producer, pseq) if entries and pseq < above else None
            if tick is not None:
                verdicts[i], out.ticks[i] = Verdict.DUPLICATE, tick
            elif pseq in seen:
                verdicts[i] = Verdict.REPEATED
                out.first_of[i] = seen[pseq]
            else:
                verdicts[i] = Verdict.NEW
                seen[pseq] = i
        return out

    def lookup(self, producer: str, pseq: int) -> int | None:
        """The tick `(producer, pseq)` was logged with, if it is in the window."""
        entries = self._by_producer.get(producer)
        if not entries:
            return None
        i = bisect_right(entries, pseq, key=_pseq_first) - 1
        if i < 0:
            return None
        entry = entries[i]
        offset = pseq - entry.pseq_first
        return entry.tick_first + offset if offset < entry.count else None

    def pseqs(self, producer: str) -> list[int]:
        """Every pseq of the (scoped) `producer` in the window, in pseq order (core/mqtt/exactly_once.py)."""
        return [e.pseq_first + i for e in self._by_producer.get(producer, ()) for i in range(e.count)]

    def logged(self, screen: Screen, at: list[int], first: int) -> list[bytes]:
        """The NEW events of `screen` at indexes `at` are being logged with ticks `first`,
        `first + 1`, ...: remember them, and return the key each record keeps."""
        producer, pseqs, ticks = screen.producer, screen.pseqs, screen.ticks
        pack = self._packer.pack
        prefix = b"\x92" + pack(producer)  # encode_key's bytes, the producer packed once
        keys: list[bytes] = []
        last = self._entries[-1] if self._entries else None
        for k, i in enumerate(at):
            pseq, tick = pseqs[i], first + k
            ticks[i] = tick
            keys.append(prefix + pack(pseq))
            if (last is not None and last.producer == producer and last.pseq_first + last.count == pseq
                    and last.tick_first + last.count == tick):
                last.count += 1  # the run goes on: what `remember` would do, without the call
                self.last_tick = tick
            else:
                self.remember(producer, pseq, tick)
                last = self._entries[-1] if self._entries else None
        return keys

    def answer(self, screen: Screen, logged: int) -> tuple[list[int], list[int]]:
        """After `logged` (which logged `logged` of the screen's events): each REPEATED event takes
        the tick of its first occurrence. Returns the events answered as duplicates (the ACK names
        them) and the repeats whose first occurrence was rejected (each gets an error)."""
        duplicates: list[int] = []
        orphans: list[int] = []
        if logged < len(screen.verdicts):  # else every event was new
            ticks = screen.ticks
            for i, verdict in enumerate(screen.verdicts):
                if verdict is Verdict.REPEATED:
                    ticks[i] = ticks[screen.first_of[i]]
                    if ticks[i] is None:
                        orphans.append(i)
                        continue
                if verdict in (Verdict.DUPLICATE, Verdict.REPEATED) and ticks[i] is not None:
                    duplicates.append(i)
        self.duplicates += len(duplicates)
        return duplicates, orphans

    def remember(self, producer: str, pseq: int, tick: int) -> None:
        """`(producer, pseq)`, not in the window, is being logged with `tick` (above every tick
        remembered before)."""
        assert tick > self.last_tick and tick > self.horizon, (tick, self.last_tick, self.horizon)
        self.last_tick = tick
        last = self._entries[-1] if self._entries else None
        if (last is not None and last.producer == producer and last.pseq_first + last.count == pseq
                and last.tick_first + last.count == tick):
            last.count += 1
            return
        if producer not in self._by_producer:
            while len(self._by_producer) >= self.producers_max:
                self._evict_oldest()
            self._by_producer[producer] = []
        entry = _Entry(producer, pseq, tick, 1)
        self._entries.append(entry)
        insort(self._by_producer[producer], entry, key=_pseq_first)
        while len(self._entries) > self.entries_max:
            self._evict_oldest()

    def advance(self, now_us: int) -> None:
        """Forget what is older than the window at wall time `now_us` (microseconds)."""
        self.forget_through(now_us - self.window_us)

    def restore(self, records: Iterable[tuple[int, bytes]], now_us: int) -> int:
        """Rebuild the window from the log's keyed records `(tick, key)` in tick order (what
        the runtime reads with `EventLog.read(..., keys=True)` past `now_us - window_us`, see
        aio/storage_worker.py); returns how many were used.
        Keys that do not decode are skipped: the log is ours, but it is read back from a disk."""
        self.advance(now_us)
        used = 0
        unpack = msgpack.unpackb
        checked = None  # the last producer id found valid: keys of a batch share it
        for tick, key in records:
            if tick <= self.horizon or tick <= self.last_tick:
                continue
            try:
                value = unpack(key)
            except Exception:  # msgpack raises several types for garbage
                continue
            if type(value) is not list or len(value) != 2 or pseq_problem(value[1]) is not None:
                continue
            producer, pseq = value
            if producer != checked:
                if producer_problem(producer, KEY_PRODUCER_BYTES_MAX) is not None:  # not one `scoped` made
                    continue
                checked = producer
            entries = self._by_producer.get(producer)
            if entries and pseq < entries[-1].pseq_first + entries[-1].count:
                old = self.lookup(producer, pseq)
                if old is not None:
                    # Only a log replayed under other caps holds a pair twice above the horizon:
                    # the later record was logged once the earlier had left the window, so the
                    # horizon was past it then.
                    self.forget_through(old)
            self.remember(producer, pseq, tick)
            used += 1
        self.advance(now_us)
        return used

    def forget_through(self, tick: int) -> None:
        """Move the horizon up to `tick`: entries at or below it are forgotten, oldest first."""
        if tick <= self.horizon:
            return
        self.horizon = tick
        entries = self._entries
        while entries and entries[0].tick_last <= tick:
            self._drop(entries.popleft())
        if entries and entries[0].tick_first <= tick:
            head = entries[0]  # partly old: its pseqs keep their order within the producer's list
            cut = tick - head.tick_first + 1
            head.pseq_first += cut
            head.tick_first += cut
            head.count -= cut

    def status(self) -> dict[str, Any]:
        return {"dedup_producers": len(self._by_producer), "dedup_entries": len(self._entries),
                "dedup_horizon": self.horizon, "dedup_duplicates": self.duplicates,
                "dedup_forgotten_early": self.forgotten_early}

    @property
    def entry_count(self) -> int:
        return len(self._entries)

    @property
    def producer_count(self) -> int:
        return len(self._by_producer)

    # ---- internals ---------------------------------------------------------------------------

    def _evict_oldest(self) -> None:
        entry = self._entries.popleft()
        self.horizon = max(self.horizon, entry.tick_last)
        self.forgotten_early += 1
        self._drop(entry)

    def _drop(self, entry: _Entry) -> None:
        entries = self._by_producer[entry.producer]
        i = bisect_right(entries, entry.pseq_first, key=_pseq_first) - 1
        assert entries[i] is entry
        del entries[i]
        if not entries:
            del self._by_producer[entry.producer]
