"""Curiosity (core/reliability/curiosity.py): when a stream nacks its gaps and when it asks again.

Driven through its public interface only: a real `Istream` whose knowledge arrives in pieces, in
any order, some never; the machine's `changed`/`heard`/`moved` after each arrival, as the tree
streams call them, and its `handle_timeout` at each deadline. A rule-based Hypothesis machine checks
the rules in every state: no nack before the stream has been curious for GCT (later gaps ride with
an earlier one's nack: consolidation), and every gap tick nacked by GCT after it appeared; a nack
names only unknown ticks; an unanswered nack is not repeated before NRT's floor (counted from when
its round of nacks began), nor backed off past its cap; the state table and the fields agree; a
stream with gaps always has its timer set.
"""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from tidings.core.reliability.curiosity import (
    Curiosity,
    CuriosityConfig,
    CuriosityEvent,
    CuriosityState,
    SendNack,
    StreamCuriosity,
    TreePruned,
)
from tidings.core.reliability.istream import Istream, StreamLimits
from tidings.core.states import ForbiddenTransition

GCT = 100
NRT_MIN = 300
NRT_MAX = 2_000
TICKS = 64
CONFIG = CuriosityConfig(GCT, NRT_MIN, NRT_MAX)
LIMITS = StreamLimits(cache_bytes_max=1 << 20, nack_ranges_max=64, nack_range_ticks_max=1_000,
                      piece_bytes_max=1 << 20)


def stream(upstream: str | None = "up") -> Istream:
    ist = Istream("t/#", "p", 0, LIMITS)
    ist.upstream = upstream
    ist.attach(1, 0)
    return ist


def arrive(machine: Curiosity, ist: Istream, now: int, after: int, through: int) -> None:
    """Knowledge of (after, through] (all silence) came from upstream, as the tree streams take it."""
    machine.heard(now, ist)
    if ist.accumulate(after, through, (), ()):
        machine.moved(now, ist)
    machine.changed(now, ist)


def run_until(machine: Curiosity, end: int) -> list[tuple[int, SendNack]]:
    sent: list[tuple[int, SendNack]] = []
    for _ in range(1_000):
        deadline = machine.next_deadline()
        if deadline is None or deadline > end:
            break
        sent += [(deadline, e) for e in machine.handle_timeout(deadline) if isinstance(e, SendNack)]
    return sent


