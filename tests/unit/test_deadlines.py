"""The one deadline structure (core/deadlines.py): typed keys, replacement, cancellation, order."""

from typing import NamedTuple

from tidings.core.deadlines import Deadlines
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
