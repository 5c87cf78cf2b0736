"""Runs the pubend log's writes, fsyncs, retention and release, and the durable state's saves, on
two threads, with group commit.

The event loop hands Append/Sync/retention work to the worker; its writer thread performs it in
order. When it takes a Sync it first writes every Append already queued behind it, then asks for
one fsync of them all: under load one fsync covers many publish batches, and an idle broker still
syncs each batch at once (no added latency). Reads run on a separate small pool so a catching-up
subscriber never waits behind an fsync.

The syncer (issue 21, stop 30). A large commit (SYNCER_COMMIT_BYTES_MIN or more written since
the last one) is not fsynced by the writer: the syncer thread makes it (`EventLog.begin_sync`, an
fsync of duplicates of the descriptors outside the log's lock, `end_sync`) while the writer goes
on writing what the loop hands over meanwhile; the next fsync begins
as soon as one is reported, covering all of it, and while one is in flight every commit is the
syncer's. When the writer fsynced itself, what came during the fsync (in (a) half the
publisher's window: about 10,000 events, 1.2-1.5 MB) was written only after it, and the disk
idled 1.3-6.4 ms between fsyncs while the window's events waited behind both. A smaller commit
stays the writer's own, with no hand-off on its path: (d)'s lone events, and (c)'s, where the
acknowledgement window (1,000 events) lets nothing arrive during an fsync, so a syncer would
only add its wake-up (0.15 us per event in the log threads, measured). The log's writes and its
sync bookkeeping take turns under one lock (`_log_lock`). The syncer also reports retention and
releases (`_retained_due`), after the syncs begun before them, so the loop never hears an older
log state after a newer one.

Reports in steps. An fsync covering many Syncs reports some of their tokens on the way, each
REPORT_BYTES_MIN (256 KiB) or more of the log past the last one reported, then its last token,
each as a WriteSynced of its own (a callback each): the loop writes one step's deliveries and
ACKs before it builds the next, so the subscribers read while the loop works. Reported as one,
(a)'s 10,000 events took the loop 3.4 ms on average to deliver before the subscriber had its first
byte, and the publisher waited behind its window meanwhile (docs/benchmarks.md, "(a): where the
broker waited"). Any token a report names is covered by the fsync, and its state is the log's as
that fsync began (at or past the token, as the writer's group commit always reported it).

The state reported with a sync is taken before the fsync (which changes none of it), so the loop
hears of the sync as soon as the fsync returns: at 1,000 events/s log_state took 6 us p50 and
51 us p90 between the fsync and the report. Each call still hands its work over at once: holding a
turn's work for one wake at its end was measured slower (bench/handoff_micro.py and
docs/benchmarks.md: the writer woken early is through its wake-up by the time the loop lets go of
the GIL).

A quiet broker's commit in the loop's own thread (`on_synced_here`; the broker passes it unless
TIDINGS_SYNC_IN_LOOP=0, aio/server.py: see the end of this paragraph). Once the writer has finished
everything handed to it and the last INLINE_RUN_COMMITS commits were quiet (each started at least
INLINE_QUIET_NS after the one before ended), the commits are the loop's: an Append is
held and the Sync that follows it (the intake hands them over together) writes and fsyncs it in
the calling thread, then reports through `on_synced_here` there and then (with `defer`, as the
broker passes it, at the end of the loop's turn: the Syncs of PUBLISHes read in one turn share one
fsync, as in the writer's group commit; each Sync committing at once had a burst fsynced once per
PUBLISH, each waited out by the loop, until INLINE_RUN_COMMITS busy ones gave the commits back):
no wake-up of the writer, no GIL passed back and forth, and the ACK and the deliveries leave in the same loop turn
as the PUBLISH. They stay the loop's until INLINE_RUN_COMMITS in a row each started less than
INLINE_QUIET_NS after the last one ended (sustained load: the writer's group commit then keeps
the disk and the loop working at once), so the thread that syncs changes seldom. The log is
still written by one thread at a time: the loop takes it only while everything put on the queue
has been done (`_put` and `_done`, each written by one thread only) and the syncer is idle
(`_syncing`), and holds
every later piece of work back behind its own until that is done. At 1,000 events/s this took the
hand-offs (about 30 us p50 and 6 context switches per event, docs/benchmarks.md "(d) above the
disk's fsync") off the path in bench/handoff_micro.py. It is for a quick disk only: while the
fsync runs the loop serves nothing else. So the fsyncs' recent length is kept (a moving average,
each new one weighing 1/8), and while it is `INLINE_SYNC_NS_MAX` or more every commit is the
writer's: a stalling disk holds the loop (the overlay's keep-alives, other connections) for one
fsync at most. On a saturated shared machine (load 9-19, fsyncs of 4-6 ms) brokers with it gave
(d) p50s several times those without it in most alternated pairs (docs/benchmarks.md, stop 24),
most of it the loop fsyncing a burst once per PUBLISH (fixed by `defer`); on the quiet machine its
p99 was the lower in every round, and it now has the prefill's fdatasyncs too, with the least CPU
and the fewest context switches per (d) event of the paths tried (stop 30): hence on by default.
Loop and writer make the same log and the same reports; only the thread and the timing differ.

The prefill (the writer's, also for the loop's commits: a quiet, small commit made in the loop
hands it to the writer when one is due). After a quiet, small commit (one that started INLINE_QUIET_NS or more
after the last one ended and wrote at most PREFILL_COMMIT_BYTES_MAX: an idle broker, or (d)'s one
event a millisecond on a quick disk, where each fsync covers an event or a few), once the queue is
empty, the writer lets the log prefill (storage/log.py: zeros written ahead, so the next commits
are fdatasyncs over them, each cheaper). Under sustained load it does not: there a commit covers
many events, so the saving per event is small, and the prefill's own fsync (milliseconds on a
loaded disk) would hold the next commit: with it after every small commit, (a) lost throughput in
4 pairs of 4 at load 11-15 (docs/benchmarks.md, "Stop 29"). `TIDINGS_LOG_PREFILL=0` turns it off.
(Pacing large back-to-back commits, so that each fsync covers more events, was built and measured
three times with no gain, the last on a quiet machine; it was taken out again.)

The core hears of a commit early (stop 31). A commit made in the loop's thread writes its Appends,
asks the kernel to begin writing them to the disk without waiting (`EventLog.start_writeback`:
sync_file_range), and only then reports the sync through `on_synced_here`, before its fsync: the
broker hands the core the WriteSynced there and then and holds every effect of it (core/drive.py
`Driver.hold`). The fsync follows; once it returned the held effects are applied (the ACKs, the
deliveries, the knowledge to the trees leave), and if it failed they are dropped with the core
itself, which hears nothing more while the broker stops: nothing of a sync leaves the broker
before the disk has it, as before. Meanwhile the disk was writing the events while the core
worked out what to send: on this stop's machine a write, 100 us of work and the fsync took
363 us p50 where they took 444 us without the early write (bench/fsync_floor.py `--calls
prefilled,writeback --work-us 100`), and (d)'s p50 fell by 55-120 us (docs/benchmarks.md, "Stop 31").
The writer's commits report after their fsync, as before.

A native commit (the loop the log's one writer, a pthread of a C extension that never takes the GIL
fsyncing and writing an eventfd the loop watches) was built and measured for (d) in stop 29 and
30, and taken out: the loop's own commit needs no hand-off at all (docs/benchmarks.md).
"""

