"""Batch records (storage/record.py): the events of one append of consecutive ticks under one header
and one checksum. Every reader cuts them back into events and reads exactly the ticks it asks for:
`EventLog.read` (payloads and dedup keys, byte budgets that end inside a batch), spans
(`records_in`), recovery; and logs written before batches (single records) read on, mixed with
batches."""

from __future__ import annotations

import pathlib
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidings.core.publish.batch import RecordRun, RecordRuns, batch_table
from tidings.storage import EventLog, record
from tidings.storage.segment import INDEX_INTERVAL_BYTES, segment_name

HUGE = 1 << 40
TICK_END = 1 << 64


def payload_for(tick: int, size: int) -> bytes:
    stamp = tick.to_bytes(8, "little")
    return (stamp * (size // 8 + 1))[:size]


def appends(rng: random.Random, count: int, size_max: int, after: int = 0,
            ) -> list[tuple[list[tuple[int, bytes]], list[bytes] | None]]:
    """Appends as the intake makes them (runs of consecutive ticks, keyed or not), with now and
    then one holding a hole (cut into runs by the log) or a single event."""
    out: list[tuple[list[tuple[int, bytes]], list[bytes] | None]] = []
    tick, total = after, 0
    while total < count:
        tick += rng.choice((1, 3, 1000))
        records = []
        for _ in range(min(rng.choice((1, 2, 5, 40)), count - total)):
            records.append((tick, payload_for(tick, rng.randint(0, size_max))))
            tick += 1 if rng.random() < 0.95 else 2
        tick -= 1
        keys = [f"p/{t}".encode() * rng.randint(0, 3) for t, _ in records] if rng.random() < 0.3 else None
        out.append((records, keys))
        total += len(records)
    return out


def model_read(events: list[tuple[int, bytes]], after: int, max_bytes: int,
               through: int | None) -> list[tuple[int, bytes]]:
    """EventLog.read's rule on a list of every event: in the range, while the bytes fit (the first
    always), and no more once they are spent."""
    out: list[tuple[int, bytes]] = []
    taken = 0
    for tick, data in events:
        if tick <= after or (through is not None and tick > through):
            continue
        if out and taken + len(data) > max_bytes:
            break
        out.append((tick, data))
        taken += len(data)
        if taken >= max_bytes:
            break
    return out


def write(log: EventLog, batches: list[tuple[list[tuple[int, bytes]], list[bytes] | None]],
          ) -> tuple[list[tuple[int, bytes]], list[tuple[int, bytes]]]:
    """Append `batches`; every event, and every (tick, key) of the keyed ones."""
    events: list[tuple[int, bytes]] = []
    keys: list[tuple[int, bytes]] = []
    for records, record_keys in batches:
        log.append(records, record_keys)
        events += records
        if record_keys is not None:
            keys += [(tick, key) for (tick, _), key in zip(records, record_keys, strict=True)]
    log.sync()
    return events, keys


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32), segment_bytes_max=st.sampled_from([300, 4096, 1 << 20]),
       size_max=st.sampled_from([0, 30, 300]))
def test_reads_cut_batches_at_exactly_the_ticks_asked(tmp_path_factory, seed, segment_bytes_max, size_max):
    rng = random.Random(seed)
    directory = tmp_path_factory.mktemp("log")
    with EventLog.open(directory, segment_bytes_max=segment_bytes_max) as log:
        events, keys = write(log, appends(rng, 200, size_max))
        assert log.record_count == len(events) and log.last_tick == events[-1][0]
    for reopened in range(2):  # as written, then from the summaries and the last segment's scan
        with EventLog.open(directory, segment_bytes_max=segment_bytes_max) as log:
            assert log.recovery.problem is None and log.record_count == len(events)
            assert log.read(0, HUGE) == events
            for _ in range(60):
                after = rng.choice([0, rng.randint(0, events[-1][0] + 2), rng.choice(events)[0]])
                through = rng.choice([None, after + rng.randint(0, 60), rng.choice(events)[0]])
                max_bytes = rng.choice([0, 1, 50, 400, HUGE])
                assert log.read(after, max_bytes, through) == model_read(events, after, max_bytes, through)
                assert log.read(after, max_bytes, through, keys=True) == model_read(keys, after, max_bytes, through)
            if not reopened:
                log.append([(events[-1][0] + 1, b"x"), (events[-1][0] + 2, b"y")])
                events += [(events[-1][0] + 1, b"x"), (events[-1][0] + 2, b"y")]


