"""The storage worker: group commit, and a failing disk reported as such (never as a hang)."""

import threading
import time

from tidings.aio.storage_worker import INLINE_SYNC_NS_MAX, StorageWorker, log_state
from tidings.core.inputs import TICK_MARKS
from tidings.storage import EventLog, StorageError


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


def test_a_failing_sync_is_reported_through_on_failed(tmp_path):
    log = EventLog.open(tmp_path / "log")

    def broken_sync():
        raise StorageError("fsync failed: EIO")

    log.sync = broken_sync  # type: ignore[method-assign]
    failures: list[BaseException] = []
    failed = threading.Event()

    def on_failed(exc):
        failures.append(exc)
        failed.set()

    worker = StorageWorker(log, lambda t, st: None, lambda st: None, on_failed)
    worker.start()
    worker.append([(1, b"x")])
    worker.sync(1)
    assert failed.wait(10)
    worker.stop()
    assert len(failures) == 1 and "EIO" in str(failures[0])


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


def _worker(log, clock, here, thread, failed=lambda exc: None):
    return StorageWorker(log, lambda t, st: thread.append((t, st)), lambda st: None, failed,
                         on_synced_here=lambda t, st: here.append((t, st)), inline_quiet_ns=500_000, clock=clock)


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


def test_a_busy_worker_keeps_the_writer_and_the_order(tmp_path):
    """A commit right after another, or while the writer has work not done, goes to the writer,
    behind that work: the log's order is the order of the calls."""
    clock, here, thread = _Clock(), [], []
    saved = tmp_path / "saved"
    with EventLog.open(tmp_path / "log") as log:
        worker = _worker(log, clock, here, thread)
        worker.append([(1, b"a")])
        worker.sync(1)  # quiet: here, though the writer has not started
        worker.append([(2, b"b")])
        worker.sync(2)  # the clock has not moved: not quiet, queued
        clock.now_ns += 10**9
        worker.save(saved, b"state")  # queued, not done: the writer is not idle
        worker.append([(3, b"c")])
        worker.sync(3)
        assert [t for t, _ in here] == [1] and log.record_count == 1
        worker.start()
        worker.stop()  # the queued work done first
        assert saved.read_bytes() == b"state"
        assert [t for t, _ in log.read(0, 1 << 20)] == [1, 2, 3] and [t for t, _ in here] == [1]
        assert [t for t, _ in thread] == [3] and worker.syncs == 2  # one group commit for 2 and 3


def test_a_failing_sync_here_is_reported_and_leaves_the_rest_to_the_writer(tmp_path):
    clock, here, thread, failures = _Clock(), [], [], []
    log = EventLog.open(tmp_path / "log")
    real_sync = log.sync

    def broken_sync():
        raise StorageError("fsync failed: EIO")

    log.sync = broken_sync  # type: ignore[method-assign]
    worker = _worker(log, clock, here, thread, failures.append)
    worker.append([(1, b"a")])
    worker.sync(1)
    assert here == [] and len(failures) == 1 and "EIO" in str(failures[0])
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
        until = time.monotonic() + 10
        while worker._done != worker._put and time.monotonic() < until:  # the writer through its work
            time.sleep(0.01)
        assert [t for t, _ in thread] == [2]
        clock.now_ns += 10**9
        worker.append([(3, b"c")])
        worker.sync(3)  # the writer's fsync was quick: here again
        worker.stop()
        assert [t for t, _ in here] == [1, 3]
        assert [t for t, _ in log.read(0, 1 << 20)] == [1, 2, 3]
