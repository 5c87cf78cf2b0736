"""The reliability node's smaller machines through their public interfaces: ack batching
(acks.py), the total-order merge (merge.py) and a tree's interest, the filter-summary epoch
protocol (interest.py)."""

from __future__ import annotations

from typing import Any

import msgpack

from tidings.core.reliability.acks import AckBatcher
from tidings.core.reliability.effects import DeliverRecords, Lost
from tidings.core.reliability.interest import Interest, SendSummary
from tidings.core.reliability.istream import Istream, StreamLimits
from tidings.core.reliability.merge import TotalOrderMerge
from tidings.core.reliability.messages import ACK_ENTRIES_MAX, SummaryUpdate
from tidings.core.reliability.summary import EVERYTHING, of_subscription
from tidings.core.reliability.ticks import TICK_MAX

TREE = "nodes/#"
LIMITS = StreamLimits(cache_bytes_max=1 << 20, nack_ranges_max=64, nack_range_ticks_max=1_000, piece_bytes_max=1 << 20)
GCT = 100


def record(pubend: str, tick: int, channel: str = "nodes/a", **attributes: Any) -> bytes:
    return msgpack.packb([pubend, tick, channel, attributes, "s", "i", f"e{tick}".encode()])


def stream(pubend: str, data: dict[int, bytes], through: int, key: int = 1) -> Istream:
    """A stream of `pubend` knowing (0, through], D at `data`, with local subscription `key` at 0."""
    ist = Istream(TREE, pubend, 0, LIMITS)
    ist.attach(key, 0)
    ticks = sorted(data)
    ist.accumulate(0, through, ticks, [data[t] for t in ticks])
    return ist


# ---- ack batching ------------------------------------------------------------------------------

def test_acks_leave_one_message_per_upstream_in_the_order_asked() -> None:
    acks = AckBatcher()
    assert not acks and acks.drain() == []
    acks.ack("up1", "a/#", "p1", 10, 5, 7)
    acks.ack("up2", "b/#", "p1", 3, 3, 3)
    acks.ack("up1", "c/#", "p2", 20, 0, 0)
    assert acks
    sends = acks.drain()
    assert [(s.address, [(e.tree, e.through) for e in s.message.streams]) for s in sends] == [
        ("up1", [("a/#", 10), ("c/#", 20)]), ("up2", [("b/#", 3)])]
    assert not acks and acks.drain() == []
    assert acks.next_deadline() is None and acks.handle_timeout(0) == []


def test_a_long_ack_is_split_at_the_entry_limit() -> None:
    acks = AckBatcher()
    for i in range(ACK_ENTRIES_MAX + 3):
        acks.ack("up", f"t{i}", "p", i, i, i)
    sends = acks.drain()
    assert [len(s.message.streams) for s in sends] == [ACK_ENTRIES_MAX, 3]
    assert [e.tree for s in sends for e in s.message.streams] == [f"t{i}" for i in range(ACK_ENTRIES_MAX + 3)]


# ---- the total-order merge ---------------------------------------------------------------------

def test_the_merge_delivers_every_stream_in_tick_then_pubend_order_up_to_the_smallest_horizon() -> None:
    merge = TotalOrderMerge(clock_skew_allowance_us=0)
    a = stream("pa", {2: record("pa", 2), 5: record("pa", 5), 9: record("pa", 9)}, 10)
    b = stream("pb", {2: record("pb", 2), 3: record("pb", 3)}, 6)
    total = {1: 0}
    out = merge.merge(total, {"pa": a, "pb": b}, wall_us=0)
    assert len(out) == 1 and type(out[0]) is DeliverRecords
    assert [(p, msgpack.unpackb(r)[1]) for p, r in zip(out[0].pubends, out[0].records, strict=True)] == [
        ("pa", 2), ("pb", 2), ("pb", 3), ("pa", 5)]  # up to 6, pb's horizon: pa's 9 and pb's 7 wait
    assert total == {1: 5} and merge.late == 0
    b.accumulate(6, 12, [7], [record("pb", 7)])
    out = merge.merge(total, {"pa": a, "pb": b}, wall_us=0)
    assert [msgpack.unpackb(r)[1] for r in out[0].records] == [7, 9]
    assert merge.next_deadline() is None and merge.handle_timeout(0) == []


