"""Flow control of the pubend's first-time knowledge (core/reliability/flow_window.py): a window of
record bytes beyond the root's ACK, held messages released in order by ACKs, a stalled root's
window opened by its deadline, the hold bounded; and the source sending no silence past a hold."""

from __future__ import annotations

from dataclasses import replace

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidings.core.deadlines import Alarm
from tidings.core.effects import ReadLog
from tidings.core.inputs import LogState
from tidings.core.reliability.flow_window import (
    HELD,
    OPEN,
    STALLED,
    FlowLimits,
    FlowWindows,
    ReadBack,
    record_bytes,
)
from tidings.core.reliability.messages import KnowledgeMessage
from tidings.core.reliability.source import PublishOnTree, Source, SourceConfig
from tidings.core.states import ForbiddenTransition

from .core_harness import as_batches

LIMITS = FlowLimits(window_bytes=100, hold_bytes_max=1000, stall_ns=50)


def message(after: int, through: int, size: int, tree: str = "t") -> PublishOnTree:
    records = (b"x" * size,) if size else ()
    ticks = (through,) if size else ()
    return PublishOnTree(tree, "me:1", KnowledgeMessage(tree, "p", after, through, ticks, records, False))


def ranges(messages: list[PublishOnTree]) -> list[tuple[int, int]]:
    return [(m.message.after, m.message.through) for m in messages]


def test_messages_beyond_the_window_wait_for_the_roots_ack_in_order():
    flow = FlowWindows(LIMITS)
    first = [message(0, 1, 60), message(1, 2, 60), message(2, 3, 10), message(3, 4, 10)]
    out = flow.offer(0, "t", first)
    assert ranges(out) == [(0, 1), (1, 2)]  # 120 bytes: the window (100) plus one message
    assert flow.holding("t") and flow.window("t").state == HELD and flow.holds == 1
    assert ranges(flow.offer(1, "t", [message(4, 5, 10)])) == []  # behind the held ones, though small
    assert ranges(flow.acked(2, "t", 1)) == [(2, 3), (3, 4), (4, 5)]  # 60 + 30 in flight after the ack
    assert flow.window("t").state == OPEN and not flow.holding("t") and flow.next_deadline() is None
    assert flow.acked(3, "t", 1) == []  # no news


def test_a_window_whose_root_stops_acknowledging_sends_everything_after_its_deadline_and_paces_again_on_an_ack():
    flow = FlowWindows(LIMITS)
    flow.offer(0, "t", [message(0, 1, 200)])
    assert ranges(flow.offer(10, "t", [message(1, 2, 10), message(2, 3, 10)])) == []
    assert flow.next_deadline() == 60  # held at 10: the root's ACKs may stop for stall_ns
    assert flow.acked(30, "t", 0) == [] and flow.next_deadline() == 80  # it moved, but made no room
    assert flow.acked(40, "t", 0) == [] and flow.next_deadline() == 80  # no news: not rearmed
    assert flow.handle_timeout(79) == []
    assert ranges(flow.handle_timeout(80)) == [(1, 2), (2, 3)]
    assert flow.window("t").state == STALLED and flow.stalls == 1
    assert ranges(flow.offer(61, "t", [message(3, 4, 500)])) == [(3, 4)]  # stalled: unpaced
    assert flow.acked(70, "t", 2) == [] and flow.window("t").state == OPEN  # it hears again
    assert ranges(flow.offer(71, "t", [message(4, 5, 1)])) == []  # 500 still in flight: paced
    assert ranges(flow.acked(72, "t", 4)) == [(4, 5)]


def test_an_ack_that_moves_rearms_the_stall_deadline():
    flow = FlowWindows(LIMITS)
    flow.offer(0, "t", [message(0, 1, 100), message(1, 2, 100), message(2, 3, 100)])
    assert flow.next_deadline() == 50
    assert ranges(flow.acked(40, "t", 1)) == [(1, 2)]
    assert flow.next_deadline() == 90 and flow.handle_timeout(50) == []


