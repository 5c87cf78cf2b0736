"""The storage worker: group commit, and a failing disk reported as such (never as a hang)."""

import errno
import os
import sys
import threading
import time

import pytest

from tidings.aio import storage_worker
from tidings.aio.storage_worker import (
    INLINE_RUN_COMMITS,
    INLINE_SYNC_NS_MAX,
    PREFILL_COMMIT_BYTES_MAX,
    REPORT_BYTES_MIN,
    SYNCER_COMMIT_BYTES_MIN,
    StorageWorker,
    log_state,
)
from tidings.core.inputs import TICK_MARKS
from tidings.storage import EventLog, StorageError, files
from tidings.storage import log as log_module
from tidings.storage.log import PREFILL_CHUNK_BYTES


def test_group_commit_reports_the_highest_token(tmp_path):
    log = EventLog.open(tmp_path / "log")
    synced: list[int] = []
    done = threading.Event()

    states = []

    def on_synced(token, state):
        synced.append(token)
        states.append(state)
        if token == 3:
            done.set()

    worker = StorageWorker(log, on_synced, lambda st: None, lambda exc: None)
    for token in (1, 2, 3):  # queued before the thread runs: one fsync covers all three
        worker.append([(token, b"x")])
        worker.sync(token)
    worker.start()
    assert done.wait(10)
    worker.stop()
    assert synced == [3] and worker.syncs == 1
    assert states == [log_state(log)]  # taken before the fsync, the state after it
    assert states[0].record_count == 3 and states[0].last_tick == 3
    assert [t for t, _ in log.read(0, 1 << 20)] == [1, 2, 3]
    log.close()


def test_a_failing_sync_is_reported_through_on_failed(tmp_path, monkeypatch):
    """The syncer's fsync fails: reported once (the writer's next append fails too, on the failed
    log, and is not reported again), the token never, and the log refuses further writes."""
    log = EventLog.open(tmp_path / "log")

    real_sync = storage_worker.sync_plan

    def broken_sync(plan):
        real_sync(plan)  # (closes the descriptors)
        return errno.EIO

    monkeypatch.setattr(storage_worker, "sync_plan", broken_sync)
    failures: list[BaseException] = []
    synced: list[int] = []
    failed = threading.Event()

    def on_failed(exc):
        failures.append(exc)
        failed.set()

    worker = StorageWorker(log, lambda t, st: synced.append(t), lambda st: None, on_failed)
    worker.start()
    worker.append([(1, b"x")])
    worker.sync(1)
    assert failed.wait(10)
    worker.append([(2, b"x")])
    worker.sync(2)
    worker.stop()
    assert len(failures) == 1 and "Input/output error" in str(failures[0]) and synced == []
    with pytest.raises(StorageError):
        log.append([(3, b"x")])


def test_the_log_state_carries_the_tick_marks(tmp_path):
    with EventLog.open(tmp_path / "log") as log:
        for first in range(1, 1001, 10):  # about 1 MB in batch records of 10 KB: 15 index entries
            log.append([(tick, bytes(1000)) for tick in range(first, first + 10)])
        log.sync()
        state = log_state(log)
        assert state.tick_marks == log.tick_marks(TICK_MARKS) and 8 <= len(state.tick_marks) < TICK_MARKS


class _Clock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now_ns = 10**12

    def __call__(self) -> int:
        return self.now_ns


def _reporter(here, dropped=None, entry=lambda t, st: (t, st)):
    """An `on_synced_here` that puts `entry(token, state)` in `here` once the fsync returned, or in
    `dropped` if it failed (the report is made before the fsync; what it answers is held)."""
    def report(token, state):
        def finish(ok):
            (here if ok else dropped).append(entry(token, state))
        return finish
    return report


