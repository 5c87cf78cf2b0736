"""The pubend's event log: every published event, once, in tick order, on real files with real fsync.

Theory of operation
-------------------
The log is a directory of segment files (`segment.py`), each a run of records (`record.py`:
`[u32 length][u32 crc32][u64 tick]` then the payload, the CRC covering tick and payload; an
append's run of consecutive ticks is one batch record, cut back into events by every read), plus
`retention.json` holding `released_through`, the highest tick retention ever removed. Appends go to
the newest segment, the active one; when it has reached `segment_bytes_max` the next append first
rolls to a new segment named after that append's first tick.

Durability. `append` writes one buffer with one write call and is not durable until `sync`, which
fsyncs the active segment and, when a segment was created or removed since, the directory. A roll
first makes everything before it durable (the old segment's data and the directory), so only the
newest segment can ever hold a torn tail and the records that survive any crash are a prefix of the
records appended: never a hole followed by later records.

Writing into space already written (`prefill`). An append past the file's end changes its size, so
its fsync commits the file system's journal as well as the data. The log writer, when it is idle,
calls `prefill`: it writes zeros past the active segment's records (a chunk of at most
PREFILL_CHUNK_BYTES, keeping at most `prefill_bytes_max` ahead of them and never past
`segment_bytes_max`) and fsyncs them, size and all. Appends then pwrite records over those zeros,
and while the file's size is the one last fsynced, `sync` makes them durable with `fdatasync`: the
data alone, no journal commit (cheaper in CPU and in time on this kind of disk:
bench/fsync_floor.py's `prefilled` call). Where a record would run past the zeros the file grows
again and the next `sync` is a full fsync, as without prefill: an append never waits for zeros.
Zeros never reach a reader: readers stop at a segment's visible end (`Segment.size`, the end of
the records), not at the file's. A segment is cut back to its records when it is closed (by a roll,
before the next segment exists, so only the last segment can ever end in zeros) and by `close`.

Recovery (`open`). Every segment but the last must be intact; one that is not is real corruption
and `open` raises `LogCorruptError` instead of guessing (closed segments are read from their saved
summary when it fits, see `segment.py`, and their checksums are then verified as they are read).
The last segment is scanned up to its first invalid record (torn header or payload, garbage, zeros,
a checksum that does not match) and truncated there; when everything from there to the file's end
is zeros, that is the end of the records (prefilled space, or a tail the file system extended but
never wrote), cut without a problem reported; a last segment left empty is removed, and so
is an empty file a crash left during a roll. Segments wholly at or below `released_through` are
deleted (a crash between persisting `released_through` and deleting files). Finally the last
segment and the directory are fsynced: what survived a kill -9 may still sit only in the page
cache, and the caller treats everything recovered as synced. Everything followed by a completed
sync is intact, so it survives.

Retention removes whole closed segments, oldest first, while the log is over its byte budget or a
segment's newest record is older than the age limit. It persists the new `released_through`
atomically before deleting any file, so a tick is never missing from the log without being
recorded as released. The active segment is never removed, so `last_tick` never goes backwards.

Threads. One thread at a time calls `append`, `sync`, `enforce_retention`, `release_through`
(the caller's released prefix, same removal) and `close` (aio/storage_worker.py may hand the log
between its writer and a quiet broker's loop); any thread may call `read` and the properties.
A segment's visible end (`Segment.size`) moves only after its bytes are written, under a lock
held for a few assignments; readers read below the end they saw, from a descriptor they pinned,
so they never see a torn record and never read a recycled descriptor.
`read` may return records that are written but not yet synced: bound it with `through_tick`.

Releases racing with reads. A reader that reaches a segment retention has just removed still reads
it (its descriptor stays open while pinned); a segment removed before the reader reached it is
skipped. In both cases every tick after `after_tick` that the read did not return, up to the last
tick it returned, is at or below `released_through` as read after `read` returned. Callers detect
gaps by reading `released_through` after the read, never before.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import pathlib
import threading
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass

from tidings.core.wire.messages import SPAN_BYTES_FACTOR
from tidings.storage import record
from tidings.storage.files import (
    TEMP_SUFFIX,
    LogCorruptError,
    StorageError,
    ensure_directory,
    fsync_directory,
    read_small_file,
    start_writeback,
    write_all,
    write_atomically,
)
from tidings.storage.segment import (
    INDEX_INTERVAL_BYTES,
    SUFFIX,
    SUMMARY_SUFFIX,
    Segment,
    SegmentInfo,
    load_segment,
    load_summary,
    open_read_fd,
    parse_segment_name,
    segment_name,
    write_summary,
)

logger = logging.getLogger(__name__)

RETENTION_FILE = "retention.json"
SEGMENT_BYTES_MAX_DEFAULT = 64 << 20
READ_CHUNK_BYTES_MAX = 8 << 20
PREFILL_BYTES_MAX_DEFAULT = 2 << 20  # zeros kept ahead of the records at most (0: no prefill)
PREFILL_CHUNK_BYTES = 256 << 10  # zeros written (and fsynced) by one `prefill` at most
_ZEROS = bytes(PREFILL_CHUNK_BYTES)


@dataclass(frozen=True, slots=True)
class RecoveryReport:
    """What `open` had to repair; all zero/None after a clean shutdown."""

    bytes_cut: int = 0
    segments_removed: int = 0
    problem: str | None = None


@dataclass(frozen=True, slots=True)
class SyncPlan:
    """A sync made outside the log (`EventLog.begin_sync`): the active segment's descriptor (-1 when
    the log holds no segment) and the directory's (-1 when no entry changed), both duplicates for
    the taker to close, and what a success makes durable: `segment` up to `size`."""

    fd: int
    directory_fd: int
    segment: Segment | None
    size: int
    shape: tuple[Segment, Segment] | None  # the first and last segments when planned
    data_only: bool = False  # fdatasync the segment: its size on disk is already durable
    file_bytes: int = 0  # the segment's file size as written when planned (records and prefilled zeros)


class EventLog:
    """Segmented, checksummed, append-only log of `(tick, payload)` records. Use `EventLog.open`."""

    def __init__(self, directory: pathlib.Path, segment_bytes_max: int, segments: list[Segment],
                 released_through: int, recovery: RecoveryReport, write_fd: int,
                 prefill_bytes_max: int = PREFILL_BYTES_MAX_DEFAULT) -> None:
        self.directory = directory
        self.segment_bytes_max = segment_bytes_max
        self.prefill_bytes_max = prefill_bytes_max
        self.recovery = recovery
        self._lock = threading.Lock()
        self._segments = segments
        self._first_ticks = [s.first_tick for s in segments]
        self._released_through = released_through
        self._last_tick = max(segments[-1].last_tick if segments else 0, released_through)
        self._size_bytes = sum(s.size for s in segments)
        self._record_count = sum(s.record_count for s in segments)
        self._write_fd = write_fd
        self._synced_bytes = segments[-1].size if segments else 0
        # The active segment's file size as written, and as last fsynced: while they are equal a
        # sync needs only fdatasync (module notes, "Writing into space already written").
        self._file_bytes = self._synced_bytes
        self._durable_file_bytes = self._synced_bytes
        self.fsyncs = 0  # the active segments' syncs that were full fsyncs (prefills' and seals' too)
        self.fdatasyncs = 0  # ... and those that were fdatasyncs over prefilled space
        self._directory_dirty = False
        self._closed = False
        self._failure: str | None = None
        self._marks: tuple[tuple[int | None, int, int], tuple[int, ...]] = ((None, 0, 0), ())  # (basis, marks)

    # ------------------------------------------------------------------ opening and recovery

    @classmethod
    def open(cls, directory: pathlib.Path, *, segment_bytes_max: int = SEGMENT_BYTES_MAX_DEFAULT,
             prefill_bytes_max: int = PREFILL_BYTES_MAX_DEFAULT) -> EventLog:
        """Open (creating if needed) the log in `directory`, repairing what a crash left.
        `prefill_bytes_max`: the zeros `prefill` keeps ahead of the records at most (0: none)."""
        assert segment_bytes_max > 0 and prefill_bytes_max >= 0
        directory = pathlib.Path(directory)
        ensure_directory(directory)
        (directory / (RETENTION_FILE + TEMP_SUFFIX)).unlink(missing_ok=True)
        released_through = _load_released_through(directory / RETENTION_FILE)
        segments, recovery, write_fd = _recover_segments(directory, released_through)
        return cls(directory, segment_bytes_max, segments, released_through, recovery, write_fd,
                   prefill_bytes_max)

    # ------------------------------------------------------------------ state

    @property
    def last_tick(self) -> int:
        """The highest tick ever appended and kept (at least `released_through`); 0 when new."""
        with self._lock:
            return self._last_tick

    @property
    def first_tick(self) -> int | None:
        """The oldest retained tick, None when the log holds no record."""
        with self._lock:
            return self._first_ticks[0] if self._first_ticks else None

    @property
    def released_through(self) -> int:
        with self._lock:
            return self._released_through

    @property
    def size_bytes(self) -> int:
        with self._lock:
            return self._size_bytes

    @property
    def segment_count(self) -> int:
        with self._lock:
            return len(self._segments)

    @property
    def record_count(self) -> int:
        with self._lock:
            return self._record_count

    def tick_marks(self, runs: int) -> tuple[int, ...]:
        """At most `runs - 1` rising ticks that cut the retained records into `runs` runs of about
        equal bytes: for each cut, the tick of the first indexed record at or past its offset. Taken
        from the sparse index (nothing is read), so a cut is as fine as INDEX_INTERVAL_BYTES. The
        storage worker asks at every sync: the marks are kept until the log's first segment changes
        or its size moves by more than half a run's share of the bytes (a drift of less than one run
        in `2 * runs`) and by half an index interval (finer than the index, the cuts would not
        move: a young log, whose runs are small, would otherwise work them out every few syncs)."""
        with self._lock:
            first = self._first_ticks[0] if self._first_ticks else None
            (basis_first, basis_size, basis_runs), marks = self._marks
            drift = abs(self._size_bytes - basis_size)
            if first == basis_first and runs == basis_runs and (drift * runs * 2 < basis_size
                                                                or drift * 2 < INDEX_INTERVAL_BYTES):
                return marks
            marks = self._cut(runs)
            self._marks = ((first, self._size_bytes, runs), marks)
            return marks

    def _cut(self, runs: int) -> tuple[int, ...]:
        """tick_marks, worked out afresh (under the lock)."""
        marks: list[int] = []
        total = sum(s.size for s in self._segments)
        targets = [total * i // runs for i in range(1, runs)] if runs > 1 else []
        t, base = 0, 0
        for segment in self._segments:
            while t < len(targets) and targets[t] < base + segment.size:
                j = bisect_left(segment.index_offsets, targets[t] - base)
                if j == len(segment.index_ticks):
                    break  # past its last entry: the next segment's first record is the mark
                if not marks or segment.index_ticks[j] > marks[-1]:
                    marks.append(segment.index_ticks[j])
                t += 1
            base += segment.size
        return tuple(marks)

    def segments(self) -> list[SegmentInfo]:
        """A snapshot of every retained segment, oldest first (for status pages)."""
        with self._lock:
            return [s.info() for s in self._segments]

    # ------------------------------------------------------------------ writer thread

    def append(self, records: Sequence[tuple[int, bytes]], keys: list[bytes] | None = None) -> None:
        """Write `records` (rising ticks above `last_tick`) with one write; durable after `sync`.
        `keys`: one dedup key per record, kept beside it (record.py, keyed records)."""
        self._check_writable()
        if not records:
            return
        assert records[0][0] > self._last_tick, f"tick {records[0][0]} does not follow {self._last_tick}"
        active = self._segments[-1] if self._segments else None
        fresh: Segment | None = None
        if active is None or active.size >= self.segment_bytes_max:
            self._seal_active()
            fresh, fresh_fd = self._create_segment(records[0][0])
            target, target_fd = fresh, fresh_fd
        else:
            target, target_fd = active, self._write_fd
        try:
            buf, entries = record.encode(records, self._last_tick, target.size, target.next_index_offset,
                                         INDEX_INTERVAL_BYTES, keys, batch=True)
            write_all(target_fd, buf, target.size)
        except BaseException:
            self._undo_write(target, target_fd, fresh is not None)
            raise
        with self._lock:
            if fresh is not None:
                self._segments.append(fresh)
                self._first_ticks.append(fresh.first_tick)
            target.extend(target.size + len(buf), records[-1][0], len(records), entries)
            self._size_bytes += len(buf)
            self._record_count += len(records)
            self._last_tick = records[-1][0]
        if fresh is not None:
            if self._write_fd >= 0:
                os.close(self._write_fd)
            self._write_fd = target_fd
            self._synced_bytes = 0
            self._file_bytes = self._durable_file_bytes = 0
        self._file_bytes = max(self._file_bytes, target.size)

    def sync(self) -> None:
        """Make every appended record durable (fsync the active segment, and the directory if needed)."""
        self._check_writable()
        if self._segments and self._segments[-1].size > self._synced_bytes:
            size = self._segments[-1].size
            if self._file_bytes == self._durable_file_bytes:  # written over prefilled zeros only
                self._fsync(self._write_fd, data_only=True)
            else:
                self._fsync(self._write_fd)
            self._synced_bytes = size
        if self._directory_dirty:
            self._fsync_directory()

    def start_writeback(self) -> bool:
        """Begin writing what was appended since the last `sync` to the disk, without waiting
        (storage/files.py `start_writeback`): the `sync` that must follow then finds the write done
        or under way. Makes nothing durable; False when nothing was begun."""
        self._check_writable()
        if not self._segments or self._write_fd < 0:
            return False
        size = self._segments[-1].size
        return start_writeback(self._write_fd, self._synced_bytes, size - self._synced_bytes)

    def begin_sync(self) -> SyncPlan | None:
        """`sync` made by another thread, which never calls into the log (aio/storage_worker.py's syncer): the
        descriptors to fsync, both duplicates the taker closes, and what they cover; None when
        everything appended is durable. Hand it back to `end_sync` once they are synced (or failed):
        until then nothing is counted durable. Appends may go on meanwhile; a roll closes only
        the log's own descriptor."""
        self._check_writable()
        active = self._segments[-1] if self._segments else None
        data = active is not None and active.size > self._synced_bytes
        if not data and not self._directory_dirty:
            return None
        fd = os.dup(self._write_fd) if active is not None else -1
        try:
            directory_fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC) \
                if self._directory_dirty else -1
        except BaseException:
            if fd >= 0:
                os.close(fd)
            raise
        shape = (self._segments[0], self._segments[-1]) if self._segments else None
        return SyncPlan(fd, directory_fd, active, active.size if active is not None else 0, shape,
                        data_only=self._file_bytes == self._durable_file_bytes, file_bytes=self._file_bytes)

    def end_sync(self, plan: SyncPlan, error: int) -> None:
        """`plan`'s descriptors were synced (`error` 0) or one failed with errno `error`: the log is
        then failed, as after its own fsync failing (StorageError raised). The directory counts as
        durable only when no segment was created or removed since the plan (its first and last
        segments are the same objects: a roll makes a new last one, a removal a new first one)."""
        if error:
            self._failure = f"fsync: {os.strerror(error)}"
            raise StorageError(f"event log {self.directory}: fsync failed: {os.strerror(error)}")
        if plan.segment is not None and self._segments and plan.segment is self._segments[-1]:
            self._synced_bytes = max(self._synced_bytes, plan.size)
            if plan.fd >= 0 and self._durable_file_bytes >= 0 and self._file_bytes >= plan.file_bytes:
                self._durable_file_bytes = max(self._durable_file_bytes, plan.file_bytes)  # (not cut since)
        if plan.fd >= 0:
            if plan.data_only:
                self.fdatasyncs += 1
            else:
                self.fsyncs += 1
        if plan.directory_fd >= 0 and plan.shape is not None and self._segments \
                and plan.shape[0] is self._segments[0] and plan.shape[1] is self._segments[-1]:
            self._directory_dirty = False

    def prefill(self) -> int:
        """Write zeros past the active segment's records and fsync them (module notes, "Writing
        into space already written"): up to `prefill_bytes_max` ahead of the records and no further
        than `segment_bytes_max`, one chunk of at most PREFILL_CHUNK_BYTES per call, and only when
        at least half a chunk is missing (or the rest up to the segment's end), so that an idle
        writer calling it after every commit pays one fsync for many commits. The writer's,
        between its other work; returns the bytes written (0: nothing was due)."""
        self._check_writable()
        room = self._prefill_room()
        if not room:
            return 0
        size = self._segments[-1].size
        start = self._file_bytes
        target = start + min(room, PREFILL_CHUNK_BYTES)
        try:
            write_all(self._write_fd, memoryview(_ZEROS)[:target - start], start)
        except OSError as exc:  # a full disk, say: appends may still fit, so the log goes on without
            logger.warning("event log %s: prefill off: %s", self.directory, exc)
            self.prefill_bytes_max = 0
            self._durable_file_bytes = -1  # the file may have grown: the next sync is a full fsync
            try:
                os.ftruncate(self._write_fd, start)
            except OSError as undo:
                self._failure = f"undoing a failed prefill: {undo}"
            return 0
        self._file_bytes = target
        self._fsync(self._write_fd)
        self._synced_bytes = size  # that fsync made the records written so far durable too
        return target - start

    def prefill_due(self) -> bool:
        """Whether `prefill` would write now (the writing thread's question: nothing changes)."""
        return self._prefill_room() > 0

    def _prefill_room(self) -> int:
        """The zeros `prefill` may write ahead now: 0 when none are due."""
        if not self._segments or self.prefill_bytes_max <= 0 or self._segments[-1].size == 0:
            return 0
        limit = min(self._segments[-1].size + self.prefill_bytes_max, self.segment_bytes_max)
        room = limit - self._file_bytes
        due = room > 0 and (room >= min(PREFILL_CHUNK_BYTES, self.prefill_bytes_max) // 2
                            or limit >= self.segment_bytes_max)
        return room if due else 0

    def enforce_retention(self, now_us: int, retention_bytes_max: int, retention_age_us: int) -> int:
        """Remove closed segments over the byte budget or too old; how many were removed."""
        self._check_writable()
        horizon = now_us - retention_age_us
        with self._lock:
            victims: list[Segment] = []
            total = self._size_bytes
            for segment in self._segments[:-1]:
                if total <= retention_bytes_max and segment.last_tick >= horizon:
                    break
                victims.append(segment)
                total -= segment.size
        return self._remove_prefix(victims)

    def release_through(self, tick: int) -> int:
        """Remove the closed segments whose records are all at or below `tick`; how many were removed.

        The caller's released prefix: the active segment stays, so `last_tick` never goes backwards.
        """
        self._check_writable()
        with self._lock:
            victims = list(itertools.takewhile(lambda s: s.last_tick <= tick, self._segments[:-1]))
        return self._remove_prefix(victims)

    def _remove_prefix(self, victims: list[Segment]) -> int:
        """Remove `victims`, the oldest segments, recording their last tick as released first."""
        if not victims:
            return 0
        released = victims[-1].last_tick
        # The promise first, the deletion second: a crash in between leaves files that recovery
        # deletes, never a missing tick that is not recorded as released.
        write_atomically(self.directory / RETENTION_FILE, _encode_released_through(released))
        with self._lock:
            assert self._segments[:len(victims)] == victims
            self._released_through = released
            del self._segments[:len(victims)]
            del self._first_ticks[:len(victims)]
            for segment in victims:
                self._size_bytes -= segment.size
                self._record_count -= segment.record_count
            to_close = _retire(victims)
        for fd in to_close:
            os.close(fd)
        self._directory_dirty = True
        for segment in victims:
            segment.path.unlink(missing_ok=True)
            segment.summary_path.unlink(missing_ok=True)
        return len(victims)

    def close(self) -> None:
        """Sync what is pending (unless the log failed) and release every descriptor."""
        if self._closed:
            return
        try:
            if self._failure is None:
                self.sync()
                self._trim_active()
        finally:
            self._closed = True
            if self._write_fd >= 0:
                os.close(self._write_fd)
                self._write_fd = -1
            with self._lock:
                to_close = _retire(self._segments)
            for fd in to_close:
                os.close(fd)

    def __enter__(self) -> EventLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_writable(self) -> None:
        if self._closed:
            raise StorageError(f"event log {self.directory} is closed")
        if self._failure is not None:
            raise StorageError(f"event log {self.directory} failed ({self._failure}); reopen it to recover")

    def _fsync(self, fd: int, *, data_only: bool = False) -> None:
        """fsync the active segment (`data_only`: fdatasync, its size being the durable one)."""
        # After a failed fsync the kernel may have dropped the dirty pages and forgotten the error:
        # the only safe way on is to reopen and recover from what the disk really holds.
        file_bytes = self._file_bytes
        try:
            if data_only:
                os.fdatasync(fd)
                self.fdatasyncs += 1
            else:
                os.fsync(fd)
                self.fsyncs += 1
        except OSError as exc:
            self._failure = f"fsync: {exc}"
            raise StorageError(f"event log {self.directory}: fsync failed: {exc}") from exc
        self._durable_file_bytes = file_bytes

    def _trim_active(self) -> None:
        """Cut the active segment's file back to its records (the zeros `prefill` left past
        them), durably: before a roll closes it, and at close."""
        if not self._segments or self._file_bytes <= self._segments[-1].size:
            return
        size = self._segments[-1].size
        try:
            os.ftruncate(self._write_fd, size)
        except OSError as exc:
            self._failure = f"truncate: {exc}"
            raise StorageError(f"event log {self.directory}: truncate failed: {exc}") from exc
        self._file_bytes = size
        self._fsync(self._write_fd)
        self._synced_bytes = size

    def _fsync_directory(self) -> None:
        try:
            fsync_directory(self.directory)
        except OSError as exc:
            self._failure = f"directory fsync: {exc}"
            raise StorageError(f"event log {self.directory}: directory fsync failed: {exc}") from exc
        self._directory_dirty = False

    def _seal_active(self) -> None:
        """Before a roll: make the active segment and the directory durable, so a crash can tear
        only the newest segment (recovery then yields a prefix of what was appended), and save the
        closing segment's summary so the next open need not scan it."""
        if not self._segments:
            if self._directory_dirty:
                self._fsync_directory()
            return
        active = self._segments[-1]
        self._trim_active()  # (its fsync makes the records durable too)
        if active.size > self._synced_bytes:
            self._fsync(self._write_fd)
            self._synced_bytes = active.size
        if self._directory_dirty:
            self._fsync_directory()
        _save_summary(active)

    def _create_segment(self, first_tick: int) -> tuple[Segment, int]:
        path = self.directory / segment_name(first_tick)
        write_fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        self._directory_dirty = True
        try:
            read_fd = open_read_fd(path)
        except BaseException:
            os.close(write_fd)
            path.unlink(missing_ok=True)
            raise
        return Segment(path, first_tick, read_fd), write_fd

    def _undo_write(self, target: Segment, target_fd: int, fresh: bool) -> None:
        """After a failed append: leave the files as they were, or mark the log failed."""
        try:
            if fresh:
                os.close(target_fd)
                os.close(target.read_fd)
                target.path.unlink(missing_ok=True)
            else:
                os.ftruncate(target_fd, target.size)  # the prefilled zeros past it go too
                self._file_bytes, self._durable_file_bytes = target.size, -1  # the next sync: a full fsync
        except OSError as exc:
            self._failure = f"undoing a failed append: {exc}"

    # ------------------------------------------------------------------ readers (any thread)

    def read(self, after_tick: int, max_bytes: int,
             through_tick: int | None = None, *, keys: bool = False) -> list[tuple[int, bytes]]:
        """Records with after_tick < tick (<= through_tick), in tick order.

        Adds records while their payloads fit in `max_bytes` in total; the first qualifying record
        is returned even when it alone is larger. See the module notes about `released_through`.
        With `keys`, the keyed records only, each as (tick, key), and `max_bytes` counts key bytes.
        """
        collector = _Collector(after_tick, max_bytes, through_tick, keys)
        if through_tick is not None and through_tick <= after_tick:
            return collector.out
        with self._lock:
            if self._closed:
                raise StorageError(f"event log {self.directory} is closed")
            i = max(bisect_right(self._first_ticks, after_tick + 1) - 1, 0)
            if i >= len(self._segments):
                return collector.out
            segment = self._segments[i]
            segment.pins += 1
            start, previous_tick = segment.start_for(after_tick)
            end = segment.size
        chunk_bytes = min(max(INDEX_INTERVAL_BYTES + max_bytes + max_bytes // 4, 1 << 16),
                          READ_CHUNK_BYTES_MAX)
        while True:
            done = True  # also when the scan raises: then nothing further gets pinned
            try:
                scanner = record.RecordScanner(segment.read_fd, start, end, previous_tick,
                                               skip_through=after_tick, keys=keys, chunk_bytes=chunk_bytes)
                done = collector.take(scanner)
                if scanner.problem is not None:
                    done = True
                    raise LogCorruptError(f"{segment.path}: {scanner.problem} at offset {scanner.offset}")
            finally:
                with self._lock:
                    following = None if done or self._closed else self._following(segment, end)
                    fd = None
                    if following is None or following[0] is not segment:
                        fd = segment.unpin()
                if fd is not None:
                    os.close(fd)
            if following is None:
                return collector.out
            if following[0] is segment:
                start, previous_tick = end, scanner.previous_tick
            else:
                segment, start, previous_tick = following[0], 0, 0
            end = following[1]

    def read_span(self, after_tick: int, max_bytes: int, through_tick: int) -> tuple[int, bytes] | None:
        """The log's own bytes for the records after `after_tick`: `(covered, span)`, where `span`
        is a run of whole records of one segment, about `max_bytes` at most, holding every record
        with after_tick < tick <= covered (covered <= through_tick). A span is cut where the sparse
        index says a record begins, so finding it reads no record: it may begin with records at or
        below after_tick (up to an index interval) and end with some past `covered` (perhaps not
        yet synced), and whoever reads it keeps the ticks in (after_tick, covered]
        (`record.records_in`, which also checks every checksum). It is at most SPAN_BYTES_FACTOR
        times `max_bytes` (or an index interval, if more) long. `(through_tick, b"")`: nothing
        is logged in the range. None: no record boundary is known near enough (a record that
        large, or a segment read back without its summary), so read the range with `read`. As
        `read` for retention."""
        if through_tick <= after_tick:
            return through_tick, b""
        with self._lock:
            if self._closed:
                raise StorageError(f"event log {self.directory} is closed")
            i = max(bisect_right(self._first_ticks, after_tick + 1) - 1, 0)
            while i < len(self._segments) and self._segments[i].last_tick <= after_tick:
                i += 1
            if i == len(self._segments) or self._segments[i].first_tick > through_tick:
                return through_tick, b""
            segment = self._segments[i]
            start, _ = segment.start_for(after_tick)
            end, covered = _span_end(segment, start, max_bytes, through_tick)
            if end - start > SPAN_BYTES_FACTOR * max(max_bytes, INDEX_INTERVAL_BYTES):  # a large record, no index
                return None
            segment.pins += 1
        try:
            span = os.pread(segment.read_fd, end - start, start)
        finally:
            with self._lock:
                fd = segment.unpin()
            if fd is not None:
                os.close(fd)
        if len(span) != end - start:
            raise LogCorruptError(f"{segment.path}: {len(span)} bytes at offset {start}, where the log holds "
                                  f"{end - start}")
        return covered, span

    def _following(self, segment: Segment, end: int) -> tuple[Segment, int] | None:
        """Where a read that reached `end` of `segment` goes on (under the lock); pins a new segment."""
        if segment.size > end:  # the writer published more since this read began
            return segment, segment.size
        j = bisect_right(self._first_ticks, segment.first_tick)
        if j >= len(self._segments):
            return None
        following = self._segments[j]
        following.pins += 1
        return following, following.size


def _span_end(segment: Segment, start: int, max_bytes: int, through_tick: int) -> tuple[int, int]:
    """Where a span of `segment` from `start` ends, and the last tick it covers: the last index
    entry within `max_bytes` of `start` (else the first one past it: a large record), or the
    segment's end; sooner where the index shows a record past `through_tick` (under the lock)."""
    offsets, ticks = segment.index_offsets, segment.index_ticks
    j = bisect_right(offsets, start + max_bytes)
    if j > 0 and offsets[j - 1] > start:
        j -= 1
    end, covered = (offsets[j], ticks[j] - 1) if j < len(offsets) else (segment.size, segment.last_tick)
    t = bisect_right(ticks, through_tick)  # the first entry past through_tick
    if t < len(offsets) and offsets[t] < end:
        end = offsets[t]
    return end, min(covered, through_tick)


class _Collector:
    """The records one `read` gathers, and the rule that says when it has enough."""

    __slots__ = ("after_tick", "keys", "max_bytes", "out", "payload_bytes", "through_tick")

    def __init__(self, after_tick: int, max_bytes: int, through_tick: int | None, keys: bool = False) -> None:
        self.keys = keys
        self.after_tick = after_tick
        self.max_bytes = max_bytes
        self.through_tick = through_tick
        self.out: list[tuple[int, bytes]] = []
        self.payload_bytes = 0

    def take(self, scanner: record.RecordScanner) -> bool:
        """Add qualifying records from `scanner`; whether the read is complete."""
        done, self.payload_bytes = scanner.take(self.out, self.through_tick, self.max_bytes, self.payload_bytes)
        return done


def _encode_released_through(tick: int) -> bytes:
    return json.dumps({"released_through": tick}).encode() + b"\n"


def _load_released_through(path: pathlib.Path) -> int:
    data = read_small_file(path)
    if data is None:
        return 0
    try:
        value = json.loads(data)["released_through"]
    except (ValueError, KeyError, TypeError) as exc:
        raise LogCorruptError(f"{path}: unreadable ({exc}); it is only ever replaced atomically") from exc
    if type(value) is not int or value < 0:
        raise LogCorruptError(f"{path}: released_through must be a non-negative integer, got {value!r}")
    return value


def _recover_segments(directory: pathlib.Path,
                      released_through: int) -> tuple[list[Segment], RecoveryReport, int]:
    """Open and validate every segment, cut a torn tail, and finish an interrupted retention.

    Returns the segments, what was repaired, and a write descriptor for the last segment (-1 if none).
    """
    names = os.listdir(directory)
    found = sorted(
        (tick, directory / name) for name in names if (tick := parse_segment_name(name)) is not None
    )
    removed = 0
    while found and found[-1][1].stat().st_size == 0:  # a crash during a roll
        found.pop()[1].unlink()
        removed += 1
    for name in names:  # summaries whose segment retention removed
        stem = name.removesuffix(SUMMARY_SUFFIX)
        if stem != name and parse_segment_name(stem + SUFFIX) is not None \
                and not (directory / (stem + SUFFIX)).exists():
            (directory / name).unlink()
    segments: list[Segment] = []
    write_fd = -1
    try:
        problem, bytes_cut = _load_segments(directory, found, segments)
        # A segment left empty by the cut goes, and so does every segment wholly at or below
        # released_through: retention persisted that promise but crashed before deleting the file.
        while segments and (segments[0].record_count == 0 or segments[0].last_tick <= released_through):
            _remove(segments.pop(0))
            removed += 1
        if segments and segments[-1].record_count == 0:
            _remove(segments.pop())
            removed += 1
        if segments:
            # What survived a kill -9 may sit only in the page cache: make it durable before anyone
            # treats the recovered log as synced (the pubend starts its synced tick at last_tick).
            write_fd = os.open(segments[-1].path, os.O_WRONLY | os.O_CLOEXEC)
            os.fsync(write_fd)
        if removed or segments:
            fsync_directory(directory)
    except BaseException:
        for segment in segments:
            os.close(segment.read_fd)
        if write_fd >= 0:
            os.close(write_fd)
        raise
    return segments, RecoveryReport(bytes_cut, removed, problem), write_fd


def _load_segments(directory: pathlib.Path, found: list[tuple[int, pathlib.Path]],
                   segments: list[Segment]) -> tuple[str | None, int]:
    """Fill `segments` from `found`; closed ones must be intact, the last one is cut where it tears.

    Returns the problem found at the end of the last segment and how many bytes were cut there.
    """
    previous_tick = 0
    for position, (tick, path) in enumerate(found):
        last = position == len(found) - 1
        segment = Segment(path, tick, open_read_fd(path))
        segments.append(segment)
        file_bytes = os.fstat(segment.read_fd).st_size
        if tick <= previous_tick:
            raise LogCorruptError(f"{path}: first tick {tick} does not follow {previous_tick}")
        if not last and load_summary(segment, file_bytes):
            previous_tick = segment.last_tick
            continue
        problem = load_segment(segment, file_bytes, previous_tick)
        if problem is None and segment.record_count == 0:
            problem = "empty segment"  # a roll never leaves one behind a newer segment
        previous_tick = max(previous_tick, segment.last_tick)
        if not last:
            if problem is not None:
                raise LogCorruptError(f"{path}: {problem} at offset {segment.size} in a closed segment")
            _save_summary(segment)
        elif problem is not None:
            bytes_cut = file_bytes - segment.size
            if segment.record_count and _zeros_from(segment.read_fd, segment.size, file_bytes):
                logger.debug("event log %s: the records of %s end at %d, %d bytes of zeros after them",
                             directory, path.name, segment.size, bytes_cut)
                _truncate(path, segment.size)  # the writer prefills again; a crash leaves no stale bytes
                return None, 0
            logger.warning("event log %s: cutting %d bytes at offset %d of %s: %s",
                           directory, bytes_cut, segment.size, path.name, problem)
            _truncate(path, segment.size)
            return problem, bytes_cut
    return None, 0


def _zeros_from(fd: int, start: int, end: int) -> bool:
    """Whether the file's bytes from `start` to `end` are all zeros."""
    while start < end:
        chunk = os.pread(fd, min(end - start, PREFILL_CHUNK_BYTES), start)
        if not chunk:
            break
        if chunk.count(0) != len(chunk):
            return False
        start += len(chunk)
    return True


def _save_summary(segment: Segment) -> None:
    try:
        write_summary(segment)
    except OSError as exc:  # only a cache: the next open scans the segment instead
        logger.warning("event log: cannot save %s: %s", segment.summary_path, exc)


def _remove(segment: Segment) -> None:
    os.close(segment.read_fd)
    segment.read_fd = -1
    segment.path.unlink()
    segment.summary_path.unlink(missing_ok=True)


def _truncate(path: pathlib.Path, size: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.ftruncate(fd, size)
        os.fsync(fd)
    finally:
        os.close(fd)


def _retire(segments: list[Segment]) -> list[int]:
    """Mark `segments` retired (call under the lock); the descriptors no reader holds, to close."""
    to_close: list[int] = []
    for segment in segments:
        segment.retired = True
        fd = segment.release_fd_if_unused()
        if fd is not None:
            to_close.append(fd)
    return to_close