from __future__ import annotations

import errno
import logging
import os
import pathlib
import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from tidings.core.inputs import TICK_MARKS, LogState
from tidings.core.publish.dedup import DedupWindow
from tidings.storage import EventLog
from tidings.storage.files import StorageError, write_atomically
from tidings.storage.log import SyncPlan

_STOP = object()
SAVE_WAIT_POLL_S = 1.0  # a waiting save looks this often whether the worker is still alive
INLINE_QUIET_NS = 500_000  # a commit that starts this long after the last one ended is a quiet one
INLINE_RUN_COMMITS = 8  # the loop takes the commits after this many quiet ones in a row, gives them back
# to the writer after this many in a row that were not
INLINE_SYNC_NS_MAX = 1_000_000  # ... and only while the fsyncs' moving average is below this (a quick disk)
PREFILL_COMMIT_BYTES_MAX = 16 << 10  # the writer prefills after a quiet commit of at most this many bytes
REPORT_BYTES_MIN = 256 << 10  # a commit's tokens are reported to the loop in steps of at least this many bytes
SYNCER_COMMIT_BYTES_MIN = 256 << 10  # a commit this large is fsynced by the syncer while the writer writes on


def sync_plan(plan: SyncPlan) -> int:
    """fsync a plan's descriptors (`EventLog.begin_sync`: fdatasync the segment when the plan
    allows) and close them, in the calling thread and outside the log; 0, or the errno of the
    first that failed (for `EventLog.end_sync`)."""
    error = 0
    try:
        if plan.fd >= 0:
            (os.fdatasync if plan.data_only else os.fsync)(plan.fd)
        if plan.directory_fd >= 0:
            os.fsync(plan.directory_fd)
    except OSError as exc:
        error = exc.errno or errno.EIO
    finally:
        for fd in (plan.fd, plan.directory_fd):
            if fd >= 0:
                os.close(fd)
    return error