def _worker(log, clock, here, thread, failed=lambda exc: None, prefill=False, dropped=None):
    """The prefill off unless asked for: it would hand the log to the writer now and then."""
    return StorageWorker(log, lambda t, st: thread.append((t, st)), lambda st: None, failed,
                         on_synced_here=_reporter(here, dropped), clock=clock, prefill=prefill)


def test_a_quiet_worker_commits_in_the_calling_thread(tmp_path):
    """Append + Sync with the writer idle and its last commit not recent: written, fsynced and
    reported before `sync` returns, through on_synced_here; the writer hears of nothing."""
    clock, here, thread = _Clock(), [], []
    with EventLog.open(tmp_path / "log") as log:
        worker = _worker(log, clock, here, thread)
        worker.start()
        worker.append([(1, b"a"), (2, b"b")])
        assert here == [] and log.record_count == 0  # held for the Sync
        worker.sync(7)
        assert [t for t, _ in here] == [7] and here[0][1] == log_state(log) and here[0][1].last_tick == 2
        assert worker.syncs == worker.syncs_here == 1
        clock.now_ns += 500_000  # quiet again
        worker.append([(3, b"c")])
        worker.sync(8)
        assert [t for t, _ in here] == [7, 8] and worker.syncs_here == 2
        worker.stop()
        assert thread == []
        assert [t for t, _ in log.read(0, 1 << 20)] == [1, 2, 3]


def test_the_report_here_comes_while_the_disk_writes_and_its_answer_after_the_fsync(tmp_path):
    """A commit in the calling thread: the records written and their writeback begun, then the
    report (the core hears of the sync), then the fsync, then the report's answer applied."""
    clock, steps = _Clock(), []
    with EventLog.open(tmp_path / "log") as log:
        real_sync, real_writeback = log.sync, log.start_writeback

        def sync():
            steps.append(("fsync", log.record_count))
            real_sync()

        def writeback():
            steps.append(("writeback", log.record_count))
            return real_writeback()

        log.sync, log.start_writeback = sync, writeback  # type: ignore[method-assign]

        def report(token, state):
            steps.append(("report", token, state.last_tick))
            return lambda ok: steps.append(("answer", token, ok))

        worker = StorageWorker(log, lambda t, st: None, lambda st: None, lambda exc: None,
                               on_synced_here=report, clock=clock, prefill=False)
        worker.start()
        worker.append([(1, b"a"), (2, b"b")])
        worker.sync(7)
        assert steps == [("writeback", 2), ("report", 7, 2), ("fsync", 2), ("answer", 7, True)]
        worker.stop()


def test_writeback_begins_on_the_appended_bytes_only(tmp_path, monkeypatch):
    """`EventLog.start_writeback` asks for the bytes appended since the last sync, on the active
    segment's descriptor (storage/files.py `start_writeback`: sync_file_range where there is one)."""
    calls = []
    monkeypatch.setattr(log_module, "start_writeback",
                        lambda fd, offset, length: calls.append((offset, length)) or True)
    with EventLog.open(tmp_path / "log") as log:
        assert log.start_writeback() is False and calls == []  # no segment yet
        log.append([(1, b"a")])
        size1 = log.size_bytes
        assert log.start_writeback() and calls == [(0, size1)]
        log.sync()
        log.append([(2, b"bb")])
        assert log.start_writeback() and calls[-1] == (size1, log.size_bytes - size1)


def test_start_writeback_is_real_and_harmless(tmp_path):
    """The real call on a real file: begun on Linux (sync_file_range), nothing asked for nothing begun."""
    path = tmp_path / "f"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.write(fd, b"x" * 4096)
        assert files.start_writeback(fd, 0, 4096) is (sys.platform == "linux")
        assert files.start_writeback(fd, 0, 0) is False
        os.fsync(fd)
    finally:
        os.close(fd)
    assert path.read_bytes() == b"x" * 4096


def _drained(worker):
    """Wait (10 s at most) until the writer has done all it was given, and the syncer too."""
    until = time.monotonic() + 10
    while (worker._done != worker._put or worker._syncing) and time.monotonic() < until:
        time.sleep(0.01)
    return worker._done == worker._put and not worker._syncing