def test_past_the_hold_the_newest_are_spilled_and_read_back_from_the_log_in_order():
    flow = FlowWindows(replace(LIMITS, hold_bytes_max=150))
    flow.offer(0, "t", [message(0, 1, 100)])
    assert flow.offer(1, "t", [message(1, 2, 100), message(2, 3, 100), message(3, 4, 100)]) == []
    window = flow.window("t")
    assert ranges(list(window.held)) == [(1, 2)] and window.spill == (2, 4) and flow.spills == 2
    assert flow.offer(2, "t", [message(4, 5, 1)]) == [] and window.spill == (2, 5)  # behind the spill
    assert ranges(flow.acked(3, "t", 1)) == [(1, 2)]  # the held one first; the window is full again
    assert flow.acked(4, "t", 2) == [ReadBack("t", 2, 5)]  # then the spill, read back
    assert flow.offer(5, "t", [message(5, 6, 1)]) == []  # nothing overtakes the read-back
    flow.sent_back("t", [message(2, 3, 100), message(3, 5, 101)])  # the source sent what it read
    assert flow.read_done(6, "t", 5) == [] and window.in_flight_bytes == 201  # no room yet
    assert ranges(flow.acked(7, "t", 5)) == [(5, 6)] and window.state == OPEN and flow.read_backs == 1


def test_a_failed_read_back_is_owed_again_and_a_stall_reads_it_at_once():
    flow = FlowWindows(replace(LIMITS, hold_bytes_max=50))
    flow.offer(0, "t", [message(0, 1, 100), message(1, 2, 100)])
    assert flow.acked(1, "t", 1) == [ReadBack("t", 1, 2)]
    flow.read_failed(2, "t")
    assert flow.window("t").reading == (1, 2) and flow.next_deadline() == 52
    assert flow.handle_timeout(52) == [ReadBack("t", 1, 2)] and flow.window("t").state == STALLED


def test_trees_are_paced_apart_and_a_dropped_tree_forgets_its_hold_and_timer():
    flow = FlowWindows(LIMITS)
    flow.offer(0, "a", [message(0, 1, 200, "a"), message(1, 2, 5, "a")])
    assert ranges(flow.offer(0, "b", [message(0, 1, 5, "b")])) == [(0, 1)]
    flow.drop("a")
    assert flow.next_deadline() is None and flow.window("a") is None and flow.acked(1, "a", 9) == []


def test_without_a_window_everything_goes_at_once():
    flow = FlowWindows(replace(LIMITS, window_bytes=0))
    msgs = [message(i, i + 1, 1000) for i in range(5)]
    assert flow.offer(0, "t", msgs) == msgs and flow.window("t") is None


def test_the_states_move_only_as_the_table_says():
    flow = FlowWindows(LIMITS)
    flow.offer(0, "t", [message(0, 1, 1)])
    with pytest.raises(ForbiddenTransition):
        flow.window("t").move(STALLED)  # OPEN -> STALLED: only a HELD window stalls


def test_the_stall_timer_tells_the_brokers_alarm():
    alarm = Alarm()
    flow = FlowWindows(LIMITS, alarm)
    alarm.watch(flow)
    flow.offer(0, "t", [message(0, 1, 200), message(1, 2, 1)])
    assert alarm.next_deadline() == 50


OPS = st.lists(st.one_of(
    st.tuples(st.just("offer"), st.lists(st.integers(0, 90), min_size=1, max_size=4)),
    st.tuples(st.just("ack"), st.integers(0, 40)),
    st.tuples(st.just("wait"), st.integers(1, 80)),
    st.tuples(st.just("read"), st.booleans()),
), max_size=40)


