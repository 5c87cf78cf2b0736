"""The one deadline structure (core/deadlines.py): typed keys, replacement, cancellation, order; the
earliest deadline of several machines kept as they move (`Alarm`); the one timer contract."""

import importlib
import inspect
import pkgutil
from typing import NamedTuple

from hypothesis import given, settings
from hypothesis import strategies as st

import tidings.core
from tidings.core.broker import timed
from tidings.core.deadlines import Alarm, Deadlines, TimedMachine
from tidings.core.durable.subscriptions import DURABLE_SAVE, DURABLE_SILENCE


class Save(NamedTuple):
    pass


class Silence(NamedTuple):
    pass


class Conn(NamedTuple):
    conn: int


class Lease(NamedTuple):
    conn: int


def test_keys_of_two_types_are_two_timers_even_when_their_values_are_equal():
    assert Save() == Silence() and Conn(3) == Lease(3)  # tuples: equal values, yet two timers each
    d: Deadlines[Save | Silence | Conn | Lease] = Deadlines()
    d.set(Silence(), 5)
    d.set(Save(), 100)
    d.set(Conn(3), 7)
    d.set(Lease(3), 9)
    assert Silence() in d and d.when(Silence()) == 5 and d.when(Save()) == 100 and len(d) == 4
    assert d.pop_due(10) == [Silence(), Conn(3), Lease(3)] and [type(k) for k in d.pop_due(10)] == []
    d.cancel(Lease(3))
    assert d.next_deadline() == 100 and d.pop_due(100) == [Save()]


def test_the_brokers_durable_timers_do_not_replace_each_other():
    """DURABLE_SAVE, always set in an overlay broker, once hid DURABLE_SILENCE (both are `()`)."""
    d: Deadlines[object] = Deadlines()
    d.set(DURABLE_SILENCE, 5)
    d.set(DURABLE_SAVE, 100)
    assert d.when(DURABLE_SILENCE) == 5 and [type(k).__name__ for k in d.pop_due(10)] == ["DurableSilenceTimer"]


def test_a_key_set_again_moves_and_ties_fire_in_the_order_they_were_set():
    d: Deadlines[Conn] = Deadlines()
    d.set(Conn(1), 10)
    d.set(Conn(2), 10)
    d.set(Conn(3), 10)
    d.set(Conn(1), 20)  # replaced: its old entry is skipped when it surfaces
    d.set_earliest(Conn(2), 30)  # already due earlier: stays
    d.set_earliest(Conn(3), 5)
    assert d.next_deadline() == 5
    assert d.pop_due(10) == [Conn(3), Conn(2)] and d.pop_due(20) == [Conn(1)] and d.next_deadline() is None


# ---- the earliest deadline of several machines, kept as they move (Alarm) ------------------------


def watched(count: int) -> tuple[Alarm, list[Deadlines[Conn]]]:
    """`count` machines' deadlines telling one alarm, which walks them when it does not know."""
    alarm = Alarm()
    machines: list[Deadlines[Conn]] = [Deadlines(alarm) for _ in range(count)]
    alarm.watch(*machines)
    return alarm, machines


def walk(machines: list[Deadlines[Conn]]) -> int | None:
    live = [d for d in (m.next_deadline() for m in machines) if d is not None]
    return min(live) if live else None


OPS = st.lists(st.tuples(st.sampled_from(["set", "set_earliest", "cancel", "pop_due", "ask"]), st.integers(0, 2),
                         st.integers(0, 5), st.integers(0, 40)), max_size=80)

def operate(d: Deadlines[Conn], op: str, conn: int, when: int, now: int) -> int:
    """One timer operation of the Hypothesis runs below on `d`; the time after it."""
    if op == "set":
        d.set(Conn(conn), now + when)
    elif op == "set_earliest":
        d.set_earliest(Conn(conn), now + when)
    elif op == "cancel":
        d.cancel(Conn(conn))
    elif op == "pop_due":
        now += when
        d.pop_due(now)
    return now


