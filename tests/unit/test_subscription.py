"""Subscription: one machine per local subscription (core/subscription/subscription.py, start.py).

Driven through its public inputs only: the rule-based machine below plays a broker around one
subscription (its own pubend's log with syncs, reads answered in pieces, retention, a blocked and
drained connection, another pubend's records from the trees, durable SILENCE, its end) and checks
after every step that no position goes back, that no record is delivered twice or out of order,
that every matching record up to its position was delivered or reported in a GAP, and that its
mode only moves as the table says.
"""

from __future__ import annotations

from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from tidings.core.channels import pattern_matches
from tidings.core.durable.checkpoint import Checkpoint
from tidings.core.durable.registrations import Registrations
from tidings.core.durable.subscriptions import DurableSubscriptions
from tidings.core.effects import Effect, ReadLog, Send
from tidings.core.errors import TidingsError
from tidings.core.inputs import LogState
from tidings.core.states import ForbiddenTransition
from tidings.core.subscription.start import check_subscribe, from_read, resolve_start
from tidings.core.subscription.subscription import MOVES, OPEN, Cause, Mode, Subscription
from tidings.core.wire import decoders, messages
from tidings.core.wire.frames import FrameDecoder

OWN, OTHER = "p-own", "p-other"
PATTERN = "a/#"
CHANNELS = ("a/x", "a/y", "b/z")


def record(pubend: str, tick: int, channel: str) -> bytes:
    return msgpack.packb([pubend, tick, channel, {}, "svc", "i", b"x"])


def decoded(effects: list[Effect]) -> list[Any]:
    out = []
    for e in effects:
        if type(e) is not Send:
            continue
        d = FrameDecoder(1 << 30)
        d.push(e.data)
        out += [decoders.decode_broker_message(body) for body in d.take()]
    return out


def log_state(first: int, last: int, released: int) -> LogState:
    return LogState(first_tick=first, last_tick=last, log_bytes=0, record_count=0, released_through=released)


# ---- start resolution and checks (moved out of the broker) -------------------------------------

def test_a_subscription_starting_now_takes_other_pubends_back_by_the_clock_skew_allowance():
    now = resolve_start(messages.Subscribe(1, "a", None, messages.START_NOW, 0, None), synced_tick=500,
                        released_through=100, wall_us=10_000_000, clock_skew_allowance_ns=2_000_000_000)
    assert (now.position, now.remote, now.end, now.from_oldest) == (500, 8_000_000, None, False)
    oldest = resolve_start(messages.Subscribe(1, "a", None, messages.START_OLDEST, 0, 900), 500, 100, 10, 0)
    assert (oldest.position, oldest.remote, oldest.end, oldest.from_oldest) == (100, 100, 500, True)
    after = resolve_start(messages.Subscribe(1, "a", None, messages.START_AFTER, 42, 300), 500, 100, 10, 0)
    assert (after.position, after.remote, after.end) == (42, 42, 300)


def test_a_subscribe_the_connection_may_not_open_is_refused_with_its_reason():
    plain = messages.Subscribe(1, "a", None, messages.START_NOW, 0, None)
    with pytest.raises(TidingsError, match="already exists"):
        check_subscribe(plain, {1: None}, 10, True)
    with pytest.raises(TidingsError, match="subscriptions_per_connection_max"):
        check_subscribe(plain, {2: None, 3: None}, 2, True)
    total = messages.Subscribe(1, "a", None, messages.START_AFTER, 5, None, messages.ORDER_TOTAL)
    with pytest.raises(TidingsError, match="starts now"):
        check_subscribe(total, {}, 10, True)
    with pytest.raises(TidingsError, match="overlay"):
        check_subscribe(messages.Subscribe(1, "a", None, messages.START_NOW, 0, None, messages.ORDER_TOTAL), {}, 10,
                        False)
    with pytest.raises(TidingsError):
        check_subscribe(messages.Subscribe(1, "a/#/b", None, messages.START_NOW, 0, None), {}, 10, False)
    with pytest.raises(TidingsError):
        check_subscribe(messages.Subscribe(1, "a", "x >", messages.START_NOW, 0, None), {}, 10, False)
    pattern, flt = check_subscribe(messages.Subscribe(1, "a/#", "x > 1", messages.START_NOW, 0, None), {}, 10, False)
    assert pattern == "a/#" and flt is not None and flt.matches({"x": 2}) and not flt.matches({"x": 0})


def test_a_read_is_a_bounded_subscribe_of_the_same_ticks():
    assert from_read(messages.Read(4, "a/#", "x > 1", 10, 20, spans=True)) == messages.Subscribe(
        4, "a/#", "x > 1", messages.START_AFTER, 10, 20)


