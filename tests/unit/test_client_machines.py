"""The client's sans-IO machines (core/session/): publish tracking, the cursor and roaming, through
their public interface; roaming also as a Hypothesis rule-based state machine."""

from __future__ import annotations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from tidings.core.broker.advice import Candidate, Probe, Reason
from tidings.core.durable.checkpoint import Checkpoint
from tidings.core.errors import BrokerError
from tidings.core.event import Event
from tidings.core.session import roaming
from tidings.core.session.cursor import Cursor, Gap, Silence
from tidings.core.session.publish_tracker import DuplicateResult, PublishResult, PublishTracker
from tidings.core.session.roaming import (
    ROAMING,
    AckDurable,
    Mode,
    Roamer,
    SendHeartbeat,
    SendRenew,
    SubKind,
)
from tidings.core.wire import messages

S = 1_000_000_000


# ---- publish tracking ----------------------------------------------------------------------------

def test_an_ack_resolves_its_frame_by_seq_whatever_the_order_of_answers():
    tracker: PublishTracker[str] = PublishTracker()
    tracker.sent(0, 2, "a")
    tracker.sent(2, 3, "b")
    assert tracker.acked(messages.Ack(2, "p", [10, 11, 12])) == ("b", [PublishResult("p", t) for t in (10, 11, 12)])
    assert tracker.acked(messages.Ack(0, "p", [8, 9])) == ("a", [PublishResult("p", 8), PublishResult("p", 9)])
    assert not tracker and tracker.acked(messages.Ack(0, "p", [8, 9])) is None  # answered already


def test_refusals_by_seq_and_by_ranges_become_the_results_of_nil_ticks():
    tracker: PublishTracker[str] = PublishTracker()
    tracker.sent(5, 6, "f")
    too_big, bad = BrokerError("too big", "event-too-large"), BrokerError("bad channel", "bad-channel")
    tracker.refused({"seq": 6}, too_big)
    tracker.refused({"seq": 7, "count": 3, "seqs": [[7, 8], [10, 10], [99, 120], "junk"]}, bad)
    tracker.refused({"seq": 4}, bad)  # not this tracker's: ignored
    key, results = tracker.acked(messages.Ack(5, "p", [1, None, None, None, 2, None])) or (None, [])
    assert key == "f"
    assert results == [PublishResult("p", 1), too_big, bad, bad, PublishResult("p", 2), bad]
    assert tracker.acked(messages.Ack(5, "p", [1])) is None


def test_a_nil_tick_no_error_named_is_rejected_and_duplicates_keep_the_original_tick():
    tracker: PublishTracker[int] = PublishTracker()
    tracker.sent(0, 3, 1)
    _, results = tracker.acked(messages.Ack(0, "p", [4, None, 7], [0, 1, 9])) or (None, [])
    assert isinstance(results[0], DuplicateResult) and results[0].duplicate and results[0] == ("p", 4)
    assert isinstance(results[1], BrokerError) and results[1].code == "rejected"
    assert type(results[2]) is PublishResult and not results[2].duplicate


def test_a_lost_connection_gives_back_every_frame_oldest_first():
    tracker: PublishTracker[str] = PublishTracker()
    for seq, key in ((0, "a"), (1, "b"), (2, "c")):
        tracker.sent(seq, 1, key)
    tracker.acked(messages.Ack(1, "p", [3]))
    assert len(tracker) == 2 and tracker.pending() == ["a", "c"]
    assert tracker.clear() == ["a", "c"] and not tracker


# ---- the cursor ----------------------------------------------------------------------------------

def event(pubend: str, tick: int) -> Event:
    return Event(pubend, tick, "c/x", {}, "svc", "i", b"")


def test_a_plain_cursor_drops_after_a_move_what_it_had_from_each_pubend():
    cursor = Cursor(total_order=True)  # (total order resumes from now)
    assert cursor.arrived([event("a", 1), event("a", 2), event("b", 5)]) == [event("a", 1), event("a", 2),
                                                                              event("b", 5)]
    assert cursor.resume() == (messages.START_NOW, None, None)
    assert cursor.arrived([event("a", 2), event("b", 5), event("a", 3), event("c", 1)]) == [event("a", 3),
                                                                                            event("c", 1)]


