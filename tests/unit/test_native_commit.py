"""The native commit (aio/native_commit.py, aio/_commit.c): the committer thread alone, the loop's
group commit over a real log, the storage worker driving it, and the same log and the same reports
as the Python writer thread for any run of appends, syncs and releases (Hypothesis)."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import select
import shutil
import time
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.asan import run_under_asan, sanitized
from tests.conftest import SOAK
from tidings.aio import native_commit
from tidings.aio.native_commit import Commit, NativeCommits
from tidings.aio.storage_worker import StorageWorker, log_state
from tidings.storage import EventLog, StorageError
from tidings.storage.log import SyncPlan

ASAN_BUILD = sanitized("TIDINGS_TEST_COMMIT_ASAN", "_commit")  # _commit.c built with ASan (test_..._under_asan)
if ASAN_BUILD is not None:
    native_commit._commit = ASAN_BUILD
_commit = native_commit._commit
needs_native = pytest.mark.skipif(_commit is None, reason="aio/_commit.c is not built here")
DEADLINE_S = 10.0


def test_the_committer_is_built_where_it_can_be() -> None:
    """setup.py builds it on Linux where a C compiler is found: a broken build must not pass unseen."""
    built = importlib.util.find_spec("tidings.aio._commit") is not None
    assert built or shutil.which("cc") is None or os.uname().sysname != "Linux"


def test_the_switch() -> None:
    assert native_commit.wanted({"TIDINGS_NATIVE_COMMIT": "0"}) is False
    assert native_commit.wanted({"TIDINGS_NATIVE_COMMIT": "1"}) is native_commit.available()
    assert native_commit.wanted({}) is (native_commit.NATIVE_COMMIT_DEFAULT and native_commit.available())


def _taken(committer: Any) -> tuple[int, int, int]:
    """The committer's finished commit, waiting on its eventfd (DEADLINE_S at most)."""
    ready, _, _ = select.select([committer.fileno()], [], [], DEADLINE_S)
    assert ready, "the committer never wrote its eventfd"
    done = committer.take()
    assert done is not None
    return done


def _closed(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return True
    return False


@needs_native
def test_the_committer_syncs_closes_and_wakes(tmp_path: Any) -> None:
    committer = _commit.Committer()
    try:
        assert committer.take() is None and not committer.busy()
        fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT)
        os.write(fd, b"x" * 100)
        dir_fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
        committer.submit(7, fd, dir_fd, False)
        with pytest.raises(RuntimeError, match="in flight"):
            committer.submit(8, 0, -1, False)  # one at a time (nothing taken: 0 is not the committer's)
        token, error, sync_ns = _taken(committer)
        assert (token, error) == (7, 0) and sync_ns > 0 and not committer.busy()
        assert _closed(fd) and _closed(dir_fd), "the descriptors are the committer's to close"
        assert committer.take() is None  # the eventfd read: quiet again
        fd = os.open(tmp_path / "f", os.O_WRONLY)
        committer.submit(2**62, fd, -1, True)  # fdatasync, a large token
        assert _taken(committer)[:2] == (2**62, 0)
    finally:
        committer.close()
    committer.close()  # idempotent
    for call in (lambda: committer.submit(1, 0, -1, False), committer.fileno, committer.take):
        with pytest.raises(RuntimeError, match="closed"):
            call()


@needs_native
def test_a_failing_fsync_is_its_errno() -> None:
    committer = _commit.Committer()
    read_end, write_end = os.pipe()  # fsync on a pipe fails: EINVAL
    try:
        committer.submit(3, write_end, -1, False)
        token, error, _ = _taken(committer)
        assert token == 3 and error == 22
        with pytest.raises(ValueError):
            committer.submit(4, -1, -1, False)
    finally:
        os.close(read_end)
        committer.close()


@needs_native
def test_close_waits_for_the_commit_in_flight_and_an_untaken_one_is_dropped(tmp_path: Any) -> None:
    for _ in range(20):
        committer = _commit.Committer()
        fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT)
        committer.submit(1, fd, -1, False)
        committer.close()  # queued or running: done before close returns, its descriptor closed
        assert _closed(fd)
    committer = _commit.Committer()
    committer.submit(1, os.open(tmp_path / "f", os.O_WRONLY), -1, False)
    del committer  # collected without close: the thread is joined, nothing leaks (ASan's run)


