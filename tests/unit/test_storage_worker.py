"""The storage worker: group commit, and a failing disk reported as such (never as a hang)."""

import threading

from tidings.aio.storage_worker import StorageWorker, log_state
from tidings.core.inputs import TICK_MARKS
from tidings.storage import EventLog, StorageError


def test_group_commit_reports_the_highest_token(tmp_path):
    log = EventLog.open(tmp_path / "log")
    synced: list[int] = []
    done = threading.Event()

    def on_synced(token, state):
        synced.append(token)
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


def test_held_work_waits_for_the_wake_and_goes_in_one_piece_in_order(tmp_path):
    """With held_wakes (the broker's runtime) nothing reaches the thread before `wake`; then the
    turn's Appends, Sync and housekeeping run in their order, one fsync for the Sync."""
    log = EventLog.open(tmp_path / "log")
    synced: list[tuple[int, int]] = []
    retained = threading.Event()
    done = threading.Event()

    def on_synced(token, state):
        synced.append((token, state.record_count))
        done.set()

    worker = StorageWorker(log, on_synced, lambda st: retained.set(), lambda exc: None, held_wakes=True)
    worker.start()
    worker.append([(1, b"x")])
    worker.append([(2, b"y")])
    worker.sync(2)
    worker.release(0)
    worker.retain(0, 1 << 30, 1 << 60)
    assert not done.wait(0.2)  # held: the thread has heard of nothing
    assert log.record_count == 0
    worker.wake()
    assert done.wait(10) and retained.wait(10)
    worker.wake()  # nothing held: no hand-off
    worker.stop()
    assert synced == [(2, 2)] and worker.syncs == 1  # the state as after the fsync
    assert [t for t, _ in log.read(0, 1 << 20)] == [1, 2]
    log.close()


def test_a_waiting_save_and_stop_hand_over_what_is_held(tmp_path):
    log = EventLog.open(tmp_path / "log")
    synced = threading.Event()
    worker = StorageWorker(log, lambda t, st: synced.set(), lambda st: None, lambda exc: None, held_wakes=True)
    worker.start()
    worker.append([(1, b"x")])
    worker.sync(1)
    worker.save(tmp_path / "state", b"saved", wait=True)  # returns once written: everything before it went too
    assert (tmp_path / "state").read_bytes() == b"saved"
    assert synced.wait(10)
    worker.append([(2, b"y")])
    worker.sync(2)
    worker.stop()  # hands the held Append and Sync over before it stops the thread
    assert worker.syncs == 2 and [t for t, _ in log.read(0, 1 << 20)] == [1, 2]
    log.close()
