"""The pubend's source streams: first-time knowledge per tree, the root learnt from its ACKs,
silence up to the present, and nacks answered from the log."""

from __future__ import annotations

import msgpack
from hypothesis import given
from hypothesis import strategies as st

from tidings.core.effects import ReadLog
from tidings.core.event import TICK_MAX
from tidings.core.inputs import LogState
from tidings.core.publish.batch import RecordRun
from tidings.core.publish.pubend import PendingBatch
from tidings.core.reliability import messages, source_knowledge
from tidings.core.reliability.source import PublishOnTree, Source, SourceConfig
from tidings.core.synced import Synced

from .core_harness import as_batches

CONFIG = SourceConfig(silence_interval_ns=10, stream_idle_ns=1000, recovery_ns=10**9, read_bytes_max=1 << 20,
                      reads_max=4, trees_max=100, knowledge_bytes_max=1 << 20)


def record(tick: int, channel: str) -> bytes:
    return msgpack.packb(["p", tick, channel, {}, "s", "i", b"x"])


def source() -> Source:
    return Source("p", "me:1", CONFIG, lambda channel: [channel, "#"])


def emptying() -> tuple[Source, set[str]]:
    """A source and the set of trees whose roots said they are empty (Scribe's TREE_EMPTY)."""
    empty: set[str] = set()
    return Source("p", "me:1", CONFIG, lambda channel: [channel, "#"], empty=lambda now, tree: tree in empty), empty


def sent(effects: list) -> list[tuple[str, bool]]:
    return [(e.tree, e.past_empty) for e in effects if isinstance(e, PublishOnTree)]


def knowledge(effect: PublishOnTree) -> messages.KnowledgeMessage:
    decoded = messages.decode(effect.message.to_wire())  # as the reliability node sends it
    assert isinstance(decoded, messages.KnowledgeMessage)
    return decoded


def test_each_tree_gets_its_events_as_d_and_the_rest_of_the_sync_as_silence():
    src = source()
    out = src.published(0, as_batches([(5, "a", {}, record(5, "a")), (6, "b", {}, record(6, "b"))]), 7)
    by_tree = {e.tree: knowledge(e) for e in out if isinstance(e, PublishOnTree)}
    assert (by_tree["a"].after, by_tree["a"].through, by_tree["a"].ticks) == (4, 7, (5,))
    assert (by_tree["#"].after, by_tree["#"].through, by_tree["#"].ticks) == (4, 7, (5, 6))
    assert (by_tree["b"].after, by_tree["b"].ticks) == (5, (6,))
    later = src.published(1, as_batches([(9, "a", {}, record(9, "a"))]), 9)
    assert [(knowledge(e).after, knowledge(e).through) for e in later if e.tree == "a"] == [(7, 9)]


def test_first_time_data_goes_straight_to_the_root_its_acks_came_from_until_it_moves():
    src = source()
    assert [e.root for e in src.published(0, as_batches([(5, "a", {}, record(5, "a"))]), 5)] == [None, None]
    src.acked(0, "a", 5, "root:7", 5, 5)
    out = src.published(1, as_batches([(6, "a", {}, record(6, "a"))]), 6)
    assert {e.tree: e.root for e in out if isinstance(e, PublishOnTree)} == {"a": "root:7", "#": None}
    assert all(e.root is None for e in src.silence(2, 8))  # silence is routed: it finds a moved root
    src.root_moved("a", "elsewhere:1")
    assert src.published(3, as_batches([(9, "a", {}, record(9, "a"))]), 9)[0].root == "root:7"
    src.root_moved("a", "root:7")
    assert src.published(4, as_batches([(10, "a", {}, record(10, "a"))]), 10)[0].root is None