US = 1_000  # ns in a tick (a microsecond)
T0 = 1_700_000_000_000_000  # a tick: a publisher's clock in microseconds


def test_a_moved_plain_cursor_starts_after_the_last_tick_of_each_pubend_and_misses_nothing():
    """The move window: what was published while the client changed brokers (and what was still
    on its way to the old broker) comes from the new one, what it had is dropped."""
    cursor = Cursor()
    cursor.confirmed(None, T0, 0)  # SUBSCRIBED at the old broker's clock T0, at now = 0
    assert cursor.arrived([event("a", T0 + 10), event("b", T0 + 2_000_000)], 2 * S) == [
        event("a", T0 + 10), event("b", T0 + 2_000_000)]
    # 0.5 s later it moves: a's events after T0+10 may be on their way (or held back for it); pubends
    # never heard from start a clock-skew allowance (1 s) before the newest tick, b's
    start, positions, home = cursor.resume(2 * S + S // 2)
    assert (start, positions, home) == (T0 + 10, None, None)
    # the new broker sends everything after it, from both connections while the old one still serves
    again = [event("a", T0 + 10), event("a", T0 + 20), event("b", T0 + 2_000_000), event("b", T0 + 2_400_000),
             event("c", T0 + 1_600_000)]
    assert cursor.arrived(again, 3 * S) == again[1:2] + again[3:]
    assert cursor.arrived([event("a", T0 + 20), event("a", T0 + 30)], 3 * S) == [event("a", T0 + 30)]


def test_a_moved_plain_cursor_reaches_back_by_time_for_pubends_it_never_heard_from():
    cursor = Cursor()
    cursor.confirmed(None, T0, 0)
    assert cursor.resume(3 * S) == (T0 - 1_000_000, None, None)  # its start, less the 1 s allowance
    quiet = Cursor(clock_skew_allowance_ns=S // 2, reach_back_ns=10 * S)
    quiet.confirmed(None, T0, 0)
    quiet.arrived([event("a", T0 + 5)], 0)
    # a failover: the connection was lost at 100 s, the next broker answered at 103 s; a was heard
    # from 100 s ago: it reaches back 10 s at most, and what is older than that it presumes it had
    quiet.lost(100 * S)
    quiet.lost(101 * S)  # (the first loss counts)
    assert quiet.resume(103 * S) == (T0 + 90_000_005, None, None)
    assert quiet.gap(Gap(T0, T0 + 90_000_005, "a")) is None  # what it presumes it had
    assert quiet.gap(Gap(T0, T0 + 95_000_000, "a")) == Gap(T0 + 90_000_005, T0 + 95_000_000, "a")
    assert quiet.gap(Gap(T0, T0 + 80_000_000, "c")) is None  # c was never heard from: 10 s back at most
    assert quiet.gap(Gap(T0, T0 + 99_000_000, "c")) == Gap(T0 + 90_000_005, T0 + 99_000_000, "c")


def test_a_moved_plain_cursor_keeps_of_a_gap_only_what_it_did_not_have():
    cursor = Cursor()
    cursor.confirmed(None, T0, 0)
    cursor.arrived([event("a", T0 + 100), event("b", T0 + 900_000)], S)
    assert cursor.gap(Gap(T0, T0 + 200, "a")) == Gap(T0, T0 + 200, "a")  # before a move: as it came
    assert cursor.resume(S) == (T0 - 100_000, None, None)  # b's clock T0+0.9 s, less the 1 s allowance
    assert cursor.gap(Gap(T0 + 50, T0 + 100, "a")) is None  # it had those
    assert cursor.gap(Gap(T0 + 50, T0 + 300, "a")) == Gap(T0 + 100, T0 + 300, "a")
    assert cursor.gap(Gap(T0 - 300_000, T0 - 200_000, "z")) is None  # a pubend it never heard from: by time
    assert cursor.gap(Gap(T0, T0 + 5)) == Gap(T0, T0 + 5)  # (an older broker names no pubend)


def test_a_moved_plain_cursor_catches_up_a_late_event_of_a_pubend_it_heard_from():
    cursor = Cursor()
    cursor.confirmed(None, T0, 0)
    # a's event of T0+0.5 s came; its next, of T0+1 s, was held up (a repair) while b's of T0+3 s came
    cursor.arrived([event("a", T0 + 500_000)], S // 2)
    cursor.arrived([event("b", T0 + 3_000_000)], 3 * S)
    assert cursor.resume(3 * S + S // 5).start == T0 + 500_000  # not b's tick less the allowance
    assert cursor.arrived([event("a", T0 + 1_000_000), event("b", T0 + 3_000_000)], 4 * S) == [
        event("a", T0 + 1_000_000)]


def test_a_moved_plain_cursor_that_was_behind_reaches_back_from_the_newest_tick_it_received():
    """A subscriber that read slowly: its old broker held back a backlog, in which an event of a
    pubend it never heard from waited behind the newest one it received."""
    cursor = Cursor()
    cursor.confirmed(None, T0, 0)
    cursor.arrived([event("a", T0 + 3_000_000)], 10 * S)  # 7 s after its publishing
    # it stopped reading for 2 s, then moved: c's event of T0+2.5 s, held back, must come
    assert cursor.resume(12 * S).start == T0 + 2_000_000  # a's tick less the allowance, not "now" less it
    assert cursor.arrived([event("c", T0 + 2_500_000)], 13 * S) == [event("c", T0 + 2_500_000)]


def test_a_plain_cursor_moved_before_its_first_subscribed_starts_now():
    assert Cursor().resume(S) == (messages.START_NOW, None, None)


def test_a_durable_cursor_resumes_after_what_arrived_and_its_token_follows_what_was_taken():
    cursor = Cursor()
    cursor.confirmed([0, [["a", 1]], ["h:1", "b", 3]])
    assert cursor.durable and cursor.ack_due() is None  # its start is released already
    items = [event("a", 2), Gap(2, 4, "a"), Silence({"b": 9}), event("a", 5)]
    cursor.received_items(items)
    cursor.taking()
    assert cursor.taken(items[:3]) == items[:2]  # the SILENCE marker moves the token, unseen
    assert cursor.checkpoint is not None and cursor.checkpoint.positions == {"a": 4, "b": 9}
    assert cursor.resume() == (0, [["a", 5], ["b", 9]], ["h:1", "b", 3])
    cursor.taking()  # asks for more: what it took is done with
    assert cursor.ack_due() == [0, [["a", 4], ["b", 9]]]
    cursor.acked([0, [["a", 4], ["b", 9]]])
    assert cursor.ack_due() is None
    cursor.rehomed([0, [], ["h:2", "c", 7]])
    cursor.rehomed(["junk"])  # a malformed home is ignored
    assert Checkpoint.decode(cursor.checkpoint.encode()).home == ("h:2", "c", 7)


# ---- roaming -------------------------------------------------------------------------------------

def serving(failover: tuple[str, ...] = ("b:1",), silence_ns: int | None = 5 * S) -> Roamer:
    r = Roamer("a:1", failover, True, silence_ns)
    r.welcomed(0, 10 * S)
    return r


def test_renew_and_auto_ack_come_at_their_cadence():
    r = serving(failover=())
    r.durable_confirmed(0)
    assert r.next_deadline() == S
    assert r.handle_timeout(S) == [AckDurable()]
    assert r.handle_timeout(10 * S) == [AckDurable(), SendRenew()]  # the ack overdue since 2 s first
    assert r.next_deadline() == 11 * S


def test_a_silent_broker_is_pinged_then_abandoned_and_the_client_fails_over():
    r = serving()
    assert r.next_deadline() == 2 * S
    r.heard(S)  # heard since: the ping waits
    assert r.handle_timeout(2 * S) == [] and r.next_deadline() == 3 * S
    assert r.handle_timeout(3 * S) == [SendHeartbeat()]
    assert r.handle_timeout(5 * S) == [SendHeartbeat()]
    (abandon,) = r.handle_timeout(6 * S)
    assert isinstance(abandon, roaming.Abandon) and "a:1" in abandon.reason
    assert r.lost(6 * S, [SubKind.DURABLE], abandon.reason) == [roaming.TryBroker("b:1", roaming.PROBE_TIMEOUT_NS)]
    assert r.mode is Mode.FAILING_OVER and r.waiting


def test_a_client_that_stopped_reading_does_not_count_the_brokers_silence():
    r = serving()
    r.reading_paused(S)
    assert roaming.RoamTimer.HEARTBEAT not in r.deadlines
    assert all(not isinstance(e, roaming.Abandon) for e in r.handle_timeout(40 * S))
    r.reading_resumed(50 * S)
    assert r.deadlines.when(roaming.RoamTimer.HEARTBEAT) == 52 * S


def test_no_failover_brokers_no_heartbeat_and_a_loss_closes():
    r = serving(failover=())
    assert roaming.RoamTimer.HEARTBEAT not in r.deadlines
    assert r.lost(S, [], "gone") == [] and r.mode is Mode.CLOSED


@pytest.mark.parametrize(("kinds", "fails_over"), [
    ([], True),  # a publisher (it used not to)
    ([SubKind.DURABLE, SubKind.DURABLE], True),
    ([SubKind.DURABLE, SubKind.PLAIN], True),  # a plain one resumes after what it received (it used not to)
    ([SubKind.DURABLE, SubKind.TOTAL], False),  # total order starts again from now only
    ([SubKind.BULK], False),
])
def test_who_fails_over(kinds, fails_over):
    r = serving()
    r.lost(S, kinds, "gone")
    assert (r.mode is Mode.FAILING_OVER) is fails_over


def test_failover_rotates_over_the_brokers_with_backoff_then_gives_up():
    r = Roamer("a:1", ("b:1", "c:1"), True, None, failover_ns=2 * S)
    r.welcomed(0, None)
    tried = [r.lost(0, [], "gone")[0]]
    tried += r.attempt_failed(S // 10)
    tried += r.attempt_failed(S // 5)
    assert [t.address for t in tried if isinstance(t, roaming.TryBroker)] == ["b:1", "c:1", "a:1"]
    assert r.attempt_failed(S // 5) == []  # the round ends: a backoff
    assert r.next_deadline() == S // 5 + roaming.FAILOVER_BACKOFF_NS[0]
    (again,) = r.handle_timeout(r.next_deadline() or 0)
    assert isinstance(again, roaming.TryBroker) and again.address == "b:1"
    (gave_up,) = r.attempt_failed(2 * S)
    assert isinstance(gave_up, roaming.GiveUp) and "gone" in gave_up.message and r.mode is Mode.CLOSED


def test_a_failover_goes_on_at_the_broker_that_answered_and_keeps_the_others():
    r = serving(failover=("b:1", "c:1"))
    r.lost(S, [], "gone")
    r.attempt_failed(S)
    r.switched(2 * S, "c:1", None, None, [])
    assert (r.mode, r.address, r.failover, r.failovers, r.moves) == (Mode.SERVING, "c:1", ["b:1", "a:1"], 1, 1)


def test_advice_is_followed_when_movable_and_held_while_busy():
    r = serving()
    b = (Candidate("b:1", 1000),)
    assert r.advised(0, Reason.CLOSER, b, [SubKind.TOTAL]) == []  # total order stays for closer
    assert r.advised(0, Reason.DRAINING, b, [SubKind.TOTAL]) == [roaming.Follow(Reason.DRAINING, b)]
    c = (Candidate("c:1", 1000),)
    assert r.advised(0, Reason.OVERLOADED, c, []) == [] and r.held == (Reason.OVERLOADED, c)
    moves = r.probed(0, Reason.DRAINING, 5000, [Probe("b:1", 4000, False, False)], [])
    assert moves == [roaming.MoveTo("b:1", "route advice: draining")] and r.waiting
    assert r.switched(S, "b:1", None, None, []) == []  # the new broker held nothing: the old advice is moot
    assert r.mode is Mode.SERVING and r.moves == 1
    assert r.failover == ["a:1"]  # a failover from b:1 goes back to a:1, not to b:1 itself


def test_a_move_that_fails_stays_and_follows_held_advice():
    r = serving()
    r.advised(0, Reason.DRAINING, (Candidate("b:1", 1),), [])
    r.advised(0, Reason.DRAINING, (Candidate("c:1", 1),), [])  # held
    r.probed(0, Reason.DRAINING, 5, [Probe("b:1", 4, False, False)], [])
    assert r.move_failed([]) == [roaming.Follow(Reason.DRAINING, (Candidate("c:1", 1),))]


def test_every_mode_change_is_in_the_table():
    reached = {m for moves in ROAMING.values() for m in moves.values()}
    assert reached | {Mode.CONNECTING} == set(Mode)


class RoamingMachine(RuleBasedStateMachine):
    """Any order of inputs: the mode stays one the table reaches, requests wait exactly while
    moving or failing over, a closed client does nothing, and the deadlines never go back in time."""

    @initialize(failover=st.lists(st.sampled_from(["b:1", "c:1", "a:1"]), max_size=3, unique=True),
                silence=st.sampled_from([None, S, 5 * S]))
    def start(self, failover, silence):
        self.now = 0
        self.r = Roamer("a:1", failover, True, silence, failover_ns=10 * S)
        self.kinds: list[SubKind] = []
        self.tasks: list[roaming.RoamEffect] = []

    def _effects(self, effects):
        for e in effects:
            assert isinstance(e, roaming.RoamEffect)
            if isinstance(e, roaming.Follow | roaming.MoveTo | roaming.TryBroker):
                self.tasks.append(e)
            if isinstance(e, roaming.GiveUp):
                assert self.r.mode is Mode.CLOSED

    @rule(dt=st.integers(0, 3 * S))
    def time_passes(self, dt):
        self.now += dt
        self._effects(self.r.handle_timeout(self.now))

    @rule()
    def heard(self):
        self.r.heard(self.now)

    @precondition(lambda self: self.r.mode is Mode.CONNECTING)
    @rule(lease=st.sampled_from([None, 3 * S]))
    def welcome(self, lease):
        self.r.welcomed(self.now, lease)

    @rule(kinds=st.lists(st.sampled_from(list(SubKind)), max_size=3))
    def subscriptions(self, kinds):
        self.kinds = kinds

    @rule(reason=st.sampled_from(list(Reason)))
    def advice(self, reason):
        self._effects(self.r.advised(self.now, reason, (Candidate("b:1", 1),), self.kinds))

    @rule(address=st.sampled_from(["b:1", "c:1"]))
    def ask(self, address):
        self._effects(self.r.move_asked(address))

    @precondition(lambda self: self.tasks)
    @rule(ok=st.booleans())
    def task_ends(self, ok):
        task = self.tasks.pop(0)
        if isinstance(task, roaming.Follow):
            probes = [Probe("b:1", 1, False, False)] if ok else []
            self._effects(self.r.probed(self.now, task.reason, 10**7, probes, self.kinds))
        elif isinstance(task, roaming.MoveTo):
            if ok and self.r.mode is Mode.MOVING:
                self._effects(self.r.switched(self.now, task.address, None, None, self.kinds))
            else:
                self._effects(self.r.move_failed(self.kinds))
        elif ok and self.r.mode is Mode.FAILING_OVER:
            self._effects(self.r.switched(self.now, task.address, 3 * S, None, self.kinds))
        else:
            self._effects(self.r.attempt_failed(self.now))

    @rule()
    def lost(self):
        self.tasks.clear()  # the driver cancels what was under way
        self._effects(self.r.lost(self.now, self.kinds, "gone"))

    @rule()
    def close(self):
        self.r.close()

    @rule()
    def reading(self):
        self.r.reading_paused(self.now)
        self.r.reading_resumed(self.now)

    @invariant()
    def consistent(self):
        r = self.r
        assert r.waiting is (r.mode in (Mode.MOVING, Mode.FAILING_OVER))
        deadline = r.next_deadline()
        if r.mode is Mode.CLOSED:
            assert deadline is None
        elif deadline is not None:
            assert deadline >= self.now - 3 * S  # nothing overdue beyond the last step
        if roaming.RoamTimer.HEARTBEAT in r.deadlines:
            assert r.watching
        if roaming.RoamTimer.BACKOFF in r.deadlines:
            assert r.mode is Mode.FAILING_OVER
        assert r.address not in r.failover


TestRoaming = RoamingMachine.TestCase
TestRoaming.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)



SKEW_US = 1_000_000


@st.composite
def move_window(draw):
    """Events of up to three pubends (ticks: microseconds of one clock), each reaching the old broker
    within the clock-skew allowance of its publishing (or, `late`, up to three times that: a repair);
    the old broker sends them to the client in the order they reached it, the client taking them as
    slowly as drawn (a backlog builds at the broker). The old connection serves until `cut`; then
    the client resumes (a failover: `lost` at the cut; or a move whose old connection serves on
    beside the new one, `overlap` longer)."""
    pubends = draw(st.lists(st.sampled_from("abc"), min_size=1, max_size=3, unique=True))
    late = draw(st.booleans())
    reached = []  # (at the old broker, pubend, tick)
    for p in pubends:
        at = 0
        for t in sorted(draw(st.sets(st.integers(1, 5_000_000), max_size=12))):
            at = max(at, t + draw(st.integers(0, 3 * SKEW_US if late else SKEW_US - 1)))  # in its pubend's order
            reached.append((at, p, t))
    events, received = [], 0  # (received by the client, pubend, tick)
    for at, p, t in sorted(reached):
        received = max(received, at) + draw(st.integers(0, 2_000_000))
        events.append((received, p, t))
    cut = draw(st.integers(0, 6_000_000))
    overlap = 0 if draw(st.booleans()) else draw(st.integers(1, 1_000_000))
    mix = draw(st.lists(st.booleans(), max_size=80))  # which connection's message comes next
    turns = draw(st.permutations(range(len(events))))  # the new broker's interleaving of the pubends
    return events, cut, overlap, mix, turns, late


@settings(max_examples=300, deadline=None)
@given(move_window())
def test_a_moved_plain_cursor_gets_every_event_once_in_order(window):
    """The move window, as a property: whatever the old connection delivered before the cut and
    beside the new one after it, and the new broker after the resume tick, the application gets
    every event once, each pubend's in order. Late events are caught up by the position of their
    pubend: exactly once for a pubend it had heard from (the others rely on the allowance)."""
    events, cut, overlap, mix, turns, late = window
    heard = {p for received, p, _ in events if received <= cut}
    assume(not late or heard == {p for _, p, _ in events})
    cursor = Cursor(clock_skew_allowance_ns=SKEW_US * US)
    cursor.confirmed(None, 0, 0)  # SUBSCRIBED before the first tick, at its clock's 0
    got = []
    for received, p, t in events:
        if received <= cut:
            got += cursor.arrived([event(p, t)], received * US)
    if not overlap:
        cursor.lost(cut * US)  # a failover: the connection was lost
    start, positions, _ = cursor.resume((cut + overlap // 2) * US)
    assert positions is None and isinstance(start, int)
    # the new broker: every tick after `start`, each pubend's in order, the pubends interleaved
    after = sorted((p, t) for _, p, t in events if t > start)
    pubend_turns = [after[i][0] for i in sorted(range(len(after)), key=lambda i: turns[i])]
    queues = {p: [t for q, t in after if q == p] for p in "abc"}
    new = [(p, queues[p].pop(0)) for p in pubend_turns]
    old = [(p, t) for received, p, t in events if cut < received <= cut + overlap]
    flags = iter(mix)
    while new or old:
        source = old if old and (not new or next(flags, False)) else new
        p, t = source.pop(0)
        got += cursor.arrived([event(p, t)], (cut + overlap) * US)
    keys_got = [(e.pubend, e.tick) for e in got]
    assert sorted(keys_got) == sorted((p, t) for _, p, t in events)  # every one, once
    for p in "abc":
        ticks = [t for q, t in keys_got if q == p]
        assert ticks == sorted(ticks)
