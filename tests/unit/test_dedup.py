"""The dedup window (core/publish/dedup.py) against the plain reference in dedup_reference.py, and the
screening of one idempotent PUBLISH."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.dedup_reference import ReferenceWindow
from tidings.core.errors import EventError
from tidings.core.publish.dedup import PRODUCER_BYTES_MAX, DedupWindow, Verdict, decode_key, encode_key
from tidings.core.session.client_session import ClientSession

# (producer, pseq, tick step, clock step): publish one event, or ("", 0, 0, step) just to let time pass
OPS = st.lists(st.tuples(st.sampled_from(["a", "b", "c", "d", ""]), st.integers(0, 12),
                         st.sampled_from([1, 1, 1, 2, 5]), st.integers(0, 30)), max_size=120)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(OPS, st.integers(5, 200), st.integers(1, 6), st.integers(1, 4))
def test_window_matches_reference(ops: list[tuple[str, int, int, int]], window: int, entries_max: int,
                                  producers_max: int) -> None:
    machine = DedupWindow(window, entries_max, producers_max)
    ref = ReferenceWindow(window, entries_max, producers_max)
    tick = now = 1000
    logged: list[tuple[int, bytes]] = []
    for producer, pseq, tick_step, clock_step in ops:
        now += clock_step
        machine.advance(now)
        ref.advance(now)
        if producer:
            found = machine.lookup(producer, pseq)
            assert found == ref.lookup(producer, pseq)
            if found is None:
                tick = max(tick + tick_step, now - window + 1)
                machine.remember(producer, pseq, tick)
                ref.remember(producer, pseq, tick)
                logged.append((tick, encode_key(producer, pseq)))
        assert machine.horizon == ref.horizon
        assert machine.entry_count == len(ref.runs()) <= entries_max
        assert machine.producer_count == len(ref.producers()) <= producers_max
    for producer in "abcd":
        for pseq in range(13):
            assert machine.lookup(producer, pseq) == ref.lookup(producer, pseq)
    # a restart replays the log's tail past now - window and rebuilds the same window
    again = DedupWindow(window, entries_max, producers_max)
    again.restore([rec for rec in logged if rec[0] > now - window], now)
    for producer in "abcd":
        for pseq in range(13):
            assert again.lookup(producer, pseq) == machine.lookup(producer, pseq)


def test_a_batch_is_one_entry_and_the_window_is_exact_in_time() -> None:
    w = DedupWindow(window_us=1000, entries_max=10, producers_max=10)
    for k in range(500):
        w.remember("p", 7000 + k, 5000 + k)
    assert w.entry_count == 1
    assert w.lookup("p", 7000) == 5000 and w.lookup("p", 7499) == 5499 and w.lookup("p", 7500) is None
    w.advance(6100)  # ticks <= 5100 are older than the window
    assert w.lookup("p", 7100) is None and w.lookup("p", 7101) == 5101
    w.advance(6600)
    assert w.entry_count == 0 and w.producer_count == 0 and w.horizon == 5600


def test_screen_sorts_out_duplicates_repeats_and_bad_input() -> None:
    w = DedupWindow(window_us=10**9, entries_max=10, producers_max=10)
    w.remember("p", 1, 100)
    ev = ["a/b", {}, b"x"]
    s = w.screen("p", [[*ev, 1], [*ev, 2], [*ev, 2], [*ev, -1], [*ev, "7"], ev, "junk"], now_us=200)
    assert s.verdicts[:3] == [Verdict.DUPLICATE, Verdict.NEW, Verdict.REPEATED]
    assert s.ticks[0] == 100 and s.first_of == {2: 1} and s.events[1] == ev
    assert s.verdicts[3:] == [Verdict.REJECTED] * 4 and sorted(s.problems) == [3, 4, 5, 6]
    for producer in ["", 7, None, "x" * (PRODUCER_BYTES_MAX + 1)]:
        s = w.screen(producer, [[*ev, 1]], now_us=200)
        assert s.verdicts == [Verdict.REJECTED] and "producer id" in str(s.problems[0])


def test_keys_round_trip_and_garbage_is_skipped_on_restore() -> None:
    assert decode_key(encode_key("p", 2**64 - 1)) == ("p", 2**64 - 1)
    assert decode_key(b"\xc1") is None and decode_key(encode_key("p", 1)[:-1]) is None
    w = DedupWindow(window_us=1000, entries_max=10, producers_max=10)
    assert w.restore([(10, b"\xc1"), (11, encode_key("p", 3)), (12, b"")], now_us=500) == 1
    assert w.lookup("p", 3) == 11


def test_a_producer_id_that_is_not_utf8_is_refused_at_the_call() -> None:
    session = ClientSession("svc", "i")
    for producer, seq in (("\ud800", 1), ("p", -1), ("p", True), (None, 1)):
        with pytest.raises(EventError, match="idempotent publish"):
            session.check_event("a/b", b"x", None, producer, seq)
