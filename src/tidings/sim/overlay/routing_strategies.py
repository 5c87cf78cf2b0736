"""PsEPR's routing question on one workload: broadcast, one spanning tree, a tree per channel, Scribe.

Theory of operation. PsEPR (Brett et al., WORLDS 2004, §5.1.2 and §6.3) first ran an n-to-n
broadcast between its message routers, then one static minimal spanning tree built from all-pairs
pings with interest-based forwarding, was weighing one spanning tree per channel, and named DHTs as
a topology to try. `RoutingExperiment` puts the four on one PLDB-like workload over the same
transit-stub Internet (transit_stub.py): `brokers` brokers; one channel per monitored host
(`channels`), published at a random broker (the host's); each channel has 1 to `subscribers_max`
subscribing brokers, plus, with `archive`, one broker holding the tuple store that subscribes to
every channel (PLDB's archive). One event is published per channel, and each strategy is measured:

- messages per event: broker-to-broker messages to deliver it to every subscribing broker;
- delay: per delivery, the one-way delay along the strategy's path, and its ratio to the direct
  (shortest-path) delay from the publisher's broker (the "stretch");
- state per broker: the peers and routing entries it keeps (connections; tree links; interest
  entries, one per (channel, neighbour) it forwards to; Pastry's table and leaf set and Scribe's
  tree entries and children);
- build: messages to set it up from nothing (pings the tree builders need, links set up, interest
  or subscriptions propagated);
- churn: `churn` brokers fail at once and as many new ones join. *Right after*: the fraction of
  live subscribing brokers of channels whose publisher lives that the next event reaches before
  any repair. *Repair*: the messages to reach the repaired state; then the fraction reached again.

Broadcast and the two kinds of spanning tree are computed from their definitions (a central
builder with the all-pairs latencies, as PsEPR's router had): the delay of a path is the sum of its
overlay links' shortest-path delays, a repair is counted as one message per link set up and per
interest entry sent. Scribe runs the production machines (`ClusterMember`) on the overlay
simulator with the production liveness timers: everything about it is measured, including the
failures' detection and the tree's own repair, and the background keep-alives it pays (reported
per broker per second and left out of the repair count).
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np

from tidings.core.multicast.agent import ScribeConfig
from tidings.core.multicast.effects import DeliverLocal
from tidings.core.overlay import messages as overlay_messages
from tidings.core.overlay.node import OverlayConfig
from tidings.core.units import SECOND_NS
from tidings.core.wire.types import OverlayType, ScribeType
from tidings.sim.overlay.build import install_steady
from tidings.sim.overlay.scribe import UPCALLS, cluster_members
from tidings.sim.overlay.sim import OverlaySim
from tidings.sim.overlay.transit_stub import TransitStub, TransitStubShape

STRATEGIES = ("broadcast", "spanning-tree", "tree-per-channel", "scribe")
PERIODIC = frozenset({OverlayType.KEEP_ALIVE, OverlayType.KEEP_ALIVE_ACK, ScribeType.HEARTBEAT, ScribeType.REFRESH})


@dataclass
class Workload:
    publisher: list[int]  # per channel: the publishing broker
    subscribers: list[list[int]]  # per channel: the subscribing brokers, distinct, sorted


def pldb_workload(brokers: int, channels: int, rng: random.Random, subscribers_max: int = 5,
                  archive: bool = True) -> Workload:
    tuple_store = rng.randrange(brokers)
    publisher = [rng.randrange(brokers) for _ in range(channels)]
    subscribers = []
    for _ in range(channels):
        chosen = set(rng.sample(range(brokers), rng.randint(1, subscribers_max)))
        if archive:
            chosen.add(tuple_store)
        subscribers.append(sorted(chosen))
    return Workload(publisher, subscribers)


def latency_us(topology: TransitStub, hosts: int) -> Any:
    """One-way shortest-path delays between hosts 0..hosts-1 (us), from the router matrix."""
    routers = np.frombuffer(topology.host_router, dtype=np.int32)[:hosts]
    lat = topology.router_us[np.ix_(routers, routers)].astype(np.int64) + 2 * topology.lan_us
    np.fill_diagonal(lat, 0)
    return lat


def mst(lat: Any, nodes: list[int]) -> list[tuple[int, int]]:
    """The minimal spanning tree of `nodes` on `lat` (Prim's, O(n^2) with numpy); its edges."""
    if len(nodes) < 2:
        return []
    idx = np.array(nodes)
    sub = lat[np.ix_(idx, idx)]
    n = len(nodes)
    inside = np.zeros(n, dtype=bool)
    inside[0] = True
    best = sub[0].astype(np.float64)
    via = np.zeros(n, dtype=np.int64)
    edges = []
    for _ in range(n - 1):
        cand = np.where(inside, np.inf, best)
        k = int(np.argmin(cand))
        edges.append((nodes[int(via[k])], nodes[k]))
        inside[k] = True
        closer = sub[k] < best
        best = np.where(closer, sub[k], best)
        via = np.where(closer, k, via)
    return edges


def _adjacency(edges: list[tuple[int, int]]) -> dict[int, list[int]]:
    adj: dict[int, list[int]] = {}
    for a, b in edges:
        adj.setdefault(a, []).append(b)
        adj.setdefault(b, []).append(a)
    return adj


def _rooted(adj: dict[int, list[int]], root: int, dead: frozenset[int] | set[int],
            lat: Any = None) -> tuple[dict[int, int], dict[int, int]]:
    """BFS from `root` avoiding `dead`: parent and (with `lat`) path delay (us) of every reached
    broker, in BFS order."""
    parent, delay = {root: root}, {root: 0}
    queue = deque([root])
    while queue:
        at = queue.popleft()
        for nxt in adj.get(at, ()):
            if nxt not in parent and nxt not in dead:
                parent[nxt] = at
                if lat is not None:
                    delay[nxt] = delay[at] + int(lat[at, nxt])
                queue.append(nxt)
    return parent, delay


def _tree_use(adj: dict[int, list[int]], publisher: int, subscribers: list[int], lat: Any,
              dead: frozenset[int] | set[int] = frozenset()) -> tuple[int, list[tuple[int, int]]]:
    """On a tree: (links an event crosses to reach every reachable subscriber, (subscriber,
    delay) of those reached)."""
    parent, delay = _rooted(adj, publisher, dead, lat)
    used: set[tuple[int, int]] = set()
    reached = []
    for s in subscribers:
        if s not in parent or s in dead:
            continue
        reached.append((s, delay[s]))
        at = s
        while at != publisher and (parent[at], at) not in used:
            used.add((parent[at], at))
            at = parent[at]
    return len(used), reached


@dataclass
class StrategyResult:
    delivered: float  # the fraction of subscribing brokers the event reached, before any churn
    messages_per_event: float
    delay_ms_mean: float
    stretch_mean: float
    stretch_p90: float
    state_mean: float
    state_max: int
    build_messages: int
    delivered_right_after: float
    repair_messages: int
    delivered_after_repair: float
    extra: dict[str, Any]

    def row(self) -> dict[str, Any]:
        return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in self.__dict__.items()}