def test_sustained_load_goes_to_the_writer_and_back_only_after_quiet_commits(tmp_path):
    """INLINE_RUN_COMMITS commits in a row that were not quiet: the next ones are the writer's
    (work it has not done keeps them there, behind it: the log's order is the calls'); the loop
    takes them again only after INLINE_RUN_COMMITS quiet ones in a row, so the thread that syncs
    does not change from one commit to the next."""
    clock, here, thread = _Clock(), [], []
    saved = tmp_path / "saved"
    with EventLog.open(tmp_path / "log") as log:
        worker = _worker(log, clock, here, thread)
        tick = 0
        for _ in range(1 + INLINE_RUN_COMMITS):  # the clock does not move: one quiet, then all busy
            tick += 1
            worker.append([(tick, b"x")])
            worker.sync(tick)
        assert [t for t, _ in here] == list(range(1, tick + 1))
        worker.append([(tick + 1, b"x")])
        worker.sync(tick + 1)  # the writer's (not started yet: queued)
        clock.now_ns += 10**9
        worker.save(saved, b"state")
        worker.append([(tick + 2, b"x")])
        worker.sync(tick + 2)  # quiet, but the writer has work not done: behind it
        tick += 2
        assert len(here) == tick - 2 and log.record_count == tick - 2
        worker.start()
        assert _drained(worker)
        assert saved.read_bytes() == b"state" and [t for t, _ in thread] == [tick]  # one group commit
        for n in range(INLINE_RUN_COMMITS - 1):  # quiet commits, the writer's until there are enough
            clock.now_ns += 10**9
            tick += 1
            worker.append([(tick, b"x")])
            worker.sync(tick)
            assert _drained(worker)
            assert thread[-1][0] == tick, f"quiet commit {n + 2} was not the writer's"
        clock.now_ns += 10**9
        worker.append([(tick + 1, b"x")])
        worker.sync(tick + 1)  # INLINE_RUN_COMMITS quiet ones in a row: the loop's again
        assert here[-1][0] == tick + 1
        worker.stop()
        assert [t for t, _ in log.read(0, 1 << 20)] == list(range(1, tick + 2))


def test_a_failing_sync_here_is_reported_and_leaves_the_rest_to_the_writer(tmp_path):
    """The core heard of the commit before its fsync: when the fsync fails, what it answered is
    dropped unapplied (finish(False)), the failure reported, and the next commits are the writer's."""
    clock, here, thread, failures, dropped = _Clock(), [], [], [], []
    log = EventLog.open(tmp_path / "log")
    real_sync = log.sync

    def broken_sync():
        raise StorageError("fsync failed: EIO")

    log.sync = broken_sync  # type: ignore[method-assign]
    worker = _worker(log, clock, here, thread, failures.append, dropped=dropped)
    worker.append([(1, b"a")])
    worker.sync(1)
    assert here == [] and [t for t, _ in dropped] == [1] and len(failures) == 1 and "EIO" in str(failures[0])
    clock.now_ns += 10**9
    worker.append([(2, b"b")])
    worker.sync(2)  # never here again after a failure: the writer has it
    assert here == [] and worker.syncs_here == 0
    log.sync = real_sync  # type: ignore[method-assign]
    worker.start()
    worker.stop()
    assert [t for t, _ in thread] == [2] and here == []
    log.close()


