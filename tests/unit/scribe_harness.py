"""A deterministic in-test network of ScribeAgents over an ideal Pastry overlay.

The overlay is a static sorted list of live nodes that every node knows completely: a route goes to
a node sharing a longer prefix with the key, else to the node numerically closest to the key, which
delivers. Prefixes are counted in bits (Pastry with b = 1) and each hop takes the shortest such jump,
so even a few dozen nodes give routes of several hops and trees with forwarders. Messages wait in
one FIFO queue and take no time; time moves only in `advance`, which wakes each agent at its
deadline. Every message is round-tripped through msgpack, so what the agents send must be wire-able.
Failures are silent unless a test reports them (`report_failure`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

import msgpack

from tidings.core.multicast.agent import ScribeAgent, ScribeConfig
from tidings.core.multicast.effects import DeliverLocal, ParentSuspected, ScribeEffect, extend_repairs
from tidings.core.overlay.envelope import Deliver, Forward, PeerSend, RouteMessage, RouteTo
from tidings.core.overlay.node_id import ID_BITS, NodeRef, node_id_from, ring_distance

SECOND = 1_000_000_000
LEAF_HALF = 4


def shared_prefix_bits(a: int, b: int) -> int:
    return ID_BITS - (a ^ b).bit_length()


def wire(value: Any) -> Any:
    return msgpack.unpackb(msgpack.packb(value), use_list=True)


def node(name: str) -> NodeRef:
    return NodeRef(node_id_from(name), f"{name}:7000")


class Network:
    def __init__(self, count: int, config: ScribeConfig | None = None) -> None:
        self.config = config or ScribeConfig()
        self.now = 0
        self.alive: dict[str, NodeRef] = {}
        self.agents: dict[str, ScribeAgent] = {}
        self.queue: deque[tuple[str, str, Any]] = deque()
        self.delivered: dict[str, list[tuple[str, list[Any]]]] = {}
        self.upcalls: list[tuple[str, ScribeEffect]] = []
        self.trace: list[tuple[int, str, str, Any]] = []
        self.repair_extra: Callable[[ParentSuspected], Any] | None = None
        for i in range(count):
            self.add(node(f"n{i}"), update_leaf_sets=False)
        self.update_leaf_sets()

    # -- membership ----------------------------------------------------------------------------

    def add(self, ref: NodeRef, update_leaf_sets: bool = True) -> ScribeAgent:
        self.agents[ref.address] = ScribeAgent(ref, self.config)
        self.alive[ref.address] = ref
        self.alive = dict(sorted(self.alive.items(), key=lambda item: item[1].node_id))
        self.delivered[ref.address] = []
        if update_leaf_sets:
            self.update_leaf_sets()
        return self.agents[ref.address]

    def kill(self, address: str) -> None:
        """A silent crash: the node's messages and timers stop, nobody is told."""
        del self.alive[address]

    def report_failure(self, address: str) -> None:
        """Pastry noticed the crash: every live node hears node_failed."""
        ref = self.agents[address].me
        for live in list(self.alive):
            self.apply(live, self.agents[live].node_failed(self.now, ref))
        self.run()

    def update_leaf_sets(self) -> None:
        ring = list(self.alive.values())
        for i, ref in enumerate(ring):
            members: list[NodeRef] = []
            for j in range(1, LEAF_HALF + 1):
                for other in (ring[(i + j) % len(ring)], ring[(i - j) % len(ring)]):
                    if other != ref and other not in members:
                        members.append(other)
            self.apply(ref.address, self.agents[ref.address].leaf_set_changed(self.now, members))
        self.run()

    # -- the ideal overlay ---------------------------------------------------------------------

    def root_of(self, key: int) -> NodeRef:
        return min(self.alive.values(), key=lambda n: (ring_distance(key, n.node_id), n.node_id))

    def next_hop(self, at: NodeRef, key: int) -> NodeRef | None:
        closest = self.root_of(key)
        if closest == at:
            return None
        here = shared_prefix_bits(at.node_id, key)
        longer = [n for n in self.alive.values() if shared_prefix_bits(n.node_id, key) > here]
        if not longer:
            return closest
        # the shortest jump; among equals the one most like `at` after the prefix, which spreads the
        # children evenly the way Pastry's choice by network proximity does
        return min(longer, key=lambda n: (shared_prefix_bits(n.node_id, key), n.node_id ^ at.node_id))

    # -- running -------------------------------------------------------------------------------

    def apply(self, at: str, effects: list[ScribeEffect]) -> None:
        if self.repair_extra is not None:
            effects = extend_repairs(effects, self.repair_extra)
        for effect in effects:
            if type(effect) is PeerSend:
                self.queue.append(("direct", effect.address, (at, wire(effect.message))))
            elif type(effect) is RouteTo:
                message = RouteMessage(effect.key, self.alive[at], 0, wire(effect.payload))
                self.queue.append(("route", at, message))
            elif type(effect) is DeliverLocal:
                self.delivered[at].append((effect.tree, effect.event))
            else:
                self.upcalls.append((at, effect))

    def run(self, steps_max: int = 100_000) -> None:
        for _ in range(steps_max):
            if not self.queue:
                return
            kind, to, item = self.queue.popleft()
            if to not in self.alive:
                continue
            self.trace.append((self.now, kind, to, item))
            if kind == "direct":
                sender, message = item
                self.apply(to, self.agents[to].handle(self.now, sender, message))
            else:
                self.route_step(to, item)
        raise AssertionError("the network did not settle")

    def route_step(self, at: str, message: RouteMessage) -> None:
        agent = self.agents[at]
        hop = self.next_hop(self.alive[at], message.key)
        if hop is None:
            self.apply(at, agent.on_deliver(self.now, Deliver(message)))
            return
        effects, onward = agent.on_forward(self.now, Forward(message, hop))
        self.apply(at, effects)
        if onward is not None:
            moved = RouteMessage(onward.key, onward.source, onward.hops + 1, onward.payload)
            self.queue.append(("route", hop.address, moved))

    def advance(self, duration_ns: int) -> None:
        """Let `duration_ns` pass, waking every live agent at its deadlines in order."""
        end = self.now + duration_ns
        self.run()
        while True:
            due = [(d, a) for a in self.alive if (d := self.agents[a].next_deadline()) is not None and d <= end]
            if not due:
                break
            self.now = max(self.now, min(due)[0])
            for deadline, address in due:
                if deadline <= self.now:
                    self.apply(address, self.agents[address].handle_timeout(self.now))
            self.run()
        self.now = end

    # -- conveniences --------------------------------------------------------------------------

    def do(self, address: str, call: Callable[[ScribeAgent, int], list[ScribeEffect]]) -> None:
        self.apply(address, call(self.agents[address], self.now))
        self.run()

    def subscribe(self, address: str, tree: str, extra: Any = None) -> None:
        self.do(address, lambda agent, now: agent.subscribe(now, tree, extra))

    def unsubscribe(self, address: str, tree: str) -> None:
        self.do(address, lambda agent, now: agent.unsubscribe(now, tree))

    def publish(self, address: str, tree: str, event: list[Any]) -> None:
        self.do(address, lambda agent, now: agent.publish(now, tree, event))

    def received(self, tree: str) -> dict[str, list[list[Any]]]:
        """What each live node delivered locally in `tree`, by address (only nodes with some)."""
        out: dict[str, list[list[Any]]] = {}
        for address, items in self.delivered.items():
            events = [event for t, event in items if t == tree]
            if events and address in self.alive:
                out[address] = events
        return out

    def tree_status(self, tree: str) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for address in self.alive:
            for entry in self.agents[address].status():
                if entry["name"] == tree:
                    out[address] = entry
        return out

    def upcalls_of(self, shape: type) -> list[tuple[str, Any]]:
        return [(at, effect) for at, effect in self.upcalls if type(effect) is shape]
