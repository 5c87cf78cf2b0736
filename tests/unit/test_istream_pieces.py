"""A consumer's pieces: a run of D ticks taken into a piece at once is what taking it tick by tick
gives (the same pieces, the same forgotten ticks), whatever the limits and the cache dropped."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tidings.core.reliability import istream
from tidings.core.reliability.istream import Istream, StreamLimits


def pieces(bulk_min: int, limits: StreamLimits, messages: list[tuple[int, list[int]]], start: int,
           drop: list[int]) -> tuple[list[tuple[int, int, list[int], list[bytes], bool]], int, int]:
    saved, istream.BULK_TICKS_MIN = istream.BULK_TICKS_MIN, bulk_min
    try:
        ist = Istream("t", "p", 0, limits)
        child = ist.attach("child:1", 0, start)
        after = 0
        for through, ticks in messages:
            ist.accumulate(after, through, ticks, [b"r%d" % t * (1 + t % 3) for t in ticks])
            after = through
        for tick in drop:  # records the cache lost (bounded), as the loop and the bulk path must see them
            ist._cache.pop(tick, None)
        out = [(p.after, p.through, p.ticks, p.records, p.lost) for p in ist.pieces_for(child)]
        return out, child.sent_through, ist.horizon
    finally:
        istream.BULK_TICKS_MIN = saved


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
    limits = StreamLimits(cache_bytes_max=1 << 20, nack_ranges_max=8, nack_range_ticks_max=1000,
                          piece_bytes_max=piece_bytes)
    assert pieces(1, limits, messages, start, drop) == pieces(10**9, limits, messages, start, drop)
