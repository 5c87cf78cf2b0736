"""The storage worker: group commit, and a failing disk reported as such (never as a hang)."""

import threading
import time

from tidings.aio.storage_worker import StorageWorker, log_state
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
        log.append([(tick, bytes(1000)) for tick in range(1, 1001)])  # about 1 MB: 15 index entries
        log.sync()
        state = log_state(log)
        assert state.tick_marks == log.tick_marks(TICK_MARKS) and 8 <= len(state.tick_marks) < TICK_MARKS


def test_a_sync_yields_the_cpu_once_to_an_idle_writer_and_never_to_a_busy_one(tmp_path, monkeypatch):
    """The loop hands an idle writer its Sync and yields its CPU so the writer starts the fsync at
    once; a Sync that finds the writer in an fsync (under load) yields nothing."""
    from tidings.aio import storage_worker

    yields: list[int] = []
    monkeypatch.setattr(storage_worker.os, "sched_yield", lambda: yields.append(1))
    log = EventLog.open(tmp_path / "log")
    real_sync = log.sync
    in_fsync, release = threading.Event(), threading.Event()

    def slow_sync():
        in_fsync.set()
        assert release.wait(10)
        real_sync()

    synced: list[int] = []
    done = threading.Event()

    def on_synced(token, state):
        synced.append(token)
        if token == 3:
            done.set()

    worker = StorageWorker(log, on_synced, lambda st: None, lambda exc: None)
    worker.start()
    deadline = time.monotonic() + 10
    while not worker._idle and time.monotonic() < deadline:
        time.sleep(0.001)  # polling a condition with a deadline: the thread reaches its wait
    log.sync = slow_sync  # type: ignore[method-assign]
    worker.append([(1, b"x")])
    worker.sync(1)
    assert yields == [1]  # idle: one yield
    assert in_fsync.wait(10)  # the writer is in the fsync now
    worker.append([(2, b"y")])
    worker.sync(2)
    worker.append([(3, b"z")])
    worker.sync(3)
    assert yields == [1]  # busy: none
    release.set()
    assert done.wait(10)
    worker.stop()
    assert synced[-1] == 3 and [t for t, _ in log.read(0, 1 << 20)] == [1, 2, 3]
    log.close()