def test_a_sync_plan_counts_only_what_it_covered(tmp_path: Any) -> None:
    """EventLog.begin_sync / end_sync: the directory stays to be synced when a segment was created
    since the plan, the size counts only for the segment planned, and a failed sync fails the log."""
    with EventLog.open(tmp_path / "log", segment_bytes_max=100) as log:
        assert log.begin_sync() is None  # nothing appended
        log.append([(1, bytes(150))])  # the first segment: a new directory entry
        plan = log.begin_sync()
        assert plan is not None and plan.directory_fd >= 0 and plan.size > 0 and not plan.data_only
        log.append([(2, bytes(10))])  # a roll: a second segment while the plan is out
        for fd in (plan.fd, plan.directory_fd):
            os.fsync(fd)
            os.close(fd)
        log.end_sync(plan, 0)
        again = log.begin_sync()
        assert again is not None and again.directory_fd >= 0 and again.segment is not plan.segment
        for fd in (again.fd, again.directory_fd):
            os.close(fd)
        log.end_sync(again, 0)  # (not really synced: the test only follows the bookkeeping)
        assert log.begin_sync() is None  # the directory and the new segment counted durable
        log.append([(3, b"x")])
        failing = log.begin_sync()
        assert failing is not None and failing.directory_fd == -1
        os.close(failing.fd)
        with pytest.raises(StorageError, match="fsync failed"):
            log.end_sync(failing, 5)
        with pytest.raises(StorageError, match="failed"):
            log.begin_sync()


class _Loop:
    """An event loop for one test, run until a condition holds (DEADLINE_S at most)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()

    def until(self, condition: Any) -> None:
        async def wait() -> None:
            end = time.monotonic() + DEADLINE_S
            while not condition():
                assert time.monotonic() < end, "condition not reached"
                await asyncio.sleep(0.001)

        self.loop.run_until_complete(wait())

    def close(self) -> None:
        self.loop.close()


@pytest.fixture
def loop() -> Any:
    held = _Loop()
    yield held
    held.close()


@needs_native
def test_group_commit_in_the_loop(tmp_path: Any, loop: _Loop) -> None:
    """The first Sync's fsync starts at once; Syncs during it wait, the highest token rides on the
    next fsync, which begins as the first one is reported; each report's state is the log's as the
    fsync began."""
    synced: list[tuple[int, Any]] = []
    failures: list[BaseException] = []
    with EventLog.open(tmp_path / "log") as log:
        commits = NativeCommits(log, loop.loop, log_state, lambda t, st: synced.append((t, st)), failures.append)
        commits.append([(1, b"a")], None)
        commits.sync(1)
        assert commits.state is Commit.IN_FLIGHT
        for tick in (2, 3):
            commits.append([(tick, b"x")], None)
            commits.sync(tick)
        loop.until(lambda: len(synced) == 2)
        assert [t for t, _ in synced] == [1, 3] and commits.syncs == 2 and commits.sync_ns_total > 0
        assert synced[0][1].last_tick == 1 and synced[1][1] == log_state(log)
        commits.sync(3)  # nothing new: reported without an fsync
        loop.until(lambda: len(synced) == 3)
        assert commits.syncs == 2 and synced[2][0] == 3 and commits.state is Commit.IDLE
        commits.close()
        commits.close()
        assert commits.state is Commit.CLOSED
        commits.append([(4, b"late")], None)  # what the core still asks for after close is dropped
        commits.sync(4)
        commits.housekeeping(lambda: pytest.fail("housekeeping after close"), pytest.fail)
        assert failures == [] and [t for t, _ in log.read(0, 1 << 20)] == [1, 2, 3] and len(synced) == 3
    with EventLog.open(tmp_path / "log") as again:
        assert again.record_count == 3 and again.recovery.bytes_cut == 0


@needs_native
def test_rolls_and_releases_in_the_loop(tmp_path: Any, loop: _Loop) -> None:
    """Small segments: appends roll (the directory synced with the next commit), a release removes
    closed segments in the loop's thread; the reopened log holds what it should."""
    synced: list[int] = []
    retained: list[Any] = []
    with EventLog.open(tmp_path / "log", segment_bytes_max=1 << 10) as log:
        commits = NativeCommits(log, loop.loop, log_state, lambda t, st: synced.append(t), pytest.fail)
        for tick in range(1, 41):
            commits.append([(tick, bytes(100))], None)
            commits.sync(tick)
            loop.until(lambda tick=tick: synced and synced[-1] == tick)
        assert log.segment_count > 3
        commits.housekeeping(lambda: log.release_through(20) > 0, retained.append)
        assert len(retained) == 1 and retained[0].released_through >= 1 and log.first_tick > 1
        commits.append([(41, b"z")], None)
        commits.sync(41)
        loop.until(lambda: synced[-1] == 41)
        first = log.first_tick
        commits.close()
    with EventLog.open(tmp_path / "log", segment_bytes_max=1 << 10) as again:
        assert again.first_tick == first and again.last_tick == 41 and again.recovery.segments_removed == 0


