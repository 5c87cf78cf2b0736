"""Scribe trees on the overlay simulator: brokers running the real composer, and an outside view.

Theory of operation. For the tree experiments every host runs the broker's own `ClusterMember`
(Pastry and Scribe composed, core/broker/cluster.py); the simulation carries its wire effects, and the
`TreeWatch` here takes the rest: it counts each `DeliverLocal` per host and event, and ignores the
reliability upcalls (`EventForwarded`, `ChildAdded`, `ParentSuspected`), which have no consumer in
these tests.

`tree_problems` checks a tree from outside, the way an oracle can and no broker could: the root
must be the live node numerically closest to the tree key, and every live subscriber must reach it
by following parent pointers through live nodes, each of which lists the previous one as a child.
Anything else is returned as one line per problem (an empty list means the tree is whole). It reads
the agents' `status()`, the same JSON the broker's status page shows.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from typing import Any

from tidings.core.broker.cluster import ClusterMember
from tidings.core.multicast.agent import ScribeConfig
from tidings.core.multicast.effects import ChildAdded, DeliverLocal, EventForwarded, ParentSuspected
from tidings.core.multicast.trees import tree_key
from tidings.core.overlay.node import OverlayConfig
from tidings.core.overlay.node_id import NodeRef
from tidings.sim.overlay.sim import OverlaySim, closest_live, host_of

UPCALLS = (EventForwarded, ChildAdded, ParentSuspected)


def cluster_members(overlay: OverlayConfig, scribe: ScribeConfig) -> Callable[[NodeRef, random.Random], ClusterMember]:
    return lambda me, rng: ClusterMember(me, overlay, scribe, rng)


class TreeWatch:
    """Drives subscribes and publishes from outside, and counts what each host delivers locally."""

    def __init__(self, sim: OverlaySim) -> None:
        self.sim = sim
        self.deliveries: dict[tuple[int, str, Any], int] = {}  # (host, tree, event id) -> count
        sim.on_effect = self._effect

    def _effect(self, host: int, eff: Any) -> None:
        if type(eff) is DeliverLocal:
            key = (host, eff.tree, eff.event[0])
            self.deliveries[key] = self.deliveries.get(key, 0) + 1
            self.sim.world.trace(f"n{host}", "deliver", eff.tree, eff.event[0])
        elif not isinstance(eff, UPCALLS):
            raise AssertionError(f"n{host}: unexpected effect {eff!r}")

    def subscribe(self, hosts: Iterable[int], tree: str) -> None:
        for host in hosts:
            self.sim.apply(host, self._member(host).subscribe(self.sim.world.now, tree))

    def publish(self, host: int, tree: str, event_id: int) -> None:
        assert self.sim.net.is_up(host), "a failed broker publishes nothing"
        self.sim.apply(host, self._member(host).publish(self.sim.world.now, tree, [event_id]))

    def missing(self, subscribers: Iterable[int], tree: str, event_id: int) -> list[int]:
        """The live subscribers that did not deliver `event_id` exactly once."""
        return [h for h in subscribers if self.sim.net.is_up(h)
                and self.deliveries.get((h, tree, event_id), 0) != 1]

    def _member(self, host: int) -> ClusterMember:
        member = self.sim.members[host]
        assert isinstance(member, ClusterMember)
        return member


def tree_entries(sim: OverlaySim, tree: str) -> dict[int, dict[str, Any]]:
    """Each live host's status entry for `tree`, when it has one."""
    out: dict[int, dict[str, Any]] = {}
    for host in sim.live():
        member = sim.members[host]
        assert isinstance(member, ClusterMember)
        for entry in member.scribe.status():
            if entry["name"] == tree:
                out[host] = entry
    return out


def tree_problems(sim: OverlaySim, tree: str, subscribers: Iterable[int]) -> list[str]:
    entries = tree_entries(sim, tree)
    hosts, ids = sim.sorted_live()
    root = closest_live(tree_key(tree), hosts, ids)
    problems: list[str] = []
    if "root" not in entries.get(root, {}).get("role", ""):
        problems.append(f"n{root}, the closest live node to the key, is not the root")
    for host in subscribers:
        if not sim.net.is_up(host):
            continue
        problem = _path_problem(sim, entries, host, root)
        if problem:
            problems.append(f"subscriber n{host}: {problem}")
    return problems


def _path_problem(sim: OverlaySim, entries: dict[int, dict[str, Any]], host: int, root: int) -> str | None:
    seen = {host}
    at = host
    while at != root:
        entry = entries.get(at)
        if entry is None:
            return f"n{at} on its path has no entry for the tree"
        if entry["parent"] is None:
            return f"n{at} on its path has no parent"
        parent = host_of(entry["parent"])
        if not sim.net.is_up(parent):
            return f"n{at}'s parent n{parent} is dead"
        if f"n{at}" not in entries.get(parent, {}).get("children", []):
            return f"n{parent} does not list n{at} as a child"
        if parent in seen:
            return f"the path loops at n{parent}"
        seen.add(parent)
        at = parent
    return None