def test_a_slow_fsync_leaves_the_next_commits_to_the_writer(tmp_path):
    """A commit here whose fsync brought the fsyncs' moving average (1/8 each) to INLINE_SYNC_NS_MAX:
    the loop is not frozen by the next one, which the writer makes; a quick fsync there brings the
    average under it, and the loop commits again."""
    clock, here, thread = _Clock(), [], []
    with EventLog.open(tmp_path / "log") as log:
        real_sync = log.sync

        def slow_sync():
            clock.now_ns += 8 * INLINE_SYNC_NS_MAX
            real_sync()

        log.sync = slow_sync  # type: ignore[method-assign]
        worker = _worker(log, clock, here, thread)
        worker.append([(1, b"a")])
        worker.sync(1)
        clock.now_ns += 10**9
        worker.append([(2, b"b")])
        worker.sync(2)  # quiet, but the disk was slow: the writer's
        assert [t for t, _ in here] == [1] and log.record_count == 1
        log.sync = real_sync  # type: ignore[method-assign]
        worker.start()
        assert _drained(worker)  # the writer through its work
        assert [t for t, _ in thread] == [2]
        clock.now_ns += 10**9
        worker.append([(3, b"c")])
        worker.sync(3)  # the writer's fsync was quick: here again
        worker.stop()
        assert [t for t, _ in here] == [1, 3]
        assert [t for t, _ in log.read(0, 1 << 20)] == [1, 2, 3]


def _commit(worker, synced, token, payload=b"x"):
    """Append and Sync `token` on the writer; the seconds until it was reported (10 s at most)."""
    began = time.monotonic()
    worker.append([(token, payload)])
    worker.sync(token)
    until = began + 10
    while token not in synced and time.monotonic() < until:
        time.sleep(0.001)
    assert token in synced
    return time.monotonic() - began


def test_the_writer_prefills_after_quiet_small_commits_only(tmp_path):
    """After a quiet commit of at most PREFILL_COMMIT_BYTES_MAX, with nothing queued, the writer
    prefills the log: the next commit is an fdatasync over the zeros. After a larger commit, or one
    that followed the last closely, it leaves the log alone."""
    clock, synced = _Clock(), []
    segment = tmp_path / "log"
    with EventLog.open(segment) as log:
        worker = StorageWorker(log, lambda t, st: synced.append(t), lambda st: None, lambda exc: None,
                               clock=clock)
        worker.start()

        def commit(token, payload=b"x", quiet=True):
            if quiet:
                clock.now_ns += 10**9
            _commit(worker, synced, token, payload)
            assert _drained(worker)

        commit(1)
        assert log.prefill_bytes_max and (log.fsyncs, log.fdatasyncs) == (2, 0)  # the commit's, the prefill's
        commit(2)
        assert log.fdatasyncs == 1
        files = sorted(segment.glob("*.seg"))
        assert files[-1].stat().st_size > log.segments()[-1].size_bytes  # zeros ahead
        commit(3, bytes(3 << 20))  # past the zeros, and large
        assert files[-1].stat().st_size == log.segments()[-1].size_bytes  # no prefill after it
        commit(4, quiet=False)  # small, but close behind the last (the clock stands still)
        assert files[-1].stat().st_size == log.segments()[-1].size_bytes
        commit(5, bytes(PREFILL_COMMIT_BYTES_MAX - 100))
        assert files[-1].stat().st_size > log.segments()[-1].size_bytes  # quiet and small: zeros ahead
        worker.stop()
        assert [t for t, _ in log.read(0, 1 << 30)] == [1, 2, 3, 4, 5]


class _Gate:
    """`sync_plan` held until the test lets it go: the syncer's fsync in flight for as long as a test needs."""

    def __init__(self, real):
        self.real = real
        self.entered = threading.Event()
        self.release = threading.Event()
        self.plans: list[int] = []  # each fsync's segment size as planned
        self.errno = 0

    def __call__(self, plan):
        self.plans.append(plan.size)
        self.entered.set()
        assert self.release.wait(10)
        error = self.real(plan)
        return self.errno or error


def _wait(predicate):
    until = time.monotonic() + 10
    while not predicate() and time.monotonic() < until:
        time.sleep(0.001)
    return predicate()


BIG = bytes(SYNCER_COMMIT_BYTES_MIN)  # a commit of this is the syncer's