# ---- the mode table ----------------------------------------------------------------------------

def test_the_table_refuses_what_it_does_not_list():
    assert MOVES.next(Mode.CATCHING_UP, Cause.CAUGHT_UP) is Mode.LIVE
    for terminal in (Mode.ENDED, Mode.AWAY):
        for cause in Cause:
            with pytest.raises(ForbiddenTransition):
                MOVES.next(terminal, cause)
    with pytest.raises(ForbiddenTransition, match="subscription: caught up in live"):
        MOVES.next(Mode.LIVE, Cause.CAUGHT_UP)


def test_a_total_order_subscription_is_live_at_once_and_never_reads_the_log():
    s = Subscription(1, 7, 1, OWN, "a", None, 50, None, total=True)
    assert s.advance(100, blocked=False, read_bytes_max=1 << 20) == ([], False) and s.mode is Mode.LIVE
    s.blocked(100)
    assert s.mode is Mode.BLOCKED and s.position == 50
    assert s.advance(200, blocked=False, read_bytes_max=1 << 20) == ([], False) and s.mode is Mode.LIVE


def test_a_bounded_read_ends_with_end_and_a_gap_for_what_retention_released():
    s = Subscription(1, 7, 3, OWN, PATTERN, None, 10, 40, bulk=True)
    (read,), ended = s.advance(500, blocked=False, read_bytes_max=1 << 20)
    assert type(read) is ReadLog and (read.after, read.through, ended) == (10, 40, False)
    effects, delivered = s.on_read([(25, record(OWN, 25, "a/x")), (30, record(OWN, 30, "b/z"))],
                                   log_state(21, 30, 20))
    gap, recs = decoded(effects)
    assert (gap.after, gap.through, gap.pubend) == (10, 20, OWN) and recs.count == 1 and delivered == 1
    (read,), _ = s.advance(500, blocked=False, read_bytes_max=1 << 20)
    assert (read.after, read.through) == (30, 40)
    assert s.on_read([], log_state(21, 30, 20)) == ([], 0)
    effects, ended = s.advance(500, blocked=False, read_bytes_max=1 << 20)
    assert ended and s.mode is Mode.ENDED and decoded(effects) == [messages.End(3, 40)]


def test_silence_moves_the_checkpoint_over_every_pubend_of_the_position_map():
    s = Subscription(1, 7, 2, OWN, PATTERN, None, 100, None)
    s.bind(None, {OWN: 100, OTHER: 5})
    assert s.advance(100, blocked=False, read_bytes_max=1) == ([], False) and s.live
    s.passed({OTHER: 70, OWN: 10_000})  # (the trees never speak for this broker's own pubend)
    (silence,) = decoded(s.silence(synced_tick=180))
    assert silence.positions == [[OTHER, 70], [OWN, 180]]
    assert s.silence(synced_tick=180) == []  # nothing moved since
    s.passed({OTHER: 60})  # a position never goes back
    assert s.positions[OTHER] == 70


def test_ticks_the_trees_lost_are_a_gap_and_move_the_position_map():
    s = Subscription(1, 7, 2, OWN, PATTERN, None, 100, None)
    (gap,) = decoded(s.lost(OTHER, 10, 40))
    assert (gap.sub, gap.after, gap.through, gap.pubend) == (2, 10, 40, OTHER)
    assert s.positions == {OWN: 100, OTHER: 40}


def test_the_durable_machine_binds_a_subscription_by_its_outcome_never_by_touching_it():
    regs = Registrations(expiry_us=10**9, registrations_max=4)
    durable = DurableSubscriptions(OWN, regs)
    checkpoint = Checkpoint(0, {OWN: 5})
    outcome = durable.begin(9, PATTERN, "", checkpoint, "a/#", None, "127.0.0.1:1")
    assert outcome.registration is not None and checkpoint.home is not None
    assert durable.forget(outcome.registration).unbound == [9]  # still served here: unbound, not held
    away = durable.begin(10, PATTERN, "", Checkpoint(0, {OWN: 5}), "a/#", None, "127.0.0.1:1")
    assert durable.end(10, away.registration, ended=False, wall_us=1) == (True, durable.end(11, None, True, 1)[1])
    with pytest.raises(TidingsError, match="no durable subscription"):
        durable.release(False, None, 3, [0, []])


# ---- the rule-based machine --------------------------------------------------------------------

