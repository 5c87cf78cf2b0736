"""The Scribe paper's experiment: 1,500 groups on a transit-stub Internet, beside IP multicast.

Theory of operation. Castro, Druschel, Kermarrec and Rowstron (Scribe, IEEE JSAC 2002) evaluate
Scribe on 100,000 end nodes of a 5,050-router transit-stub network with 1,500 groups whose sizes
follow a Zipf-like law: the group of rank r has floor(N * r^-1.25 + 0.5) members (rank 1: every
node; rank 1,500: 11 of 100,000), chosen uniformly at random. `ScribeExperiment` plays it with the
production machines: every host runs the broker's own `ClusterMember` (Pastry and Scribe), built
in the steady state (build.py) with proximity neighbour selection on the topology's delays
(transit_stub.py), so routing-table entries are the nearest of their candidates; the members take
their leaf sets as known to their leaves, so the build sends nothing.

1. Subscriptions: every (member, group) SUBSCRIBE is issued at a seeded random instant in
   `subscribe_window_ns`, and the overlay routes them (trees are the union of the routes).
2. Node stress, read from every agent's status: per node, the number of trees in which it has a
   non-empty children table, and its children entries over all trees.
3. One event per group, published by the group's rendez-vous point at one instant (the paper's
   publisher caches the root's address; publishing at the root measures the tree alone), carried
   down the trees by the agents. Every EVENT message sent is counted on the physical links of its
   route (`MessageNet.on_send`), and each member's local delivery is timed.
4. IP multicast in the same topology, from the root's router: the shortest-path tree to the
   members' routers. Its delay to a member is the unicast shortest-path delay, so per group
   RMD = max Scribe delay / max IP delay and RAD = mean / mean over the members other than the
   root (whose delay is 0 both ways). Its link stress: each link of the tree carries one copy.

The network carries whole messages with no jitter and no loss, so a Scribe delay is exactly the sum
of its hops' shortest-path delays and RAD >= 1 holds by the triangle inequality. The liveness
timers (keep-alives, heartbeats, refreshes) are set to an hour: nothing fails here, and at 100,000
brokers their traffic would only cost time. `children_max` is Scribe's `children_per_tree_max`;
None (the default) leaves it unbounded, as the paper's Scribe without its bottleneck remover.

Everything random comes from streams derived from the seed, so one seed is one run (the report
carries the trace digest); the experiment never reads a clock (the command times its phases).
"""

from __future__ import annotations

import random
import statistics
from array import array
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from tidings.core.multicast.agent import ScribeConfig
from tidings.core.multicast.effects import DeliverLocal
from tidings.core.multicast.trees import tree_key
from tidings.core.overlay.node import OverlayConfig
from tidings.core.units import SECOND_NS
from tidings.core.wire.types import ScribeType
from tidings.sim.overlay.build import install_steady
from tidings.sim.overlay.scribe import UPCALLS, cluster_members
from tidings.sim.overlay.sim import OverlaySim, closest_live
from tidings.sim.overlay.transit_stub import TransitStub, TransitStubShape

HOUR_NS = 3600 * SECOND_NS
ZIPF_EXPONENT = 1.25

Progress = Callable[[str, int, int], None]


def group_sizes(nodes: int, groups: int, exponent: float = ZIPF_EXPONENT) -> list[int]:
    """The paper's law: rank r (from 1) has floor(N * r^-exponent + 0.5) members, at least 1."""
    return [max(1, min(nodes, int(nodes * r ** -exponent + 0.5))) for r in range(1, groups + 1)]


def quiet_configs(children_max: int | None, nodes: int, groups: int) -> tuple[OverlayConfig, ScribeConfig]:
    """Production machines with their liveness timers at an hour (nothing fails in this run)."""
    overlay = OverlayConfig(keepalive_interval_ns=HOUR_NS, failure_timeout_ns=3 * HOUR_NS,
                            routing_repair_interval_ns=HOUR_NS, revive_interval_ns=HOUR_NS)
    scribe = ScribeConfig(heartbeat_interval_ns=HOUR_NS, parent_timeout_ns=3 * HOUR_NS,
                          refresh_interval_ns=HOUR_NS, child_timeout_ns=3 * HOUR_NS,
                          children_per_tree_max=nodes if children_max is None else children_max,
                          trees_max=max(ScribeConfig().trees_max, groups))
    return overlay, scribe


def summarise(values: Any) -> dict[str, float]:
    """mean, median, p90, max of a non-empty sequence of numbers."""
    ordered = sorted(float(v) for v in values)
    if not ordered:
        return {"mean": 0.0, "median": 0.0, "p90": 0.0, "max": 0.0}
    return {"mean": round(statistics.fmean(ordered), 3), "median": round(statistics.median(ordered), 3),
            "p90": round(ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))], 3), "max": round(ordered[-1], 3)}