@settings(max_examples=300, deadline=None)
@given(OPS)
def test_the_alarm_always_gives_what_a_walk_of_the_machines_gives(ops):
    """Any timer operations on three machines, asked between any of them (an input moves several
    timers, or none, before the runtime asks)."""
    alarm, machines = watched(3)
    now = 0
    for op, m, conn, when in [*ops, ("ask", 0, 0, 0)]:
        if op == "ask":
            assert alarm.next_deadline() == walk(machines) == alarm.walk()
        else:
            now = operate(machines[m], op, conn, when, now)


def test_an_input_that_moves_no_earliest_timer_walks_nothing():
    alarm, (a, b) = watched(2)
    a.set(Conn(1), 10)
    assert alarm.next_deadline() == 10 and alarm.walks == 1
    b.set(Conn(2), 50)  # later: the earliest holds
    b.set(Conn(2), 40)  # moved, but was not the earliest
    b.cancel(Conn(2))
    a.set(Conn(3), 5)  # earlier: known at once
    assert alarm.next_deadline() == 5 and alarm.walks == 1
    a.cancel(Conn(3))  # the earliest left: the next ask walks
    assert alarm.next_deadline() == 10 and alarm.walks == 2
    assert a.pop_due(10) == [Conn(1)] and alarm.next_deadline() is None and alarm.walks == 3


# ---- the one timer contract ----------------------------------------------------------------------


def classes_with_timers() -> set[type]:
    """Every class under tidings.core that defines handle_timeout itself (the contract's Protocol aside)."""
    found: set[type] = set()
    for info in pkgutil.walk_packages(tidings.core.__path__, "tidings.core."):
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if (inspect.isclass(value) and value.__module__ == info.name and "handle_timeout" in vars(value)
                    and value is not TimedMachine):
                found.add(value)
    return found


def test_every_machine_with_timers_is_checked_against_the_one_contract():
    listed = set(timed.MACHINES)
    assert classes_with_timers() == listed  # a new one is added to core/broker/timed.py, where mypy checks it
    for machine in listed:
        assert list(inspect.signature(machine.handle_timeout).parameters) == ["self", "now"], machine
        assert list(inspect.signature(machine.next_deadline).parameters) == ["self"], machine


class Composer:
    """Machines kept by an alarm of the composer's own, under the broker's (as the cluster member's)."""

    def __init__(self, parent: Alarm, count: int) -> None:
        self.alarm = Alarm(parent)
        self.machines: list[Deadlines[Conn]] = [Deadlines(self.alarm) for _ in range(count)]
        self.alarm.watch(*self.machines)

    def next_deadline(self) -> int | None:
        return self.alarm.next_deadline()


NESTED_OPS = st.lists(st.tuples(st.sampled_from(["set", "set_earliest", "cancel", "pop_due", "ask", "ask_below"]),
                                st.integers(0, 2), st.integers(0, 5), st.integers(0, 40)), max_size=80)


@settings(max_examples=300, deadline=None)
@given(NESTED_OPS)
def test_a_composers_own_alarm_and_the_one_above_it_give_what_walks_give(ops):
    """Two machines under a composer's alarm, one beside it under the broker's: both alarms give
    what a walk of their machines gives, whichever is asked when."""
    top = Alarm()
    composer = Composer(top, 2)
    beside: Deadlines[Conn] = Deadlines(top)
    top.watch(composer, beside)
    machines = [*composer.machines, beside]
    now = 0
    for op, m, conn, when in [*ops, ("ask", 0, 0, 0), ("ask_below", 0, 0, 0)]:
        if op == "ask_below":
            assert composer.next_deadline() == walk(composer.machines)
        elif op == "ask":
            assert top.next_deadline() == walk(machines) == top.walk()
        else:
            now = operate(machines[m], op, conn, when, now)
