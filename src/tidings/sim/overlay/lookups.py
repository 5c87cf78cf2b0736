"""The routing experiment: lookups between random live brokers, hops counted, destinations checked.

Theory of operation. A `LookupMember` is the smallest composer over an `OverlayNode`: Pastry alone,
with an application that only counts. A lookup is a ROUTE whose payload is `[lookup id]`; at each
node `route_step` decides, a `Forward` is sent on with `forward` (which adds the hop), and a
`Deliver` ends the lookup with a `LookupDelivered(lookup, hops)` effect. The simulation carries
those effects to a `LookupRun`, which checks each delivery against the brute-force answer: the live
node numerically closest to the key (from the sorted list of live ids; with key = a live node's id
that is the node itself).

Failed next hops. The overlay core keeps no copy of what it forwarded, so when a ROUTE was sent to a
node that is dead, the runtime's report is what saves it: the simulation hands the undelivered
message back to the sender with `undelivered(...)` right after `peer_unreachable(...)` (a crashed
node resets the connection one latency later; a silent one is noticed after the runtime's
unanswered-message timeout). The lookup member re-routes it from there with the hop count it had
before the failed attempt, so:

- `hops` counts forwards that reached a live node (the paper's hop count);
- `detours` counts attempts on a dead node, each one a detection (a timeout or a reset) and a
  re-route; by the time it is re-routed, the dead node has left the sender's tables.

Lookups of a phase are issued at evenly spaced instants over `window_ns` of virtual time, while the
overlay's own timers (keep-alives, repairs) keep running, so "right after failures" means: before
keep-alives had time to notice (the failure timeout is longer than the window).
"""

from __future__ import annotations

import random
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tidings.core.overlay import messages as m
from tidings.core.overlay.envelope import Deliver, RouteMessage
from tidings.core.overlay.node import OverlayConfig, OverlayNode
from tidings.core.overlay.node_id import NodeRef
from tidings.core.units import SECOND_NS
from tidings.core.wire.types import OverlayType
from tidings.sim.overlay.sim import OverlaySim, closest_live


@dataclass(frozen=True, slots=True)
class LookupDelivered:
    lookup: int
    hops: int


@dataclass(frozen=True, slots=True)
class LookupDetour:
    """A lookup's next hop was dead: it is routed again from here."""

    lookup: int


class LookupMember:
    __slots__ = ("me", "overlay")

    def __init__(self, me: NodeRef, config: OverlayConfig, rng: random.Random) -> None:
        self.me = me
        self.overlay = OverlayNode(me, config, rng)

    def start(self, now: int, bootstrap: str | None) -> list[Any]:
        return list(self.overlay.start(now, bootstrap))

    def received(self, now: int, sender: str, message: list[Any]) -> list[Any]:
        if message[0] == OverlayType.ROUTE:
            return self._step(now, m.decode_route(message))
        return list(self.overlay.handle(now, sender, message))

    def rtt_measured(self, now: int, address: str, rtt_ns: int) -> list[Any]:
        return list(self.overlay.rtt_measured(now, address, rtt_ns))

    def peer_unreachable(self, now: int, address: str) -> list[Any]:
        return list(self.overlay.peer_unreachable(now, address))

    def handle_timeout(self, now: int) -> list[Any]:
        return list(self.overlay.handle_timeout(now))

    def next_deadline(self) -> int | None:
        return self.overlay.next_deadline()

    def lookup(self, now: int, key: int, lookup: int) -> list[Any]:
        return self._step(now, self.overlay.route(key, [lookup]))

    def undelivered(self, now: int, message: list[Any]) -> list[Any]:
        """A message this node sent never reached a live node: re-route a lookup from here."""
        if message[0] != OverlayType.ROUTE:
            return []
        sent = m.decode_route(message)
        back = RouteMessage(sent.key, sent.source, sent.hops - 1, sent.payload)
        return [LookupDetour(_lookup_id(sent)), *self._step(now, back)]

    def _step(self, now: int, message: RouteMessage) -> list[Any]:
        decision = self.overlay.route_step(now, message)
        if isinstance(decision, Deliver):
            return [LookupDelivered(_lookup_id(message), message.hops)]
        return [self.overlay.forward(decision)]