def _held_syncer(tmp_path, monkeypatch, on_retained=lambda st: None, on_failed=lambda exc: None):
    """A worker whose first commit (small) was the writer's; the syncer's fsyncs (of large commits,
    and of any commit while one is in flight) wait on the returned gate."""
    gate = _Gate(storage_worker.sync_plan)
    monkeypatch.setattr(storage_worker, "sync_plan", gate)
    reports: list[tuple[str, int, object]] = []
    log = EventLog.open(tmp_path / "log")
    worker = StorageWorker(log, lambda t, st: reports.append(("synced", t, st)), on_retained, on_failed,
                           clock=_Clock(), prefill=False)
    worker.start()
    gate.release.set()
    worker.append([(1, b"a")])
    worker.sync(1)  # small: the writer's own, no hand-off
    assert _wait(lambda: reports) and reports[0][1] == 1 and _drained(worker)
    assert not worker.syncs_pipelined
    gate.release.clear()
    gate.entered.clear()
    return worker, log, gate, reports


def test_the_writer_writes_on_while_the_syncer_fsyncs(tmp_path, monkeypatch):
    """Commits that follow each other closely: the syncer fsyncs, and what the loop hands over
    meanwhile is written at once (not held behind the fsync); it rides on the next fsync, which
    begins as soon as the one in flight is reported. Each report carries the log's state as its
    fsync began: exactly what that fsync covered."""
    worker, log, gate, reports = _held_syncer(tmp_path, monkeypatch)
    worker.append([(2, BIG)])
    worker.sync(2)
    assert gate.entered.wait(10)  # the syncer's fsync of ticks 1-2 in flight
    for tick in (3, 4, 5):
        worker.append([(tick, b"c")])
        worker.sync(tick)
    assert _wait(lambda: log.record_count == 5)  # written while the fsync is in flight
    assert [t for _, t, _ in reports] == [1]
    gate.release.set()
    assert _wait(lambda: [t for _, t, _ in reports] == [1, 2, 5])
    assert [st.last_tick for _, _, st in reports] == [1, 2, 5]  # (the state as each fsync began)
    worker.stop()
    assert worker.syncs == 3 and worker.syncs_pipelined == 2 and len(gate.plans) == 3
    assert [t for t, _ in log.read(0, 1 << 20)] == [1, 2, 3, 4, 5]
    log.close()


def test_housekeeping_is_reported_after_the_syncs_begun_before_it(tmp_path, monkeypatch):
    """Retention while the syncer's fsync is in flight: its report (RetentionApplied) reaches the
    loop after that sync's (WriteSynced, whose state is older), never before it."""
    retained: list[object] = []
    worker, log, gate, reports = _held_syncer(tmp_path, monkeypatch, on_retained=retained.append)
    worker.append([(2, BIG)])
    worker.sync(2)
    assert gate.entered.wait(10)
    worker.retain(10**15, 1 << 40, 1 << 60)
    assert _wait(lambda: worker._done == worker._put)  # the writer applied it
    assert retained == [] and [t for _, t, _ in reports] == [1]
    gate.release.set()
    assert _wait(lambda: retained)
    worker.stop()
    assert [t for _, t, _ in reports] == [1, 2] and retained[0].last_tick == 2
    log.close()


def test_stop_waits_for_the_syncer(tmp_path, monkeypatch):
    """Stopping while a fsync is in flight and another is wanted: both are made and reported first."""
    worker, log, gate, reports = _held_syncer(tmp_path, monkeypatch)
    worker.append([(2, BIG)])
    worker.sync(2)
    assert gate.entered.wait(10)
    worker.append([(3, b"c")])
    worker.sync(3)
    stopper = threading.Thread(target=worker.stop)
    stopper.start()
    gate.release.set()
    stopper.join(10)
    assert not stopper.is_alive() and [t for _, t, _ in reports] == [1, 2, 3]
    log.close()


