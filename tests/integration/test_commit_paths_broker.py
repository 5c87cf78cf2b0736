"""A broker in this process with each commit path (TIDINGS_SYNC_IN_LOOP, aio/storage_worker.py):
the switch picks the path, publishes are acknowledged and read back, the log's commits are made
where the path says (the quiet ones the loop's when it may), and the broker stops cleanly."""

import asyncio
import errno
import os
import time

import pytest

from tidings import sync
from tidings.aio import storage_worker
from tidings.aio.server import BrokerServer
from tidings.aio.storage_worker import INLINE_QUIET_NS, INLINE_RUN_COMMITS
from tidings.storage import EventLog

pytestmark = pytest.mark.integration
EVENTS = 300


QUIET_EVENTS = 2 * INLINE_RUN_COMMITS  # published INLINE_QUIET_NS and more apart: quiet commits
QUIET_GAP_S = 10 * INLINE_QUIET_NS / 1e9


def _publish_and_read(address: str) -> tuple[list[int], list[bytes]]:
    with sync.connect(address, service="commit", instance="pub") as c:
        ticks = [r.tick for r in c.publish_many([("n/t", str(i).encode(), {}) for i in range(EVENTS // 2)])]
        ticks += [c.publish("n/t", str(i).encode()).tick for i in range(EVENTS // 2, EVENTS)]  # one at a time
        for i in range(EVENTS, EVENTS + QUIET_EVENTS):
            time.sleep(QUIET_GAP_S)  # the gap is what makes a commit quiet (not a wait for anything)
            ticks.append(c.publish("n/t", str(i).encode()).tick)
        return ticks, [e.payload for e in c.read("n/#", after=0)]


@pytest.mark.parametrize("commit", ["0", "1"], ids=["writer-commit", "loop-commit"])
def test_a_broker_commits_on_the_path_the_switch_says(tmp_path, commit, monkeypatch):
    monkeypatch.setenv("TIDINGS_SYNC_IN_LOOP", commit)
    monkeypatch.setattr(storage_worker, "INLINE_SYNC_NS_MAX", 10**12)  # a loaded machine's slow disk counts as quick
    in_loop = commit == "1"

    async def run() -> None:
        server = BrokerServer(tmp_path / "b", "127.0.0.1", 0)
        await server.start()
        try:
            worker = server.worker
            assert worker is not None
            ticks, payloads = await asyncio.wait_for(asyncio.to_thread(_publish_and_read, server.address), 60)
            assert ticks == sorted(set(ticks)) and len(ticks) == EVENTS + QUIET_EVENTS
            assert payloads == [str(i).encode() for i in range(EVENTS + QUIET_EVENTS)]
            assert worker.syncs > 0 and (worker.syncs_here > 0) is in_loop
        finally:
            await server.stop()
        assert worker.log.record_count == EVENTS + QUIET_EVENTS

    asyncio.run(run())


def test_a_failed_fsync_after_the_core_heard_of_it_sends_nothing_and_stops_the_broker(tmp_path, monkeypatch):
    """The loop's commit tells the core of the sync before its fsync and holds the answer
    (aio/storage_worker.py, "The core hears of a commit early"): when that fsync fails, neither the
    publisher's ACK nor the subscriber's delivery leaves the broker, the core hears nothing more,
    and the broker stops. What was acknowledged before is in the log when it is opened again."""
    monkeypatch.setenv("TIDINGS_SYNC_IN_LOOP", "1")
    monkeypatch.setattr(storage_worker, "INLINE_SYNC_NS_MAX", 10**12)
    failed_in: list[bool] = []

    async def run() -> None:
        server = BrokerServer(tmp_path / "b", "127.0.0.1", 0)
        await server.start()
        worker, driver = server.worker, server.driver
        assert worker is not None and driver is not None
        real_fdatasync, log = os.fdatasync, worker.log

        def failing_fdatasync(fd: int) -> None:  # the log's own fd only: as a failing disk would
            if fd != log._write_fd:
                return real_fdatasync(fd)
            failed_in.append(worker._in_loop)
            raise OSError(errno.EIO, "injected")

        def clients() -> tuple[list[bytes], BaseException | None, object]:
            with sync.connect(server.address, service="commit", instance="sub") as s, \
                    sync.connect(server.address, service="commit", instance="pub") as p:
                sub = s.subscribe("n/#")
                for i in range(QUIET_EVENTS):  # quiet commits: the loop's
                    time.sleep(QUIET_GAP_S)
                    p.publish("n/t", f"ok{i}".encode())
                got = [item.payload for item in (sub.get(timeout=30) for _ in range(QUIET_EVENTS))]
                time.sleep(QUIET_GAP_S)
                monkeypatch.setattr(os, "fdatasync", failing_fdatasync)
                error: BaseException | None = None
                try:
                    p.publish("n/t", b"never")
                except Exception as exc:  # the broker stops: the ACK never comes
                    error = exc
                try:
                    after: object = sub.get(timeout=10)
                except Exception as exc:  # the subscription ends with the broker
                    after = exc
                return got, error, after

        try:
            got, error, after = await asyncio.wait_for(asyncio.to_thread(clients), 90)
            await asyncio.wait_for(server._stopped.wait(), 30)
        finally:
            monkeypatch.setattr(os, "fdatasync", real_fdatasync)
            await server.stop()
        assert got == [f"ok{i}".encode() for i in range(QUIET_EVENTS)]
        assert failed_in == [True], "the failing fsync was the loop's commit"
        assert error is not None, "the publish of the event whose fsync failed was acknowledged"
        assert getattr(after, "payload", None) != b"never", "the event whose fsync failed was delivered"
        assert driver._closed, "the core heard more after the failed fsync"

    asyncio.run(run())
    with EventLog.open(tmp_path / "b" / "log") as log:  # what was acknowledged is there
        payloads = [record for _, record in log.read(0, 1 << 20)]
        assert len(payloads) >= QUIET_EVENTS
