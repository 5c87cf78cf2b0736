"""The log's own bytes as a READ's answer (EventLog.read_span, record.records_in): spans cut where
the sparse index says records begin, covering exactly the ticks they claim, on real files; and the
reader's checks of a span it was sent."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidings.core.wire.messages import SPAN_BYTES_FACTOR
from tidings.storage import EventLog, record
from tidings.storage.segment import INDEX_INTERVAL_BYTES

KIB = 1024


def payload_for(tick: int, size: int) -> bytes:
    stamp = tick.to_bytes(8, "little")
    return (stamp * (size // 8 + 1))[:size]


def write(log: EventLog, rng: random.Random, count: int, size_max: int) -> list[tuple[int, bytes]]:
    """`count` records of random sizes, ticks with random holes, in batches of random length."""
    written: list[tuple[int, bytes]] = []
    tick = log.last_tick
    while len(written) < count:
        records = []
        for _ in range(min(rng.randint(1, 40), count - len(written))):
            tick += rng.choice((1, 1, 1, 2, 7))
            records.append((tick, payload_for(tick, rng.randint(0, size_max))))
        log.append(records)
        written += records
    log.sync()
    return written


def walk(log: EventLog, after: int, through: int, max_bytes: int) -> list[bytes]:
    """Every payload a reader of spans gets for (after, through], one span after another, with the
    checks a reader makes of each answer."""
    got: list[bytes] = []
    position = after
    while position < through:
        answer = log.read_span(position, max_bytes, through)
        assert answer is not None
        covered, span = answer
        assert position < covered <= through  # every answer moves the reader on
        assert len(span) <= SPAN_BYTES_FACTOR * max(max_bytes, INDEX_INTERVAL_BYTES)
        got += [bytes(p) for p in record.records_in(span, position, covered)]
        position = covered
    return got


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32), segment_kib=st.sampled_from([64, 300, 4096]),
       max_bytes=st.sampled_from([1, 5 * KIB, 100 * KIB, 1024 * KIB]), size_max=st.sampled_from([16, 400, 3000]))
def test_spans_hold_exactly_the_records_of_any_range(tmp_path_factory, seed, segment_kib, max_bytes, size_max):
    rng = random.Random(seed)
    with EventLog.open(tmp_path_factory.mktemp("log"), segment_bytes_max=segment_kib * KIB) as log:
        written = write(log, rng, 4000, size_max)
        last = written[-1][0]
        for _ in range(4):
            after = rng.randint(0, last)
            through = rng.randint(after, last + 3) if rng.random() < 0.8 else last
            expected = [p for t, p in written if after < t <= through]
            assert walk(log, after, through, max_bytes) == expected


def test_a_span_ends_at_an_index_entry_within_its_budget(tmp_path):
    with EventLog.open(tmp_path) as log:
        write(log, random.Random(3), 20_000, 200)
        segment = log._segments[0]
        assert len(segment.index_offsets) > 20
        covered, span = log.read_span(0, 256 * KIB, log.last_tick)
        ends = [o for o in segment.index_offsets if 0 < o <= 256 * KIB]
        assert len(span) == ends[-1]  # the last record boundary the index knows within the budget
        assert covered == segment.index_ticks[len(ends)] - 1
        # the next span starts where this one ended: no byte is sent twice
        _, following = log.read_span(covered, 256 * KIB, log.last_tick)
        assert record.HEADER.unpack_from(following, 0)[2] == segment.index_ticks[len(ends)]
        # a read that ends sooner ends its span at the index entry past its end: no more is sent
        through = segment.index_ticks[3] + 1
        covered, span = log.read_span(0, 1024 * KIB, through)
        assert (covered, len(span)) == (through, segment.index_offsets[4])


def test_nothing_to_send_and_a_range_between_segments(tmp_path):
    with EventLog.open(tmp_path, segment_bytes_max=300) as log:
        log.append([(10, b"a" * 100), (20, b"b" * 300)])
        log.append([(50, b"c" * 10)])  # the first segment is full: a second one starts at 50
        log.sync()
        assert log.read_span(50, KIB, 60) == (60, b"")  # past the last record
        assert log.read_span(20, KIB, 40) == (40, b"")  # between the segments
        covered, span = log.read_span(20, KIB, 50)
        assert covered == 50 and [bytes(p) for p in record.records_in(span, 20, covered)] == [b"c" * 10]
        covered, span = log.read_span(0, KIB, 50)  # the first segment ends the span
        assert covered == 20 and [bytes(p) for p in record.records_in(span, 0, covered)] == [b"a" * 100,
                                                                                               b"b" * 300]


def test_released_segments_are_not_sent(tmp_path):
    with EventLog.open(tmp_path, segment_bytes_max=1000) as log:
        written = write(log, random.Random(5), 300, 100)
        log.release_through(written[150][0])
        first = log.first_tick
        assert first is not None and first > written[0][0]
        covered, span = log.read_span(0, 64 * KIB, log.last_tick)
        kept = [p for t, p in written if first <= t <= covered]
        assert [bytes(p) for p in record.records_in(span, 0, covered)] == kept


def test_a_record_larger_than_a_span_is_read_record_by_record(tmp_path):
    with EventLog.open(tmp_path) as log:
        log.append([(1, b"s"), (2, b"L" * (300 * KIB)), (3, b"t")])
        log.sync()
        assert log.read_span(1, 64 * KIB, 3) is None  # no record boundary near enough: the caller reads
        assert log.read(1, 64 * KIB, 3) == [(2, b"L" * (300 * KIB))]
        assert log.read_span(0, 512 * KIB, 3) is not None


def spans_of(records: list[tuple[int, bytes]], keys: list[bytes] | None = None) -> bytes:
    return record.encode(records, 0, 0, 1 << 62, INDEX_INTERVAL_BYTES, keys)[0]


def test_a_reader_checks_every_record_it_keeps():
    span = spans_of([(t, payload_for(t, 30)) for t in range(1, 11)])
    assert [bytes(p) for p in record.records_in(span, 3, 7)] == [payload_for(t, 30) for t in range(4, 8)]
    damaged = bytearray(span)
    damaged[5 * 46 + 20] ^= 1  # a payload byte of tick 6
    with pytest.raises(record.SpanError, match="tick 6 fails its checksum"):
        record.records_in(bytes(damaged), 3, 7)
    assert len(record.records_in(bytes(damaged), 6, 10)) == 4  # tick 6 is not the reader's
    with pytest.raises(record.SpanError, match="runs past its end"):
        record.records_in(span[:-5], 0, 10)
    with pytest.raises(record.SpanError, match="torn header"):
        record.records_in(span + span[:7], 0, 100)
    with pytest.raises(record.SpanError, match="has tick 1, after 10"):
        record.records_in(span + span, 0, 100)


def test_a_keyed_record_gives_its_payload_without_the_key():
    span = spans_of([(1, b"first"), (2, b"second")], keys=[b"producer/1", b"producer/2"])
    assert [bytes(p) for p in record.records_in(span, 0, 2)] == [b"first", b"second"]
