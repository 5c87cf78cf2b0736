"""The simulated disk: the pubend log's semantics in memory, with volatile writes and group commit.

Theory of operation. The log is a sequence of records (tick, encoded event) with strictly increasing
ticks, in two parts: the durable prefix (on stable storage) and the volatile tail (written, in the
page cache, not yet synced). The disk works through its requests in order, like
`tidings.aio.storage_worker.StorageWorker`'s single writer thread:

- an Append is written at once (to the volatile tail) when the disk is idle;
- a Sync first takes every request already queued behind it (appends are written, later syncs'
  tokens are absorbed), then one sync runs for a latency drawn from the disk's seeded stream, after
  which the whole tail written so far is durable and the owner hears `synced(token, state)` with
  the highest token taken: one sync covers every Append issued before it started (group commit);
- requests arriving while a sync runs wait in the queue for the next round.

Reads (`read`) run beside the writer, as the real worker's reader pool does: after a latency they
answer with the records after < tick <= through (whatever is written by then), adding records while
their sizes fit in max_bytes and always at least one. A read that asks for a span (ReadLog.span)
is answered, as storage/log.py `read_span` answers it, with the log's own bytes (storage/record.py's
format) for a run of whole records holding every record with after < tick <= covered; like a span
cut at an index entry, it starts with the record before `after` when there is one, which the reader
drops. A read that touches a record marked corrupt (`corrupt(tick)`, a fault a scenario injects)
fails instead, as a read of a corrupt segment does: the owner hears `read_failed(reader, reason)`.

`release(through)` drops the durable records at or below `through` (the release protocol's
ReleaseLog; at once, as whole segments would be) and remembers `released_through`; `retain(now_us,
bytes_max, age_us)` (ApplyRetention) drops the oldest durable records while the log holds more than
`bytes_max` or they are older than `age_us`, keeping the newest record as the active segment
stays. Either one that dropped something reports `retained(state)` (RetentionApplied), as the real
worker does. `save(data)` keeps the broker's durable state (SaveDurable: an atomic replace, so a
crash keeps the old or the new one whole).

`crash()` is what a power cut leaves: queued requests vanish, pending completions never fire, and
of the volatile tail either nothing, all of it (a process crash: the page cache survives) or any
prefix survives -- never a record without every record before it. What survives is what a
restarted broker finds (`state()`), so it counts as durable from then on.

Invariants: ticks strictly increase across the whole log; the durable part only grows; a sync
completion reports a token only after every Append under that token is durable.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from tidings.core.inputs import LogState
from tidings.core.units import MICROSECOND_NS
from tidings.sim.world import Timer, World
from tidings.storage.record import encode

SURVIVE_NONE = "none"
SURVIVE_PREFIX = "prefix"
SURVIVE_ALL = "all"

SyncedCallback = Callable[[int, LogState], None]
ReadCallback = Callable[[int, list[tuple[int, bytes]], LogState, tuple[int, bytes] | None], None]
ReadFailedCallback = Callable[[int, str], None]
RetainedCallback = Callable[[LogState], None]


class Disk:
    def __init__(self, world: World, name: str = "disk",
                 sync_ns_min: int = 200 * MICROSECOND_NS, sync_ns_max: int = 3_000 * MICROSECOND_NS,
                 read_ns_min: int = 50 * MICROSECOND_NS, read_ns_max: int = 500 * MICROSECOND_NS) -> None:
        self.world = world
        self.name = name
        self.rng = world.derive_rng(name)
        self.sync_ns_min = sync_ns_min
        self.sync_ns_max = sync_ns_max
        self.read_ns_min = read_ns_min
        self.read_ns_max = read_ns_max
        self.ticks: list[int] = []  # every written record's tick, for reads
        self.records: list[tuple[int, bytes]] = []  # written: durable prefix, then volatile tail
        # (tick, dedup key) of the keyed records written (core/publish/dedup.py)
        self.keys: list[tuple[int, bytes]] = []
        self.durable_count = 0
        self.log_bytes = 0
        self._queue: deque[tuple[str, Any]] = deque()
        self._sync_timer: Timer | None = None
        self._reads: list[Timer] = []
        self.on_synced: SyncedCallback | None = None
        self.on_read: ReadCallback | None = None
        self.on_read_failed: ReadFailedCallback | None = None
        self.on_retained: RetainedCallback | None = None
        self.corrupt_ticks: set[int] = set()  # records a read fails on (a fault: `corrupt`)
        self.reads_failed = 0
        self.retained_records = 0  # records retention dropped
        self.on_sync_started: list[Callable[[int], None]] = []  # fault hooks: called with done_at
        self.syncs = 0
        self.reads = 0
        self.crashes = 0
        self.records_lost = 0  # volatile records a crash dropped
        self.records_survived = 0  # volatile records a crash kept
        self.released_through = 0
        self.released_records: list[tuple[int, bytes]] = []  # what release dropped (for checkers)
        self.durable_state: bytes | None = None  # what the broker last saved (SaveDurable)
        self.directory_state: bytes | None = None  # its pubend directory (SaveDirectory)

    # ---- the owner's interface (effects Append, Sync, ReadLog) -----------------------------------

    def attach(self, on_synced: SyncedCallback, on_read: ReadCallback,
               on_read_failed: ReadFailedCallback | None = None, on_retained: RetainedCallback | None = None) -> None:
        self.on_synced = on_synced
        self.on_read = on_read
        self.on_read_failed = on_read_failed
        self.on_retained = on_retained

    def append(self, records: Sequence[tuple[int, bytes]], keys: list[bytes] | None = None) -> None:
        self._queue.append(("append", (records, keys)))
        self._work()

    def sync(self, token: int) -> None:
        self._queue.append(("sync", token))
        self._work()

    def release(self, through: int) -> None:
        """Drop the durable records at or below `through`."""
        count = bisect.bisect_right(self.ticks, through, 0, self.durable_count)
        if self._drop(count):
            self.world.trace(self.name, "release", through, count)
            self._report_retained()

    def retain(self, now_us: int, bytes_max: int, age_us: int) -> None:
        """Retention: drop the oldest durable records while the log holds more than `bytes_max` or
        they are older than `age_us` (ticks are wall-clock microseconds); the newest stays."""
        horizon = now_us - age_us
        count, size = 0, self.log_bytes
        keep_from = min(self.durable_count, len(self.records) - 1)
        while count < keep_from and (size > bytes_max or self.ticks[count] < horizon):
            size -= len(self.records[count][1])
            count += 1
        self.retained_records += count
        self.world.trace(self.name, "retain", count)
        self._drop(count)
        self._report_retained()

    def _drop(self, count: int) -> bool:
        """Drop the first `count` (durable) records; whether there were any."""
        if count <= 0:
            return False
        self.released_through = max(self.released_through, self.ticks[count - 1])
        self.released_records += self.records[:count]
        through = self.ticks[count - 1]
        self.keys = [k for k in self.keys if k[0] > through]
        for _, record in self.records[:count]:
            self.log_bytes -= len(record)
        del self.records[:count]
        del self.ticks[:count]
        self.durable_count -= count
        return True

    def _report_retained(self) -> None:
        if self.on_retained is not None:
            self.world.call_soon(self._report, self.on_retained, self.state())

    def _report(self, callback: RetainedCallback, state: LogState) -> None:
        if callback is self.on_retained:  # not if the owner crashed in between
            callback(state)

    def corrupt(self, tick: int) -> None:
        """A fault: the record of `tick` (logged or to be) fails every read that reaches it."""
        self.corrupt_ticks.add(tick)

    def save(self, data: bytes) -> None:
        self.durable_state = data

    def read(self, reader: int, after: int, through: int, max_bytes: int, span: bool = False) -> None:
        delay = self.rng.randint(self.read_ns_min, self.read_ns_max)
        self._reads = [t for t in self._reads if not t.cancelled]
        self._reads.append(self.world.call_later(delay, self._read_done, reader, after, through, max_bytes, span))

    # ---- what is on the disk ---------------------------------------------------------------------

    @property
    def syncing(self) -> bool:
        return self._sync_timer is not None

    @property
    def volatile_count(self) -> int:
        return len(self.records) - self.durable_count

    def durable_records(self) -> list[tuple[int, bytes]]:
        """Every record that was ever durable: released ones too."""
        return self.released_records + self.records[: self.durable_count]

    def state(self) -> LogState:
        """The log as a reader of the files sees it now (volatile tail included)."""
        records = self.records
        if not records:  # (a log that released everything still knows its last tick)
            return LogState(self.released_through, None, self.released_through, 0, 0)
        return LogState(last_tick=records[-1][0], first_tick=records[0][0], released_through=self.released_through,
                        log_bytes=self.log_bytes, record_count=len(records))

    # ---- faults ----------------------------------------------------------------------------------

    def crash(self, survive: str = SURVIVE_NONE) -> int:
        """Lose power: returns how many volatile records survived (they become durable)."""
        self.crashes += 1
        self._queue.clear()
        if self._sync_timer is not None:
            self._sync_timer.cancel()
            self._sync_timer = None
        for t in self._reads:
            t.cancel()
        self._reads = []
        self.on_synced = self.on_read = self.on_read_failed = self.on_retained = None
        tail = self.volatile_count
        if survive == SURVIVE_ALL:
            kept = tail
        elif survive == SURVIVE_PREFIX:
            kept = self.rng.randint(0, tail)
        else:
            assert survive == SURVIVE_NONE, survive
            kept = 0
        keep = self.durable_count + kept
        self.records_lost += tail - kept
        self.records_survived += kept
        for _, record in self.records[keep:]:
            self.log_bytes -= len(record)
        del self.records[keep:]
        del self.ticks[keep:]
        last = self.ticks[-1] if self.ticks else 0
        self.keys = [k for k in self.keys if k[0] <= last]
        self.durable_count = keep
        self.world.trace(self.name, "crash", survive, tail, kept, keep)
        return kept

    # ---- the writer ------------------------------------------------------------------------------

    def keyed_since(self, after: int) -> list[tuple[int, bytes]]:
        """The dedup keys of the records written after tick `after`, in tick order (what the real
        broker reads from its log's tail to rebuild its dedup window)."""
        return [k for k in self.keys if k[0] > after]

    def _write(self, work: tuple[list[tuple[int, bytes]], list[bytes] | None]) -> None:
        records, keys = work
        if keys is not None:
            self.keys += [(tick, key) for (tick, _), key in zip(records, keys, strict=True)]
        for tick, record in records:
            assert not self.ticks or tick > self.ticks[-1], f"tick {tick} after {self.ticks[-1]}"
            self.ticks.append(tick)
            self.records.append((tick, record))
            self.log_bytes += len(record)

    def _work(self) -> None:
        queue = self._queue
        while queue and self._sync_timer is None:
            kind, arg = queue.popleft()
            if kind == "append":
                self._write(arg)
                continue
            token = arg
            while queue:  # group commit: write everything already queued, then one sync
                kind, arg = queue.popleft()
                if kind == "append":
                    self._write(arg)
                else:
                    token = arg
            latency = self.rng.randint(self.sync_ns_min, self.sync_ns_max)
            done_at = self.world.now + latency
            covered = len(self.records)
            self.world.trace(self.name, "sync-start", token, covered)
            # what it covers, by tick: release and retention may drop records from the front meanwhile
            covered_tick = self.ticks[-1] if self.ticks else 0
            self._sync_timer = self.world.call_at(done_at, self._sync_done, token, covered, covered_tick)
            for hook in list(self.on_sync_started):
                hook(done_at)

    def _sync_done(self, token: int, covered: int, covered_tick: int) -> None:
        self._sync_timer = None
        self.syncs += 1
        durable = bisect.bisect_right(self.ticks, covered_tick)
        assert durable >= self.durable_count
        self.durable_count = durable
        state = self.state()
        self.world.trace(self.name, "synced", token, covered)
        self._work()  # the writer goes on at once; the owner hears of the sync on its own loop turn
        if self.on_synced is not None:
            self.world.call_soon(self._report_synced, self.on_synced, token, state)

    def _report_synced(self, callback: SyncedCallback, token: int, state: LogState) -> None:
        if callback is self.on_synced:  # not if the owner crashed in between
            callback(token, state)

    def _read_done(self, reader: int, after: int, through: int, max_bytes: int, span: bool) -> None:
        self.reads += 1
        out: list[tuple[int, bytes]] = []
        i = bisect.bisect_right(self.ticks, after)
        if through > after:
            total = 0
            records = self.records
            while i + len(out) < len(records) and records[i + len(out)][0] <= through:
                size = len(records[i + len(out)][1])
                if out and total + size > max_bytes:
                    break
                out.append(records[i + len(out)])
                total += size
        bad = [tick for tick, _ in out if tick in self.corrupt_ticks]
        if bad:
            self.reads_failed += 1
            self.world.trace(self.name, "read-failed", reader, after, through, bad[0])
            if self.on_read_failed is not None:
                self.on_read_failed(reader, f"LogCorruptError: the record of tick {bad[0]} fails its checksum")
            return
        self.world.trace(self.name, "read", reader, after, through, len(out))
        if self.on_read is None:
            return
        if not span:
            self.on_read(reader, out, self.state(), None)
            return
        # the log's bytes, from the record before `after` (a span begins where the index says a record does)
        before = [self.records[i - 1]] if i > 0 and out else []
        run = before + out
        blob = bytes(encode(run, 0, 0, 1 << 62, 1 << 62)[0]) if run else b""
        covered = out[-1][0] if out else through
        self.on_read(reader, [], self.state(), (covered, blob))