def _lookup_id(message: RouteMessage) -> int:
    lookup = message.payload[0]
    assert type(lookup) is int, "a lookup routes [its id]"
    return lookup


def lookup_members(config: OverlayConfig) -> Callable[[NodeRef, random.Random], LookupMember]:
    return lambda me, rng: LookupMember(me, config, rng)


@dataclass
class LookupResult:
    issued: int = 0
    delivered: int = 0
    wrong: int = 0  # delivered somewhere other than the live node closest to the key
    detours: int = 0
    histogram: dict[int, int] = field(default_factory=dict)

    @property
    def lost(self) -> int:
        return self.issued - self.delivered

    @property
    def mean_hops(self) -> float:
        return sum(h * c for h, c in self.histogram.items()) / max(1, self.delivered)

    @property
    def mean_hops_with_detours(self) -> float:
        """Counting each attempt on a dead node as a hop."""
        return (self.mean_hops * self.delivered + self.detours) / max(1, self.delivered)

    @property
    def max_hops(self) -> int:
        return max(self.histogram, default=0)

    def percentages(self) -> dict[int, float]:
        return {h: 100.0 * self.histogram[h] / max(1, self.delivered) for h in sorted(self.histogram)}

    def summary(self) -> dict[str, Any]:
        return {
            "lookups": self.issued, "delivered": self.delivered, "lost": self.lost, "wrong": self.wrong,
            "mean_hops": round(self.mean_hops, 4), "max_hops": self.max_hops,
            "mean_hops_with_detours": round(self.mean_hops_with_detours, 4),
            "detours_per_lookup": round(self.detours / max(1, self.issued), 4),
            "hops_percent": {str(h): round(p, 3) for h, p in self.percentages().items()},
        }


class LookupRun:
    """One phase of lookups over the live hosts as they are when it starts."""

    def __init__(self, sim: OverlaySim, count: int, rng: random.Random, window_ns: int = SECOND_NS,
                 progress: Callable[[int, int], None] | None = None) -> None:
        self.sim = sim
        self.count = count
        self.rng = rng
        self.window_ns = window_ns
        self.progress = progress
        self.result = LookupResult()
        self.expected = array("i", [-1]) * count

    def run(self, deadline_ns: int = 120 * SECOND_NS) -> LookupResult:
        sim, world = self.sim, self.sim.world
        hosts, ids = sim.sorted_live()
        start = world.now
        for i in range(self.count):
            source = hosts[self.rng.randrange(len(hosts))]
            key = ids[self.rng.randrange(len(ids))]
            self.expected[i] = closest_live(key, hosts, ids)
            world.call_at(start + i * self.window_ns // self.count, self._issue, i, source, key)
        previous = sim.on_effect
        sim.on_effect = self._effect
        try:
            self._run_until_done(start + self.window_ns + deadline_ns)
        finally:
            sim.on_effect = previous
        return self.result

    def _run_until_done(self, deadline_ns: int) -> None:
        result, step = self.result, max(1, self.count // 20)
        while result.delivered < self.count:
            target = min(self.count, result.delivered + step)

            def reached(t: int = target) -> bool:
                return result.delivered >= t

            if not self.sim.world.run_until(reached, deadline_ns):
                return  # lost lookups (message loss): counted, not waited for
            if self.progress is not None:
                self.progress(result.delivered, self.count)

    def _issue(self, lookup: int, source: int, key: int) -> None:
        member = self.sim.members[source]
        assert isinstance(member, LookupMember)
        self.result.issued += 1
        self.sim.apply(source, member.lookup(self.sim.world.now, key, lookup))

    def _effect(self, host: int, eff: Any) -> None:
        if type(eff) is LookupDelivered:
            result = self.result
            result.delivered += 1
            result.histogram[eff.hops] = result.histogram.get(eff.hops, 0) + 1
            if host != self.expected[eff.lookup]:
                result.wrong += 1
                self.sim.world.trace(f"n{host}", "lookup-wrong", eff.lookup, self.expected[eff.lookup])
        elif type(eff) is LookupDetour:
            self.result.detours += 1
        else:
            raise AssertionError(f"n{host}: unexpected effect {eff!r}")
