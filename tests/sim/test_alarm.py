"""The broker's earliest deadline, kept as its machines' timers move (core/deadlines.py `Alarm`),
is after every input what a walk of every machine's `next_deadline()` gives: checked at each ask of
every broker of a simulated overlay under loss and broker failures, where links drop, trees
repair, nacks and leases run and brokers restart; the same for the alarms under the broker's (the
cluster member's, and under it Scribe's, the reliability node's and the directory's). And every
`Deadlines` a broker holds, however deep in its machines, tells that broker's alarm, directly or
through the alarms between (one that did not would leave the alarm blind to its timers)."""

from __future__ import annotations

import gc
from collections import deque
from typing import TypeVar

import pytest

from tidings.core.broker.broker import Broker
from tidings.core.deadlines import Alarm, Deadlines
from tidings.sim.delivery_scenario import DeliveryScenario, run_delivery

CONTAINERS = (dict, list, tuple, set, frozenset, deque)
T = TypeVar("T")


def reachable(broker: Broker, kind: type[T]) -> list[T]:
    """Every `kind` reachable from `broker` through the project's objects and plain containers."""
    seen = {id(broker)}
    queue: deque[object] = deque([broker])
    found: list[T] = []
    while queue:
        obj = queue.popleft()
        if isinstance(obj, kind):
            found.append(obj)
        for ref in gc.get_referents(obj):
            if id(ref) in seen or not (isinstance(ref, CONTAINERS) or type(ref).__module__.startswith("tidings.")):
                continue
            seen.add(id(ref))
            queue.append(ref)
    return found


def deadlines_of(broker: Broker) -> list[Deadlines[object]]:
    return reachable(broker, Deadlines)


def alarms_of(broker: Broker) -> list[Alarm]:
    """The alarms under the broker's (the cluster member's and those of its machines)."""
    return [a for a in reachable(broker, Alarm) if a is not broker.alarm]


def tells(d: Deadlines[object], top: Alarm) -> bool:
    """`d` tells `top`, directly or through the alarms between."""
    alarm = d.alarm
    while alarm is not None and alarm is not top:
        alarm = alarm.parent
    return alarm is top


def test_the_alarm_gives_what_a_walk_of_every_machine_gives_after_every_input(monkeypatch: pytest.MonkeyPatch) -> None:
    asks: dict[int, int] = {}
    alarms: dict[int, Broker] = {}
    kept = Broker.next_deadline

    def checked(self: Broker) -> int | None:
        for alarm in alarms_of(self):  # the member's and those under it: what each answers when known
            assert not alarm.known or alarm.earliest == alarm.walk(), alarm
        earliest = kept(self)
        assert earliest == self.alarm.walk()
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
    for broker in alarms.values():
        held = deadlines_of(broker)
        assert len(held) >= 11  # the broker's, reading's, partial frames', leases', lifecycle's, and the cluster's six
        blind = [d for d in held if not tells(d, broker.alarm)]
        assert not blind, blind
    assert walks < asked / 4, (walks, asked)  # most inputs move no earliest timer: no walk (about 1 in 10)
