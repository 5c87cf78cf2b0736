"""The pubend's event log on real files: round trips, read bounds, recovery from every torn tail,
retention, readers racing the writer, identity persistence, and a model-based random walk."""

from __future__ import annotations

import itertools
import json
import os
import pathlib
import random
import tempfile
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidings.storage import EventLog, LogCorruptError, StorageError, load_or_create_identity, record
from tidings.storage import log as log_module
from tidings.storage.segment import INDEX_INTERVAL_BYTES, SUMMARY_SUFFIX, parse_segment_name, segment_name

HUGE = 1 << 40


def payload_for(tick: int, size: int) -> bytes:
    """Distinct, checkable bytes for each tick."""
    stamp = tick.to_bytes(8, "little")
    return (stamp * (size // 8 + 1))[:size]


def batch(first_tick: int, count: int, size: int = 40, step: int = 1) -> list[tuple[int, bytes]]:
    return [(first_tick + i * step, payload_for(first_tick + i * step, size)) for i in range(count)]


def segment_files(directory: pathlib.Path) -> list[pathlib.Path]:
    return sorted(p for p in directory.iterdir() if parse_segment_name(p.name) is not None)


def read_all(log: EventLog) -> list[tuple[int, bytes]]:
    return log.read(0, HUGE)


def abandon(log: EventLog) -> None:
    """What kill -9 does to an open log: descriptors go, nothing is synced or cleaned up."""
    if log._write_fd >= 0:
        os.close(log._write_fd)
    for segment in log._segments:
        os.close(segment.read_fd)
    log._closed = True


def fill(log: EventLog, count: int, size: int = 40, per_batch: int = 7) -> list[tuple[int, bytes]]:
    written: list[tuple[int, bytes]] = []
    tick = log.last_tick + 1
    while len(written) < count:
        records = batch(tick, min(per_batch, count - len(written)), size)
        log.append(records)
        written += records
        tick = records[-1][0] + 1
    log.sync()
    return written


# ---------------------------------------------------------------------------------------- basics


def test_a_new_log_is_empty(tmp_path):
    directory = tmp_path / "a" / "log"
    with EventLog.open(directory) as log:
        assert directory.is_dir()
        assert (log.last_tick, log.first_tick, log.released_through) == (0, None, 0)
        assert (log.size_bytes, log.segment_count, log.record_count) == (0, 0, 0)
        assert log.read(0, HUGE) == []
        log.sync()  # nothing to do, and no error


def test_round_trip_across_segment_rolls(tmp_path):
    with EventLog.open(tmp_path, segment_bytes_max=1000) as log:
        written = []
        rng = random.Random(1)
        tick = 1_000
        for _ in range(60):
            records = batch(tick, rng.randint(1, 12), rng.randint(0, 90), step=rng.randint(1, 5))
            log.append(records)
            written += records
            tick = records[-1][0] + rng.randint(1, 9)
            if rng.random() < 0.5:
                log.sync()
        log.sync()
        assert log.segment_count > 5
        assert read_all(log) == written
        assert log.record_count == len(written)
        assert (log.first_tick, log.last_tick) == (written[0][0], written[-1][0])
        files = segment_files(tmp_path)
        assert log.size_bytes == sum(f.stat().st_size for f in files)
        assert [f.name for f in files] == sorted(f.name for f in files)
        infos = log.segments()
        for info in infos:
            assert info.name == segment_name(info.first_tick)
        assert all(info.size_bytes >= 1000 for info in infos[:-1])
        for i in range(len(written)):
            after = written[i][0]
            assert log.read(after, HUGE) == written[i + 1:]
            assert log.read(after - 1, HUGE) == written[i:]


def test_one_write_call_per_append(tmp_path, monkeypatch):
    calls = []
    real = os.pwrite

    def counting(fd, data, offset):
        calls.append(len(data))
        return real(fd, data, offset)

    monkeypatch.setattr(os, "pwrite", counting)
    with EventLog.open(tmp_path, segment_bytes_max=500) as log:
        for first in range(1, 400, 40):
            log.append(batch(first, 40, 30))
        assert log.segment_count == 10  # a batch never splits: the roll happens before it
        assert calls.count(batch_record_bytes(40, 30)) == 10
        assert len(calls) == 10 + 9  # and a summary for each closed segment


def test_read_bounds(tmp_path):
    with EventLog.open(tmp_path, segment_bytes_max=300) as log:
        written = batch(10, 30, 50, step=10)  # ticks 10, 20, ..., 300
        for i in range(0, 30, 4):
            log.append(written[i:i + 4])
        assert log.read(0, HUGE, through_tick=55) == written[:5]
        assert log.read(20, HUGE, through_tick=50) == written[2:5]
        assert log.read(25, HUGE, through_tick=25) == []
        assert log.read(50, HUGE, through_tick=40) == []
        assert log.read(300, HUGE) == []
        assert log.read(299, HUGE) == written[-1:]
        # max_bytes is a limit on payload bytes, except that one record always comes back
        assert log.read(0, 0) == written[:1]
        assert log.read(0, 49) == written[:1]
        assert log.read(0, 50) == written[:1]
        assert log.read(0, 99) == written[:1]
        assert log.read(0, 100) == written[:2]
        assert log.read(95, 160) == written[9:12]
        assert log.read(95, 160, through_tick=110) == written[9:11]


def test_read_limits_payload_bytes_with_mixed_sizes(tmp_path):
    rng = random.Random(7)
    with EventLog.open(tmp_path, segment_bytes_max=2000) as log:
        written = [(t, payload_for(t, rng.randint(0, 300))) for t in range(1, 200)]
        for i in range(0, len(written), 9):
            log.append(written[i:i + 9])
        for _ in range(300):
            after = rng.randint(0, 210)
            limit = rng.randint(0, 1500)
            got = log.read(after, limit)
            qualifying = [r for r in written if r[0] > after]
            assert got == qualifying[:len(got)]
            if qualifying:
                assert got
                total = sum(len(p) for _, p in got)
                assert total <= limit or len(got) == 1
                if len(got) < len(qualifying):
                    assert total + len(qualifying[len(got)][1]) > limit or total >= limit


def test_sparse_index_seeks_inside_a_large_segment(tmp_path):
    with EventLog.open(tmp_path) as log:
        written = fill(log, 6000, size=100, per_batch=50)  # batch records of 5,220 bytes
        segment = log._segments[0]
        assert len(segment.index_ticks) >= segment.size // (INDEX_INTERVAL_BYTES + batch_record_bytes(50, 100))
        offsets = segment.index_offsets
        assert all(b - a >= INDEX_INTERVAL_BYTES for a, b in itertools.pairwise(offsets))
        for after in (0, 1, 564, 565, 566, 2999, 5998, 5999, 6000):
            assert log.read(after, 1000) == written[after:after + 10]


def test_tick_marks_cut_the_log_into_runs_of_about_equal_bytes(tmp_path):
    with EventLog.open(tmp_path, segment_bytes_max=1_000_000) as log:
        assert log.tick_marks(8) == ()
        written = fill(log, 20_000, size=100, per_batch=100)  # batch records of 10,420 bytes: 3 segments
        assert log.tick_marks(1) == ()
        marks = log.tick_marks(8)
        assert len(marks) == 7 and list(marks) == sorted(set(marks))
        ticks = [tick for tick, _ in written]
        for k, mark in enumerate(marks, 1):  # the first indexed record at or past each eighth
            at = ticks.index(mark)
            assert at % 100 == 0  # a batch record's first tick
            past = at // 100 * batch_record_bytes(100, 100) - log.size_bytes * k // 8
            assert 0 <= past < INDEX_INTERVAL_BYTES + batch_record_bytes(100, 100), (k, past)
        fill(log, 1000, size=100, per_batch=1000)  # a twentieth more: within half a run's share
        assert log.tick_marks(8) is marks
        fill(log, 3000, size=100, per_batch=1000)
        assert log.tick_marks(8) != marks and log.tick_marks(8)[-1] > marks[-1]


def test_tick_marks_of_a_young_log_move_by_half_an_index_interval(tmp_path):
    """A young log's runs are smaller than the index's interval: the marks are worked out again
    only once the log grew by half an interval, not at every sync (a (d) broker's log)."""
    with EventLog.open(tmp_path) as log:
        fill(log, 1000, size=100, per_batch=1)  # about 130 KB: two index entries, runs of 500 bytes
        marks = log.tick_marks(256)
        assert marks and log.tick_marks(256) is marks
        basis, grown = log.size_bytes, 0
        while log.tick_marks(256) is marks and grown < 1000:
            log.append(batch(log.last_tick + 1, 1, 100))
            grown += 1
        assert INDEX_INTERVAL_BYTES // 2 <= log.size_bytes - basis < INDEX_INTERVAL_BYTES // 2 + 200


def test_reopen_recovers_state(tmp_path):
    with EventLog.open(tmp_path, segment_bytes_max=700) as log:
        written = fill(log, 100)
        state = (log.last_tick, log.first_tick, log.size_bytes, log.segment_count, log.record_count)
    with EventLog.open(tmp_path, segment_bytes_max=700) as log:
        assert (log.last_tick, log.first_tick, log.size_bytes, log.segment_count, log.record_count) == state
        assert log.recovery.bytes_cut == 0 and log.recovery.segments_removed == 0
        assert read_all(log) == written
        with pytest.raises(AssertionError):
            log.append([(log.last_tick, b"again")])
        written += fill(log, 50)
    with EventLog.open(tmp_path, segment_bytes_max=700) as log:
        assert read_all(log) == written


def test_closed_log_refuses_use(tmp_path):
    log = EventLog.open(tmp_path)
    fill(log, 3)
    log.close()
    log.close()
    with pytest.raises(StorageError):
        log.append(batch(100, 1))
    with pytest.raises(StorageError):
        log.read(0, HUGE)


# ---------------------------------------------------------------------------------------- torn tails


def record_bytes(size: int) -> int:
    return record.HEADER_BYTES + size


def batch_record_bytes(count: int, size: int) -> int:
    """A batch record of `count` payloads of `size` bytes: header, count, ends, payloads."""
    return record.HEADER_BYTES + 4 + 4 * count + count * size


@pytest.mark.parametrize("segment_bytes_max", [10_000, 100])
def test_truncation_at_every_offset_of_the_last_record(tmp_path, segment_bytes_max):
    """With 100-byte segments the last record starts its own segment: cutting it empties that file."""
    base = tmp_path / "base"
    with EventLog.open(base, segment_bytes_max=segment_bytes_max) as log:
        written = fill(log, 9, size=30, per_batch=3)
        log.append(batch(100, 1, size=45))
        log.sync()
    last = segment_files(base)[-1]
    full = last.stat().st_size
    for cut in range(1, record_bytes(45) + 1):
        directory = tmp_path / f"cut{cut}"
        directory.mkdir()
        for f in base.iterdir():
            (directory / f.name).write_bytes(f.read_bytes())
        os.truncate(directory / last.name, full - cut)
        with EventLog.open(directory, segment_bytes_max=segment_bytes_max) as log:
            assert read_all(log) == written, cut
            assert log.last_tick == written[-1][0]
            assert log.recovery.bytes_cut == record_bytes(45) - cut
            emptied = full == record_bytes(45)
            assert log.recovery.segments_removed == int(emptied)
            assert (directory / last.name).exists() != emptied
            log.append(batch(200, 2))  # the log goes on from the cut
            log.sync()
        with EventLog.open(directory, segment_bytes_max=segment_bytes_max) as log:
            assert read_all(log) == [*written, *batch(200, 2)]


@pytest.mark.parametrize("tail", ["zeros-short", "zeros-long", "garbage", "old-record", "repeat-last",
                                  "next-tick-bad-crc", "huge-length"])
def test_junk_after_the_last_record_is_cut(tmp_path, tail):
    with EventLog.open(tmp_path, segment_bytes_max=10_000) as log:
        written = fill(log, 20)
    last = segment_files(tmp_path)[-1]
    junk = {
        "zeros-short": bytes(7),
        "zeros-long": bytes(4096),
        "garbage": random.Random(3).randbytes(333),
        "old-record": bytes(record.encode(batch(5, 1), 0, 0, 0, INDEX_INTERVAL_BYTES)[0]),
        "repeat-last": bytes(record.encode(written[-1:], 0, 0, 0, INDEX_INTERVAL_BYTES)[0]),
        "next-tick-bad-crc": bytes(record.encode(batch(21, 1), 0, 0, 0, INDEX_INTERVAL_BYTES)[0])[:-1] + b"!",
        "huge-length": record.HEADER.pack(1 << 31, 0, 21) + b"abc",
    }[tail]
    size = last.stat().st_size
    with last.open("ab") as f:
        f.write(junk)
    with EventLog.open(tmp_path, segment_bytes_max=10_000) as log:
        assert read_all(log) == written
        if tail.startswith("zeros"):  # the end of the records, as prefilled space leaves it: no problem
            assert (log.recovery.bytes_cut, log.recovery.problem) == (0, None)
        else:
            assert log.recovery.bytes_cut == len(junk)
            assert log.recovery.problem is not None
        assert last.stat().st_size == size
        log.append(batch(21, 1))
    with EventLog.open(tmp_path) as log:
        assert read_all(log) == [*written, *batch(21, 1)]


def test_bad_checksum_inside_the_last_segment_cuts_from_there(tmp_path):
    with EventLog.open(tmp_path, segment_bytes_max=10_000) as log:
        written = fill(log, 20, size=40)  # batch records of 7, 7 and 6 events
    last = segment_files(tmp_path)[-1]
    data = bytearray(last.read_bytes())
    data[batch_record_bytes(7, 40) + 60 + 5 * 40] ^= 0x01  # a payload byte of the 13th event, the second batch's
    last.write_bytes(bytes(data))
    with EventLog.open(tmp_path) as log:
        assert read_all(log) == written[:7]  # the batch goes whole, and everything after it
        assert log.recovery.problem == "checksum mismatch"


@pytest.mark.parametrize("segment_bytes_max", [10_000, 100])
def test_a_torn_batch_record_is_dropped_whole(tmp_path, segment_bytes_max):
    """Cut at every offset of the last batch record: none of its events survives, all before do."""
    base = tmp_path / "base"
    with EventLog.open(base, segment_bytes_max=segment_bytes_max) as log:
        written = fill(log, 9, size=30, per_batch=3)
        log.append(batch(100, 5, size=20))
        log.sync()
        assert log.record_count == 14
    last = segment_files(base)[-1]
    full = last.stat().st_size
    size = batch_record_bytes(5, 20)
    for cut in range(1, size + 1):
        directory = tmp_path / f"cut{cut}"
        directory.mkdir()
        for f in base.iterdir():
            (directory / f.name).write_bytes(f.read_bytes())
        os.truncate(directory / last.name, full - cut)
        with EventLog.open(directory, segment_bytes_max=segment_bytes_max) as log:
            assert read_all(log) == written, cut
            assert log.last_tick == written[-1][0] and log.record_count == 9
            assert log.recovery.bytes_cut == size - cut
            log.append(batch(200, 2))
            log.sync()
        with EventLog.open(directory, segment_bytes_max=segment_bytes_max) as log:
            assert read_all(log) == [*written, *batch(200, 2)]


def test_damaged_batch_tables_cut_the_log_there(tmp_path):
    """A batch whose tables do not account for its body (checksum recomputed: a writer's bug, not
    a torn write) is invalid like a bad checksum."""
    with EventLog.open(tmp_path, segment_bytes_max=10_000) as log:
        written = fill(log, 6, size=10, per_batch=3)
    last = segment_files(tmp_path)[-1]
    data = bytearray(last.read_bytes())
    second = batch_record_bytes(3, 10)
    data[second + 16 + 4:second + 16 + 8] = (99).to_bytes(4, "little")  # the first end past the payloads
    length, _crc, tick = record.HEADER.unpack_from(data, second)
    body = bytes(data[second + 16:second + 16 + (length & record.LENGTH_MASK)])
    record.HEADER.pack_into(data, second, length, record.checksum(tick.to_bytes(8, "little"), body), tick)
    last.write_bytes(bytes(data))
    with EventLog.open(tmp_path) as log:
        assert read_all(log) == written[:3]
        assert log.recovery.problem == "batch tables do not fit their record"


def test_empty_segment_left_by_a_crash_during_a_roll_is_removed(tmp_path):
    with EventLog.open(tmp_path, segment_bytes_max=300) as log:
        written = fill(log, 30)
        count = log.segment_count
    (tmp_path / segment_name(10_000)).touch()
    (tmp_path / segment_name(20_000)).touch()
    with EventLog.open(tmp_path, segment_bytes_max=300) as log:
        assert log.segment_count == count
        assert log.recovery.segments_removed == 2
        assert read_all(log) == written
        log.append(batch(10_000, 1))
    with EventLog.open(tmp_path, segment_bytes_max=300) as log:
        assert read_all(log) == [*written, *batch(10_000, 1)]


def test_corrupt_closed_segment_is_refused_not_guessed(tmp_path):
    with EventLog.open(tmp_path, segment_bytes_max=300) as log:
        fill(log, 30)
    first = segment_files(tmp_path)[0]
    data = bytearray(first.read_bytes())
    data[30] ^= 0xFF
    first.write_bytes(bytes(data))
    # With its summary saved, open trusts the summary and the read finds the damage.
    with EventLog.open(tmp_path, segment_bytes_max=300) as log, pytest.raises(LogCorruptError):
        log.read(0, HUGE)
    # Without the summary, open scans the segment and refuses.
    first.with_suffix(SUMMARY_SUFFIX).unlink()
    with pytest.raises(LogCorruptError, match="closed segment"):
        EventLog.open(tmp_path, segment_bytes_max=300)


def test_summaries_are_only_a_cache(tmp_path):
    with EventLog.open(tmp_path, segment_bytes_max=300) as log:
        written = fill(log, 40)
        infos = log.segments()
    summaries = sorted(tmp_path.glob("*" + SUMMARY_SUFFIX))
    assert len(summaries) == len(infos) - 1
    summaries[0].write_bytes(b"junk")
    summaries[1].write_bytes(summaries[1].read_bytes()[:-3])
    summaries[2].unlink()
    orphan = (tmp_path / segment_name(999_999)).with_suffix(SUMMARY_SUFFIX)
    orphan.write_bytes(b"orphan")
    (tmp_path / "notes.idx").write_bytes(b"not ours")
    with EventLog.open(tmp_path, segment_bytes_max=300) as log:
        assert log.segments() == infos
        assert read_all(log) == written
    assert not orphan.exists()
    assert (tmp_path / "notes.idx").exists()
    (tmp_path / "notes.idx").unlink()
    assert len(sorted(tmp_path.glob("*" + SUMMARY_SUFFIX))) == len(infos) - 1  # rewritten


# ---------------------------------------------------------------------------------------- retention


def test_retention_by_size_keeps_the_active_segment(tmp_path):
    with EventLog.open(tmp_path, segment_bytes_max=500) as log:
        written = fill(log, 100, size=40, per_batch=5)
        infos = log.segments()
        assert len(infos) > 4
        budget = sum(i.size_bytes for i in infos[3:])
        assert log.enforce_retention(0, budget, HUGE) == 3
        assert log.enforce_retention(0, budget, HUGE) == 0
        assert log.released_through == infos[2].last_tick
        assert log.first_tick == infos[3].first_tick
        assert log.size_bytes == budget
        assert log.record_count == sum(i.record_count for i in infos[3:])
        retained = [r for r in written if r[0] > infos[2].last_tick]
        assert read_all(log) == retained
        assert log.read(5, 40) == retained[:1]  # the caller sees released_through > 5: a gap
        assert log.enforce_retention(0, 0, HUGE) == len(infos) - 4
        assert log.segment_count == 1
        assert log.segments() == infos[-1:]
        assert log.last_tick == written[-1][0]
        log.sync()
    assert json.loads((tmp_path / log_module.RETENTION_FILE).read_text()) == {
        "released_through": infos[-2].last_tick
    }
    assert [f.name for f in segment_files(tmp_path)] == [infos[-1].name]
    assert sorted(tmp_path.glob("*" + SUMMARY_SUFFIX)) == []
    with EventLog.open(tmp_path) as log:
        assert log.released_through == infos[-2].last_tick
        assert read_all(log) == [r for r in written if r[0] >= infos[-1].first_tick]


def test_retention_by_age(tmp_path):
    second = 1_000_000
    start = 1_700_000_000 * second
    with EventLog.open(tmp_path, segment_bytes_max=400) as log:
        for i in range(40):  # one record per second
            log.append(batch(start + i * second, 1, size=60))
        infos = log.segments()
        now = start + 100 * second
        assert log.enforce_retention(now, HUGE, 200 * second) == 0
        horizon = now - 90 * second  # records older than tick start + 10 s go
        expected = [i for i in infos[:-1] if i.last_tick < horizon]
        assert expected and len(expected) < len(infos) - 1
        assert log.enforce_retention(now, HUGE, 90 * second) == len(expected)
        assert log.released_through == expected[-1].last_tick
        assert log.first_tick == infos[len(expected)].first_tick
        assert log.enforce_retention(now + HUGE, HUGE, 0) == len(infos) - len(expected) - 1


def test_release_through_removes_whole_segments_at_or_below_the_tick(tmp_path):
    with EventLog.open(tmp_path, segment_bytes_max=400) as log:
        written = fill(log, 60, size=40, per_batch=3)
        infos = log.segments()
        assert len(infos) > 3
        assert log.release_through(infos[1].last_tick - 1) == 1  # the second segment still holds it
        assert log.released_through == infos[0].last_tick
        assert log.release_through(infos[2].last_tick) == 2
        assert log.released_through == infos[2].last_tick
        assert read_all(log) == [r for r in written if r[0] > infos[2].last_tick]
        assert log.release_through(written[-1][0]) == len(infos) - 4  # never the active segment
        assert log.segments() == infos[-1:] and log.last_tick == written[-1][0]
    with EventLog.open(tmp_path) as log:
        assert log.released_through == infos[-2].last_tick


def test_crash_between_persisting_and_deleting_finishes_the_retention(tmp_path):
    with EventLog.open(tmp_path, segment_bytes_max=300) as log:
        written = fill(log, 40)
        infos = log.segments()
    # released_through persisted, files not yet removed
    (tmp_path / log_module.RETENTION_FILE).write_text(json.dumps({"released_through": infos[1].last_tick}))
    (tmp_path / (log_module.RETENTION_FILE + ".tmp")).write_text("{")  # a torn next attempt
    with EventLog.open(tmp_path, segment_bytes_max=300) as log:
        assert log.recovery.segments_removed == 2
        assert log.released_through == infos[1].last_tick
        assert log.segments() == infos[2:]
        assert read_all(log) == [r for r in written if r[0] > infos[1].last_tick]
    assert not (tmp_path / (log_module.RETENTION_FILE + ".tmp")).exists()


def test_released_through_keeps_ticks_monotonic_when_the_log_empties(tmp_path):
    """Retention released everything but the active segment, whose only record then tore."""
    with EventLog.open(tmp_path, segment_bytes_max=100) as log:
        fill(log, 10, size=90, per_batch=1)
        assert log.enforce_retention(0, 0, HUGE) == 9
        released = log.released_through
    os.truncate(segment_files(tmp_path)[-1], 20)
    with EventLog.open(tmp_path, segment_bytes_max=100) as log:
        assert (log.first_tick, log.record_count, log.segment_count) == (None, 0, 0)
        assert log.last_tick == released
        with pytest.raises(AssertionError):
            log.append(batch(released, 1))
        log.append(batch(released + 1, 1))


def test_corrupt_retention_file_is_refused(tmp_path):
    EventLog.open(tmp_path).close()
    (tmp_path / log_module.RETENTION_FILE).write_text('{"released_through": -4}')
    with pytest.raises(LogCorruptError):
        EventLog.open(tmp_path)


def test_a_read_keeps_a_segment_that_retention_removes_under_it(tmp_path, monkeypatch):
    log = EventLog.open(tmp_path, segment_bytes_max=300)
    written = fill(log, 40)
    first = log._segments[0]
    removed = []

    class RetentionMidRead(record.RecordScanner):
        def _chunks(self):
            if not removed:  # the reader has pinned the segment: now retention runs
                removed.append(log.enforce_retention(0, 0, HUGE))
                assert not first.path.exists() and first.read_fd >= 0
            return super()._chunks()

    monkeypatch.setattr(log_module.record, "RecordScanner", RetentionMidRead)
    got = log.read(0, first.record_count * 40)
    assert removed[0] > 0 and log.segment_count == 1
    assert got == written[:first.record_count]  # genuine records, though now released
    assert log.released_through >= got[-1][0]  # ... and the caller can tell
    assert first.read_fd == -1  # the last unpin closed the descriptor
    log.close()


# ---------------------------------------------------------------------------------------- I/O failures


def test_a_failed_write_leaves_the_log_as_it_was(tmp_path, monkeypatch):
    log = EventLog.open(tmp_path, segment_bytes_max=300)
    written = fill(log, 10)
    real = log_module.write_all

    def half_then_enospc(fd, data, offset):
        real(fd, bytes(data)[:len(data) // 2], offset)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(log_module, "write_all", half_then_enospc)
    count = log.segment_count
    with pytest.raises(OSError, match="No space"):
        log.append(batch(100, 3))  # into the active segment
    monkeypatch.undo()
    fill(log, 20)
    monkeypatch.undo()
    # now the active segment is full: the failing append is the first of a new segment
    monkeypatch.setattr(log_module, "write_all", half_then_enospc)
    with pytest.raises(OSError, match="No space"):
        log.append(batch(1_000, 3))
    assert log.segment_count > count
    monkeypatch.undo()
    files = len(segment_files(tmp_path))
    assert files == log.segment_count
    log.append(batch(2_000, 3))
    log.close()
    with EventLog.open(tmp_path, segment_bytes_max=300) as log:
        got = read_all(log)
        assert got[:10] == written
        assert got[-3:] == batch(2_000, 3)
        assert log.recovery.bytes_cut == 0


def test_a_failed_fsync_fails_the_log_until_reopened(tmp_path, monkeypatch):
    log = EventLog.open(tmp_path)
    written = fill(log, 5)
    log.append(batch(100, 1))

    def broken(fd):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", broken)
    with pytest.raises(StorageError, match="fsync failed"):
        log.sync()
    monkeypatch.undo()
    with pytest.raises(StorageError, match="reopen"):
        log.append(batch(200, 1))
    assert log.read(0, HUGE) == [*written, *batch(100, 1)]  # readers still work
    log.close()
    with EventLog.open(tmp_path) as log:
        assert read_all(log)[:5] == written


# ---------------------------------------------------------------------------------------- threads


@pytest.mark.parametrize("with_retention", [False, True])
def test_reader_thread_never_sees_torn_or_disordered_records(tmp_path, with_retention):
    total = 6000
    log = EventLog.open(tmp_path, segment_bytes_max=2048)
    done = threading.Event()
    errors: list[BaseException] = []
    seen: list[int] = []

    def writer() -> None:
        try:
            rng = random.Random(11)
            tick = 1
            while tick <= total:
                count = min(rng.randint(1, 40), total - tick + 1)
                log.append([(t, payload_for(t, t % 97)) for t in range(tick, tick + count)])
                tick += count
                if rng.random() < 0.3:
                    log.sync()
                if rng.random() < 0.3:
                    log.prefill()  # zeros past the records: never read
                if with_retention and rng.random() < 0.05:
                    log.enforce_retention(0, 16 * 2048, HUGE)
        except BaseException as exc:
            errors.append(exc)
        finally:
            done.set()

    def reader() -> None:
        try:
            rng = random.Random(12)
            position = 0
            for _ in range(10_000_000):  # a bound, never reached unless something is broken
                finished = done.is_set()  # before the read: a read after it sees everything
                records = log.read(position, rng.choice([1, 200, 5000, HUGE]))
                released = log.released_through
                ticks = [t for t, _ in records]
                assert ticks == sorted(set(ticks)) and all(t > position for t in ticks)
                for t, payload in records:
                    assert payload == payload_for(t, t % 97)
                # every tick up to the last returned is either returned or released
                kept = [t for t in ticks if t > released]
                resume = max(position, released) + 1
                assert kept == list(range(resume, resume + len(kept)))
                seen.extend(kept)
                position = max(position, released, *ticks)
                if finished and not records:
                    return
            raise AssertionError("reader did not finish")
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer), threading.Thread(target=reader)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads)
    assert not errors, errors
    if with_retention:
        assert log.released_through > 0
        assert seen[-1] == total
    else:
        assert seen == list(range(1, total + 1))
    log.close()


# ---------------------------------------------------------------------------------------- prefilled space


def test_prefill_writes_zeros_ahead_and_syncs_over_them_with_fdatasync(tmp_path, monkeypatch):
    log = EventLog.open(tmp_path, prefill_bytes_max=1 << 20)
    assert log.prefill() == 0  # nothing to write ahead of yet
    written = fill(log, 10)
    active = segment_files(tmp_path)[-1]
    end = active.stat().st_size
    assert log.prefill() == log_module.PREFILL_CHUNK_BYTES
    assert active.stat().st_size == end + log_module.PREFILL_CHUNK_BYTES
    calls: list[str] = []
    monkeypatch.setattr(log_module.os, "fsync", lambda fd: calls.append("fsync"))
    monkeypatch.setattr(log_module.os, "fdatasync", lambda fd: calls.append("fdatasync"))
    more = batch(11, 5)
    log.append(more)
    log.sync()
    assert calls == ["fdatasync"]  # size unchanged since the prefill's fsync: the data alone
    assert active.stat().st_size == end + log_module.PREFILL_CHUNK_BYTES
    assert read_all(log) == [*written, *more]  # never a zero past the records
    assert log.read_span(0, HUGE, 15)[1] == active.read_bytes()[:log.segments()[-1].size_bytes]
    monkeypatch.undo()
    log.close()
    assert active.stat().st_size == log.segments()[-1].size_bytes  # close cuts the zeros
    with EventLog.open(tmp_path) as log:
        assert read_all(log) == [*written, *more]
        assert log.recovery == log_module.RecoveryReport()


def test_prefill_refills_in_chunks_within_its_bound_and_the_segment(tmp_path):
    chunk = log_module.PREFILL_CHUNK_BYTES
    with EventLog.open(tmp_path / "a", segment_bytes_max=600_000, prefill_bytes_max=1 << 20) as log:
        fill(log, 3)
        size = log.segments()[-1].size_bytes
        assert [log.prefill() for _ in range(4)] == [chunk, chunk, 600_000 - size - 2 * chunk, 0]
        assert segment_files(tmp_path / "a")[-1].stat().st_size == 600_000  # the segment's end, no further
    with EventLog.open(tmp_path / "b", prefill_bytes_max=300_000) as log:
        fill(log, 3)
        assert [log.prefill() for _ in range(2)] == [chunk, 0]  # less than half a chunk missing: not yet
        fill(log, 1, size=200_000, per_batch=1)
        assert log.prefill() == 300_000 - (chunk - 200_016)  # back up to the bound ahead of the records
        assert log.prefill() == 0


def test_a_record_past_the_zeros_grows_the_file_and_is_fsynced(tmp_path, monkeypatch):
    log = EventLog.open(tmp_path, prefill_bytes_max=4096)
    fill(log, 2)
    assert log.prefill() == 4096
    calls: list[str] = []
    monkeypatch.setattr(log_module.os, "fsync", lambda fd: calls.append("fsync"))
    monkeypatch.setattr(log_module.os, "fdatasync", lambda fd: calls.append("fdatasync"))
    log.append(batch(3, 1, size=10_000))
    log.sync()
    log.append(batch(4, 1))
    log.sync()
    assert calls == ["fsync", "fsync"]  # the size changed: a full fsync until the next prefill's
    monkeypatch.undo()
    assert log.prefill() == 4096
    log.append(batch(5, 1))
    log.sync()
    assert (log.fsyncs, log.fdatasyncs) == (5, 1)  # fill, 2 prefills, the 2 above; the last sync
    log.close()


def test_a_roll_cuts_the_closed_segment_back_to_its_records(tmp_path):
    log = EventLog.open(tmp_path, segment_bytes_max=3000, prefill_bytes_max=1 << 20)
    written = fill(log, 30, per_batch=3)
    log.prefill()
    first = segment_files(tmp_path)[0]
    assert first.stat().st_size == 3000 or len(segment_files(tmp_path)) > 1
    written += fill(log, 60, per_batch=3)
    files = segment_files(tmp_path)
    assert len(files) > 1
    for info, path in zip(log.segments()[:-1], files, strict=False):
        assert path.stat().st_size == info.size_bytes  # closed: no zeros, its summary fits
    abandon(log)
    with EventLog.open(tmp_path, segment_bytes_max=3000) as log:
        assert read_all(log) == written
        assert log.recovery.problem is None


def test_kill_after_a_prefill_finds_the_end_of_the_records(tmp_path):
    log = EventLog.open(tmp_path, prefill_bytes_max=1 << 20)
    written = fill(log, 8)
    log.prefill()
    more = batch(9, 3)
    log.append(more)
    log.sync()
    active = segment_files(tmp_path)[-1]
    abandon(log)
    assert active.stat().st_size > log.segments()[-1].size_bytes
    with EventLog.open(tmp_path) as log:
        assert read_all(log) == [*written, *more]
        assert log.recovery == log_module.RecoveryReport()  # zeros are the end, not a problem
        assert active.stat().st_size == log.segments()[-1].size_bytes
        log.append(batch(12, 1))  # and the log goes on from there
    with EventLog.open(tmp_path) as log:
        assert read_all(log) == [*written, *more, *batch(12, 1)]


@pytest.mark.parametrize("torn", ["header", "payload", "zero-header-then-data"])
def test_a_torn_record_in_prefilled_space_is_cut(tmp_path, torn):
    log = EventLog.open(tmp_path, prefill_bytes_max=1 << 20)
    written = fill(log, 8)
    log.prefill()
    end = log.segments()[-1].size_bytes
    active = segment_files(tmp_path)[-1]
    abandon(log)
    lost = bytes(record.encode(batch(9, 3), 8, end, HUGE, INDEX_INTERVAL_BYTES, batch=True)[0])
    # torn before its last non-zero byte (a tear that misses only zeros leaves the record whole)
    part = {"header": lost[:9], "payload": lost[:len(lost.rstrip(bytes(1))) - 1],
            "zero-header-then-data": bytes(record.HEADER_BYTES) + lost[record.HEADER_BYTES:]}[torn]
    with active.open("r+b") as f:  # what a crash can leave of an unsynced write over the zeros
        f.seek(end)
        f.write(part)
    with EventLog.open(tmp_path) as log:
        assert read_all(log) == written
        assert log.recovery.problem is not None
        assert log.recovery.bytes_cut > 0
        assert active.stat().st_size == end


def test_a_failed_prefill_turns_it_off_and_the_log_goes_on(tmp_path, monkeypatch):
    log = EventLog.open(tmp_path, prefill_bytes_max=1 << 20)
    written = fill(log, 4)

    def full(fd, data, offset):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(log_module, "write_all", full)
    assert log.prefill() == 0
    monkeypatch.undo()
    assert log.prefill_bytes_max == 0 and log.prefill() == 0
    more = batch(5, 2)
    log.append(more)
    log.sync()
    assert log.fdatasyncs == 0
    log.close()
    with EventLog.open(tmp_path) as log:
        assert read_all(log) == [*written, *more]


# ---------------------------------------------------------------------------------------- identity


def test_identity_is_created_once_and_kept(tmp_path):
    directory = tmp_path / "data"
    ids = iter(["pubend-a", "pubend-b"])
    assert load_or_create_identity(directory, lambda: next(ids)) == "pubend-a"
    assert load_or_create_identity(directory, lambda: next(ids)) == "pubend-a"
    assert json.loads((directory / "identity.json").read_text()) == {"pubend_id": "pubend-a"}
    assert not (directory / "identity.json.tmp").exists()


def test_damaged_identity_is_refused(tmp_path):
    (tmp_path / "identity.json").write_text('{"pubend_id": ')
    with pytest.raises(LogCorruptError):
        load_or_create_identity(tmp_path, lambda: "fresh")
    (tmp_path / "identity.json").write_text('{"pubend_id": ""}')
    with pytest.raises(LogCorruptError):
        load_or_create_identity(tmp_path, lambda: "fresh")


def test_a_torn_identity_write_leaves_no_identity(tmp_path):
    (tmp_path / "identity.json.tmp").write_text('{"pubend_id": "half')
    assert load_or_create_identity(tmp_path, lambda: "fresh") == "fresh"


# ---------------------------------------------------------------------------------------- model


class Model:
    """What the log must hold: appended records, how many of them a completed sync covered, and
    where the last sync left the files (the bytes a crash may lose lie after that point)."""

    def __init__(self) -> None:
        self.records: list[tuple[int, bytes]] = []
        self.synced = 0
        self.synced_at: tuple[str, int] | None = None
        self.released = 0

    def mark_synced(self, directory: pathlib.Path, log: EventLog) -> None:
        self.synced = len(self.records)
        files = segment_files(directory)
        # the records' end, not the file's: zeros prefilled past it are not records
        self.synced_at = (files[-1].name, log.segments()[-1].size_bytes) if files else None


def crash(directory: pathlib.Path, model: Model, rng: random.Random) -> None:
    """Lose a random amount of what was not synced: cut one file after the synced point, drop every
    newer file, and maybe leave junk where the cut is."""
    files = segment_files(directory)
    if model.synced_at is not None:
        files = [f for f in files if f.name >= model.synced_at[0]]
    if not files:
        return
    k = rng.randrange(len(files))
    victim = files[k]
    low = model.synced_at[1] if model.synced_at is not None and victim.name == model.synced_at[0] else 0
    os.truncate(victim, rng.randint(low, victim.stat().st_size))
    for later in files[k + 1:]:
        later.unlink()
        later.with_suffix(SUMMARY_SUFFIX).unlink(missing_ok=True)
    junk = rng.choice([b"", bytes(rng.randint(1, 64)), rng.randbytes(rng.randint(1, 64))])
    with victim.open("ab") as f:
        f.write(junk)


operations = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 12), st.integers(0, 120)),
        st.tuples(st.just("sync")),
        st.tuples(st.just("reopen")),
        st.tuples(st.just("crash"), st.integers(0, 2**32)),
        st.tuples(st.just("retain"), st.integers(0, 3000)),
        st.tuples(st.just("prefill")),
    ),
    max_size=30,
)