def test_a_failing_fsync_of_the_syncer_is_reported_once(tmp_path, monkeypatch):
    failures: list[BaseException] = []
    worker, log, gate, reports = _held_syncer(tmp_path, monkeypatch, on_failed=failures.append)
    gate.errno = errno.EIO
    worker.append([(2, BIG)])
    worker.sync(2)
    assert gate.entered.wait(10)
    gate.release.set()
    assert _wait(lambda: failures)
    worker.append([(3, b"c")])  # the writer finds the log failed: not reported a second time
    worker.sync(3)
    worker.stop()
    assert len(failures) == 1 and "Input/output error" in str(failures[0])
    assert [t for _, t, _ in reports] == [1]
    log.close()


def test_a_large_commit_is_reported_in_steps(tmp_path, monkeypatch):
    """A commit covering many Syncs reports some of their tokens on the way, each at least
    REPORT_BYTES_MIN of the log past the last one reported, and its last token: the loop handles
    each as a WriteSynced of its own and sends its deliveries before building the next. A commit
    of small Syncs reports only its last."""
    worker, log, gate, reports = _held_syncer(tmp_path, monkeypatch)
    worker.append([(2, BIG)])
    worker.sync(2)
    assert gate.entered.wait(10)
    payload = bytes(REPORT_BYTES_MIN // 3)
    for tick in range(3, 13):  # ten Syncs of a third of a step each
        worker.append([(tick, payload)])
        worker.sync(tick)
    for tick in range(13, 16):  # and three small ones
        worker.append([(tick, b"c")])
        worker.sync(tick)
    assert _wait(lambda: log.record_count == 15)
    gate.release.set()
    assert _wait(lambda: reports[-1][1] == 15)
    worker.stop()
    tokens = [t for _, t, _ in reports]
    assert tokens[:2] == [1, 2] and tokens[2:] == [5, 8, 11, 15]  # (every third big one, then the last)
    assert all(st.last_tick == 15 for _, t, st in reports[2:])  # the state as the fsync began: all of it
    log.close()


def test_the_loops_commits_get_prefilled_space_from_the_writer(tmp_path):
    """A quiet, small commit made in the loop's thread hands the prefill to the writer (never
    waited for there): once the writer is through it, the loop's next commit is an fdatasync over
    the zeros, made in the loop again. A commit while the writer prefills is the writer's."""
    clock, here, thread = _Clock(), [], []
    segment = tmp_path / "log"
    with EventLog.open(segment, prefill_bytes_max=PREFILL_CHUNK_BYTES) as log:  # one chunk ahead at most
        worker = _worker(log, clock, here, thread, prefill=True)
        worker.start()
        worker.append([(1, b"a")])
        worker.sync(1)  # here; the prefill goes to the writer
        assert [t for t, _ in here] == [1] and _drained(worker)
        assert (log.fsyncs, log.fdatasyncs) == (2, 0)  # the commit's, the prefill's (the writer's)
        files = sorted(segment.glob("*.seg"))
        assert files[-1].stat().st_size > log.segments()[-1].size_bytes  # zeros ahead
        clock.now_ns += 10**9
        worker.append([(2, b"b")])
        worker.sync(2)
        assert [t for t, _ in here] == [1, 2] and log.fdatasyncs == 1 and log.fsyncs == 2
        clock.now_ns += 10**9
        worker.append([(3, b"c")])
        worker.sync(3)  # nothing due (the zeros still cover a chunk): the writer is not woken
        assert [t for t, _ in here] == [1, 2, 3] and worker._put == 1 and thread == []
        worker.stop()
        assert [t for t, _ in log.read(0, 1 << 20)] == [1, 2, 3]


def test_no_prefill_without_it_or_after_a_large_commit_in_the_loop(tmp_path):
    clock, here, thread = _Clock(), [], []
    with EventLog.open(tmp_path / "a") as log:
        worker = StorageWorker(log, lambda t, st: thread.append(t), lambda st: None, lambda exc: None,
                               on_synced_here=_reporter(here, entry=lambda t, st: t), clock=clock, prefill=False)
        worker.start()
        worker.append([(1, b"a")])
        worker.sync(1)
        assert here == [1] and worker._put == 0 and (log.fsyncs, log.fdatasyncs) == (1, 0)
        worker.stop()
    with EventLog.open(tmp_path / "b") as log:
        worker = _worker(log, clock, here, thread, prefill=True)
        worker.start()
        worker.append([(1, bytes(PREFILL_COMMIT_BYTES_MAX + 1))])
        worker.sync(2)
        assert here[-1][0] == 2 and worker._put == 0 and (log.fsyncs, log.fdatasyncs) == (1, 0)
        worker.stop()


def test_a_commit_while_the_writer_prefills_is_the_writers_and_then_the_loops_again(tmp_path):
    clock, here, thread = _Clock(), [], []
    with EventLog.open(tmp_path / "log", prefill_bytes_max=PREFILL_CHUNK_BYTES) as log:
        gate, real_prefill = threading.Event(), log.prefill

        def held_prefill():
            assert gate.wait(10)
            return real_prefill()

        log.prefill = held_prefill  # type: ignore[method-assign]
        worker = _worker(log, clock, here, thread, prefill=True)
        worker.start()
        worker.append([(1, b"a")])
        worker.sync(1)
        clock.now_ns += 10**9
        worker.append([(2, b"b")])
        worker.sync(2)  # the writer is in its prefill: behind it, on the writer
        assert [t for t, _ in here] == [1] and thread == []
        gate.set()
        assert _drained(worker) and [t for t, _ in thread] == [2]
        clock.now_ns += 10**9
        worker.append([(3, b"c")])
        worker.sync(3)  # the writer's commit was quiet: the loop's again
        assert [t for t, _ in here] == [1, 3]
        worker.stop()
        assert [t for t, _ in log.read(0, 1 << 20)] == [1, 2, 3]


def test_the_syncs_of_one_turn_share_the_loops_commit_at_its_end(tmp_path):
    """With `defer` (the loop's call_soon), Syncs asked for in one turn are committed together when
    the turn ends: one fsync, the highest token reported (the writer's group commit, in the loop)."""
    clock, here, thread, turn_end = _Clock(), [], [], []
    with EventLog.open(tmp_path / "log") as log:
        worker = StorageWorker(log, lambda t, st: thread.append(t), lambda st: None, lambda exc: None,
                               on_synced_here=_reporter(here), clock=clock, prefill=False,
                               defer=turn_end.append)
        worker.start()
        for token in (1, 2, 3):  # three PUBLISHes read in one turn
            worker.append([(token, b"x")])
            worker.sync(token)
        assert here == [] and log.record_count == 0 and len(turn_end) == 1
        turn_end.pop()()
        assert [t for t, _ in here] == [3] and here[0][1].last_tick == 3 and worker.syncs == 1
        clock.now_ns += 10**9
        worker.append([(4, b"y")])
        worker.sync(4)
        worker.save(tmp_path / "saved", b"state", wait=True)  # other work before the turn's end: all the writer's
        turn_end.pop()()
        assert _drained(worker) and [t for t, _ in here] == [3] and thread == [4]
        clock.now_ns += 10**9
        worker.append([(5, b"z")])
        worker.sync(5)
        worker.commit_held()  # the broker's stop, in the loop's thread: made now, not at the turn's end
        assert [t for t, _ in here] == [3, 5]
        turn_end.pop()()  # nothing left for it
        worker.stop()
        assert [t for t, _ in here] == [3, 5] and thread == [4]
        assert [t for t, _ in log.read(0, 1 << 20)] == [1, 2, 3, 4, 5] and worker.syncs == 3