def test_a_nack_is_read_back_and_answered_with_exactly_the_range_read():
    src = source()
    src.published(0, as_batches([(5, "a", {}, record(5, "a"))]), 5)
    reads = src.nacked(0, "a", ((0, 3), (3, 50)), synced=20, log=LogState(last_tick=20, first_tick=1))
    assert [(r.after, r.through) for r in reads if isinstance(r, ReadLog)] == [(0, 3), (3, 20)]
    second = [r for r in reads if isinstance(r, ReadLog)][1]
    log = LogState(last_tick=20, first_tick=1)
    out = src.log_read(1, second.reader, [(5, record(5, "a")), (6, record(6, "b"))], log)
    k = knowledge(out[0])
    assert (k.after, k.through, k.ticks, k.retransmit) == (3, 6, (5,), True)
    assert [(r.after, r.through) for r in out if isinstance(r, ReadLog)] == [(6, 20)]  # cut short: read on


def test_what_the_log_released_is_answered_as_lost_never_as_silence():
    src = source()
    log = LogState(last_tick=40, first_tick=31, released_through=30)
    out = src.nacked(0, "a", ((0, 10), (10, 35)), synced=40, log=log)
    lost = [knowledge(e) for e in out if isinstance(e, PublishOnTree)]
    assert [(k.after, k.through, k.lost, k.ticks) for k in lost] == [(0, 30, True, ())]  # all of it, at once
    assert [(r.after, r.through) for r in out if isinstance(r, ReadLog)] == [(30, 35)]  # the rest is read


def test_ticks_before_the_first_record_are_answered_as_silence_in_one_message():
    src = source()
    out = src.nacked(0, "a", ((0, 60), (60, 120)), synced=10**9, log=LogState(last_tick=10**9, first_tick=5000))
    sent = [knowledge(e) for e in out if isinstance(e, PublishOnTree)]
    assert [(k.after, k.through, k.lost) for k in sent] == [(0, 4999, False)]  # beyond the 120 asked
    assert not [r for r in out if isinstance(r, ReadLog)]


def test_a_read_that_finds_its_start_released_meanwhile_reports_the_loss():
    src = source()
    (read,) = src.nacked(0, "a", ((0, 20),), synced=20, log=LogState(last_tick=20, first_tick=1))
    assert isinstance(read, ReadLog)
    out = src.log_read(1, read.reader, [(15, record(15, "a"))], LogState(last_tick=20, released_through=12))
    sent = [knowledge(e) for e in out if isinstance(e, PublishOnTree)]
    assert [(k.after, k.through, k.lost, k.ticks) for k in sent] == [(0, 12, True, ()), (12, 15, False, (15,))]


def test_past_a_trees_last_event_nacks_are_silence_without_a_read_and_a_new_stream_says_so():
    """A subscriber starting a clock-skew allowance back must not wait for a nack (GCT, then a log
    read through a busy log) to learn that nothing was published on its tree meanwhile."""
    src = source()
    assert src.recover(0) == []  # an empty log: every record of this run is seen by `published`
    out = src.published(0, as_batches([(50, "a", {}, record(50, "a"))]), 55)
    first = {e.tree: knowledge(e) for e in out if isinstance(e, PublishOnTree)}
    assert (first["a"].after, first["a"].through, first["a"].ticks) == (0, 55, (50,))  # silence before it
    log = LogState(last_tick=90, first_tick=1)
    out = src.nacked(0, "a", ((60, 80),), synced=90, log=log)
    assert not [e for e in out if isinstance(e, ReadLog)]
    assert [(k.after, k.through, k.ticks) for k in map(knowledge, out)] == [(60, 80, ())]
    out = src.nacked(0, "a", ((40, 80),), synced=90, log=log)  # only up to its last event is read
    assert [(r.after, r.through) for r in out if isinstance(r, ReadLog)] == [(40, 50)]
    assert [(knowledge(e).after, knowledge(e).through) for e in out if isinstance(e, PublishOnTree)] == [(50, 80)]