def log_state(log: EventLog) -> LogState:
    return LogState(last_tick=log.last_tick, first_tick=log.first_tick,
                    released_through=log.released_through, log_bytes=log.size_bytes,
                    record_count=log.record_count, tick_marks=log.tick_marks(TICK_MARKS))


logger = logging.getLogger(__name__)
DEDUP_READ_BYTES = 1 << 20  # keys read per step while rebuilding the dedup window


def restore_dedup(window: DedupWindow, log: EventLog, now_us: int) -> int:
    """Rebuild the idempotent-publish window from the log's keyed records younger than the window
    (core/publish/dedup.py), before the broker serves; returns the records replayed. The read is bounded
    by the window: ticks are microseconds of wall clock. A segment that cannot be read (corrupt)
    is skipped with a warning, as its readers fail and the broker serves on: repeats of the events
    it holds are logged again."""
    used = 0
    horizon = max(now_us - window.window_us, 0)
    for info in log.segments():
        if info.last_tick <= horizon:
            continue
        after = max(horizon, info.first_tick - 1)
        try:
            while keyed := log.read(after, DEDUP_READ_BYTES, info.last_tick, keys=True):
                used += window.restore(keyed, now_us)
                after = keyed[-1][0]
        except (StorageError, OSError) as exc:
            logger.warning("the dedup window misses the producer ids of segment %s: %s", info.name, exc)
    return used


