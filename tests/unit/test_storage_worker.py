"""The storage worker: group commit, and a failing disk reported as such (never as a hang)."""

import threading

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
        for first in range(1, 1001, 10):  # about 1 MB in batch records of 10 KB: 15 index entries
            log.append([(tick, bytes(1000)) for tick in range(first, first + 10)])
        log.sync()
        state = log_state(log)
        assert state.tick_marks == log.tick_marks(TICK_MARKS) and 8 <= len(state.tick_marks) < TICK_MARKS