def test_what_was_logged_before_this_run_is_read_not_assumed_silent():
    src = source()
    assert len(src.recover(100)) == 1  # the tail is read to find the trees
    out = src.nacked(0, "a", ((50, 200),), synced=300, log=LogState(last_tick=300, first_tick=1))
    assert [(r.after, r.through) for r in out if isinstance(r, ReadLog)] == [(50, 100)]
    assert [(knowledge(e).after, knowledge(e).through) for e in out if isinstance(e, PublishOnTree)] == [(100, 200)]
    # a tree's first stream reaches back to there
    out = src.published(1, as_batches([(150, "b", {}, record(150, "b"))]), 160)
    assert {e.tree: knowledge(e).after for e in out if isinstance(e, PublishOnTree)} == {"b": 100, "#": 100}


@given(pubend=st.text(min_size=1, max_size=40), tick=st.integers(0, 2**63),
       channel=st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="/+#\x00"),
                       min_size=1, max_size=300))
def test_a_records_trees_are_those_of_its_channel_whatever_its_encoding(pubend, tick, channel):
    """The in-place read of an own record's channel (uint64 ticks, short channels) agrees with
    decoding it, and any other layout is decoded."""
    src = Source(pubend, "me:1", CONFIG, lambda ch: [ch, "#"])
    rec = msgpack.packb([pubend, tick, channel, {}, "s", "i", b"x"])
    assert src.record_trees(rec) == [channel, "#"]
    assert src.record_trees(rec) == [channel, "#"]  # again, the same


def windowed(window_bytes: int) -> Source:
    config = SourceConfig(silence_interval_ns=10, stream_idle_ns=1000, recovery_ns=10**9, read_bytes_max=1 << 20,
                          reads_max=4, trees_max=100, knowledge_bytes_max=1 << 20,
                          retransmit_window_bytes=window_bytes, retransmit_wait_ns=500)
    return Source("p", "me:1", config, lambda channel: [channel, "#"])


def reads(effects: list) -> list[tuple[int, int]]:
    return [(r.after, r.through) for r in effects if isinstance(r, ReadLog)]


def test_a_long_answer_reads_on_only_as_the_roots_acks_make_room_in_the_window():
    """A log read returns in microseconds what the brokers below take far longer to deliver: read
    back to back, the answer overruns their bounded queues, and what they drop is nacked again."""
    src = windowed(window_bytes=1000)
    log = LogState(last_tick=10_000, first_tick=1)
    (read,) = src.nacked(0, "a", ((0, 10_000),), synced=10_000, log=log)
    records = [(t, record(t, "a")) for t in range(1, 101)]  # about 2,000 bytes: past the window
    out = src.log_read(1, read.reader, records, log)
    assert [knowledge(e).through for e in out if isinstance(e, PublishOnTree)] == [100]
    assert reads(out) == []  # parked, not read on
    assert src.status()["reads"] == 1 and src.status()["reads_parked"] == 1
    assert reads(src.acked(2, "a", 60, "root:7", 0, 0)) == []  # the answer is not all acknowledged yet
    assert reads(src.acked(3, "a", 100, "root:7", 0, 0)) == [(100, 10_000)]


def test_a_window_the_roots_acks_do_not_move_starts_again_after_the_wait():
    """The root's ack point may be held below the answer by another consumer (a second catchup,
    a slow child): its acks then say nothing of the answer, which goes on a window per
    `retransmit_wait_ns` instead of stalling. A root that sends no ack at all is only slow (its
    subscriber's connection is full): its window waits ten times longer (it may be gone)."""
    src = windowed(window_bytes=100)
    log = LogState(last_tick=10_000, first_tick=1)
    (read,) = src.nacked(0, "a", ((1000, 10_000),), synced=10_000, log=log)
    assert reads(src.log_read(1, read.reader, [(t, record(t, "a")) for t in range(1001, 1011)], log)) == []
    assert reads(src.acked(100, "a", 500, "root:7", 0, 0)) == []  # held below the answer
    assert reads(src.silence(400, 10_000)) == []
    assert reads(src.silence(600, 10_000)) == [(1010, 10_000)]
    assert src.status()["windows_restarted"] == 1
    (read,) = src.nacked(700, "b", ((1000, 10_000),), synced=10_000, log=log)
    assert reads(src.log_read(701, read.reader, [(t, record(t, "b")) for t in range(1001, 1011)], log)) == []
    assert reads(src.silence(1300, 10_000)) == []  # no ack at all: slow, not held
    assert reads(src.silence(5700, 10_000)) == [(1010, 10_000)]


