"""A complete nack (messages.Nack.complete): a child that names every tick of its span it lacks has
a forwarder fetch and send only those, whatever it had let go; and the silence that leaves at the
forwarder is never sent to a child, nor trusted by another consumer."""

from __future__ import annotations

from typing import Any

from tests.unit.test_gap_curiosity import MS, first_nack, past_stream
from tests.unit.test_reliability_filtering import PUBEND, TREE, knowledge, node, record, sent_to
from tidings.core.config import BrokerConfig
from tidings.core.reliability import messages
from tidings.core.reliability.consumers import Consumer
from tidings.core.reliability.curiosity import complete, named_whole
from tidings.core.reliability.pieces import Piece
from tidings.core.reliability.sparse import SparseSilence

COMPLETE = BrokerConfig(nack_complete=True)  # (the default, said here: these tests are about it)
ASKED = ((600, 601), (800, 801))  # a PFS catchup's sparse nack: two matching ticks of 600..1000


def answer(gd: Any, now: int, ranges: tuple[tuple[int, int], ...]) -> list[Any]:
    """The parent answers `ranges` as the pubend does: retransmitted knowledge of each, D at its last tick."""
    out = []
    for after, through in ranges:
        wire = messages.KnowledgeMessage(TREE, PUBEND, after, through, (through,), (record(through, "nodes/a"),),
                                         True, None).to_wire()
        out += gd.event_arrived(now, TREE, ["origin", wire], "parent")
    return out


def test_a_forwarder_fetches_exactly_the_ranges_a_complete_nack_names() -> None:
    gd = past_stream(["c"], COMPLETE)  # its floor is 1000: it kept nothing of 600..1000
    out = gd.received(5 * MS, "c", messages.Nack(TREE, PUBEND, ASKED, complete=True).to_wire())
    got = first_nack(gd, out, 10_000 * MS)
    assert got is not None and got[0] <= 5 * MS  # at once, as any nack below the floor
    assert got[1].ranges == ASKED and got[1].complete  # and only those: its own nack is complete too


def test_a_nack_that_is_not_complete_has_the_forwarder_fetch_its_whole_span_as_before() -> None:
    gd = past_stream(["c"], COMPLETE)
    out = gd.received(5 * MS, "c", messages.Nack(TREE, PUBEND, ASKED).to_wire())
    got = first_nack(gd, out, 10_000 * MS)
    assert got is not None and (got[1].ranges[0][0], got[1].ranges[-1][1]) == (600, 1000)
    assert sum(hi - lo for lo, hi in got[1].ranges) == 400


def test_the_child_is_sent_the_ranges_and_never_the_silence_they_left_at_the_forwarder() -> None:
    gd = past_stream(["c"], COMPLETE)
    gd.received(5 * MS, "c", messages.Nack(TREE, PUBEND, ASKED, complete=True).to_wire())
    sent = sent_to(answer(gd, 6 * MS, ASKED), "c")
    assert [t for m in sent for t in m.ticks] == [601, 801]
    assert [(m.after, m.through) for m in sent] == list(ASKED)  # the rest of the span it knows: not sent


def test_another_consumer_that_wants_the_ticks_doubts_that_silence_and_they_are_fetched() -> None:
    gd = past_stream(["c", "d"], COMPLETE)
    gd.received(5 * MS, "c", messages.Nack(TREE, PUBEND, ASKED, complete=True).to_wire())
    answer(gd, 6 * MS, ASKED)
    assert gd.trees[TREE].istreams[PUBEND].horizon >= 1000  # 600..1000 is known here (for c)
    out = gd.received(7 * MS, "d", messages.Nack(TREE, PUBEND, ((650, 1000),)).to_wire())  # d lacks all of it
    got = first_nack(gd, out, 10_000 * MS)
    assert got is not None
    asked = got[1].ranges
    assert all(any(lo < t <= hi for lo, hi in asked) for t in (651, 700, 800, 999))  # not 801: it is known


def test_a_nack_is_complete_when_it_names_every_gap_of_its_span() -> None:
    gaps = [(0, 5), (7, 8), (10, 20), (30, 40)]
    assert complete(gaps, [(0, 5), (7, 8), (10, 20)])
    assert complete(gaps, [(10, 20), (30, 40)])  # (the span starts at the first range named)
    assert not complete(gaps, [(0, 5), (10, 20)])  # 7..8 was asked for before and left out


def test_a_complete_nack_never_ends_inside_an_unknown_run_it_could_not_name_whole() -> None:
    gaps = [(0, 5), (10, 20), (20, 30)]  # (10, 30] chopped in two, and it goes on past 30
    assert named_whole(gaps, cut=True) == ([(0, 5)], True)  # left to the next nack
    assert named_whole(gaps[1:], cut=True) == (gaps[1:], False)  # first: nacked plain
    assert named_whole(gaps, cut=False) == (gaps, True)