def _stretch(pairs: list[tuple[int, int, int]]) -> tuple[float, float, float]:
    """(mean delay ms, mean stretch, p90 stretch) of (publisher, subscriber, delay us) deliveries."""
    if not pairs:
        return 0.0, 0.0, 0.0
    ratios = sorted(d / direct if direct else 1.0 for _, direct, d in pairs)
    return (sum(d for _, _, d in pairs) / len(pairs) / 1000, sum(ratios) / len(ratios),
            ratios[int(0.9 * (len(ratios) - 1))])


def _deliverable(work: Workload, dead: set[int]) -> list[tuple[int, list[int]]]:
    """(channel, live subscribers other than the publisher) of channels whose publisher lives."""
    return [(c, [s for s in subs if s not in dead and s != work.publisher[c]])
            for c, subs in enumerate(work.subscribers) if work.publisher[c] not in dead]


def broadcast(work: Workload, lat: Any, brokers: int, dead: set[int], joiners: int) -> StrategyResult:
    channels = len(work.publisher)
    pairs = [(p, int(lat[p, s]), int(lat[p, s])) for p, subs in zip(work.publisher, work.subscribers, strict=True)
             for s in subs if s != p]
    delay, stretch, p90 = _stretch(pairs)
    return StrategyResult(
        delivered=1.0, messages_per_event=float(brokers - 1), delay_ms_mean=delay, stretch_mean=stretch,
        stretch_p90=p90,
        state_mean=float(brokers - 1), state_max=brokers - 1, build_messages=brokers * (brokers - 1) // 2,
        delivered_right_after=1.0 if channels else 0.0,
        repair_messages=joiners * (brokers - 1), delivered_after_repair=1.0,
        extra={"links": brokers * (brokers - 1) // 2})


def spanning_tree(work: Workload, lat: Any, brokers: int, dead: set[int], joiners: int) -> StrategyResult:
    everyone = list(range(brokers))
    edges = mst(lat, everyone)
    adj = _adjacency(edges)
    messages, pairs = 0, []
    interest: set[tuple[int, int, int]] = set()
    for c, (p, subs) in enumerate(zip(work.publisher, work.subscribers, strict=True)):
        others = [s for s in subs if s != p]
        used, reached = _tree_use(adj, p, others, lat)
        messages += used
        pairs += [(p, int(lat[p, s]), d) for s, d in reached]
        interest |= _interest(adj, c, subs)
    delay, stretch, p90 = _stretch(pairs)
    state = np.zeros(brokers, dtype=np.int64)
    for a, b in edges:
        state[a] += 1
        state[b] += 1
    for b, _, _ in interest:
        state[b] += 1
    pings = brokers * (brokers - 1) // 2
    right_after = _tree_delivery(work, lambda c: adj, lat, dead)
    live = [b for b in range(brokers + joiners) if b not in dead]
    new_edges = mst(lat, live)
    new_adj = _adjacency(new_edges)
    new_interest: set[tuple[int, int, int]] = set()
    for c, subs in enumerate(work.subscribers):
        new_interest |= _interest(new_adj, c, [s for s in subs if s not in dead])
    changed = len({frozenset(e) for e in new_edges} - {frozenset(e) for e in edges})
    repair = joiners * (len(live) - 1) + changed + len(new_interest - interest)
    return StrategyResult(
        delivered=_tree_delivery(work, lambda c: adj, lat, set()),
        messages_per_event=messages / len(work.publisher), delay_ms_mean=delay, stretch_mean=stretch,
        stretch_p90=p90, state_mean=float(state.mean()), state_max=int(state.max()),
        build_messages=pings + len(edges) + len(interest), delivered_right_after=right_after,
        repair_messages=repair, delivered_after_repair=_tree_delivery(work, lambda c: new_adj, lat, dead),
        extra={"tree_links_changed": changed, "interest_entries": len(interest)})


def _interest(adj: dict[int, list[int]], channel: int, subscribers: list[int]) -> set[tuple[int, int, int]]:
    """PsEPR's interest: (broker, neighbour, channel) when a subscriber lies behind that neighbour."""
    if not subscribers:
        return set()
    root = subscribers[0]
    parent, _ = _rooted(adj, root, set())
    order = list(parent)  # BFS order from the root
    below = dict.fromkeys(order, 0)
    for s in subscribers:
        if s in below:
            below[s] += 1
    total = sum(below.values())
    for node in reversed(order[1:]):
        below[parent[node]] += below[node]
    out = set()
    for node in order[1:]:
        up = parent[node]
        if below[node]:
            out.add((up, node, channel))
        if total - below[node]:
            out.add((node, up, channel))
    return out


def _tree_delivery(work: Workload, tree_of: Any, lat: Any, dead: set[int]) -> float:
    wanted = got = 0
    for c, subs in _deliverable(work, dead):
        _, reached = _tree_use(tree_of(c), work.publisher[c], subs, lat, dead)
        wanted += len(subs)
        got += len(reached)
    return got / wanted if wanted else 1.0


def tree_per_channel(work: Workload, lat: Any, brokers: int, dead: set[int], joiners: int) -> StrategyResult:
    trees = []
    messages, pairs = 0, []
    state = np.zeros(brokers + joiners, dtype=np.int64)
    for p, subs in zip(work.publisher, work.subscribers, strict=True):
        members = sorted({p, *subs})
        edges = mst(lat, members)
        adj = _adjacency(edges)
        trees.append(edges)
        used, reached = _tree_use(adj, p, [s for s in subs if s != p], lat)
        messages += used
        pairs += [(p, int(lat[p, s]), d) for s, d in reached]
        for a, b in edges:
            state[a] += 1
            state[b] += 1
    delay, stretch, p90 = _stretch(pairs)
    adjs = [_adjacency(e) for e in trees]
    right_after = _tree_delivery(work, lambda c: adjs[c], lat, dead)
    repaired, changed = [], 0
    for c, (p, subs) in enumerate(zip(work.publisher, work.subscribers, strict=True)):
        members = sorted({p, *subs} - dead)
        if any(m in dead for m in {p, *subs}):
            new = mst(lat, members)
            changed += len({frozenset(e) for e in new} - {frozenset(e) for e in trees[c]})
            repaired.append(_adjacency(new))
        else:
            repaired.append(adjs[c])
    pings = brokers * (brokers - 1) // 2
    live = brokers + joiners - len(dead)
    return StrategyResult(
        delivered=_tree_delivery(work, lambda c: adjs[c], lat, set()),
        messages_per_event=messages / len(work.publisher), delay_ms_mean=delay, stretch_mean=stretch,
        stretch_p90=p90, state_mean=float(state[:brokers].mean()), state_max=int(state.max()),
        build_messages=pings + sum(len(e) for e in trees), delivered_right_after=right_after,
        repair_messages=joiners * (live - 1) + changed,
        delivered_after_repair=_tree_delivery(work, lambda c: repaired[c], lat, dead),
        extra={"tree_links_changed": changed})


class ScribeRun:
    """The production machines: Scribe trees over Pastry, with the production liveness timers."""

    def __init__(self, work: Workload, topology: TransitStub, lat: Any, brokers: int, seed: int,
                 joiners: int) -> None:
        self.work, self.lat, self.brokers = work, lat, brokers
        overlay = OverlayConfig()
        self.sim = sim = OverlaySim(brokers + joiners, seed, cluster_members(overlay, ScribeConfig()),
                                    topology=topology, jitter_fraction=0.0)
        install_steady(sim, overlay, sim.world.derive_rng("build"), hosts=range(brokers), announce=False)
        sim.run(SECOND_NS)
        self.delivered: dict[tuple[int, int, int], int] = {}  # (host, channel, round) -> arrival
        # messages sent, by what they are for: events (PUBLISH hops, EVENT copies), the periodic
        # liveness traffic (keep-alives, heartbeats, refreshes), and the rest (control)
        self.sent = {"event": 0, "periodic": 0, "control": 0}
        sim.on_effect = self._effect
        sim.net.on_send = self._count

    def _effect(self, host: int, eff: Any) -> None:
        if type(eff) is DeliverLocal:
            channel, round_ = eff.event[0], eff.event[1]
            assert type(channel) is int and type(round_) is int, "this sim publishes [channel, round]"
            self.delivered.setdefault((host, channel, round_), self.sim.world.now)
        elif not isinstance(eff, UPCALLS):
            raise AssertionError(f"n{host}: unexpected effect {eff!r}")

    def _count(self, src: int, dst: int, message: list[Any]) -> None:
        kind = message[0]
        if kind == ScribeType.EVENT or (kind == OverlayType.ROUTE
                                        and overlay_messages.decode_route(message).payload[0] == ScribeType.PUBLISH):
            self.sent["event"] += 1
        elif kind in PERIODIC:
            self.sent["periodic"] += 1
        else:
            self.sent["control"] += 1

    def _member(self, host: int) -> Any:
        return self.sim.members[host]

    def build(self) -> tuple[int, float, list[int]]:
        """Subscribe everyone: (tree build messages: SUBSCRIBE hops and the other control messages,
        plus one HEARTBEAT per adoption; periodic messages per broker per second; state per broker)."""
        sim = self.sim
        control = self.sent["control"]
        for c, subs in enumerate(self.work.subscribers):
            for host in subs:
                sim.apply(host, self._member(host).subscribe(sim.world.now, f"ch-{c}"))
        sim.run(5 * SECOND_NS)
        control = self.sent["control"] - control
        periodic = self.sent["periodic"]
        sim.run(10 * SECOND_NS)
        per_broker_s = (self.sent["periodic"] - periodic) / 10 / self.brokers
        children = 0
        state = []
        for m in map(self._member, range(self.brokers)):
            trees = m.scribe.status()
            children += sum(len(t["children"]) for t in trees)
            state.append(len(m.overlay.routing_table) + len(m.overlay.leaf_set)
                         + sum(1 + len(t["children"]) for t in trees))
        return control + children, per_broker_s, state

    def publish(self, round_: int, dead: set[int]) -> tuple[float, list[tuple[int, int, int]], int]:
        """One event per live channel: (fraction of live subscribers reached, (publisher, direct
        delay, delay) per delivery in us, messages carried)."""
        sim = self.sim
        carried = self.sent["event"]
        published = sim.world.now
        live = _deliverable(self.work, dead)
        for c, _ in live:
            p = self.work.publisher[c]
            sim.apply(p, self._member(p).publish(published, f"ch-{c}", [c, round_]))
        sim.run(3 * SECOND_NS)
        wanted, pairs = 0, []
        for c, subs in live:
            p = self.work.publisher[c]
            wanted += len(subs)
            pairs += [(p, int(self.lat[p, s]), (self.delivered[(s, c, round_)] - published) // 1000)
                      for s in subs if (s, c, round_) in self.delivered]
        return (len(pairs) / wanted if wanted else 1.0), pairs, self.sent["event"] - carried

    def churn(self, dead: set[int], joiners: int) -> None:
        """Fail `dead` silently, and start `joiners` new brokers, which join by the protocol."""
        sim = self.sim
        rng = sim.world.derive_rng("joiners")
        live = [h for h in range(self.brokers) if h not in dead]
        for host in sorted(dead):
            sim.fail_silently(host)
        for host in range(self.brokers, self.brokers + joiners):
            sim.start(host, sim.topology.nearest(host, rng.sample(live, min(16, len(live)))))


def scribe(work: Workload, topology: TransitStub, lat: Any, brokers: int, seed: int, dead: set[int],
           joiners: int, settle_ns: int = 30 * SECOND_NS) -> StrategyResult:
    run = ScribeRun(work, topology, lat, brokers, seed, joiners)
    build, per_broker_s, state = run.build()
    delivered, pairs, carried = run.publish(0, set())
    delay, stretch, p90 = _stretch(pairs)
    control = run.sent["control"]
    run.churn(dead, joiners)
    right_after, _, _ = run.publish(1, dead)  # published at once: the trees have not noticed
    run.sim.run(settle_ns)
    repair = run.sent["control"] - control  # joins, leaf-set and row repairs, re-SUBSCRIBEs
    after, _, _ = run.publish(2, dead)
    return StrategyResult(
        delivered=delivered, messages_per_event=carried / len(work.publisher), delay_ms_mean=delay,
        stretch_mean=stretch,
        stretch_p90=p90, state_mean=sum(state) / len(state), state_max=max(state), build_messages=build,
        delivered_right_after=right_after, repair_messages=repair, delivered_after_repair=after,
        extra={"periodic_messages_per_broker_s": round(per_broker_s, 2)})


@dataclass
class RoutingExperiment:
    brokers: int
    seed: int = 1
    channels: int = 500
    subscribers_max: int = 5
    archive: bool = True
    churn: int = 50
    settle_ns: int = 30 * SECOND_NS
    shape: TransitStubShape | None = None

    def __post_init__(self) -> None:
        if self.brokers < 4:
            raise ValueError("--brokers must be at least 4")
        if self.channels < 1 or not 1 <= self.subscribers_max < self.brokers:
            raise ValueError("--channels must be at least 1 and --subscribers-max between 1 and brokers - 1")
        if not 0 <= self.churn < self.brokers // 2:
            raise ValueError("--churn must be below half the brokers")

    def run(self) -> dict[str, Any]:
        rng = random.Random(f"{self.seed}/routing")
        work = pldb_workload(self.brokers, self.channels, rng, self.subscribers_max, self.archive)
        topology = TransitStub(self.brokers + self.churn, random.Random(f"{self.seed}/topology"), self.shape)
        lat = latency_us(topology, self.brokers + self.churn)
        dead = set(rng.sample(range(self.brokers), self.churn))
        results = {
            "broadcast": broadcast(work, lat, self.brokers, dead, self.churn),
            "spanning-tree": spanning_tree(work, lat, self.brokers, dead, self.churn),
            "tree-per-channel": tree_per_channel(work, lat, self.brokers, dead, self.churn),
            "scribe": scribe(work, topology, lat, self.brokers, self.seed, dead, self.churn, self.settle_ns),
        }
        return {"experiment": "routing", "brokers": self.brokers, "seed": self.seed, "channels": self.channels,
                "subscriptions": sum(len(s) for s in work.subscribers), "churn": self.churn,
                "strategies": {name: r.row() for name, r in results.items()}}
