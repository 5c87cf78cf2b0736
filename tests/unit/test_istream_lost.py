"""L ticks in an input stream: a released range reaches each consumer as a lost piece of its own
(a gap for a subscription), never folded into silence; known ticks are not lost."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tidings.core.reliability.istream import Istream, StreamLimits

LIMITS = StreamLimits(cache_bytes_max=1 << 20, nack_ranges_max=8, nack_range_ticks_max=1000, piece_bytes_max=1 << 20)


def stream() -> Istream:
    return Istream("t", "p", 0, LIMITS)


def test_a_lost_range_is_its_own_piece_between_data():
    ist = stream()
    sub = ist.attach(1, 0)
    ist.accumulate(0, 10, [5], [b"e5"])
    assert ist.lose(10, 20)
    ist.accumulate(20, 30, [25], [b"e25"])
    pieces = ist.pieces_for(sub)
    assert [(p.after, p.through, p.lost, p.ticks) for p in pieces] == [
        (0, 10, False, [5]), (10, 20, True, []), (20, 30, False, [25])]
    assert sub.sent_through == 30 and ist.ack_point() == 30


def test_known_ticks_are_not_lost_and_a_gap_waits_for_knowledge():
    ist = stream()
    sub = ist.attach(1, 0)
    ist.accumulate(0, 10, [5], [b"e5"])
    ist.lose(0, 20)  # 1..10 are known here: only 11..20 are lost
    assert [(p.after, p.through, p.lost) for p in ist.pieces_for(sub)] == [(0, 10, False), (10, 20, True)]
    ist.lose(25, 30)  # 21..25 unknown: a gap, nothing past it yet
    assert ist.pieces_for(sub) == [] and ist.gaps() == [(20, 25)]


def test_ticks_lost_before_a_consumer_starts_are_silence_to_it():
    ist = stream()
    sub = ist.attach(1, 0, start=15)
    ist.lose(0, 20)
    assert [(p.after, p.through, p.lost) for p in ist.pieces_for(sub)] == [(0, 15, False), (15, 20, True)]
    late = ist.attach(2, 0, start=25)
    ist.accumulate(20, 30, [], [])
    assert all(not p.lost for p in ist.pieces_for(late))


@given(st.lists(st.tuples(st.integers(0, 60), st.integers(1, 10), st.booleans()), max_size=12))
def test_every_tick_reaches_a_consumer_once_as_data_silence_or_loss(messages):
    """Whatever order (consistent) knowledge and losses arrive in, the pieces a consumer is sent tile its ticks
    contiguously, every data tick that was not known lost is delivered, and a lost piece holds no data."""
    ist = stream()
    sub = ist.attach(1, 0)
    pieces = []
    data: set[int] = set()
    for after, width, lost in messages:
        through = after + width
        if lost:
            ist.lose(after, through)
        else:  # one truth across messages: the data ticks are the multiples of 3
            ticks = [t for t in range(after + 1, through + 1) if t % 3 == 0]
            ist.accumulate(after, through, ticks, [b"r%d" % t for t in ticks])
            data.update(ticks)
        pieces += ist.pieces_for(sub)
    position = 0
    delivered = set()
    for piece in pieces:
        assert piece.after == position and piece.through > piece.after
        assert not (piece.lost and piece.ticks)
        delivered |= set(piece.ticks)
        position = piece.through
        lost_here = {t for t in data if piece.after < t <= piece.through} if piece.lost else set()
        data -= lost_here
    assert {t for t in data if t <= position} == delivered


def test_a_child_that_left_holds_release_until_it_comes_back_and_acks():
    """A departed child's ghost holds (released, delivered) for the hold time; the same child
    attaching again (its broker restarted) holds 0 until it acks, then its own values count."""
    ist = stream()
    ist.attach("child", 0)
    ist.accumulate(0, 100, [], [])
    ist.acked("child", 100, 40, 60)
    assert ist.release_points(now=0, held=None) == (40, 60)
    ist.detach("child", now=0, hold_ns=1000)
    assert ist.release_points(now=10, held=None) == (40, 60)  # the ghost holds
    ist.attach("child", 100)
    assert ist.release_points(now=20, held=None) == (0, 0)  # back, not acked yet
    ist.acked("child", 100, 90, 100)
    assert ist.release_points(now=30, held=None) == (90, 100)  # no ghost left behind
