"""The persistent filtering subsystem against a per-subscriber reference, across crashes and chops."""

import os
import pathlib
import tempfile

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from tidings.storage import LogCorruptError
from tidings.storage.log import EventLog
from tidings.storage.pfs import Pfs, PfsStream, back_delta_of, encode_record

SUBSCRIBERS = list(range(6))
SEGMENT_BYTES = 200  # a handful of records per segment: rolls and chops happen in short runs


def newest_segment(directory: pathlib.Path) -> pathlib.Path | None:
    segments = sorted(directory.glob("*.seg"))
    return segments[-1] if segments else None


class PfsAgainstReference(RuleBasedStateMachine):
    """Reference: for each subscriber, the list of its matching ticks (synced, then pending)."""

    def __init__(self):
        super().__init__()
        self.tmp = tempfile.TemporaryDirectory()
        self.directory = pathlib.Path(self.tmp.name) / "stream"
        self.stream = PfsStream.open(self.directory, segment_bytes_max=SEGMENT_BYTES)
        self.records: list[tuple[int, frozenset[int]]] = []  # every record ever kept, in tick order
        self.synced_through = 0
        self.chopped_at_most = 0  # the highest tick a chop asked for
        self.synced_tail: tuple[pathlib.Path | None, int] = (None, 0)

    def teardown(self):
        self.stream.close()
        self.tmp.cleanup()

    def matches(self, subscriber, after, through):
        floor = max(after, self.stream.released_through)
        return [t for t, subs in self.records if floor < t <= through and subscriber in subs]

    @rule(gap=st.integers(min_value=1, max_value=5000),
          subscribers=st.sets(st.sampled_from(SUBSCRIBERS), min_size=1))
    def append(self, gap, subscribers):
        tick = (self.records[-1][0] if self.records else 1_000_000) + gap
        self.stream.append(tick, subscribers)
        self.records.append((tick, frozenset(subscribers)))

    @rule()
    def sync(self):
        self.stream.sync()
        self.synced_through = self.records[-1][0] if self.records else 0
        segment = newest_segment(self.directory)
        self.synced_tail = (segment, segment.stat().st_size if segment else 0)

    @rule(subscriber=st.sampled_from(SUBSCRIBERS), after_index=st.integers(min_value=-1, max_value=60),
          count_max=st.integers(min_value=1, max_value=8))
    def read(self, subscriber, after_index, count_max):
        after = self.records[min(after_index, len(self.records) - 1)][0] if after_index >= 0 and self.records else 0
        got = self.stream.read(subscriber, after, count_max)
        assert got.released_through == self.stream.released_through
        expected = self.matches(subscriber, after, self.synced_through)
        if len(expected) > count_max:
            assert got.ticks == tuple(expected[:count_max])
            assert got.through_tick == expected[count_max - 1]
        elif len(expected) == count_max:  # a full buffer may stop at its last match: a later match
            assert got.ticks == tuple(expected)  # not synced yet says nothing of the ticks between
            assert got.through_tick in (expected[-1], max(self.synced_through, after))
        else:
            assert got.ticks == tuple(expected)
            assert got.through_tick == max(self.synced_through, after)
        # Reading on from where a full buffer stopped gives the rest: batches join without loss.
        if got.through_tick < self.synced_through:
            rest = self.stream.read(subscriber, got.through_tick, 10_000)
            assert got.ticks + rest.ticks == tuple(expected)

    @precondition(lambda self: self.records)
    @rule(index=st.integers(min_value=0, max_value=60))
    def chop(self, index):
        self.sync()  # the constream chops below latestDelivered, which the PFS has synced
        tick = self.records[min(index, len(self.records) - 1)][0]
        self.stream.chop(tick)
        self.chopped_at_most = max(self.chopped_at_most, tick)
        assert self.stream.released_through <= self.chopped_at_most

    @rule(keep=st.floats(min_value=0, max_value=1), garbage=st.binary(max_size=40))
    def crash(self, keep, garbage):
        """kill -9 then power loss: unsynced bytes of the newest segment are cut anywhere (torn)."""
        self.stream.close()
        segment = newest_segment(self.directory)
        if segment is not None:
            floor = self.synced_tail[1] if segment == self.synced_tail[0] else 0
            size = segment.stat().st_size
            cut = floor + int((size - floor) * keep)
            with open(segment, "r+b") as f:
                f.truncate(cut)
                if cut < size:
                    f.seek(cut)
                    f.write(garbage)
        self.stream = PfsStream.open(self.directory, segment_bytes_max=SEGMENT_BYTES)
        survived = self.stream.last_timestamp
        assert survived >= self.synced_through  # nothing synced is lost
        self.records = [(t, s) for t, s in self.records if t <= survived]
        self.synced_through = survived
        segment = newest_segment(self.directory)
        self.synced_tail = (segment, segment.stat().st_size if segment else 0)

    @invariant()
    def released_prefix_only(self):
        assert self.stream.released_through <= self.chopped_at_most
        assert self.stream.last_timestamp == self.synced_through