def test_a_repeated_nack_rereads_only_what_the_read_answering_it_has_sent_so_far():
    """The same ticks must not be read and sent twice: what the read in progress still has to
    read is on its way; what it has sent may have been lost, so that is read again."""
    src = windowed(window_bytes=4 << 20)  # room for this read and three more (1 MiB each)
    log = LogState(last_tick=10_000, first_tick=1)
    (read,) = src.nacked(0, "a", ((0, 1000),), synced=10_000, log=log)
    out = src.log_read(1, read.reader, [(t, record(t, "a")) for t in range(1, 101)], log)
    assert reads(out) == [(100, 1000)]
    again = src.nacked(2, "a", ((40, 1200),), synced=10_000, log=log)
    assert reads(again) == [(40, 100), (1000, 1200)]
    assert src.status()["nack_ticks_in_flight"] == 900


def test_a_nacks_first_range_is_read_even_when_the_window_is_full():
    """The root's horizon stands at the first range it nacks: its acks cannot move before that is
    answered, so waiting for them would wait for nothing."""
    src = windowed(window_bytes=100)
    log = LogState(last_tick=20_000, first_tick=1)
    (read,) = src.nacked(0, "a", ((0, 10_000),), synced=20_000, log=log)
    src.log_read(1, read.reader, [(t, record(t, "a")) for t in range(1, 101)], log)  # the window is full
    (other,) = src.nacked(2, "b", ((0, 50),), synced=20_000, log=log)  # another tree has its own window
    assert (other.after, other.through) == (0, 50)
    again = src.nacked(3, "a", ((10_000, 10_040), (10_060, 10_080)), synced=20_000, log=log)
    assert reads(again) == [(10_000, 10_040)]  # the second range waits for the window
    assert src.status()["reads"] == 4  # a's waiting continuation and second range, and one each out


def test_an_answer_waits_while_the_link_to_the_root_is_congested():
    """Past its send buffer's high-water mark a peer link queues, boundedly, and drops: an answer
    read into it would be nacked again, so the next read waits for the link to drain."""
    congested = {"root:7"}
    src = Source("p", "me:1", CONFIG, lambda channel: [channel, "#"], congested=congested.__contains__)
    src.published(0, as_batches([(5, "a", {}, record(5, "a"))]), 5)
    src.acked(0, "a", 5, "root:7", 5, 5)  # the root the answers go straight to
    log = LogState(last_tick=10_000, first_tick=1)
    (read,) = src.nacked(1, "a", ((0, 10_000),), synced=10_000, log=log, asker="root:7")  # the first, at once
    assert reads(src.log_read(2, read.reader, [(t, record(t, "a")) for t in range(1, 11)], log)) == []
    assert src.link_drained(3) == []
    congested.clear()
    assert reads(src.link_drained(4)) == [(10, 10_000)]


def test_a_tree_that_never_had_members_does_not_hold_release():
    """A prefix tree of the channel nobody subscribes to (its root answered TREE_EMPTY, and no
    root ever acknowledged its stream) has nobody below to wait for: it must not hold Tr and Td
    at its stream's start for `release_hold_ns` (issue 20: phantom prefix trees)."""
    empty: set[str] = set()
    src = Source("p", "me:1", CONFIG, lambda channel: [channel, "#"], empty=lambda now, tree: tree in empty)
    src.published(0, as_batches([(5, "a", {}, record(5, "a"))]), 5)  # streams of a and # begin at 4
    src.acked(1, "#", 5, "root:1", 5, 5)  # "#" has members: they have it all
    empty.add("a")  # a's root said it has no members; none ever acked
    assert (src.released(2, None), src.delivered(2)) == (5, 5)
    assert (src.released(CONFIG.release_hold_ns, None), src.delivered(CONFIG.release_hold_ns)) == (5, 5)