@settings(max_examples=50, deadline=None)
@given(seed=st.integers(0, 2**32))
def test_a_span_of_batch_records_gives_exactly_its_range(seed):
    rng = random.Random(seed)
    batches = appends(rng, 60, 40)
    events = [event for records, _ in batches for event in records]
    span = b"".join(record.encode(records, 0, 0, 1 << 62, INDEX_INTERVAL_BYTES, keys, batch=True)[0]
                    for records, keys in batches)
    for _ in range(40):
        after = rng.randint(0, events[-1][0] + 1)
        through = rng.randint(after, events[-1][0] + 2)
        assert [bytes(p) for p in record.records_in(span, after, through)] == [
            data for tick, data in events if after < tick <= through]


def test_one_header_and_one_checksum_per_run_of_ticks():
    records = [(t, payload_for(t, 10)) for t in (5, 6, 7, 9, 20, 21)]
    buf, entries = record.encode(records, 0, 0, 0, 1, batch=True)
    assert entries == [(5, 0), (9, 16 + 4 + 12 + 30), (20, 16 + 4 + 12 + 30 + 16 + 10)]  # runs 5-7, 9, 20-21
    length, _crc, tick = record.HEADER.unpack_from(buf, 0)
    assert tick == 5 and length == record.BATCH | (4 + 12 + 30)
    assert len(buf) == 3 * 16 + (4 + 12 + 30) + 10 + (4 + 8 + 20)
    assert [bytes(p) for p in record.records_in(buf, 0, 100)] == [p for _, p in records]
    with pytest.raises(AssertionError):
        record.encode(records, 5, 0, 0, 1, batch=True)  # tick 5 does not follow 5


@settings(max_examples=100, deadline=None)
@given(first=st.integers(1, 2**63 - 200), sizes=st.lists(st.integers(0, 300), min_size=1, max_size=60),
       base=st.integers(0, 1 << 20), due=st.integers(0, 1 << 21))
def test_a_run_with_its_table_is_logged_as_its_pairs(first, sizes, base, due):
    """An append the intake made (core/publish/batch.py RecordRun: ticks, records and the batch
    table its pass wrote) is encoded byte for byte as the same (tick, record) pairs are."""
    records = [payload_for(first + i, size) for i, size in enumerate(sizes)]
    ticks = list(range(first, first + len(records)))
    run = RecordRun(ticks, records, batch_table(records))
    pairs = list(zip(ticks, records, strict=True))
    buf, entries = record.encode(run, first - 1, base, due, INDEX_INTERVAL_BYTES, batch=True)
    assert (bytes(buf), entries) == record.encode(pairs, first - 1, base, due, INDEX_INTERVAL_BYTES, batch=True)
    assert [bytes(p) for p in record.records_in(bytes(buf), 0, TICK_END)] == records
    with pytest.raises(AssertionError):
        record.encode(run, first, base, due, INDEX_INTERVAL_BYTES, batch=True)  # its first tick does not follow


@settings(max_examples=100, deadline=None)
@given(first=st.integers(1, 2**40), runs=st.lists(st.tuples(st.integers(0, 5), st.lists(st.integers(0, 300), min_size=1,
                                                                                     max_size=20)),
                                                  min_size=1, max_size=6),
       base=st.integers(0, 1 << 12), due=st.integers(0, 1 << 13), interval=st.sampled_from([64, 4096, 1 << 20]))
def test_an_inputs_runs_are_logged_as_each_run_alone(first, runs, base, due, interval):
    """An Append of several runs (core/publish/batch.py RecordRuns: an input's PUBLISHes) is the
    records of each run as it would be appended alone, one after the other, with the same index
    entries; a run of one event is a single record."""
    tick, made = first, []
    for gap, sizes in runs:
        tick += gap
        records = [payload_for(tick + i, size) for i, size in enumerate(sizes)]
        made.append(RecordRun(list(range(tick, tick + len(records))), records, batch_table(records)))
        tick += len(records)
    buf, entries = record.encode(RecordRuns(made), first - 1, base, due, interval, batch=True)
    expected, expected_entries, offset, previous = b"", [], base, first - 1
    for run in made:
        alone, more = record.encode(list(run), previous, offset, due, interval, batch=True)
        expected += alone
        expected_entries += more
        due = more[-1][1] + interval if more else due
        offset, previous = offset + len(alone), run.ticks[-1]
    assert (bytes(buf), entries) == (expected, expected_entries)
    assert [bytes(p) for p in record.records_in(bytes(buf), 0, TICK_END)] == [r for run in made for r in run.records]
    assert list(RecordRuns(made)) == [pair for run in made for pair in run]