def test_a_gap_waits_gct_then_is_nacked_and_repeated_after_nrt() -> None:
    machine = Curiosity(CONFIG, lambda tree: False)
    ist = stream()
    machine.watch(ist)
    arrive(machine, ist, 0, 0, 10)
    assert machine.state("t/#", "p") is CuriosityState.QUIET and machine.next_deadline() is None
    arrive(machine, ist, 5, 20, 30)  # (10, 20] missing
    assert machine.state("t/#", "p") is CuriosityState.CURIOUS
    sent = run_until(machine, 5 + GCT + 2 * NRT_MIN + NRT_MIN // 2)
    assert [(at, e.address, e.message.ranges) for at, e in sent][:1] == [(5 + GCT, "up", ((10, 20),))]
    assert len(sent) >= 2 and sent[1][0] - sent[0][0] >= NRT_MIN
    assert machine.state("t/#", "p") is CuriosityState.REPEATING
    arrive(machine, ist, sent[-1][0] + 1, 10, 20)  # answered: the gap closes
    assert machine.state("t/#", "p") is CuriosityState.QUIET and machine.next_deadline() is None
    assert machine.nacks_sent == len(sent)


def test_gaps_of_recalled_ticks_are_nacked_at_once() -> None:
    machine = Curiosity(CONFIG, lambda tree: False)
    ist = stream()
    machine.watch(ist)
    arrive(machine, ist, 0, 0, 50)
    ist.pieces_for(ist.consumers[1])  # the subscription had it all: the stream forgets (0, 50]
    ist.bound_memory()
    ist.attach(2, 10)  # a catchup from 10: (10, 50] is wanted again, and not in flight
    machine.changed(1, ist)
    assert machine.next_deadline() == 1
    sent = run_until(machine, 1)
    assert [e.message.ranges for _, e in sent] == [((10, 50),)]


def test_a_stream_without_upstream_waits_and_a_pruned_tree_is_reported() -> None:
    pruned: set[str] = set()
    machine = Curiosity(CONFIG, pruned.__contains__)
    ist = stream(None)
    machine.watch(ist)
    arrive(machine, ist, 0, 20, 30)
    ist.upstream = None  # (repairing: no parent yet)
    assert run_until(machine, 10 * NRT_MIN) == []
    assert machine.next_deadline() is not None  # it asks once the tree has a parent again
    pruned.add("t/#")
    assert machine.handle_timeout(machine.next_deadline() or 0) == [TreePruned("t/#")]
    machine.unwatch("t/#", "p")
    assert machine.next_deadline() is None and machine.state("t/#", "p") is None


def test_the_state_table_drives_the_moves_and_refuses_one_it_does_not_list() -> None:
    c = StreamCuriosity()
    c.move(CuriosityEvent.GAP)
    c.move(CuriosityEvent.NACK)
    c.move(CuriosityEvent.REPEAT)
    assert c.state is CuriosityState.REPEATING
    c.move(CuriosityEvent.CLOSED)
    assert c.state is CuriosityState.QUIET
    with pytest.raises(ForbiddenTransition):
        c.move(CuriosityEvent.REPEAT)  # a repeat with nothing nacked: our bug


class CuriosityMachine(RuleBasedStateMachine):
    """One stream under arrivals in any order; time moves by deadlines and by steps."""

    def __init__(self) -> None:
        super().__init__()
        self.machine = Curiosity(CONFIG, lambda tree: False)
        self.ist = stream()
        self.machine.watch(self.ist)
        self.now = 0
        self.known = [False] * (TICKS + 1)  # tick -> known here (index 0 unused)
        self.gap_since: dict[int, int] = {}  # unknown tick below the top -> when it first was
        self.nacked_at: dict[int, int] = {}  # tick -> when the nack round it was last nacked in began
        self.curious_since: int | None = None  # since when the stream has had gaps without a break

    def _note_gaps(self) -> None:
        top = max((t for t in range(1, TICKS + 1) if self.known[t]), default=0)
        for t in range(1, top + 1):
            if not self.known[t]:
                self.gap_since.setdefault(t, self.now)
        for t in [t for t in self.gap_since if self.known[t]]:
            del self.gap_since[t]
            self.nacked_at.pop(t, None)
        if not self.gap_since:
            self.curious_since = None
        elif self.curious_since is None:
            self.curious_since = self.now

    def _timeouts(self, end: int) -> None:
        for _ in range(1_000):
            at = self.machine.next_deadline()
            if at is None or at > end:
                break
            nacks = [e for e in self.machine.handle_timeout(at) if isinstance(e, SendNack)]
            self.now = at
            # a nack round starts when the curiosity is cleared: NRT counts from there, not from each
            # tick's own nack (gaps found later in a round ride with it, and are asked again with it)
            round_ns = self.ist.curiosity.curious_ns
            for nack in nacks:
                assert round_ns is not None
                for after, through in nack.message.ranges:
                    for t in range(after + 1, through + 1):
                        assert not self.known[t], f"nacked known tick {t}"
                        assert self.curious_since is not None and at - self.curious_since >= GCT, "nacked before GCT"
                        last = self.nacked_at.get(t)
                        assert last is None or round_ns - last >= NRT_MIN, f"tick {t} again after {round_ns - last}"
                        self.nacked_at[t] = round_ns
        self.now = max(self.now, end)

    @rule(after=st.integers(0, TICKS - 1), width=st.integers(1, 16), dt=st.integers(0, 400))
    def knowledge_arrives(self, after: int, width: int, dt: int) -> None:
        self._timeouts(self.now + dt)
        through = min(TICKS, after + width)
        arrive(self.machine, self.ist, self.now, after, through)
        for t in range(after + 1, through + 1):
            self.known[t] = True
        self._note_gaps()

    @rule(dt=st.integers(1, 3 * NRT_MAX))
    def time_passes(self, dt: int) -> None:
        self._timeouts(self.now + dt)

    @invariant()
    def fields_agree_with_the_state(self) -> None:
        state = self.machine.state("t/#", "p")
        c = self.ist.curiosity
        assert (c.curious_ns is None) == (state in (CuriosityState.QUIET, CuriosityState.CURIOUS))
        assert c.nack_interval_ns <= NRT_MAX

    @invariant()
    def a_stream_with_gaps_has_its_timer_set(self) -> None:
        if self.ist.gaps():
            assert self.machine.next_deadline() is not None
            assert self.machine.state("t/#", "p") is not CuriosityState.QUIET
        else:
            assert self.machine.state("t/#", "p") is CuriosityState.QUIET

    @invariant()
    def a_gap_older_than_gct_has_been_nacked(self) -> None:
        deadline = self.machine.next_deadline()
        for t, since in self.gap_since.items():
            if self.now - since > GCT and (deadline is None or deadline > self.now):
                assert t in self.nacked_at, f"tick {t} in a gap since {since}, now {self.now}, never nacked"


TestCuriosityMachine = CuriosityMachine.TestCase
TestCuriosityMachine.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