def test_a_tree_that_lost_its_members_holds_release_for_the_hold():
    """A tree whose only subscriber broker failed looks empty too: its release point holds for
    `release_hold_ns`, then it stops counting."""
    empty: set[str] = set()
    src = Source("p", "me:1", CONFIG, lambda channel: [channel, "#"], empty=lambda now, tree: tree in empty)
    src.published(0, as_batches([(5, "a", {}, record(5, "a"))]), 5)
    src.acked(1, "#", 5, "root:1", 5, 5)
    src.acked(1, "a", 5, "root:2", 3, 4)  # a durable subscription below released through 3
    empty.add("a")
    assert (src.released(2, None), src.delivered(2)) == (3, 4)
    assert (src.released(2 + CONFIG.release_hold_ns, None), src.delivered(2 + CONFIG.release_hold_ns)) == (5, 5)


def test_an_empty_tree_that_never_had_members_is_sent_nothing_until_it_has_some():
    """The trees of a channel nobody subscribes to: their roots answer TREE_EMPTY and nobody
    acknowledges the first event. The stream owes it to nobody, so it is not routed past "empty"
    with every event (4 Pastry routes per event at the publisher's broker); a member that joins
    later hears of it (`activated`) and nacks what it wants from its start."""
    src, empty = emptying()
    assert src.recover(0) == []  # an empty log: every record of this run is seen by `published`
    assert {e.tree for e in src.published(0, as_batches([(5, "a", {}, record(5, "a"))]), 5)} == {"a", "#"}
    src.acked(1, "#", 5, "root:1", 5, 5)
    empty.add("a")  # a's root said it has no members; nobody acked a
    assert sent(src.published(2, as_batches([(9, "a", {}, record(9, "a"))]), 9)) == [("#", False)]
    assert [tree for tree, _ in sent(src.silence(3, 12))] == ["#"]  # nor silence
    assert src.active_trees == 1  # a's stream is gone
    empty.clear()  # a member joined: the tree is told of everything after the last event, and nacks the rest
    (told,) = src.activated(0, "a", 12)
    assert (knowledge(told).after, knowledge(told).through, told.past_empty) == (9, 12, True)
    log = LogState(last_tick=12, first_tick=1)
    assert reads(src.nacked(4, "a", ((4, 9),), synced=12, log=log)) == [(4, 9)]
    assert src.active_trees == 2  # a has a stream again, from its last event: its silence goes on
    src.acked(4, "#", 12, "root:1", 12, 12)
    out = src.published(5, as_batches([(15, "a", {}, record(15, "a"))]), 15)  # it goes on after the silence told
    assert [(knowledge(e).after, knowledge(e).ticks) for e in out if e.tree == "a"] == [(12, (15,))]
    assert (src.released(6, None), src.delivered(6)) == (9, 9)  # held where it starts until its root reports


def test_a_tree_activated_before_anything_after_its_last_event_is_durable_is_told_by_the_next_silence():
    """TREE_ACTIVE may come while the pubend's last event on the tree is its newest durable tick:
    there is no silence to tell yet, and the memberless tree's stream was dropped. It gets a stream
    again, so the next periodic silence tells the new members of this pubend (they then nack its
    events from their start), and its root goes on hearing of it: when the tree loses its members
    and gets new ones again, it tells this pubend once more (tests/integration/test_from_start_overlay.py:
    a second from-start reader through another broker got nothing of the first reader's pubend)."""
    src, empty = emptying()
    assert src.recover(0) == []
    src.published(0, as_batches([(5, "a", {}, record(5, "a"))]), 5)
    src.acked(1, "#", 5, "root:1", 5, 5)
    empty.add("a")
    src.silence(2, 5)
    assert src.active_trees == 1  # a's stream is dropped: said empty, never known to have members
    empty.clear()
    assert src.activated(3, "a", 5) == []  # nothing durable after tick 5 yet
    assert src.active_trees == 2
    told = [knowledge(e) for e in src.silence(4, 8) if e.tree == "a"]
    assert [(k.after, k.through) for k in told] == [(5, 8)]


