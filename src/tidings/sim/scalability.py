"""The durable paper's scalability experiment (Gryphon durable, section 5.1, Figure 4) in the simulator.

Theory of operation. One publisher's broker (PHB, broker 0) and `shbs` subscriber brokers (SHBs)
form an overlay of real broker cores. Four publishers at the PHB publish 200 events/s each (the
paper's 800 events/s over 4 pubends; a tidings broker has one pubend, so here the four share it)
on `nodes/h<k>/load|mem`, k in 0..3. Every SHB hosts `subscribers_per_shb` durable subscribers
of `nodes/#` with the filter `host == "h<j mod 4>"`: each receives a quarter of the events, the
paper's 200 events/s, and all of them share one tree, so the SHB matches every event against
every filter (content filtering, as in Gryphon). The tree's rendez-vous point is the PHB when
`root_at_phb` (its name is chosen so that its nodeId is the closest to the tree's key): every
SHB is then a child of the PHB, as in the paper's star topology, unless Scribe routes a join
through another SHB, which then forwards (counted in `forwarders`).

What is measured. The paper raises the number of subscribers per SHB until the SHB saturates and
reports the aggregate rate to subscribers. A simulator has no CPU to saturate, so each broker's
own work is measured instead, by a meter hung around every `handle` of its core
(`BrokerNode.meter`), over the measurement window, beside the events its subscribers received
per virtual second:

- `calls` (CallMeter): the Python function calls (and calls of C functions) the core made, counted
  by a cProfile profiler per broker. Deterministic: the same seed does the same work on any machine,
  so a difference between two configurations is a difference in work, never noise. The profiler
  slows the core about threefold, which changes nothing that is counted.
- `cpu` (CpuMeter): the thread's CPU time inside the core (`time.thread_time_ns`, injected). Real
  seconds, but noisy on a shared machine (about 10 % from run to run); it converts calls to
  seconds (bench/scalability.py measures the nanoseconds per call once per sweep).

bench/scalability.py runs each configuration at two subscriber counts and fits, per SHB,
work = fixed + subscribers x per-subscriber work; the SHB's peak is the subscriber count at which
that work fills one core, times 200 events/s. Work that grows with the number of SHBs (the PHB's
sends, forwarding SHBs, SHBs that are rendez-vous points of the channel's empty trees) shows there
as a falling per-SHB peak or a saturated PHB.

Disconnections (the paper: each subscriber disconnects every 300 s for 5 s) are scaled down to
`disconnect_every_s` and `away_s`, staggered: each subscriber first drops its connection at a
seeded instant in the window's first period, then every period, and resumes on the same SHB
with its checkpoint token, catching up what it missed.

While it measures, the overlay-wide checker (delivery_checker.py) holds every durable subscriber
to the guarantee across its reconnections: every acknowledged matching event once, in order, no
gap. Everything is drawn from the seed; only the CPU meter depends on the machine, and nothing
reads a meter during the run, so the trace does not.
"""

from __future__ import annotations

import cProfile
from collections.abc import Callable
from dataclasses import dataclass, field

from tidings.core.config import BrokerConfig
from tidings.core.multicast.trees import tree_key
from tidings.core.overlay.node_id import closer, node_id_from
from tidings.core.units import MILLISECOND_NS, SECOND_NS
from tidings.sim.broker_node import BrokerNode
from tidings.sim.clients import DurableSubscriber, Publisher
from tidings.sim.delivery_checker import check_overlay_delivery
from tidings.sim.disk import Disk
from tidings.sim.network import Network
from tidings.sim.world import World

TREE = "nodes/#"
PUBLISHERS = 4
EVENTS_PER_S_PER_PUBLISHER = 200
HOSTS = 4  # the publishers' `host` attribute takes 4 values: each filter matches a quarter
RATE_PER_SUBSCRIBER = PUBLISHERS * EVENTS_PER_S_PER_PUBLISHER / HOSTS  # 200 events/s
PHB_NAMES_MAX = 100_000
QUIET_NS = 3 * SECOND_NS  # after publishing: the last events and catch-ups arrive before the check


