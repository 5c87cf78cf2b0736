"""The broker's earliest deadline, kept as its machines' timers move (core/deadlines.py `Alarm`),
is after every input what a walk of every machine's `next_deadline()` gives: checked at each ask of
every broker of a simulated overlay under loss and broker failures, where links drop, trees
repair, nacks and leases run and brokers restart; the same for the cluster member's own alarm
(its parent the broker's). And every `Deadlines` a broker holds, however deep in its machines,
tells that broker's alarm, directly or through the member's (one that did not would leave the
alarm blind to its timers)."""

from __future__ import annotations

import gc
from collections import deque

import pytest

from tidings.core.broker.broker import Broker
from tidings.core.deadlines import Deadlines
from tidings.sim.delivery_scenario import DeliveryScenario, run_delivery

CONTAINERS = (dict, list, tuple, set, frozenset, deque)


def deadlines_of(broker: Broker) -> list[Deadlines[object]]:
    """Every Deadlines reachable from `broker` through the project's objects and plain containers."""
    seen = {id(broker)}
    queue: deque[object] = deque([broker])
    found: list[Deadlines[object]] = []
    while queue:
        obj = queue.popleft()
        if isinstance(obj, Deadlines):
            found.append(obj)
        for ref in gc.get_referents(obj):
            if id(ref) in seen or not (isinstance(ref, CONTAINERS) or type(ref).__module__.startswith("tidings.")):
                continue
            seen.add(id(ref))
            queue.append(ref)
    return found


def test_the_alarm_gives_what_a_walk_of_every_machine_gives_after_every_input(monkeypatch: pytest.MonkeyPatch) -> None:
    asks: dict[int, int] = {}
    alarms: dict[int, Broker] = {}
    kept = Broker.next_deadline

    def checked(self: Broker) -> int | None:
        member = self.cluster.alarm if self.cluster is not None else None
        if member is not None and member.known:  # what the member answers from its alarm
            assert member.earliest == member.walk()
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
        blind = [d for d in held if d.alarm is None or broker.alarm not in (d.alarm, d.alarm.parent)]
        assert not blind, blind
    assert walks < asked / 4, (walks, asked)  # most inputs move no earliest timer: no walk (about 1 in 10)