@needs_native
def test_a_failing_commit_is_reported_once_and_ends_the_writes(tmp_path: Any, loop: _Loop) -> None:
    synced: list[int] = []
    failures: list[BaseException] = []
    with EventLog.open(tmp_path / "log") as log:
        real_begin = log.begin_sync

        def through_a_pipe() -> SyncPlan:
            plan = real_begin()
            assert plan is not None
            os.close(plan.fd)
            read_end, write_end = os.pipe()
            os.close(read_end)
            return SyncPlan(write_end, plan.directory_fd, plan.segment, plan.size, plan.shape)

        log.begin_sync = through_a_pipe  # type: ignore[method-assign]
        commits = NativeCommits(log, loop.loop, log_state, lambda t, st: synced.append(t), failures.append)
        commits.append([(1, b"a")], None)
        commits.sync(1)
        commits.append([(2, b"b")], None)
        commits.sync(2)  # waits behind the one that fails: never reported
        loop.until(lambda: failures)
        assert commits.state is Commit.FAILED and "fsync failed" in str(failures[0])
        commits.append([(3, b"c")], None)
        commits.sync(3)
        loop.loop.run_until_complete(asyncio.sleep(0.05))
        assert synced == [] and len(failures) == 1 and log.record_count == 2
        with pytest.raises(StorageError, match="failed"):
            log.append([(4, b"d")])
        commits.close()


@needs_native
def test_a_committer_that_refuses_the_commit_fails_the_log_and_keeps_no_descriptor(tmp_path: Any,
                                                                                   loop: _Loop) -> None:
    failures: list[BaseException] = []
    with EventLog.open(tmp_path / "log") as log:
        planned: list[SyncPlan] = []
        real_begin = log.begin_sync

        def noted() -> SyncPlan | None:
            plan = real_begin()
            if plan is not None:
                planned.append(plan)
            return plan

        log.begin_sync = noted  # type: ignore[method-assign]
        commits = NativeCommits(log, loop.loop, log_state, lambda t, st: pytest.fail("reported"), failures.append)
        commits._committer.close()  # its thread gone under it: submit refuses
        commits.append([(1, b"a")], None)
        commits.sync(1)
        assert commits.state is Commit.FAILED and len(failures) == 1 and "closed" in str(failures[0])
        assert len(planned) == 1 and _closed(planned[0].fd)
        loop.loop.remove_reader(commits._watched)


@needs_native
def test_the_worker_drives_the_native_commit(tmp_path: Any, loop: _Loop) -> None:
    """Appends, syncs, retention and a save through StorageWorker with `native_loop`: syncs reported
    through on_synced_here in the loop's thread, retention's report as the writer's, saves on the
    writer thread."""
    here: list[int] = []
    retained: list[Any] = []
    with EventLog.open(tmp_path / "log", segment_bytes_max=1 << 10) as log:
        worker = StorageWorker(log, lambda t, st: pytest.fail("the writer synced"), retained.append,
                               pytest.fail, on_synced_here=lambda t, st: here.append(t), native_loop=loop.loop)
        worker.start()
        for tick in range(1, 31):
            worker.append([(tick, bytes(100))])
            worker.sync(tick)
        loop.until(lambda: here and here[-1] == 30)
        worker.retain(10**18, 1 << 11, 10**18)  # a byte budget of 2 KiB: the oldest segments go
        assert len(retained) == 1 and retained[0].released_through > 0
        worker.save(tmp_path / "saved", b"state", wait=True)
        assert (tmp_path / "saved").read_bytes() == b"state"
        assert worker.commits == worker.native.syncs >= 1 and worker.syncs == 0  # type: ignore[union-attr]
        worker.detach()
        worker.stop()
        assert log.read(0, 1 << 20)[-1][0] == 30