@dataclass(frozen=True)
class ScalabilityScenario:
    seed: int = 1
    shbs: int = 1
    subscribers_per_shb: int = 4
    warm_s: float = 2.0  # publishing before the window: trees formed, streams flowing
    window_s: float = 6.0  # the measurement window (virtual seconds)
    disconnect_every_s: float | None = None  # None: no disconnections
    away_s: float = 0.1
    root_at_phb: bool = True


@dataclass
class ScalabilityResult:
    scenario: ScalabilityScenario
    problems: list[str]
    acked: int
    delivered: int  # events received by subscribers over the whole run
    delivered_per_s: list[float]  # per SHB, in the window
    work_per_s: list[float]  # per broker (0: the PHB): the meter's work per virtual second of the window
    received_per_s: list[float]  # per broker: Received inputs (reads off its connections) per virtual second
    forwarders: int  # SHBs that forward the tree to other SHBs
    reconnections: int
    stats: dict[str, int] = field(default_factory=dict)


def identities(shbs: int, root_at_phb: bool = True, tree: str = TREE) -> list[str]:
    """Pubend ids (hence nodeIds) of the PHB and the SHBs: with `root_at_phb`, the PHB's is the
    first name `phb-<i>` closer to the tree's key than every SHB's, so the PHB is its rendez-vous point."""
    names = [f"shb-{j}" for j in range(1, shbs + 1)]
    if not root_at_phb:
        return ["phb-0", *names]
    key = tree_key(tree)
    ids = [node_id_from(n) for n in names]
    for i in range(PHB_NAMES_MAX):
        mine = node_id_from(f"phb-{i}")
        if all(closer(key, mine, other) for other in ids):
            return [f"phb-{i}", *names]
    raise RuntimeError(f"no PHB name among {PHB_NAMES_MAX} is the rendez-vous point of {tree}")


class CallMeter:
    """Function calls made inside the core (a cProfile profiler of its own per broker; only one
    runs at a time, as brokers handle inputs one after another)."""

    def __init__(self) -> None:
        self.profile = cProfile.Profile()

    def begin(self) -> None:
        self.profile.enable()

    def end(self) -> None:
        self.profile.disable()

    def work(self) -> int:
        return sum(entry.callcount for entry in self.profile.getstats())


class CpuMeter:
    """CPU time inside the core, in ns, from an injected clock (`time.thread_time_ns`)."""

    def __init__(self, clock: Callable[[], int]) -> None:
        self.clock = clock
        self.ns = 0
        self._began = 0

    def begin(self) -> None:
        self._began = self.clock()

    def end(self) -> None:
        self.ns += self.clock() - self._began

    def work(self) -> int:
        return self.ns


Meter = CallMeter | CpuMeter