class StorageWorker:
    def __init__(self, log: EventLog, on_synced: Callable[[int, LogState], object],
                 on_retained: Callable[[LogState], object], on_failed: Callable[[BaseException], object],
                 on_synced_here: Callable[[int, LogState], Callable[[bool], object]] | None = None,
                 clock: Callable[[], int] = time.monotonic_ns, prefill: bool | None = None,
                 defer: Callable[[Callable[[], None]], object] | None = None) -> None:
        """`on_synced` is called in the writer's thread; `on_synced_here`, when given, reports a
        quiet broker's commit made in the calling thread before its fsync, and returns what to call
        after it: with True once it returned, with False if it failed (the module's docstring);
        None: every commit is the writer's. `clock`: monotonic ns, for the quiet test. `prefill` (default on
        unless $TIDINGS_LOG_PREFILL=0): the module's "The prefill". `defer`: the calling thread's
        loop's `call_soon`, so that a commit made there waits for the end of the turn and every
        Sync of the turn shares its fsync (the module's docstring); None: each Sync commits at once."""
        self.log = log
        self._prefill = os.environ.get("TIDINGS_LOG_PREFILL") != "0" if prefill is None else prefill
        self._size_committed = log.size_bytes  # the log's bytes after the writer's last commit
        self._small = True  # that commit wrote at most PREFILL_COMMIT_BYTES_MAX
        self._on_synced = on_synced
        self._on_synced_here = on_synced_here
        self._clock = clock
        self._on_retained = on_retained
        self._on_failed = on_failed
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, args=(self._loop,), name="tidings-log-writer", daemon=True)
        self._syncer = threading.Thread(target=self._run, args=(self._syncs,), name="tidings-log-syncer",
                                        daemon=True)
        self._log_lock = threading.Lock()  # the log's writes and its sync's bookkeeping: one thread at a time
        self._asked = threading.Condition()  # the writer asks the syncer for a sync through it
        self._wanted: list[tuple[int, int]] = []  # tokens asked for that the syncer has not taken, each with
        # the log's bytes through it
        self._reported_bytes = 0  # the log's bytes through the last token reported
        self._syncing = False  # a sync asked for or in flight (set by the writer, cleared by the syncer)
        self._syncer_stop = False  # the writer stops: the syncer ends once nothing is wanted
        self._retained_due = False  # retention or a release changed the log: the syncer reports it
        self._written = log.size_bytes  # the log's bytes when the writer last handed a commit over or made it
        self._failed = False  # a failure was reported (once: on_failed stops the broker)
        self._readers = ThreadPoolExecutor(max_workers=2, thread_name_prefix="tidings-log-reader")
        self.syncs = 0
        self.syncs_here = 0  # of `syncs`, the commits made in the calling thread
        self.syncs_pipelined = 0  # of `syncs`, the syncer's (the writer wrote on meanwhile)
        self.sync_ns_total = 0  # the fsyncs' length in all (the writer's and the loop's)
        self._stopping = False
        self._put = 0  # work put on the queue (by the calling thread only)
        self._done = 0  # of it, the work the writer has finished (by the writer only)
        self._held: list[tuple[Sequence[tuple[int, bytes]], list[bytes] | None]] = []  # Appends for a Sync here
        self._held_token: int | None = None  # with `defer`: the highest Sync for the commit at the turn's end
        self._defer = defer
        self._last_commit_ns = clock() - INLINE_QUIET_NS  # when the last commit ended
        self._in_loop = False  # the commits are the loop's (until the load is sustained), not the writer's
        self._quiet_run = INLINE_RUN_COMMITS  # the last commits in a row that were quiet (a new log: idle)
        self._busy_run = 0  # the last commits in a row that were not
        self._sync_ns_avg = 0  # the fsyncs' recent length: a moving average, each new one weighing 1/8

    def start(self) -> None:
        self._syncer.start()
        self._thread.start()

    def append(self, records: Sequence[tuple[int, bytes]], keys: list[bytes] | None = None) -> None:
        if self._on_synced_here is not None and (self._held or self._loop_commits()):
            self._held.append((records, keys))  # for the Sync that follows, made here
            return
        self._put_work(("append", (records, keys)))

    def sync(self, token: int) -> None:
        if not self._held:  # nothing held here (any other work put since took it to the writer)
            self._put_work(("sync", token))
        elif self._defer is None:
            self._commit_here(token)
        else:  # one commit at the end of the turn, for every Sync of it
            if self._held_token is None:
                self._defer(self._commit_turn)
            self._held_token = token

    def retain(self, now_us: int, bytes_max: int, age_us: int) -> None:
        self._put_work(("retain", (now_us, bytes_max, age_us)))

    def release(self, through: int) -> None:
        """The release protocol's ReleaseLog: drop the whole segments at or below `through`."""
        self._put_work(("release", through))

    def fsync_mean_us(self) -> float:
        """The log's fsyncs' mean length so far, by whichever thread made them (0 before any)."""
        return self.sync_ns_total / max(self.syncs, 1) / 1000

    def _loop_commits(self) -> bool:
        """Whether the next commit is the loop's: the writer has done all it was given and the disk
        is quick, and the loop has the commits already (until INLINE_RUN_COMMITS in a row were
        not quiet) or the last INLINE_RUN_COMMITS were quiet. Which thread syncs changes seldom:
        fsyncs from two threads taking turns were measured several times slower than one
        thread's back to back (docs/benchmarks.md, stop 24)."""
        if (self._done != self._put or self._syncing or self._stopping or self._sync_ns_avg >= INLINE_SYNC_NS_MAX
                or self._busy_run >= INLINE_RUN_COMMITS):
            self._in_loop = False
        elif self._quiet_run >= INLINE_RUN_COMMITS:
            self._in_loop = True
        return self._in_loop

    def _put_work(self, item: Any) -> None:
        """Hand `item` to the writer, after any Appends (and Sync) held for a commit here (the order holds)."""
        if self._held:
            for held in self._held:
                self._put += 1
                self._queue.put(("append", held))
            self._held.clear()
        if self._held_token is not None:
            self._put += 1
            self._queue.put(("sync", self._held_token))
            self._held_token = None
        self._put += 1
        self._queue.put(item)

    def commit_held(self) -> None:
        """In the calling thread, before `stop` (which the broker calls from another): a commit held
        for the end of the turn is made now, so that nothing here races the stop's hand-over."""
        self._commit_turn()

    def _commit_turn(self) -> None:
        """At the end of the turn (`defer`): the commit of its Syncs, unless other work put on the
        queue meanwhile took them to the writer."""
        token, self._held_token = self._held_token, None
        if token is not None:
            self._commit_here(token)

    def _commit_here(self, token: int) -> None:
        """The held Appends written and fsynced in this thread; `on_synced_here` hears of the sync
        while the disk writes them, and its answer is applied once the fsync returned (the
        module's "The core hears of a commit early")."""
        report = self._on_synced_here
        assert report is not None
        held, self._held = self._held, []
        try:
            with self._log_lock:  # (the writer and the syncer are idle: `_loop_commits`)
                for records, keys in held:
                    self.log.append(records, keys)
                self.log.start_writeback()
                state = log_state(self.log)  # (while the disk writes)
        except BaseException as exc:  # a failing disk stops the broker, as in the writer
            self._failed_here(exc)
            return
        finish = report(token, state)  # the log untouched meanwhile: the lock is not needed
        try:
            with self._log_lock:
                began = self._commit_began()
                self.log.sync()
                self._commit_ended(began)
        except BaseException as exc:
            finish(False)  # the answer is dropped unapplied: nothing of it left the broker
            self._failed_here(exc)
            return
        self.syncs_here += 1
        finish(True)
        size, self._size_committed = self._size_committed, self.log.size_bytes
        if (self._prefill and not self._busy_run and self.log.size_bytes - size <= PREFILL_COMMIT_BYTES_MAX
                and self.log.prefill_due()):
            self._put_work(("prefill", None))  # zeros ahead, by the writer: the loop goes on meanwhile

    def _failed_here(self, exc: BaseException) -> None:
        """A commit in this thread failed: never here again (what follows is the writer's to fail)."""
        self._on_synced_here = None
        self._on_failed(exc)

    def _commit_began(self) -> int:
        """A commit's fsync begins (in the syncer, or the loop's when the syncer is idle): whether
        it is a quiet one is noted; returns the time."""
        began = self._clock()
        if began - self._last_commit_ns >= INLINE_QUIET_NS:
            self._quiet_run, self._busy_run = self._quiet_run + 1, 0
        else:
            self._quiet_run, self._busy_run = 0, self._busy_run + 1
        return began

    def _commit_ended(self, began: int) -> None:
        """... and ended: its end and its length noted."""
        self.syncs += 1
        self._last_commit_ns = self._clock()
        self.sync_ns_total += self._last_commit_ns - began
        self._sync_ns_avg += (self._last_commit_ns - began - self._sync_ns_avg) // 8

    def save(self, path: pathlib.Path, data: bytes, wait: bool = False) -> None:
        """Replace `path` with `data` atomically (SaveDurable), in order with the other saves; with
        `wait`, return once it is on disk (or the worker has failed, which stops the broker)."""
        done = threading.Event() if wait else None
        self._put_work(("save", (path, data, done)))
        while done is not None and not done.wait(SAVE_WAIT_POLL_S) and self._thread.is_alive():
            pass

    def read(self, after: int, through: int, max_bytes: int,
             done: Callable[[list[tuple[int, bytes]], LogState, tuple[int, bytes] | None], None],
             failed: Callable[[str], None], span: bool = False) -> None:
        """ReadLog: the records, or with `span` the log's bytes when it can cut them (LogRead)."""
        def work() -> None:
            try:
                found = self.log.read_span(after, max_bytes, through) if span else None
                records = self.log.read(after, max_bytes, through) if found is None else []
            except Exception as exc:  # a corrupt or vanished segment: that reader must hear of it
                failed(f"{type(exc).__name__}: {exc}")
                return
            done(records, log_state(self.log), found)

        if self._stopping:
            return  # the broker is stopping: nobody will hear the answer (a nack is repeated elsewhere)
        self._readers.submit(work)

    def stop(self) -> None:
        """Finish queued work, then stop the threads (pending syncs complete first)."""
        self._stopping = True
        self._put_work(_STOP)
        self._thread.join()
        with self._asked:
            self._syncer_stop = True
            self._asked.notify()
        if self._syncer.is_alive():
            self._syncer.join()
        self._readers.shutdown(wait=True)

    def _fail(self, exc: BaseException) -> None:
        """A failing disk stops the broker, not hangs it: reported once, whichever thread saw it."""
        with self._asked:
            first, self._failed = not self._failed, True
        if first:
            self._on_failed(exc)

    def _run(self, body: Callable[[], None]) -> None:
        """A thread's body (the writer's or the syncer's): whatever it raises fails the worker, once."""
        try:
            body()
        except BaseException as exc:
            self._fail(exc)

    def _loop(self) -> None:
        q = self._queue
        while True:
            item = q.get()
            if item is _STOP:
                return
            kind, arg = item
            if kind == "append":
                with self._log_lock:
                    self.log.append(*arg)
            elif kind != "sync":
                self._housekeeping(kind, arg)
            elif self._group_commit(arg):
                return
            self._done += 1  # after the work: until then the calling thread leaves the log alone

    def _group_commit(self, token: int) -> bool:
        """Write every Append already queued behind a Sync, then ask the syncer for one fsync of
        them all; the other work taken from the queue meanwhile runs after that, in order. True
        when STOP was among it."""
        q = self._queue
        later: list[tuple[str, Any]] = []
        stop = False
        taken = 0
        asks = [(token, self.log.size_bytes)]  # each token with the log's bytes through it
        while True:
            try:
                more = q.get_nowait()
            except queue.Empty:
                break
            if more is _STOP:
                stop = True
                break
            taken += 1
            if more[0] == "append":
                with self._log_lock:
                    self.log.append(*more[1])
            elif more[0] == "sync":
                asks.append((more[1], self.log.size_bytes))
            else:
                later.append(more)
        written, self._written = self.log.size_bytes - self._written, self.log.size_bytes
        with self._asked:  # a smaller commit is made here: no hand-off on its path
            here = written < SYNCER_COMMIT_BYTES_MIN and not self._syncing
            if not here:
                self._wanted += asks
                self._syncing = True
                self._asked.notify()
        if here:
            self._commit(asks)
            self._prefill_when_idle(stop)
        for kind, arg in later:
            self._housekeeping(kind, arg)
        self._done += taken
        return stop

    def _syncs(self) -> None:
        """The syncer: one fsync at a time of everything written when it begins, reported with the
        log's state as it began; the writer goes on writing meanwhile (group commit: what it wrote
        rides on the next one, which begins as soon as this one is reported)."""
        asked = self._asked
        while True:
            with asked:
                while not self._wanted and not self._retained_due and not self._syncer_stop:
                    asked.wait()
                asks, self._wanted = self._wanted, []
                retained, self._retained_due = self._retained_due, False
                if not asks and not retained:
                    return  # stopping, and nothing is left to do
            if asks:
                self._commit(asks)
                self.syncs_pipelined += 1
            if retained:  # after the syncs begun before the housekeeping: the states reach the loop in order
                with self._log_lock:
                    state = log_state(self.log)
                self._on_retained(state)
            with asked:
                if self._wanted or self._retained_due:
                    continue
            if asks:
                self._prefill_when_idle(self._syncer_stop)
            with asked:
                self._syncing = bool(self._wanted) or self._retained_due

    def _prefill_when_idle(self, stopping: bool) -> None:
        """After a quiet, small commit with nothing queued: zeros ahead (the module's "The prefill")."""
        if self._prefill and self._small and not self._busy_run and not stopping and self._queue.empty():
            with self._log_lock:
                self.log.prefill()

    def _commit(self, asks: list[tuple[int, int]]) -> None:
        """One fsync outside the log's lock (the writer appends meanwhile), and its reports: the
        tokens it covers in steps of REPORT_BYTES_MIN or more, each a WriteSynced of its own, so
        the loop sends the first deliveries of a large commit before it has built the last."""
        with self._log_lock:
            plan = self.log.begin_sync()
            state = log_state(self.log)
        if plan is not None:
            began = self._commit_began()
            error = sync_plan(plan)
            with self._log_lock:
                self.log.end_sync(plan, error)  # (raises StorageError when it failed)
            self._commit_ended(began)
        reported = self._reported_bytes
        for token, through in asks[:-1]:
            if through - reported >= REPORT_BYTES_MIN:
                self._on_synced(token, state)
                reported = through
        self._on_synced(asks[-1][0], state)
        self._reported_bytes = asks[-1][1]
        size, self._size_committed = self._size_committed, state.log_bytes
        self._small = self._size_committed - size <= PREFILL_COMMIT_BYTES_MAX  # (after a retention: negative)

    def _housekeeping(self, kind: str, arg: Any) -> None:
        """The writer's prefill, retention, a release (reported by the syncer, after the syncs begun
        before it) or a save."""
        if kind == "prefill":
            with self._log_lock:
                self.log.prefill()
        elif kind in ("retain", "release"):
            with self._log_lock:
                if kind == "retain":
                    self.log.enforce_retention(*arg)
                    changed = True  # (reported whatever it removed)
                else:
                    changed = self.log.release_through(arg) > 0
            if changed:
                with self._asked:
                    self._retained_due = True
                    self._syncing = True
                    self._asked.notify()
        else:
            assert kind == "save"
            path, data, done = arg
            write_atomically(path, data)
            if done is not None:
                done.set()