def test_a_tree_whose_root_acknowledged_is_still_sent_past_empty_while_it_is_owed():
    """A root that said "empty" may be a stale one of a partition, or have lost its members since:
    what a tree that had members was not acknowledged is still sent to it, for `release_hold_ns`;
    after that it neither counts nor is sent anything."""
    src, empty = emptying()
    src.published(0, as_batches([(5, "a", {}, record(5, "a"))]), 5)
    src.acked(1, "a", 4, "root:2", 4, 4)  # it had members; 5 is not acknowledged
    src.acked(1, "#", 5, "root:1", 5, 5)
    empty.add("a")
    assert ("a", True) in sent(src.published(2, as_batches([(9, "a", {}, record(9, "a"))]), 9))
    assert ("a", True) in sent(src.silence(3, 12))
    assert src.released(3, None) == 4  # a's root reported 4
    later = 2 + CONFIG.release_hold_ns
    assert [tree for tree, _ in sent(src.published(later, as_batches([(20, "a", {}, record(20, "a"))]), 20))] == ["#"]
    assert src.active_trees == 1 and src.released(later, None) == 5  # what "#"'s root reported


def test_a_tree_that_had_members_when_its_idle_stream_was_forgotten_holds_release_when_found_empty():
    """A tree whose subscriber broker fails after the pubend forgot the tree's idle stream: the
    next stream on it may find it empty, but it had members, so it holds release for the hold
    (its broker, restarted meanwhile, rejoins and reports its durable subscriptions)."""
    src, empty = emptying()
    src.published(0, as_batches([(5, "a", {}, record(5, "a"))]), 5)
    src.acked(1, "a", 5, "root:2", 5, 5)
    src.acked(1, "#", 5, "root:1", 5, 5)
    src.silence(2000, 5)  # idle, everything acknowledged and released: both streams forgotten
    assert src.active_trees == 0
    src.published(2001, as_batches([(3000, "a", {}, record(3000, "a"))]), 3000)
    src.acked(2002, "#", 3000, "root:1", 3000, 3000)
    empty.add("a")
    assert src.released(2003, None) == 2999  # where its new stream starts: all before was released
    assert src.released(2003 + CONFIG.release_hold_ns, None) == 3000


def test_a_tree_found_in_the_log_after_a_restart_holds_release_for_the_hold_then_is_dropped_if_empty():
    """After a restart the pubend does not know which trees had members: each tree of the log's
    tail counts for the hold, then, if its root says it is empty, it is sent nothing more."""
    src, empty = emptying()
    (read,) = src.recover(100)
    src.log_read(0, read.reader, [(100, record(100, "a"))], LogState(last_tick=100, first_tick=1))
    empty.update({"a", "#"})
    assert src.released(1, None) == 0
    assert ("a", True) in sent(src.silence(1, 120))
    later = 1 + CONFIG.release_hold_ns
    assert src.released(later, None) == TICK_MAX  # nothing holds it
    assert sent(src.silence(later, 130)) == [] and src.active_trees == 0