def run_scalability(scenario: ScalabilityScenario,
                    meter: Callable[[], Meter] | None = None) -> ScalabilityResult:
    """Run one configuration; `meter` makes one meter per broker (none: nothing is measured)."""
    s = scenario
    world = World(s.seed)
    net = Network(world, coalesce_probability=1.0)  # whole writes: frame reassembly is not what is measured
    config = BrokerConfig(leaf_set_size=16)
    nodes: list[BrokerNode] = []
    meters: list[Meter | None] = []
    for i, ident in enumerate(identities(s.shbs, s.root_at_phb)):
        node = BrokerNode(world, net, Disk(world, f"disk{i}"), f"b{i}:7000", config, pubend_id=ident,
                          name=f"b{i}", overlay=True, join=None if i == 0 else "b0:7000")
        meters.append(None if meter is None else meter())
        node.meter = meters[-1]
        nodes.append(node)
        world.call_at(i * 20 * MILLISECOND_NS, node.start)
    world.run(until_ns=len(nodes) * 20 * MILLISECOND_NS + 2 * SECOND_NS)
    subscribers: list[list[DurableSubscriber]] = []
    for b in range(1, s.shbs + 1):
        here = [DurableSubscriber(world, net, f"b{b}:7000", f"s{b}.{j}", TREE, filter=f'host == "h{j % HOSTS}"')
                for j in range(s.subscribers_per_shb)]
        for sub in here:
            sub.start(world.now)
        subscribers.append(here)
    world.run(until_ns=world.now + SECOND_NS)
    interval_ns = SECOND_NS // EVENTS_PER_S_PER_PUBLISHER
    total = round((s.warm_s + s.window_s) * EVENTS_PER_S_PER_PUBLISHER)
    publishers = [Publisher(world, net, "b0:7000", f"pub{q}", total, hosts=HOSTS, batch_max=1,
                            interval_ns=(interval_ns, interval_ns), bad_event_probability=0)
                  for q in range(PUBLISHERS)]
    for pub in publishers:
        pub.start(world.now)
    world.run(until_ns=world.now + int(s.warm_s * SECOND_NS))
    window_start = world.now
    window_ns = int(s.window_s * SECOND_NS)
    if s.disconnect_every_s is not None:
        _schedule_disconnections(world, subscribers, window_start, window_start + window_ns,
                                 int(s.disconnect_every_s * SECOND_NS), int(s.away_s * SECOND_NS))
    work0 = [0 if m is None else m.work() for m in meters]
    reads0 = [node.stats.get("Received", 0) for node in nodes]
    got0 = [sum(len(sub.received) for sub in here) for here in subscribers]
    world.run(until_ns=window_start + window_ns)
    work = [0.0 if m is None else (m.work() - w0) / s.window_s for m, w0 in zip(meters, work0, strict=True)]
    reads = [(node.stats.get("Received", 0) - r0) / s.window_s for node, r0 in zip(nodes, reads0, strict=True)]
    got = [(sum(len(sub.received) for sub in here) - g0) / s.window_s
           for here, g0 in zip(subscribers, got0, strict=True)]
    deadline = world.now + 60 * SECOND_NS
    while world.now < deadline and not all(p.finished for p in publishers):
        world.run(until_ns=world.now + 200 * MILLISECOND_NS)
    world.run(until_ns=world.now + QUIET_NS)
    everyone = [sub for here in subscribers for sub in here]
    problems = check_overlay_delivery(publishers, everyone, [node.disk.durable_records() for node in nodes])
    for client in (*publishers, *everyone):
        problems += client.violations
    acked = sum(len(p.acked) for p in publishers)
    if acked < PUBLISHERS * total:
        problems.append(f"only {acked} of {PUBLISHERS * total} events were acknowledged")
    return ScalabilityResult(
        scenario=s, problems=problems, acked=acked, delivered=sum(len(sub.received) for sub in everyone),
        delivered_per_s=got, work_per_s=work, received_per_s=reads, forwarders=_forwarders(nodes),
        reconnections=sum(sub.moves for sub in everyone),
        stats={"gaps": sum(len(sub.gaps) for sub in everyone), "virtual_s": world.now // SECOND_NS})


def _schedule_disconnections(world: World, subscribers: list[list[DurableSubscriber]], start_ns: int,
                             end_ns: int, every_ns: int, away_ns: int) -> None:
    rng = world.derive_rng("disconnections")
    for here in subscribers:
        for sub in here:
            at = start_ns + rng.randrange(every_ns)
            while at < end_ns:
                world.call_at(at, _disconnect, sub, away_ns)
                at += every_ns


def _disconnect(sub: DurableSubscriber, away_ns: int) -> None:
    sub.move(sub.address, away_ns)  # the same SHB, with its token, after `away_ns`


def _forwarders(nodes: list[BrokerNode]) -> int:
    count = 0
    for node in nodes[1:]:
        status = node.core.status() if node.core is not None else {}
        count += any(t["name"] == TREE and t["children"] for t in status.get("trees", []))
    return count
