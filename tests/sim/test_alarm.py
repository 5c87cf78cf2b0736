"""The broker's earliest deadline, kept as its machines' timers move (core/deadlines.py `Alarm`),
is after every input what a walk of every machine's `next_deadline()` gives: checked at each ask of
every broker of a simulated overlay under loss and broker failures, where links drop, trees
repair, nacks and leases run and brokers restart."""

from __future__ import annotations

import pytest

from tidings.core.broker.broker import Broker
from tidings.sim.delivery_scenario import DeliveryScenario, run_delivery


def test_the_alarm_gives_what_a_walk_of_every_machine_gives_after_every_input(monkeypatch: pytest.MonkeyPatch) -> None:
    asks: dict[int, int] = {}
    alarms: dict[int, Broker] = {}
    kept = Broker.next_deadline

    def checked(self: Broker) -> int | None:
        earliest = kept(self)
        assert earliest == self.walk_deadlines()
        asks[id(self)] = asks.get(id(self), 0) + 1
        alarms[id(self)] = self
        return earliest

    monkeypatch.setattr(Broker, "next_deadline", checked)
    result = run_delivery(DeliveryScenario(seed=3, brokers=10, events_per_publisher=40, loss=0.02,
                                           faults=("forwarder", "publisher")))
    assert not result.problems and result.delivered > 0, result.problems
    walks = sum(b.alarm.walks for b in alarms.values())
    asked = sum(asks.values())
    assert len(alarms) > 8 and asked > 1000
    assert walks < asked / 4, (walks, asked)  # most inputs move no earliest timer: no walk (about 1 in 10)