class _Deliveries:
    """When each member first delivered its group's event locally, and how many came twice."""

    def __init__(self, sim: OverlaySim, names: list[str]) -> None:
        self.sim = sim
        self.at: dict[str, dict[int, int]] = {name: {} for name in names}
        self.duplicates = 0

    def effect(self, host: int, eff: Any) -> None:
        if type(eff) is DeliverLocal:
            got = self.at[eff.tree]
            if host in got:
                self.duplicates += 1
            else:
                got[host] = self.sim.world.now
        elif not isinstance(eff, UPCALLS):
            raise AssertionError(f"n{host}: unexpected effect {eff!r}")


@dataclass
class ScribeExperiment:
    nodes: int
    groups: int = 1500
    seed: int = 1
    children_max: int | None = None
    subscribe_window_ns: int = 10 * SECOND_NS
    settle_ns: int = 10 * SECOND_NS
    sample_max: int = 16
    shape: TransitStubShape | None = None

    def __post_init__(self) -> None:
        if self.nodes < 2:
            raise ValueError("--nodes must be at least 2")
        if self.groups < 1:
            raise ValueError("--groups must be at least 1")
        if self.children_max is not None and self.children_max < 1:
            raise ValueError("--children-max must be at least 1")

    def run(self, progress: Progress | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
        """(the summary, the distributions) of one run."""
        say = progress or (lambda phase, done, total: None)
        rng_root = random.Random(f"{self.seed}/scribe-experiment")
        say("topology", 0, 1)
        topology = TransitStub(self.nodes, random.Random(f"{self.seed}/topology"), self.shape)
        say("topology", 1, 1)
        overlay, scribe = quiet_configs(self.children_max, self.nodes, self.groups)
        sim = OverlaySim(self.nodes, self.seed, cluster_members(overlay, scribe), topology=topology,
                         jitter_fraction=0.0)
        install_steady(sim, overlay, sim.world.derive_rng("build"), self.sample_max,
                       progress=lambda done, total: say("build", done, total), announce=False)

        names = [f"group-{r}" for r in range(1, self.groups + 1)]
        sizes = group_sizes(self.nodes, self.groups)
        members_rng = random.Random(f"{self.seed}/members")
        members = [array("i", sorted(members_rng.sample(range(self.nodes), size))) for size in sizes]
        deliveries = _Deliveries(sim, names)
        sim.on_effect = deliveries.effect
        self._subscribe_all(sim, names, members, rng_root, say)
        tables, children, largest_table = self._node_stress(sim)
        hosts, ids = sim.sorted_live()
        roots = [closest_live(tree_key(name), hosts, ids) for name in names]
        published_ns, sources, destinations = self._publish_all(sim, names, roots)
        say("publish", 1, 1)

        penalties, missed = self._delay_penalties(topology, names, members, roots, deliveries.at, published_ns)
        scribe_links = self._scribe_link_stress(topology, sources, destinations)
        ip_links = self._ip_link_stress(topology, members, roots)
        say("measure", 1, 1)
        summary = self._summary(topology, sim, sizes, penalties, tables, children, scribe_links, ip_links,
                                missed, deliveries.duplicates, len(sources))
        summary["largest_children_table"] = largest_table
        distributions = {
            "group_sizes": sizes,
            "rmd": [p[0] for p in penalties], "rad": [p[1] for p in penalties],
            "node_tables": list(tables), "node_children": list(children),
            "link_stress_scribe": [int(v) for v in scribe_links if v],
            "link_stress_ip": [int(v) for v in ip_links if v],
        }
        return summary, distributions

    # ---- phases --------------------------------------------------------------------------------

    def _publish_all(self, sim: OverlaySim, names: list[str],
                     roots: list[int]) -> tuple[int, array[int], array[int]]:
        """Each root publishes its group's event at one instant: (that instant, the sender and the
        receiver of every EVENT message sent)."""
        sources: array[int] = array("i")
        destinations: array[int] = array("i")

        def count(src: int, dst: int, message: list[Any]) -> None:
            if message[0] == ScribeType.EVENT:
                sources.append(src)
                destinations.append(dst)

        sim.net.on_send = count
        published_ns = sim.world.now
        for g, name in enumerate(names):
            member = sim.members[roots[g]]
            sim.apply(roots[g], member.publish(published_ns, name, [g]))  # type: ignore[union-attr]
        sim.run(self.settle_ns)
        sim.net.on_send = None
        return published_ns, sources, destinations

    def _subscribe_all(self, sim: OverlaySim, names: list[str], members: list[array[int]],
                       rng: random.Random, say: Progress) -> None:
        world = sim.world
        start = world.now
        window = self.subscribe_window_ns
        total = sum(len(m) for m in members)

        def subscribe(host: int, name: str) -> None:
            member = sim.members[host]
            sim.apply(host, member.subscribe(world.now, name))  # type: ignore[union-attr]

        for name, hosts in zip(names, members, strict=True):
            for host in hosts:
                world.call_at(start + rng.randrange(window), subscribe, host, name)
        step = window // 20
        for k in range(1, 21):
            world.run(until_ns=start + k * step)
            say("subscribe", k * total // 20, total)
        world.run(until_ns=start + window + self.settle_ns)

    def _node_stress(self, sim: OverlaySim) -> tuple[array[int], array[int], int]:
        """Per host: trees with a non-empty children table, and children entries in all of them;
        and the largest single children table."""
        tables, children = array("i", bytes(4 * sim.n)), array("i", bytes(4 * sim.n))
        largest = 0
        for host in range(sim.n):
            member = sim.members[host]
            for entry in member.scribe.status():  # type: ignore[union-attr]
                if entry["children"]:
                    tables[host] += 1
                    children[host] += len(entry["children"])
                    largest = max(largest, len(entry["children"]))
        return tables, children, largest

    @staticmethod
    def _delay_penalties(topology: TransitStub, names: list[str], members: list[array[int]], roots: list[int],
                         deliveries: dict[str, dict[int, int]],
                         published_ns: int) -> tuple[list[tuple[float, float]], int]:
        penalties: list[tuple[float, float]] = []
        missed = 0
        for g, name in enumerate(names):
            got, root = deliveries[name], roots[g]
            scribe_ns: list[int] = []
            ip_ns: list[int] = []
            for host in members[g]:
                if host not in got:
                    missed += 1
                    continue
                if host == root:
                    continue
                scribe_ns.append(got[host] - published_ns)
                ip_ns.append(topology.one_way_us(root, host) * 1000)
            if ip_ns:
                penalties.append((max(scribe_ns) / max(ip_ns), sum(scribe_ns) / sum(ip_ns)))
        return penalties, missed

    @staticmethod
    def _scribe_link_stress(topology: TransitStub, sources: array[int], destinations: array[int]) -> Any:
        """Copies per physical link of every EVENT message sent (each copy on each link of its route)."""
        src = np.frombuffer(sources, dtype=np.int32).astype(np.int64)
        dst = np.frombuffer(destinations, dtype=np.int32).astype(np.int64)
        routers = np.frombuffer(topology.host_router, dtype=np.int32).astype(np.int64)
        router_links = topology.router_path_links(routers[src], routers[dst], np.ones(len(src), dtype=np.int64))
        lan = np.bincount(src, minlength=topology.n) + np.bincount(dst, minlength=topology.n)
        return np.concatenate([router_links, lan])

    @staticmethod
    def _ip_link_stress(topology: TransitStub, members: list[array[int]], roots: list[int]) -> Any:
        """Copies per physical link when IP multicast sends one message to each group from its root."""
        routers = np.frombuffer(topology.host_router, dtype=np.int32)
        counts = np.zeros(topology.links, dtype=np.int64)
        for hosts, root in zip(members, roots, strict=True):
            others = np.frombuffer(hosts, dtype=np.int32).astype(np.int64)
            others = others[others != root]
            if not len(others):
                continue
            np.add.at(counts, topology.multicast_router_links(int(routers[root]), routers[others]), 1)
            counts[topology.edges + root] += 1
            counts[topology.edges + others] += 1
        return counts

    def _summary(self, topology: TransitStub, sim: OverlaySim, sizes: list[int],
                 penalties: list[tuple[float, float]], tables: array[int], children: array[int],
                 scribe_links: Any, ip_links: Any, missed: int, duplicates: int, copies: int) -> dict[str, Any]:
        def links(counts: Any) -> dict[str, Any]:
            used = [int(v) for v in counts if v]
            return {**summarise(used), "links_used": len(used), "copies": int(sum(used)),
                    "mean_all_links": round(float(counts.mean()), 3)}

        return {
            "experiment": "scribe", "nodes": self.nodes, "groups": self.groups, "seed": self.seed,
            "children_max": self.children_max, "subscriptions": sum(sizes),
            "largest_group": sizes[0], "smallest_group": sizes[-1],
            "topology": topology.describe(),
            "rmd": summarise(p[0] for p in penalties), "rad": summarise(p[1] for p in penalties),
            "node_tables": summarise(tables), "node_children": summarise(children),
            "link_stress_scribe": links(scribe_links), "link_stress_ip": links(ip_links),
            "event_messages": copies, "members_missed": missed, "duplicates": duplicates,
            "messages": sim.net.messages_sent, "virtual_s": round(sim.world.now / SECOND_NS, 3),
            "trace_digest": sim.world.trace_digest(),
        }