TestPfsAgainstReference = PfsAgainstReference.TestCase
TestPfsAgainstReference.settings = settings(max_examples=100, stateful_step_count=40, deadline=None)


def test_record_payload_round_trip():
    payload = encode_record([(1, 0), (7, 1250), (300, 70_000)])
    assert back_delta_of(payload, 7) == 1250
    assert back_delta_of(payload, 1) == 0
    assert back_delta_of(payload, 2) is None and back_delta_of(payload, 301) is None


def test_paper_figure_2_example(tmp_path):
    """Three subscribers over ticks 1-5: s1 at 1, 3; s2 at 3, 5; s3 at 1, 4; no record at 2."""
    stream = PfsStream.open(tmp_path / "p")
    try:
        for tick, subscribers in [(1, {1, 3}), (3, {1, 2}), (4, {3}), (5, {2})]:
            stream.append(tick, subscribers)
        assert stream.read(3, 0, 100).ticks == ()  # nothing is visible before the sync
        stream.sync()
        got = stream.read(3, 0, 100)
        assert (got.ticks, got.through_tick, got.released_through) == ((1, 4), 5, 0)
        assert stream.read(1, 1, 100).ticks == (3,)
        assert stream.read(2, 5, 100).ticks == ()
        assert stream.read(9, 0, 100).ticks == ()  # never matched: answered from memory
        assert stream.last_timestamp == 5
    finally:
        stream.close()


def test_a_hole_in_a_subscribers_chain_is_an_error(tmp_path):
    """A record that does not point at the one the read saw before it means records went missing."""
    stream = PfsStream.open(tmp_path / "p")
    stream.append(10, {1})
    stream.sync()
    stream.close()
    with EventLog.open(tmp_path / "p") as log:  # the stream's own log, written past the stream
        log.append([(20, encode_record([(1, 5)]))])  # points at 15, which was never written
        log.sync()
    stream = PfsStream.open(tmp_path / "p")
    try:
        stream.append(30, {1})
        stream.sync()
        with pytest.raises(LogCorruptError, match="points at 15"):
            stream.read(1, 0, 100)
    finally:
        stream.close()


def test_bad_appends_are_refused(tmp_path):
    stream = PfsStream.open(tmp_path / "p")
    try:
        with pytest.raises(ValueError, match="at least one"):
            stream.append(1, [])
        with pytest.raises(ValueError, match="ids in"):
            stream.append(1, [-1])
    finally:
        stream.close()


def test_volume_keeps_one_stream_per_pubend_across_reopen(tmp_path):
    with Pfs.open(tmp_path / "pfs") as pfs:
        for pubend, tick in [("a" * 32, 100), ("b/ü", 200)]:
            pfs.stream(pubend).append(tick, {7})
            pfs.stream(pubend).sync()
    (tmp_path / "pfs" / "not-a-stream").mkdir()
    with Pfs.open(tmp_path / "pfs") as pfs:
        assert pfs.pubends() == ["a" * 32, "b/ü"]
        assert pfs.stream("b/ü").read(7, 0, 10).ticks == (200,)
        assert pfs.stream("a" * 32).read(7, 0, 10).ticks == (100,)


def test_chop_removes_whole_files_and_bounds_memory(tmp_path):
    stream = PfsStream.open(tmp_path / "p", segment_bytes_max=SEGMENT_BYTES)
    try:
        for tick in range(1, 201):
            stream.append(tick, {tick % 3} if tick <= 100 else {0})
        stream.sync()
        files = len(os.listdir(stream.directory))
        assert stream.subscriber_count == 3
        assert stream.chop(150) > 0
        assert 100 <= stream.released_through <= 150
        assert len(os.listdir(stream.directory)) < files
        assert stream.subscriber_count == 1  # subscribers 1 and 2 matched nothing still retained
        got = stream.read(1, 0, 100)
        assert got.ticks == () and got.released_through >= 100
        assert stream.read(0, 150, 1000).ticks == tuple(range(151, 201))
    finally:
        stream.close()