def test_a_subscription_from_tick_0_nacks_its_long_absence_plain() -> None:
    """A forwarder answers a complete nack with exactly its ranges (64 of at most 60 s of ticks):
    ~1.7e15 ticks unknown from a subscription from tick 0 would take ~470,000 round trips (the PLDB
    demo's stall, docs/delivery.md). The run is nacked plain: the forwarder sends all after its start."""
    width, far = BrokerConfig().nack_range_ticks_max, 1_700_000_000_000_000
    gd, _ = node("f", "parent", [], config=COMPLETE)
    gd.local_subscribe(0, 1, TREE, 0)
    gd.event_arrived(1 * MS, TREE, knowledge(far, far + 10, {}, None), "parent")
    got = first_nack(gd, [], 1_000 * MS)
    assert got is not None and not got[1].complete
    assert got[1].ranges[0] == (0, width) and len(got[1].ranges) == BrokerConfig().nack_ranges_max
    gd, _ = node("f", "parent", [], config=COMPLETE)  # a gap before the long run: complete, without the run
    gd.local_subscribe(0, 1, TREE, 0)
    gd.event_arrived(1 * MS, TREE, knowledge(0, 10, {}, None), "parent")
    gd.event_arrived(1 * MS, TREE, knowledge(20, 30, {}, None), "parent")
    gd.event_arrived(1 * MS, TREE, knowledge(far, far + 10, {}, None), "parent")
    got = first_nack(gd, [], 1_000 * MS)
    assert got is not None and got[1].complete and got[1].ranges == ((10, 20),)


def test_a_stream_with_more_gaps_than_a_nack_names_asks_for_the_rest_once_the_first_are_answered() -> None:
    gd, _ = node("f", "parent", [], config=COMPLETE)
    gd.local_subscribe(0, 1, TREE, 0)
    holes = [10 * k for k in range(1, BrokerConfig().nack_ranges_max + 4)]  # one unknown tick in each ten
    after = 0
    for hole in holes:
        gd.event_arrived(1 * MS, TREE, knowledge(after, hole - 1, {}, None), "parent")
        after = hole
    gd.event_arrived(1 * MS, TREE, knowledge(after, after + 5, {}, None), "parent")
    got = first_nack(gd, [], 1_000 * MS)
    assert got is not None
    when, first = got
    named = [hi for _, hi in first.ranges]
    assert first.complete and named == holes[:len(first.ranges)] and len(named) < len(holes)
    out = answer(gd, when + 1 * MS, first.ranges)  # answered: the rest is asked for at once, not after NRT
    rest = first_nack(gd, out, when + 1 * MS + BrokerConfig().nack_repeat_ns_min - 1)
    assert rest is not None and [hi for _, hi in rest[1].ranges] == holes[len(named):] and rest[1].complete


def test_holes_cut_pieces_around_the_marked_silence() -> None:
    sparse = SparseSilence()
    sparse.mark([(10, 20), (30, 40)])
    pieces = [Piece(0, 25, [5, 21], [b"a", b"b"]), Piece(25, 50, [45], [b"c"]), Piece(50, 60, [], [], True),
              Piece(60, 70, [65], [b"d"])]
    assert [(p.after, p.through, p.ticks) for p in sparse.holes(pieces)] == [
        (0, 10, [5]), (20, 25, [21]), (25, 30, []), (40, 50, [45]), (50, 60, []), (60, 70, [65])]
    assert SparseSilence().holes(pieces) == pieces


def test_a_second_complete_nack_keeps_what_the_first_asked_for_past_it() -> None:
    consumer = Consumer("c", 0, 1000, 1000)
    consumer.ask(((600, 601), (800, 801), (900, 901)))
    consumer.sent_through = 700  # (600, 601] sent, then the rest of the way to 700
    consumer.ask(((600, 601), (650, 651)))
    assert consumer.asked == ((600, 601), (650, 651), (800, 801), (900, 901))
    assert (consumer.sent_through, consumer.asked_through) == (600, 1000)


def test_a_parent_whose_link_speaks_an_older_version_is_sent_the_nack_without_complete() -> None:
    """A broker of peer protocol version 1 refuses a five-element NACK as malformed and closes the
    link: a nack says it is complete only to a parent whose link speaks COMPLETE_NACKS (wire/peer.py)."""
    for takes, expected in ((True, True), (False, False)):
        asked: list[str] = []
        gd, _ = node("f", "parent", [], config=COMPLETE,
                     takes_complete=lambda address, takes=takes, asked=asked: asked.append(address) is None and takes)
        gd.local_subscribe(0, 1, TREE, 0)
        gd.event_arrived(1 * MS, TREE, knowledge(0, 10, {}, None), "parent")
        gd.event_arrived(1 * MS, TREE, knowledge(20, 30, {}, None), "parent")  # (10, 20] never came
        got = first_nack(gd, [], 1_000 * MS)
        assert got is not None and got[1].ranges == ((10, 20),) and got[1].complete is expected
        assert len(got[1].to_wire()) == (5 if expected else 4) and asked == ["parent"]