@settings(max_examples=300, deadline=None)
@given(OPS, st.integers(1, 150), st.integers(60, 400))
def test_every_message_goes_once_in_order_within_the_window_and_the_hold(ops, window_bytes, hold_bytes_max):
    """Against a plain reference: what goes (messages, and spilled ranges read back as the very
    messages they held) is what was offered, in order, each once; what is in flight beyond the
    last ACK is at most the window plus one message unless the window stalled; the hold stays
    within its bound; a final stall and the reads it asks for send everything."""
    limits = FlowLimits(window_bytes=window_bytes, hold_bytes_max=hold_bytes_max, stall_ns=100)
    flow = FlowWindows(limits)
    offered: list[PublishOnTree] = []
    went: list[PublishOnTree] = []
    reads: list[ReadBack] = []
    now, tick, acked = 0, 0, 0

    def take(items: list) -> None:
        for item in items:
            if isinstance(item, ReadBack):
                reads.append(item)
            else:
                went.append(item)

    def read(ok: bool) -> None:  # the log answers the read-back with the messages of its range
        back = reads.pop(0)
        if not ok:
            flow.read_failed(now, back.tree)
            return
        answer = [m for m in offered if back.after <= m.message.after and m.message.through <= back.through][:2]
        went.extend(flow.sent_back("t", answer))  # (a read stops at its byte bound: here two messages)
        take(flow.read_done(now, "t", answer[-1].message.through if answer else back.through))

    for op, arg in ops:
        if op == "offer":
            batch = []
            for size in arg:
                batch.append(message(tick, tick + 1, size))
                tick += 1
            offered += batch
            take(flow.offer(now, "t", batch))
        elif op == "ack":
            acked = min(acked + arg, went[-1].message.through if went else 0)  # never past what it got
            take(flow.acked(now, "t", acked))
        elif op == "wait":
            now += arg
            take(flow.handle_timeout(now))
        elif reads:
            read(arg)
        assert went == offered[:len(went)]  # in order, each once
        assert len(reads) <= 1  # one read-back out at a time
        window = flow.window("t")
        if window is not None:
            assert window.held_bytes == sum(map(record_bytes, window.held)) <= hold_bytes_max
            assert (window.state == HELD) == (window.pending and window.state != STALLED) == flow.holding("t")
            assert (flow.next_deadline() is not None) == (window.state == HELD)
            if not flow.stalls:
                beyond = sum(record_bytes(m) for m in went if m.message.through > acked)
                assert beyond <= window_bytes + 90 + (90 * 4 if flow.read_backs else 0)
    for _ in range(100):  # the root never answers again: the stalls and reads send everything
        now += 1000
        take(flow.handle_timeout(now))
        while reads:
            read(True)
    assert went == offered


def record(tick: int, channel: str) -> bytes:
    return msgpack.packb(["p", tick, channel, {}, "s", "i", b"x" * 100])


def test_the_source_holds_first_time_knowledge_past_the_window_and_sends_no_silence_past_it():
    config = SourceConfig(silence_interval_ns=10, stream_idle_ns=1000, recovery_ns=10**9, read_bytes_max=1 << 20,
                          reads_max=4, trees_max=100, knowledge_bytes_max=150,
                          flow=FlowLimits(window_bytes=200, hold_bytes_max=10**6, stall_ns=500))
    src = Source("p", "me:1", config, lambda channel: [channel])
    out = src.published(0, as_batches([(t, "a", {}, record(t, "a")) for t in range(1, 6)]), 6)
    assert [(e.message.after, e.message.through) for e in out] == [(0, 1), (1, 2)]  # one record a message
    assert src.silence(1, 9) == []  # silence now would claim the held ticks 3..5 were F
    assert src.activated(2, "a", 9) == []
    back = src.acked(3, "a", 2, "root:1", 2, 2)
    assert [(e.message.after, e.message.through, e.root) for e in back] == [(2, 3, "root:1"), (3, 4, "root:1")]
    back = src.acked(4, "a", 4, "root:1", 4, 4)
    assert [(e.message.after, e.message.through) for e in back] == [(4, 6)]  # the last ends at the sync
    assert [(e.message.after, e.message.through) for e in src.silence(5, 9)] == [(6, 9)]
    assert src.status()["flow_holds"] == 1 and src.status()["flow_held_bytes"] == 0
    src.published(10, as_batches([(t, "a", {}, record(t, "a")) for t in range(10, 14)]), 14)
    assert [(e.message.after, e.message.through) for e in src.flow_timeout(600)] == [(10, 11), (11, 12), (12, 14)]
    assert src.status()["flow_stalls"] == 1