def check_against(log: EventLog, model: Model) -> None:
    assert read_all(log) == model.records
    assert log.record_count == len(model.records)
    assert log.released_through == model.released
    assert log.first_tick == (model.records[0][0] if model.records else None)
    assert log.last_tick == max(model.records[-1][0] if model.records else 0, model.released)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=operations, segment_bytes_max=st.sampled_from([200, 700, 1 << 20]))
def test_random_appends_syncs_crashes_and_retention_match_the_model(ops, segment_bytes_max):
    with tempfile.TemporaryDirectory() as name:
        directory = pathlib.Path(name)
        log = EventLog.open(directory, segment_bytes_max=segment_bytes_max)
        model = Model()
        tick = 1
        for op in ops:
            if op[0] == "append":
                records = batch(tick, op[1], op[2], step=2)
                log.append(records)
                model.records += records
                tick = records[-1][0] + 1
            elif op[0] == "sync":
                log.sync()
                model.mark_synced(directory, log)
            elif op[0] == "prefill":
                if log.prefill():  # its fsync makes what was appended durable too
                    model.mark_synced(directory, log)
            elif op[0] == "reopen":
                log.close()
                log = EventLog.open(directory, segment_bytes_max=segment_bytes_max)
                model.mark_synced(directory, log)
            elif op[0] == "retain":
                log.enforce_retention(0, op[1], HUGE)
                model.released = log.released_through
                dropped = sum(1 for t, _ in model.records if t <= model.released)
                model.records = model.records[dropped:]
                model.synced = max(0, model.synced - dropped)
            else:
                abandon(log)
                crash(directory, model, random.Random(op[1]))
                log = EventLog.open(directory, segment_bytes_max=segment_bytes_max)
                recovered = read_all(log)
                assert recovered == model.records[:len(recovered)]
                assert len(recovered) >= model.synced
                model.records = recovered
                model.mark_synced(directory, log)  # recovery makes what it kept durable
                tick = max(tick, log.last_tick + 1)
            check_against(log, model)
        log.close()
        with EventLog.open(directory, segment_bytes_max=segment_bytes_max) as log:
            check_against(log, model)