def _chunks_reference(ticks: list[int], bodies: list[bytes], after: int, through: int, bytes_max: int,
                      records_max: int) -> list[tuple[int, int, tuple[int, ...], tuple[bytes, ...]]]:
    """The cut record by record: a message ends before the record that would take it past
    `bytes_max` or `records_max` (it holds at least one); each range ends at its last record but
    the last's, which ends at `through`."""
    out: list[tuple[int, int, tuple[int, ...], tuple[bytes, ...]]] = []
    start = size = 0
    for i, body in enumerate(bodies):
        if i > start and (size + len(body) > bytes_max or i - start >= records_max):
            out.append((after, ticks[i - 1], tuple(ticks[start:i]), tuple(bodies[start:i])))
            after, start, size = ticks[i - 1], i, 0
        size += len(body)
    return [*out, (after, through, tuple(ticks[start:]), tuple(bodies[start:]))]


@given(st.lists(st.integers(1, 30), max_size=40), st.integers(1, 80), st.integers(1, 6), st.booleans())
def test_knowledge_is_cut_into_messages_as_record_by_record(sizes: list[int], bytes_max: int,
                                                             records_max: int, sized: bool) -> None:
    """... whether the caller counted the records' bytes (`size`) or not; each message carries its
    records' bytes for the flow window, exactly."""
    writer = source_knowledge.KnowledgeWriter("p", "me:1", bytes_max, lambda channel: [channel])
    ticks, bodies = list(range(10, 10 + len(sizes))), [bytes(n) for n in sizes]
    was = source_knowledge.RECORDS_MAX
    source_knowledge.RECORDS_MAX = records_max
    try:
        made = writer.chunked_columns("a", 5, 100, ticks, bodies, retransmit=False, size=sum(sizes) if sized else None)
    finally:
        source_knowledge.RECORDS_MAX = was
    got = [(m.message.after, m.message.through, m.message.ticks, m.message.records) for m in made]
    assert got == _chunks_reference(ticks, bodies, 5, 100, bytes_max, records_max)
    assert [m.records_bytes for m in made] == [sum(map(len, m.message.records)) for m in made]


def _held(deliveries: list[tuple[int, str, dict[str, object], bytes]], cuts: int) -> Synced:
    """The same sync as `as_batches`', as the intake holds a PUBLISH on one channel without
    attributes: batches of the Append's runs, ticks and records (core/publish/pubend.py)."""
    size = -(-len(deliveries) // cuts)
    return Synced([PendingBatch(k, 0, k, [], [], sum(len(rec) for _, _, _, rec in deliveries[at:at + size]),
                                channel=deliveries[0][1],
                                records=RecordRun([d[0] for d in deliveries[at:at + size]],
                                                  [d[3] for d in deliveries[at:at + size]], None))
                   for k, at in enumerate(range(0, len(deliveries), size))])


@given(st.integers(1, 60), st.integers(1, 4), st.integers(40, 400))
def test_a_sync_on_one_channel_held_as_records_gives_the_trees_the_same_knowledge(count: int, cuts: int,
                                                                                 bytes_max: int) -> None:
    """A sync whose batches hold the Append's records (one channel, no attributes) reaches every
    tree of its channel as the same messages as the same events held one by one, cut at the same
    records (the sync's bytes counted once)."""
    config = SourceConfig(silence_interval_ns=10, stream_idle_ns=1000, recovery_ns=10**9, read_bytes_max=1 << 20,
                          reads_max=4, trees_max=100, knowledge_bytes_max=bytes_max)
    deliveries: list[tuple[int, str, dict[str, object], bytes]] = [(t, "a", {}, record(t, "a"))
                                                                   for t in range(5, 5 + count)]
    outs = [Source("p", "me:1", config, lambda channel: [channel, "#"]).published(0, synced, 5 + count + 3)
            for synced in (as_batches(deliveries), _held(deliveries, cuts))]
    assert [(e.tree, e.message) for e in outs[0]] == [(e.tree, e.message) for e in outs[1]]
    assert {e.tree for e in outs[1]} == {"a", "#"}
    assert all(isinstance(e, PublishOnTree) and e.records_bytes == sum(map(len, e.message.records))
               for e in outs[1])
