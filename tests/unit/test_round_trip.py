"""NRT from nack round trips (TCP's RTO estimate): bounded, and it follows the path it measures."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tidings.core.reliability.round_trip import RoundTrip

MS = 1_000_000


def test_no_sample_gives_the_floor_and_the_first_sample_sets_srtt_and_half_of_it_as_variation():
    rt = RoundTrip()
    assert rt.threshold(300 * MS, 5000 * MS) == 300 * MS
    rt.sample(100 * MS)
    assert (rt.srtt_ns, rt.rttvar_ns) == (100 * MS, 50 * MS)
    assert rt.threshold(0, 5000 * MS) == 300 * MS  # srtt + 4 * rttvar


def test_a_steady_round_trip_brings_the_threshold_down_to_it():
    rt = RoundTrip()
    rt.sample(400 * MS)
    for _ in range(60):
        rt.sample(20 * MS)
    assert 20 * MS <= rt.threshold(0, 10_000 * MS) < 30 * MS


@given(st.lists(st.integers(-10, 10**11), min_size=1, max_size=50), st.integers(0, 10**9),
       st.integers(0, 10**10))
def test_the_threshold_stays_between_its_floor_and_ceiling(samples, floor, extra):
    rt = RoundTrip()
    for s in samples:
        rt.sample(s)
    assert floor <= rt.threshold(floor, floor + extra) <= floor + extra