class SubscriptionMachine(RuleBasedStateMachine):
    """A broker around one subscription, its own pubend's log and another pubend's stream."""

    def __init__(self) -> None:
        super().__init__()
        self.log: list[tuple[int, str]] = []  # own pubend's durable records (tick, channel)
        self.tick = 100
        self.released = 0
        self.blocked = False
        self.other_tick = 1_000
        self.other_matching: list[int] = []
        self.delivered: dict[str, list[int]] = {OWN: [], OTHER: []}
        self.skipped: list[tuple[int, int]] = []  # GAPs, and what a start at the oldest skipped
        self.start = 0
        self.from_oldest = False
        self.ends = 0
        self.silenced: dict[str, int] = {}

    @property
    def synced(self) -> int:
        return self.log[-1][0] if self.log else 100

    def _append(self, channels: list[str]) -> None:
        for channel in channels:
            self.tick += 1 + len(channel) % 3
            self.log.append((self.tick, channel))

    def _take(self, effects: list[Effect]) -> None:
        for msg in decoded(effects):
            if isinstance(msg, messages.Events):
                for fields in msg.records:
                    pubend, tick = fields[0], fields[1]
                    seen = self.delivered[pubend]
                    assert not seen or tick > seen[-1], f"{pubend} tick {tick} after {seen[-1:]}: twice or out of order"
                    assert fields[2].startswith("a/")
                    seen.append(tick)
            elif isinstance(msg, messages.Gap):
                self.skipped.append((msg.after, msg.through))
            elif isinstance(msg, messages.End):
                self.ends += 1
            elif isinstance(msg, messages.Silence):
                for pubend, tick in msg.positions:
                    assert tick > self.silenced.get(pubend, -1)
                    self.silenced[pubend] = tick

    def _advance(self) -> None:
        effects, _ = self.s.advance(self.synced, self.blocked, read_bytes_max=1 << 20)
        self._take(effects)

    @initialize(channels=st.lists(st.sampled_from(CHANNELS), max_size=8),
                start=st.sampled_from(["now", "oldest", "after"]), bounded=st.booleans(), released=st.integers(0, 4))
    def open(self, channels: list[str], start: str, bounded: bool, released: int) -> None:
        self._append(channels)
        ticks = [t for t, _ in self.log]
        self.released = ticks[min(released, len(ticks)) - 1] if ticks and released else 0
        kind = {"now": messages.START_NOW, "oldest": messages.START_OLDEST, "after": messages.START_AFTER}[start]
        after = ticks[len(ticks) // 2] if ticks else 0
        msg = messages.Subscribe(1, PATTERN, None, kind, after, self.synced if bounded else None)
        begin = resolve_start(msg, self.synced, self.released, 0, 0)
        self.start = begin.position
        self.from_oldest = begin.from_oldest
        self.s = Subscription(1, 7, 1, OWN, PATTERN, None, begin.position, begin.end, from_oldest=begin.from_oldest)
        self.mode = self.s.mode
        self.positions = dict(self.s.positions)
        self._advance()

    @rule(channels=st.lists(st.sampled_from(CHANNELS), min_size=1, max_size=5))
    def publish_and_sync(self, channels: list[str]) -> None:
        before = self.s.position
        self._append(channels)
        if self.s.live:  # the broker's fan-out of what became durable
            records = [record(OWN, t, c) for t, c in self.log if t > before and c.startswith("a/")]
            if records:
                self._take(self.s.deliver(records, OWN, self.synced))

    @precondition(lambda self: self.s.mode in OPEN and self.s.reading is not None)
    @rule(count=st.integers(1, 4))
    def answer_read(self, count: int) -> None:
        s = self.s
        assert s.reading is not None
        position, through = s.position, s.reading
        if self.released > position and self.from_oldest:  # skipped without a GAP by a start at the oldest
            self.skipped.append((position, self.released))
        self.from_oldest = False  # (later releases: a GAP, which `_take` records)
        floor = max(position, self.released)
        records = [(t, record(OWN, t, c)) for t, c in self.log if floor < t <= through][:max(1, count)]
        effects, _ = s.on_read(records, log_state(self.released + 1, self.synced, self.released))
        self._take(effects)
        self._advance()

    @precondition(lambda self: self.s.mode in OPEN)
    @rule(by=st.integers(1, 3))
    def retention(self, by: int) -> None:
        ticks = [t for t, _ in self.log if t > self.released]
        if ticks:
            self.released = ticks[min(by, len(ticks)) - 1]

    @precondition(lambda self: self.s.mode in OPEN and not self.blocked)
    @rule()
    def block(self) -> None:
        self.blocked = True
        self.s.blocked(self.synced)

    @precondition(lambda self: self.s.mode in OPEN and self.blocked)
    @rule()
    def drain(self) -> None:
        self.blocked = False
        if not self.s.live:
            self._advance()

    @precondition(lambda self: self.s.mode in OPEN and not self.blocked and self.s.end is None)
    @rule(channels=st.lists(st.sampled_from(CHANNELS), min_size=1, max_size=4))
    def from_the_trees(self, channels: list[str]) -> None:
        records = []
        for channel in channels:
            self.other_tick += 2
            if channel.startswith("a/"):
                records.append(record(OTHER, self.other_tick, channel))
                self.other_matching.append(self.other_tick)
        self._take(self.s.deliver(records))
        self.s.passed({OTHER: self.other_tick})

    @precondition(lambda self: self.s.mode in OPEN and self.s.end is None)
    @rule(ticks=st.integers(1, 5))
    def lost_in_the_trees(self, ticks: int) -> None:
        after, self.other_tick = self.other_tick, self.other_tick + ticks
        (gap,) = decoded(self.s.lost(OTHER, after, self.other_tick))
        assert (gap.after, gap.through, gap.pubend) == (after, self.other_tick, OTHER)
        assert self.s.positions[OTHER] == self.other_tick

    @precondition(lambda self: self.s.mode in OPEN and not self.s.durable and self.s.end is None)
    @rule()
    def bind(self) -> None:
        self.s.bind(7, {OWN: self.s.position})
        self.silenced = {OWN: self.s.position}

    @precondition(lambda self: self.s.mode in OPEN and self.s.durable)
    @rule()
    def silence(self) -> None:
        self._take(self.s.silence(self.synced))

    @precondition(lambda self: self.s.mode in OPEN)
    @rule(away=st.booleans())
    def close(self, away: bool) -> None:
        self.s.close(away)
        assert self.s.mode is (Mode.AWAY if away else Mode.ENDED)

    @invariant()
    def moves_only_by_the_table(self) -> None:
        """One input may make several moves (drained, then caught up): each one the table's."""
        reachable, frontier = {self.mode}, [self.mode]
        while frontier:
            mode = frontier.pop()
            for cause in Cause:
                if MOVES.allows(mode, cause) and (new := MOVES.next(mode, cause)) not in reachable:
                    reachable.add(new)
                    frontier.append(new)
        assert self.s.mode in reachable, f"{self.mode} -> {self.s.mode}"
        self.mode = self.s.mode

    @invariant()
    def no_position_goes_back(self) -> None:
        for pubend, tick in self.positions.items():
            assert self.s.positions[pubend] >= tick
        self.positions = dict(self.s.positions)

    @invariant()
    def every_matching_record_up_to_the_position_was_delivered_or_reported(self) -> None:
        delivered = set(self.delivered[OWN])
        for t, channel in self.log:
            if self.start < t <= self.s.position and channel.startswith("a/") and t not in delivered:
                assert any(a < t <= b for a, b in self.skipped), f"tick {t} missed"
        assert self.delivered[OTHER] == self.other_matching

    @invariant()
    def a_bounded_one_ends_once_at_its_end(self) -> None:
        if self.s.mode is Mode.ENDED and self.s.end is not None and self.ends:
            assert self.ends == 1 and self.s.position >= self.s.end
        assert self.ends <= 1


TestSubscriptionMachine = SubscriptionMachine.TestCase
TestSubscriptionMachine.settings = settings(max_examples=80, stateful_step_count=30, deadline=None)


@settings(max_examples=200)
@given(st.sampled_from(["a/#", "a/x", "#", "b/+", "c"]),
       st.lists(st.sampled_from(CHANNELS), max_size=12))
def test_a_batch_from_the_trees_is_taken_as_record_by_record_matching_takes_it(pattern, channels):
    """Without a filter a batch is matched once per channel of it: the records taken, their first
    and their frames are those of matching each record alone."""
    records = [record(OTHER, 10 + i, channel) for i, channel in enumerate(channels)]
    routed: list[tuple[str, dict[str, Any]]] = [(channel, {}) for channel in channels]
    s = Subscription(1, 7, 1, OWN, pattern, None, 0, None)
    picked = [i for i, channel in enumerate(channels) if pattern_matches(pattern, channel)]
    taken = s.take(routed, records) if records else None
    if not picked:
        assert taken is None
        return
    assert taken is not None and (taken.first, taken.delivered) == (picked[0], len(picked))
    assert decoded(taken.effects) == decoded(s.deliver([records[i] for i in picked]))
