"""A consumer's pieces: a run of D ticks taken into a piece at once is what taking it tick by tick
gives (the same pieces, stopping before the same dropped record), whatever the limits and the
cache dropped."""

from __future__ import annotations

from collections import OrderedDict

from hypothesis import example, given, settings
from hypothesis import strategies as st

from tidings.core.reliability import pieces
from tidings.core.reliability.istream import KNOWN, Istream, StreamLimits
from tidings.core.reliability.ticks import KnowledgeMap


def cut(bulk_min: int, piece_bytes: int, messages: list[tuple[int, list[int]]], start: int,
        drop: list[int]) -> tuple[list[tuple[int, int, list[int], list[bytes], bool]], int | None]:
    """A consumer's pieces of what `messages` made known, its records but those of `drop` (which
    a bounded cache lost), and the first tick the cut stopped before."""
    saved, pieces.BULK_TICKS_MIN = pieces.BULK_TICKS_MIN, bulk_min
    try:
        known, records, after = KnowledgeMap(), {}, 0
        for through, ticks in messages:
            known.accumulate(after, through, ticks)
            records.update((t, b"r%d" % t * (1 + t % 3)) for t in ticks)
            after = through
        for tick in drop:
            records.pop(tick, None)
        out, dropped = pieces.cut(known.runs(0, known.prefix_end(0, KNOWN)), records, 0, start, piece_bytes)
        return [(p.after, p.through, p.ticks, p.records, p.lost) for p in out], dropped
    finally:
        pieces.BULK_TICKS_MIN = saved


@st.composite
def bursts(draw):
    messages, tick = [], 0
    for _ in range(draw(st.integers(1, 4))):
        ticks = []
        for gap, length in draw(st.lists(st.tuples(st.integers(0, 4), st.integers(1, 30)), max_size=4)):
            ticks += range(tick + gap + 1, tick + gap + 1 + length)
            tick = ticks[-1]
        tick += draw(st.integers(0 if ticks else 1, 3))
        messages.append((tick, ticks))
    return messages


@settings(max_examples=300)
@given(bursts(), st.integers(0, 40), st.integers(4, 400), st.lists(st.integers(1, 200), max_size=3))
def test_a_run_taken_whole_is_what_tick_by_tick_gives(messages, start, piece_bytes, drop):
    assert cut(1, piece_bytes, messages, start, drop) == cut(10**9, piece_bytes, messages, start, drop)


def dropped_by_the_old_loop(cache: OrderedDict[int, bytes], wanted: int, size_max: int) -> list[int]:
    """Istream.bound_cache as it was, one record at a time from the oldest: the reference."""
    cache, size = OrderedDict(cache), sum(map(len, cache.values()))
    while cache:
        oldest, record = cache.popitem(last=False)
        if oldest > wanted and size <= size_max:
            cache[oldest] = record
            cache.move_to_end(oldest, last=False)
            break
        size -= len(record)
    return list(cache)


@settings(max_examples=200)
@given(bursts(), st.lists(st.integers(0, 400), min_size=1, max_size=4), st.integers(0, 200), st.integers(0, 60),
       st.integers(50, 5000))
@example(messages=[(50, list(range(1, 51)))], acks=[30], first_ack=30, resent_from=10, size_max=5000)  # the
# newest record (30, resent) is acked, older ones behind it (31..50) are not: the cache must not empty
def test_an_ack_empties_the_cache_as_the_record_by_record_loop_did(messages, acks, first_ack, resent_from, size_max):
    """Whether the child acked all (the cache empties at once) or part, and after a retransmission
    appended older ticks behind newer ones, under byte pressure or not."""
    limits = StreamLimits(cache_bytes_max=size_max, nack_ranges_max=8, nack_range_ticks_max=1000,
                          piece_bytes_max=1 << 20)
    ist = Istream("t", "p", 0, limits)
    child = ist.attach("child:1", 0)
    after = 0
    for through, ticks in messages:
        ist.accumulate(after, through, ticks, [b"r%d" % t for t in ticks])
        after = through
    ist.pieces_for(child)
    ist.acked("child:1", min(first_ack, child.sent_through), 0, 0)  # what is above stays cached
    resent_from = min(resent_from, first_ack, after)
    ist.rewind("child:1", resent_from)  # a nack: what it lacks comes again, behind what is cached
    resent = [t for _, ticks in messages for t in ticks if t > resent_from]
    ist.accumulate(resent_from, after, resent, [b"r%d" % t for t in resent])
    ist.pieces_for(child)
    for ack in sorted(acks):
        before = OrderedDict(ist.cached())
        ist.acked("child:1", ack, 0, 0)
        if ack > resent_from:  # (an ack at or below what it had acked changes nothing)
            wanted = min(child.sent_through, child.acked_through)
            assert [tick for tick, _ in ist.cached()] == dropped_by_the_old_loop(before, wanted, size_max)
        assert ist.cache_bytes == sum(len(record) for _, record in ist.cached())


def _pieces_as_tuples(out: list[pieces.Piece]) -> list[tuple[int, int, list[int], list[bytes], bool]]:
    return [(p.after, p.through, list(p.ticks), list(p.records), p.lost) for p in out]


@settings(max_examples=300)
@given(bursts(), st.lists(st.integers(0, 3), max_size=6), st.integers(0, 40), st.integers(4, 400),
       st.lists(st.integers(0, 60), max_size=3))
def test_knowledge_passed_through_as_it_came_is_what_a_cut_gives(messages, order, start, piece_bytes, rewinds):
    """A consumer sent the knowledge that just arrived whole (`Istream._arrival`) gets the pieces
    the cut from the stream's map and cache gives, whatever arrives in which order, repeated or
    not, whatever the consumer's start, the piece bound and the nacks that send it back."""
    ranges, after = [], 0
    for through, ticks in messages:
        ranges.append((after, through, ticks))
        after = through
    arrivals = list(ranges)  # first-time news in order, then some again or out of order
    for k in order:
        if k < len(ranges):
            arrivals.insert(min(k, len(arrivals)), ranges[-1 - k])
    limits = StreamLimits(cache_bytes_max=1 << 20, nack_ranges_max=8, nack_range_ticks_max=1000,
                          piece_bytes_max=piece_bytes)
    passing, cutting = Istream("t", "p", 0, limits), Istream("t", "p", 0, limits)
    consumers = [ist.attach("child:1", 0, start) for ist in (passing, cutting)]
    for step, (lo, hi, ticks) in enumerate(arrivals):
        records = [b"r%d" % t * (1 + t % 3) for t in ticks]
        for ist in (passing, cutting):
            ist.accumulate(lo, hi, tuple(ticks), tuple(records))
            if step < len(rewinds):
                ist.rewind("child:1", min(rewinds[step], consumers[0].sent_through))
        cutting._arrival = None  # the tick-by-tick cut, always
        assert (_pieces_as_tuples(passing.pieces_for(consumers[0]))
                == _pieces_as_tuples(cutting.pieces_for(consumers[1])))
        assert consumers[0].sent_through == consumers[1].sent_through
        for ist in (passing, cutting):
            ist.settle(step, None)
