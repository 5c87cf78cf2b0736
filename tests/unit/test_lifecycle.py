"""The broker's lifecycle machine (core/broker/lifecycle.py): join deadline, drain, retention."""

from __future__ import annotations

import pytest

from tidings.core.broker.lifecycle import DRAIN_MOVES, DrainState, Lifecycle, Retention
from tidings.core.effects import ApplyRetention, Drained, JoinTimedOut, PeerRefused
from tidings.core.states import ForbiddenTransition

S = 1_000_000_000


class View:
    def __init__(self) -> None:
        self.joined = False
        self.wall_us = 7_000_000
        self.movable = 0
        self.owed = 0

    def movable_clients(self) -> int:
        return self.movable

    def undelivered(self, now: int) -> int:
        return self.owed


def machine() -> tuple[Lifecycle, View]:
    view = View()
    return Lifecycle(view, Retention(bytes_max=100, age_ns=3 * S, check_interval_ns=10 * S)), view


def test_retention_is_asked_on_its_cadence_with_the_wall_clock():
    life, _view = machine()
    assert life.next_deadline() is None
    life.start(0)
    assert life.next_deadline() == 10 * S and life.handle_timeout(9 * S) == []
    assert life.handle_timeout(10 * S) == [ApplyRetention(7_000_000, 100, 3_000_000)]
    assert life.next_deadline() == 20 * S


def test_a_join_not_complete_by_its_deadline_gives_up_naming_the_last_failure():
    life, _view = machine()
    life.start(0)
    life.join_through(0, "m:1", 5 * S)
    life.join_attempt_failed("other:2", "refused")  # not the join's address: not counted
    life.join_attempt_failed("m:1", "ConnectionRefusedError")
    life.peer_refused(PeerRefused(0, "m:1", "dialler", "credential", "m:1 requires a cluster credential"))
    life.peer_refused(PeerRefused(3, "m:1", "acceptor", "credential", "not ours"))
    assert life.handle_timeout(5 * S) == [JoinTimedOut("m:1", 5 * S, 2, "m:1 requires a cluster credential")]


def test_a_join_complete_in_time_is_not_reported():
    life, view = machine()
    life.join_through(0, "m:1", 5 * S)
    view.joined = True
    life.join_attempt_failed("m:1", "late")
    assert life.join_attempts_failed == 0 and life.handle_timeout(5 * S) == []


def test_a_drain_waits_for_clients_then_for_what_is_owed():
    life, view = machine()
    view.movable, view.owed = 2, 1
    assert life.drain_requested(1 * S, 5 * S, advised=True) == [] and life.drain is DrainState.MOVING
    view.movable = 0
    assert life.look(2 * S) == [] and life.drain is DrainState.DELIVERING
    view.owed = 0
    assert life.look(3 * S) == [Drained(2 * S, 0, 0)] and life.drain is DrainState.DRAINED
    assert life.next_deadline() is None and life.drain_requested(4 * S, 5 * S, advised=True) == []


def test_a_drain_ends_at_its_deadline_with_what_is_left():
    life, view = machine()
    view.movable, view.owed = 1, 3
    life.drain_requested(0, 5 * S, advised=True)
    assert life.handle_timeout(5 * S) == [Drained(5 * S, 1, 3)] and not life.draining


def test_without_anyone_to_advise_a_drain_only_waits_for_what_is_owed():
    life, view = machine()
    view.movable = 4  # clients, but no neighbour to advise them to
    assert life.drain_requested(0, 5 * S, advised=False) == [Drained(0, 4, 0)]


def test_the_drain_table_refuses_going_back():
    with pytest.raises(ForbiddenTransition):
        DRAIN_MOVES.move(DrainState.DELIVERING, DrainState.MOVING)