def test_a_log_appends_a_run_and_reads_it_back(tmp_path: pathlib.Path):
    records = [payload_for(t, 30) for t in range(10, 110)]
    with EventLog.open(tmp_path / "log") as log:
        log.append(RecordRun(list(range(10, 110)), records, batch_table(records)))
        log.append([(200, b"one")])
        log.sync()
        assert log.read(0, HUGE) == [*zip(range(10, 110), records, strict=True), (200, b"one")]
    with EventLog.open(tmp_path / "log") as log:  # recovered as written
        assert log.last_tick == 200 and [t for t, _ in log.read(50, HUGE)] == [*range(51, 110), 200]


def test_a_damaged_batch_in_a_span_is_named():
    records = [(t, payload_for(t, 10)) for t in range(1, 6)]
    span = record.encode(records, 0, 0, 1 << 62, INDEX_INTERVAL_BYTES, batch=True)[0]
    damaged = bytearray(span)
    damaged[-3] ^= 1
    with pytest.raises(record.SpanError, match="tick 1 fails its checksum"):
        record.records_in(bytes(damaged), 3, 4)
    assert record.records_in(bytes(damaged), 5, 9) == []  # wholly before the range: not the reader's
    with pytest.raises(record.SpanError, match="runs past its end"):
        record.records_in(span[:-1], 0, 9)
    with pytest.raises(record.SpanError, match="has tick 1, after 5"):
        record.records_in(span + span, 0, 9)


def test_a_log_of_single_records_written_before_batches_reads_on(tmp_path: pathlib.Path):
    """A segment of single records (every log before batch records) opens, takes batch records
    behind its own, and reads back mixed, with a summary and from a scan."""
    old = [(t, payload_for(t, 25)) for t in range(100, 140)]
    old_keys = [f"p/{t}".encode() for t, _ in old]
    (tmp_path / segment_name(100)).write_bytes(record.encode(old, 0, 0, 0, INDEX_INTERVAL_BYTES, old_keys)[0])
    new = [(t, payload_for(t, 25)) for t in range(140, 150)]
    with EventLog.open(tmp_path, segment_bytes_max=500) as log:
        assert log.recovery.problem is None and log.read(0, HUGE) == old
        log.append(new[:5])  # behind the old records, in their segment (now past its size): a roll
        log.append(new[5:], [b"k"] * 5)
        log.sync()
        assert log.segment_count == 2
    for _ in range(2):
        with EventLog.open(tmp_path, segment_bytes_max=500) as log:
            assert log.read(0, HUGE) == old + new and log.record_count == 50
            assert log.read(138, 75, 146) == old[-1:] + new[:2]  # a budget ending inside a batch
            assert log.read(0, HUGE, keys=True) == [*zip([t for t, _ in old], old_keys, strict=True),
                                                    *((t, b"k") for t, _ in new[5:])]
        (tmp_path / segment_name(100)).with_suffix(".idx").unlink()  # the second time: a scan


def test_a_run_too_long_for_one_record_becomes_several(monkeypatch):
    monkeypatch.setattr(record, "BATCH_BYTES_MAX", 100)  # (a body of at most 1 GiB otherwise)
    records = [(t, payload_for(t, 30)) for t in range(1, 11)]
    keys = [b"k" * t for t in range(1, 11)]
    for record_keys in (None, keys):
        buf, entries = record.encode(records, 0, 0, 0, 1, record_keys, batch=True)
        assert len(entries) > 3  # several records, each indexed here (an entry every byte)
        offsets = [offset for _, offset in entries] + [len(buf)]
        for (tick, offset), end in zip(entries, offsets[1:], strict=True):
            length = record.HEADER.unpack_from(buf, offset)[0]
            assert end - offset == 16 + (length & record.LENGTH_MASK) and (length & record.LENGTH_MASK) <= 100
            assert length & record.BATCH or end - offset <= 16 + 30 + 10 + 2, tick
        assert [bytes(p) for p in record.records_in(buf, 0, 10)] == [p for _, p in records]