# ---- the same log and the same reports as the writer thread ------------------------------------------

operations = st.lists(st.one_of(st.tuples(st.just("append"), st.integers(1, 5), st.integers(0, 300)),
                                st.tuples(st.just("sync")), st.tuples(st.just("release"), st.integers(0, 100))),
                      max_size=30)


def _play(tmp: Any, ops: list[tuple[Any, ...]], native: bool) -> tuple[list[tuple[int, bytes]], list[int], Any, int]:
    """Run `ops` through a StorageWorker, native or with its writer thread: the log's records at the
    end, the tokens reported, the last report's state, and what the log released in the end."""
    held = _Loop()
    reports: list[tuple[int, Any]] = []
    failures: list[BaseException] = []
    tick = token = 0
    with EventLog.open(tmp, segment_bytes_max=1 << 10) as log:
        worker = StorageWorker(log, lambda t, st: held.loop.call_soon_threadsafe(reports.append, (t, st)),
                               lambda st: None, failures.append,
                               on_synced_here=(lambda t, st: reports.append((t, st))) if native else None,
                               native_loop=held.loop if native else None)
        worker.start()
        for op in ops:
            if op[0] == "append":
                worker.append([(tick + i + 1, bytes([i]) * op[2]) for i in range(op[1])])
                tick += op[1]
            elif op[0] == "sync":
                token += 1
                worker.sync(token)
                if token % 3 == 0:  # now and then the report is waited for, now and then it is not
                    held.until(lambda token=token: reports and reports[-1][0] == token)
            else:
                worker.release(op[1])
        token += 1
        worker.sync(token)
        held.until(lambda: reports and reports[-1][0] == token)
        worker.detach()
        worker.stop()
        assert failures == []
        out = log.read(0, 1 << 30), [t for t, _ in reports], reports[-1][1], log.released_through
    held.close()
    return out


@needs_native
@given(ops=operations)
@settings(max_examples=400 if SOAK else 25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
def test_the_native_and_the_writer_commits_agree(tmp_path: Any, ops: list[tuple[Any, ...]]) -> None:
    """Both hold every record appended above what they released, report rising tokens ending with
    the last, whose state covers every append. They may release differently: the writer runs a
    release taken during a group commit after the appends queued behind it (a later roll may have
    closed the segment by then), the loop runs it where it was called."""
    appended: list[tuple[int, bytes]] = []
    for op in ops:
        if op[0] == "append":
            appended += [(len(appended) + i + 1, bytes([i]) * op[2]) for i in range(op[1])]
    releases = [op[1] for op in ops if op[0] == "release"]
    for native in (False, True):
        records, tokens, last, released = _play(tmp_path / f"{native}-{time.monotonic_ns()}", ops, native)
        assert released == 0 or released <= max(releases)
        assert records == [r for r in appended if r[0] > released], f"native={native}"
        assert tokens == sorted(tokens) and tokens[-1] == 1 + sum(op[0] == "sync" for op in ops)
        assert last.last_tick == max(len(appended), last.released_through)


@pytest.mark.soak
def test_the_committer_under_address_sanitizer(tmp_path: Any) -> None:
    """_commit.c built with AddressSanitizer and UBSan, this file's tests run against it in a child."""
    if ASAN_BUILD:
        pytest.skip("this is the child's run")
    source = os.path.join(os.path.dirname(native_commit.__file__), "_commit.c")
    run_under_asan(tmp_path, source, "TIDINGS_TEST_COMMIT_ASAN", f"{__file__}")
