"""Named scenarios: a world, a network, one broker on one disk, clients, faults, and the checks.

Theory of operation. A `Scenario` is plain data (seed, workload, faults, limits); `Simulation` builds
everything from it, runs the world until it is idle (every event published, acknowledged or in
doubt, and delivered) or until a virtual-time limit, and checks the outcome. The acknowledged and
phantom checks also run right after every crash, against what the disk kept. Everything random is
drawn from streams derived from the seed, so `Simulation(Scenario(seed=s)).run()` replays exactly;
a failing seed is reported with the tail of its trace.

The default scenario is the first one the house rule asks for: three publishers, five subscribers
(live on everything, live with a content filter, one joining late from the oldest event with a
filter, a narrow one, and a slow reader whose connection blocks so that its subscription falls
behind and reads the log back), two broker crashes (most of them between a write and its sync),
two client-side disconnections (a subscriber or a publisher drops its connection) and one client
that never says HELLO (the handshake timer).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tidings.core.config import BrokerConfig
from tidings.core.units import KIB, MICROSECOND_NS, MILLISECOND_NS, SECOND_NS
from tidings.sim.broker_node import BrokerNode
from tidings.sim.checker import check_acked_durable, check_no_phantoms, check_run, decode_log
from tidings.sim.clients import Publisher, Subscriber
from tidings.sim.disk import Disk
from tidings.sim.faults import CrashInjector, DropInjector
from tidings.sim.network import SERVER, Endpoint, LatencyModel, Network, Socket
from tidings.sim.world import World

BROKER_ADDRESS = "broker:7000"


@dataclass(frozen=True, slots=True)
class PublisherSpec:
    name: str
    events: int = 120
    interval_ns: tuple[int, int] = (1 * MILLISECOND_NS, 10 * MILLISECOND_NS)
    start_at_ns: int = 0
    window: int = 4
    batch_max: int = 6
    idempotent: bool = False  # publish with a producer id and re-send what was in doubt (core/publish/dedup.py)


@dataclass(frozen=True, slots=True)
class SubscriberSpec:
    name: str
    pattern: str
    filter: str | None = None
    start: str = "now"
    join_at_ns: int = 0
    read_rate_bytes_per_s: int | None = None


DEFAULT_PUBLISHERS = (PublisherSpec("pub-0"), PublisherSpec("pub-1"), PublisherSpec("pub-2"))

DEFAULT_SUBSCRIBERS = (
    SubscriberSpec("sub-all", "#"),
    SubscriberSpec("sub-hot", "nodes/+/load", "load > 2.5"),
    SubscriberSpec("sub-site1", "nodes/#", "site == 's1' or (host == 'h3' and load >= 1)", start="start",
                   join_at_ns=90 * MILLISECOND_NS),
    SubscriberSpec("sub-h2mem", "nodes/h2/mem", join_at_ns=30 * MILLISECOND_NS),
    SubscriberSpec("sub-slow", "#", start="start", read_rate_bytes_per_s=40_000),
)

# leases last longer than any run: this scenario ends when the world is idle, which periodic RENEWs
# would prevent, so its subscribers do not renew (leases are exercised by the delivery scenario)
SIM_BROKER_CONFIG = BrokerConfig(send_queue_bytes_max=4 * KIB, log_read_bytes_max=8 * KIB,
                                 handshake_timeout_ns=50 * MILLISECOND_NS, lease_ns=3600 * SECOND_NS)


@dataclass(frozen=True, slots=True)
class Scenario:
    seed: int
    publishers: tuple[PublisherSpec, ...] = DEFAULT_PUBLISHERS
    subscribers: tuple[SubscriberSpec, ...] = DEFAULT_SUBSCRIBERS
    crashes: int = 2
    crash_window_ns: tuple[int, int] = (10 * MILLISECOND_NS, 200 * MILLISECOND_NS)
    client_drops: int = 2
    mute_clients: int = 1
    config: BrokerConfig = field(default=SIM_BROKER_CONFIG)
    latency: LatencyModel = field(default_factory=LatencyModel)
    sync_ns: tuple[int, int] = (200 * MICROSECOND_NS, 3 * MILLISECOND_NS)
    time_limit_ns: int = 60 * SECOND_NS
    steps_max: int = 2_000_000


class MuteClient(Endpoint):
    """Connects and never says HELLO: the broker must close it when the handshake deadline passes.

    A reset (the broker crashed) or a refusal is not the broker's answer, so it connects again.
    """

    def __init__(self, world: World, network: Network, name: str) -> None:
        self.world = world
        self.network = network
        self.name = name
        self.closed_by_broker = False

    def start(self) -> None:
        self.network.connect(BROKER_ADDRESS, self)

    def connection_refused(self, address: str) -> None:
        self.world.call_later(10 * MILLISECOND_NS, self.start)

    def data_received(self, sock: Socket, data: bytes) -> None:
        pass  # the ERROR handshake-timeout frame

    def connection_lost(self, sock: Socket, reset: bool) -> None:
        if reset:
            self.world.call_later(10 * MILLISECOND_NS, self.start)
        else:
            self.closed_by_broker = True


class Simulation:
    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        sc = scenario
        self.world = world = World(sc.seed)
        self.network = Network(world, sc.latency)
        self.disk = Disk(world, sync_ns_min=sc.sync_ns[0], sync_ns_max=sc.sync_ns[1])
        self.node = BrokerNode(world, self.network, self.disk, BROKER_ADDRESS, sc.config)
        self.publishers = [
            Publisher(world, self.network, BROKER_ADDRESS, spec.name, spec.events, batch_max=spec.batch_max,
                      window=spec.window, interval_ns=spec.interval_ns, idempotent=spec.idempotent)
            for spec in sc.publishers
        ]
        self.subscribers = [
            Subscriber(world, self.network, BROKER_ADDRESS, spec.name, spec.pattern, spec.filter,
                       spec.start, spec.read_rate_bytes_per_s, renews=False)
            for spec in sc.subscribers
        ]
        self.mute = [MuteClient(world, self.network, f"mute-{i}") for i in range(sc.mute_clients)]
        self.problems: list[str] = []
        self.crash_checks = 0
        self.crasher = CrashInjector(world, self.node, sc.crashes, sc.crash_window_ns,
                                     on_crash=self._check_after_crash)
        self.dropper = DropInjector(world, [*self.subscribers, *self.publishers], sc.client_drops,
                                    sc.crash_window_ns)
        self.quiesced = False
        self.finished_at_ns = 0

    def _check_after_crash(self) -> None:
        self.crash_checks += 1
        log = decode_log(self.disk.durable_records())
        for problem in check_acked_durable(self.publishers, log) + check_no_phantoms(self.subscribers, log):
            self.problems.append(f"after crash {self.crash_checks} at {self.world.now} ns: {problem}")

    def run(self) -> Simulation:
        sc = self.scenario
        world = self.world
        self.node.start()
        for pub, pub_spec in zip(self.publishers, sc.publishers, strict=True):
            pub.start(pub_spec.start_at_ns)
        for sub, spec in zip(self.subscribers, sc.subscribers, strict=True):
            sub.start(spec.join_at_ns)
        for mute in self.mute:
            mute.start()
        world.run(until_ns=sc.time_limit_ns, steps_max=sc.steps_max)
        # quiet: nothing left to happen within the run (a lease's expiry far beyond it does not count)
        upcoming = world.next_time()
        self.quiesced = ((upcoming is None or upcoming > sc.time_limit_ns)
                         and all(p.finished for p in self.publishers))
        self.finished_at_ns = world.last_step_ns
        return self

    def check(self) -> list[str]:
        problems = list(self.problems)
        if not self.quiesced:
            problems.append(f"the run did not quiesce within {self.scenario.time_limit_ns} ns / "
                            f"{self.scenario.steps_max} steps (at {self.world.now} ns, "
                            f"{self.world.steps} steps)")
        problems += check_run(self.publishers, self.subscribers, self.disk.durable_records(),
                              quiesced=self.quiesced)
        for mute in self.mute:
            if not mute.closed_by_broker:
                problems.append(f"{mute.name} never said HELLO and the broker did not close it")
        return problems

    def report(self) -> str:
        """What to print when a seed fails: the seed, the problems, the last lines of the trace."""
        lines = [f"seed={self.scenario.seed} steps={self.world.steps} last step at "
                 f"{self.world.last_step_ns} ns, digest={self.world.trace_digest()}",
                 f"summary: {self.summary()}",
                 f"broker stats: {self.node.stats}",
                 *(f"  PROBLEM {p}" for p in self.check()),
                 "trace tail:", *(f"  {line}" for line in self.world.trace_tail)]
        return "\n".join(lines)

    def send_queue_bytes_peak(self) -> int:
        """The most bytes the broker ever had queued to one connection."""
        return max((c.links[SERVER].bytes_buffered_max for c in self.network.connections), default=0)

    def summary(self) -> dict[str, int]:
        return {
            "events_acked": sum(len(p.acked) for p in self.publishers),
            "events_in_doubt": sum(len(p.in_doubt) for p in self.publishers),
            "events_deduplicated": sum(p.duplicates for p in self.publishers),
            "events_rejected": sum(len(p.rejected) for p in self.publishers),
            "log_records": self.disk.durable_count,
            "delivered": sum(len(s.received) for s in self.subscribers),
            "crashes": self.crasher.crashes,
            "crashes_during_sync": self.crasher.crashes_during_sync,
            "drops": self.dropper.drops,
            "unsynced_lost": self.disk.records_lost,
            "unsynced_survived": self.disk.records_survived,
            "send_blocked": self.node.stats.get("SendBlocked", 0),
            "log_reads": self.node.stats.get("ReadLog", 0),
            "syncs": self.disk.syncs,
            "steps": self.world.steps,
            "finished_at_ms": self.finished_at_ns // MILLISECOND_NS,
            "send_queue_bytes_peak": self.send_queue_bytes_peak(),
        }
