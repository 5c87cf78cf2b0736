"""The runtime's PFS thread (aio/pfs_worker.py) on real files: appends synced in groups, a read
answers through the stream's mark, a dropped stream reads as failed, a failing stream is never
written again, and the directory starts empty."""

from __future__ import annotations

import queue

from tidings.aio.pfs_worker import PfsWorker
from tidings.storage.pfs import PfsStream


def answer(worker: PfsWorker, stream: str, registration: int, after: int) -> tuple[tuple[int, ...], int, int]:
    got: queue.SimpleQueue[tuple[tuple[int, ...], int, int]] = queue.SimpleQueue()
    worker.read(stream, registration, after, 100, lambda *a: got.put(a))
    return got.get(timeout=10)


def test_reads_see_what_was_appended_before_them_up_to_the_known_through(tmp_path):
    worker = PfsWorker(tmp_path / "pfs")
    worker.start()
    try:
        worker.append("s", [(10, [1, 2]), (20, [2])], 25)
        worker.append("s", [(30, [1])], 40)
        assert answer(worker, "s", 1, 0) == ((10, 30), 40, 0)
        assert answer(worker, "s", 2, 10) == ((20,), 40, 0)
        worker.append("s", [], 90)  # nothing matched up to 90
        assert answer(worker, "s", 1, 30) == ((), 90, 0)
        assert answer(worker, "unknown", 1, 0)[1] == -1
        worker.chop("s", None)
        assert answer(worker, "s", 1, 0)[1] == -1
    finally:
        worker.stop()
    assert PfsWorker(tmp_path / "pfs").pfs.pubends() == []  # emptied at start


def test_a_failing_stream_is_dropped_and_never_written_again(tmp_path):
    worker = PfsWorker(tmp_path / "pfs")
    worker.start()
    try:
        worker.append("s", [(10, [1])], 10)
        worker.append("s", [(5, [1])], 10)  # ticks must rise: the stream fails
        assert answer(worker, "s", 1, 0)[1] == -1
        worker.append("s", [(20, [1])], 20)  # would be a stream with a hole: refused
        assert answer(worker, "s", 1, 0)[1] == -1
        assert worker.failures == 1
    finally:
        worker.stop()


def test_a_mark_makes_a_quiet_stream_known_through_it(tmp_path):
    stream = PfsStream.open(tmp_path / "s")
    stream.append(10, [1])
    stream.mark(50)
    stream.mark(40)  # not below what is known
    stream.sync()
    assert stream.last_timestamp == 50
    read = stream.read(1, 0, 10)
    assert (read.ticks, read.through_tick) == ((10,), 50)
    stream.close()