def test_the_merge_waits_for_the_present_less_the_clock_skew_allowance() -> None:
    merge = TotalOrderMerge(clock_skew_allowance_us=100)
    a = stream("pa", {150: record("pa", 150), 250: record("pa", 250)}, 300)
    total = {1: 0}
    out = merge.merge(total, {"pa": a}, wall_us=300)  # the present less the allowance: 200
    assert [msgpack.unpackb(r)[1] for r in out[0].records] == [150]
    assert merge.merge(total, {"pa": a}, wall_us=300) == []


def test_a_stream_heard_of_after_the_merge_point_passed_is_delivered_late_and_counted() -> None:
    merge = TotalOrderMerge(clock_skew_allowance_us=0)
    total = {1: 0}
    merge.merge(total, {"pa": stream("pa", {8: record("pa", 8)}, 10)}, wall_us=0)
    late = stream("pb", {4: record("pb", 4)}, 10)
    out = merge.merge(total, {"pa": stream("pa", {}, 10), "pb": late}, wall_us=0)
    assert [msgpack.unpackb(r)[1] for r in out[0].records] == [4] and merge.late == 1
    assert total == {1: 8}  # the merge point never goes back


def test_released_ticks_are_lost_for_the_merge_too() -> None:
    merge = TotalOrderMerge(clock_skew_allowance_us=0)
    a = Istream(TREE, "pa", 0, LIMITS)
    a.attach(1, 0)
    a.lose(0, 5)
    out = merge.merge({1: 0}, {"pa": a}, wall_us=0)
    assert out == [Lost(TREE, (1,), "pa", 0, 5)]


# ---- a tree's interest -------------------------------------------------------------------------

def narrow() -> Any:
    return of_subscription("nodes/a/#", "", 64 * 1024)


def wide() -> Any:
    return of_subscription("nodes/#", "", 64 * 1024)


def test_the_join_carries_the_interest_with_a_new_epoch_when_it_changed() -> None:
    interest = Interest(TREE, 64 * 1024, GCT)
    epoch, summary = interest.for_join(narrow(), wall_us=1_000)
    assert epoch == 1_000 and summary == [["nodes/a/#", ""]]  # epochs start from the clock
    assert interest.for_join(narrow(), wall_us=5) == [1_000, [["nodes/a/#", ""]]]  # unchanged: same epoch
    assert interest.for_join(wide(), wall_us=5)[0] == 1_001  # and only grow


def test_a_narrowing_is_told_to_the_parent_at_once_and_doubts_nothing() -> None:
    interest = Interest(TREE, 64 * 1024, GCT)
    ist = stream("p", {}, 10)
    sends = interest.resummarize(narrow(), False, "parent", {"p": ist}, {}, TICK_MAX, wall_us=0)
    assert [(s.address, s.message.summary, s.message.since) for s in sends] == [("parent", narrow(), TICK_MAX)]
    assert ist.horizon == 10 and interest.sent == narrow()
    assert interest.resummarize(narrow(), False, "parent", {"p": ist}, {}, TICK_MAX, wall_us=0) == []


def test_a_widening_doubts_the_silence_after_the_new_consumers_position_and_asks_from_there() -> None:
    interest = Interest(TREE, 64 * 1024, GCT)
    ist = stream("p", {}, 10)
    interest.resummarize(narrow(), False, "parent", {"p": ist}, {}, TICK_MAX, wall_us=0)
    sends = interest.resummarize(wide(), False, "parent", {"p": ist}, {"p": 4}, 4, wall_us=0)
    assert [(s.message.summary, s.message.since) for s in sends] == [(wide(), 4)]
    assert ist.horizon == 4 and interest.valid_from == 4  # (4, 10] is fetched again
    assert interest.sent == wide()