def test_the_cache_counts_records_it_lets_go_while_still_wanted_not_those_nobody_needs():
    from tidings.core.reliability.record_cache import RecordCache
    cache = RecordCache(bytes_max=20)
    cache.add((1, 2, 3), (b"x" * 10, b"y" * 10, b"z" * 10), wanted=0)
    cache.bound(wanted=0)  # 30 bytes over 20: tick 1 goes though a consumer wants it
    assert cache.evicted == 1 and 1 not in cache
    cache.bound(wanted=2)  # tick 2 nobody needs any more: not counted
    assert cache.evicted == 1 and list(cache.records) == [3]


def test_the_source_reads_a_spilled_range_back_from_its_log_and_sends_it_as_first_time_knowledge():
    config = SourceConfig(silence_interval_ns=10, stream_idle_ns=1000, recovery_ns=10**9, read_bytes_max=1 << 20,
                          reads_max=4, trees_max=100, knowledge_bytes_max=150,
                          flow=FlowLimits(window_bytes=100, hold_bytes_max=150, stall_ns=500))
    src = Source("p", "me:1", config, lambda channel: [channel])
    log = [(t, record(t, "a" if t % 2 else "b")) for t in range(1, 9)]  # the tree's events: the odd ticks
    out = src.published(0, as_batches([(t, "a" if t % 2 else "b", {}, r) for t, r in log]), 8)
    assert [(e.tree, e.message.after, e.message.through) for e in out] == [("a", 0, 1), ("b", 1, 2)]
    assert src.status()["flow_spills"] == 4  # per tree: one message held, the next two spilled
    assert [(e.message.after, e.message.through) for e in src.acked(1, "a", 1, "root:1", 1, 1)] == [(1, 3)]
    reads = src.acked(2, "a", 3, "root:1", 3, 3)
    assert len(reads) == 1 and isinstance(reads[0], ReadLog) and (reads[0].after, reads[0].through) == (3, 8)
    assert src.owns_read(reads[0].reader) and src.flow.holding("a")
    sent = src.log_read(4, reads[0].reader, [(t, r) for t, r in log if t > 3],
                        LogState(first_tick=1, released_through=0, log_bytes=0, record_count=8))
    assert [(e.message.after, e.message.through, e.message.ticks, e.message.retransmit, e.root) for e in sent] == [
        (3, 5, (5,), False, "root:1"), (5, 8, (7,), False, "root:1")]
    assert src.status()["flow_read_backs"] == 1 and src.status()["flow_records_read"] == 5
    assert not src.owns_read(reads[0].reader) and not src.flow.holding("a") and src.flow.holding("b")
    assert [(e.tree, e.message.after, e.message.through) for e in src.silence(5, 9)] == [("a", 8, 9)]


def test_a_blocked_subscription_far_behind_no_longer_holds_the_ack_its_broker_sends_up():
    from tidings.core.reliability.istream import Istream, StreamLimits

    limits = StreamLimits(cache_bytes_max=1 << 20, nack_ranges_max=8, nack_range_ticks_max=1000,
                          piece_bytes_max=1 << 20, lag_ticks_max=50)
    ist = Istream("t", "p", 0, limits)
    ist.upstream = "parent:1"
    fast, slow = ist.attach(1, 0), ist.attach(2, 0)
    ist.accumulate(0, 40, [10], [b"e10"])
    ist.pieces_for(fast)
    slow.blocked = True  # its connection is full: it was sent nothing
    assert ist.settle(0, None) == (0, 0, 0)  # 40 behind: it still holds the ack
    ist.accumulate(40, 100, [60], [b"e60"])
    ist.pieces_for(fast)
    assert ist.ack_point() == 0 and ist.flow_point() == 100  # 100 behind: the ack goes on without it
    assert ist.settle(1, None) == (100, 0, 0)  # release and delivered still wait for it
    assert [tick for tick, _ in ist.cached()] == [10, 60]  # its records wait in the cache
    slow.blocked = False
    assert ist.flow_point() == 0  # unblocked, it holds the point again (upstream keeps its higher ack)
    unpaced = Istream("t", "p", 0, replace(limits, lag_ticks_max=0))
    unpaced.attach(2, 0).blocked = True
    unpaced.accumulate(0, 100, [], [])
    assert unpaced.flow_point() == 0  # without flow control, as before