def test_the_root_tells_nobody_but_doubts_on_a_widening() -> None:
    interest = Interest(TREE, 64 * 1024, GCT)
    ist = stream("p", {}, 10)
    interest.resummarize(narrow(), False, "parent", {"p": ist}, {}, TICK_MAX, wall_us=0)
    assert interest.resummarize(wide(), True, None, {"p": ist}, {"p": 6}, 6, wall_us=0) == []
    assert ist.horizon == 6


def test_a_stale_stamp_sends_the_summary_again_at_most_once_per_gct() -> None:
    interest = Interest(TREE, 64 * 1024, GCT)
    ist = stream("p", {}, 10)
    first = interest.stale_stamp(0, "parent", stamp=41, istreams={"p": ist})
    assert first == [SendSummary("parent", SummaryUpdate(TREE, 42, EVERYTHING, 10))]
    assert interest.stale_stamp(GCT - 1, "parent", 41, {"p": ist}) == []
    assert interest.stale_stamp(GCT, "parent", 41, {"p": ist})


def test_a_childs_summary_filters_from_its_epoch_on_and_a_widening_rewinds_it() -> None:
    interest = Interest(TREE, 64 * 1024, GCT)
    ist = stream("p", {}, 10)
    ist.attach("c", 10)
    interest.child_joined("c", (5, narrow()))
    assert interest.filter_for("c") == (5, narrow()) and interest.filter_for("other") == (None, EVERYTHING)
    assert interest.child_summary("c", SummaryUpdate(TREE, 5, wide(), 3), {"p": ist}) is None  # stale epoch
    grown = interest.child_summary("c", SummaryUpdate(TREE, 6, wide(), 3), {"p": ist})
    assert grown == ({"p": 3}, 3) and ist.consumers["c"].sent_through == 3
    assert interest.child_summary("c", SummaryUpdate(TREE, 7, wide(), 0), {"p": ist}) == ({}, TICK_MAX)  # not wider
    assert interest.wanted(["c"]) == wide() and interest.wanted([]) != wide()
    interest.child_left("c")
    assert interest.wanted(["c"]) is EVERYTHING


def test_the_unwanted_records_are_those_no_summary_matches() -> None:
    interest = Interest(TREE, 64 * 1024, GCT)
    records = [record("p", 1, "nodes/a/x"), record("p", 2, "nodes/b/x"), record("p", 3, "nodes/b/y")]
    interest.own_added(narrow())
    assert interest.unwanted(records, []) == 2
    interest.own_added(EVERYTHING)
    assert interest.unwanted(records, []) == 0
    interest.own_removed(EVERYTHING)
    interest.own_removed(narrow())
    interest.child_joined("c", (5, narrow()))
    assert interest.unwanted(records, ["c"]) == 2  # the children's summaries count too
    interest.own_added(narrow())
    assert interest.unwanted(records, ["other"]) == 0  # a child that sent none wants everything
    assert interest.next_deadline() is None and interest.handle_timeout(0) == []


def test_a_stream_settles_in_one_call_an_ack_only_when_it_tells_something_new() -> None:
    """Istream.settle: the ack to send once the consumers were served (none without an upstream,
    none twice), then the cache bounded and the served prefix made the floor."""
    ist = stream("p", {1: record("p", 1), 2: record("p", 2)}, 5)
    assert ist.settle(0, None) is None  # no upstream yet: nothing to acknowledge to
    ist.upstream = "parent:1"
    consumer = ist.consumers[1]
    assert ist.settle(0, None) == (0, 0, 0)  # the first ack tells the release points, though nothing was served
    assert ist.settle(0, None) is None  # nothing new
    assert [p.ticks for p in ist.pieces_for(consumer)] == [[1, 2]]
    assert ist.settle(0, None) == (5, 5, 5) and ist.acked_sent == 5
    assert ist.settle(0, None) is None  # told already
    assert ist.cached() == [] and ist.floor == 5  # nobody needs the records, nor the prefix
    assert ist.settle(0, 3) == (5, 3, 5)  # this broker's durable subscriptions released less: news
