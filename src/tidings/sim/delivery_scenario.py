"""Guaranteed-delivery scenarios: many brokers, faults on the way, and the overlay-wide checker.

A scenario builds an overlay of `brokers` real broker cores in the byte-level simulator, puts
subscribers with patterns and filters on some brokers and publishers on two others, and publishes
while it injects faults: message loss, duplication and reordering between brokers (PeerFaults),
per-broker clock skew, and broker crashes chosen by role once the trees have formed (a forwarder, the
rendez-vous point, a subscriber broker's parent, a publisher's broker, a broker that stalls
before it is killed, and the broker hosting the durable subscriber, whose registration must
survive). Crashed brokers restart from their disks. Interest churns while events flow:
late subscribers (with their own patterns and filters, often on brokers new to the tree) widen the
filter summaries on their paths, and subscribers that unsubscribe narrow them; `records_unwanted`
counts the data records that reached a broker where nothing there or below matched them. After a
quiet period the checker (delivery_checker.py) compares what each subscriber received with what the publishers had
acknowledged. Everything is drawn from the seed, so a failing seed replays exactly.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from typing import Any

from tidings.core.config import BrokerConfig
from tidings.core.multicast.trees import tree_key
from tidings.core.overlay.node_id import closer, node_id_from
from tidings.core.units import MILLISECOND_NS, SECOND_NS
from tidings.sim.broker_node import BrokerNode
from tidings.sim.clients import DurableSubscriber, Publisher, RoamingSubscriber, Subscriber
from tidings.sim.delivery_checker import check_overlay_delivery
from tidings.sim.disk import Disk
from tidings.sim.network import Network
from tidings.sim.peer_faults import PeerFaults
from tidings.sim.world import World

FAULTS = ("forwarder", "root", "parent", "publisher", "stall", "partition")
DURABLE_FAULTS = ("durable-home",)  # only with a durable subscriber
MAIN_TREE = "nodes/#"
SUBSCRIPTIONS = (  # pattern, filter
    ("nodes/#", None),
    ("nodes/+/load", "load > 2"),
    ("nodes/h1/#", None),
    ("nodes/h2/mem", "mem < 500000"),
    ("+/+/load", 'site = "s1"'),
    ("nodes/#", 'host in ("h0", "h3")'),
)

DURABLE_SUBSCRIPTION = ("nodes/+/load", "load > 2")
DURABLE_MOVE_EVERY_NS = 250 * MILLISECOND_NS
DURABLE_RETURN_NS = 300 * MILLISECOND_NS
SLOW_READER_BYTES_PER_S = 8_000  # a few dozen events a second: far below the publishing rate
# the second roaming subscriber reads slower than its events come: its broker holds some back when it moves
ROAMER_BYTES_PER_S = 1_500

CONFIG = BrokerConfig(
    leaf_set_size=4, keepalive_interval_ns=200 * MILLISECOND_NS, failure_timeout_ns=600 * MILLISECOND_NS,
    heartbeat_interval_ns=200 * MILLISECOND_NS, parent_timeout_ns=600 * MILLISECOND_NS,
    ping_interval_ns=SECOND_NS, revive_interval_ns=SECOND_NS, gap_curiosity_ns=50 * MILLISECOND_NS,
    nack_repeat_ns_min=150 * MILLISECOND_NS,
    nack_repeat_ns_max=2 * SECOND_NS, silence_interval_ns=100 * MILLISECOND_NS,
    send_queue_bytes_max=4096, stream_cache_bytes_max=4096,  # small, so slow readers and caches hit them
    # nack answers paced by a small window, so reads of a tree park and resume (25-179 reads parked
    # per seed), four log reads wide as the defaults are (4 MiB, 1 MiB): a window narrower than one
    # read let a read go only when the window was empty or restarted, and an answer whose root's
    # ack another consumer held crawled (durable-sweep seeds 115, 542, 579: more than 8 s of quiet)
    retransmit_window_bytes=65536, retransmit_wait_ns=300 * MILLISECOND_NS, log_read_bytes_max=16384,
    # the release protocol at work: logs drop what is released at once (no replay margin), a new
    # root or a vanished subscriber broker holds release for 5 s (the faults restart brokers in 2)
    release_keep_ns=1, release_hold_ns=5 * SECOND_NS, durable_save_interval_ns=100 * MILLISECOND_NS,
)
# The liveness timers of the runs at scale (churn_scenario): 1,000 brokers' keep-alives, heartbeats and
# link pings at CONFIG's rates are most of a run's work. Failures are noticed after 1.5 s here (0.6 s
# in CONFIG), still well inside the 8 s of quiet; the link pings (RTT measurement, and a link's own
# liveness, which keep-alives and resets already cover) every 30 s, the directory's gossip every 5 s.
SCALE_TIMERS: dict[str, Any] = {
    "keepalive_interval_ns": 500 * MILLISECOND_NS, "failure_timeout_ns": 1500 * MILLISECOND_NS,
    "heartbeat_interval_ns": 500 * MILLISECOND_NS, "parent_timeout_ns": 1500 * MILLISECOND_NS,
    "ping_interval_ns": 30 * SECOND_NS, "directory_announce_interval_ns": 5 * SECOND_NS,
}
# the replay margin of the runs with roaming plain subscribers: longer than a run, as the default's hour is
ROAMERS_KEEP_NS = 60 * SECOND_NS
# a publisher's pace: batches of 1 to 6 events every 2 to 20 ms (Publisher's defaults)
PUBLISH_NS_PER_EVENT = 3 * MILLISECOND_NS
RESTART_AFTER_NS = 2 * SECOND_NS
QUIET_AFTER_COMPLETE_NS = 2 * SECOND_NS  # a crashed broker comes back from its disk this much later
EARLY_RELEASE_NS = 1500 * MILLISECOND_NS  # maxRetain when a scenario asks for early release
DRAIN_NS = SECOND_NS  # a drained broker stops this long after it advised its clients to move
DURABLE_AWAY_NS = 7 * SECOND_NS  # a durable subscriber's long absence: past release_hold_ns and maxRetain


@dataclass(frozen=True)
class DeliveryScenario:
    seed: int
    brokers: int = 24
    loss: float = 0.0
    duplication: float = 0.0
    reordering: float = 0.0
    clock_skew_us_max: int = 0
    events_per_publisher: int = 150
    faults: tuple[str, ...] = ()
    subscribers: int = 6
    slow_subscriber: bool = False  # the first subscriber reads slowly: its broker's queue to it fills
    total_order: bool = False  # every subscriber asks for total order
    # how often the network hands a receiver all it has rather than a random cut of it: cuts test
    # frame reassembly, and cost a receive each, so runs at scale cut less
    coalesce_probability: float = 0.3
    # one more subscriber, durable, that moves to another broker this many times while events flow
    # (docs/durable.md): reconnecting with its token, it must miss and repeat nothing
    durable_moves: int = 0
    churn: int = 2  # subscribers that join while events flow, and as many that unsubscribe
    # the durable subscriber's first move keeps it away for DURABLE_AWAY_NS: its registration must
    # hold release meanwhile (all it missed comes back), unless
    durable_away: bool = False
    # early release (maxRetain, EARLY_RELEASE_NS) lets the pubends drop what it missed: it may come back
    # to a gap; everyone else must still get none
    early_release: bool = False
    # its last move resumes from the older token it had at its first move: what followed that token
    # comes again, or a gap where it was released since (it had acknowledged it)
    durable_rewind: bool = False
    # each move returns to the broker it left after DURABLE_RETURN_NS away: its catchup there asks
    # the persistent filtering subsystem (PFS) which ticks matched it meanwhile
    durable_returns: bool = False
    # the durable subscriber fails over, as the client library does (core/session/roaming.py), to
    # two other brokers when its broker dies (the `durable-home` fault), rather than waiting for it,
    # and follows route advice (the `durable-drain` fault drains its broker, then stops it)
    durable_failover: bool = False
    # plain subscribers that roam as the client library does (RoamingSubscriber: route advice,
    # failover to two other brokers), on the durable subscriber's first broker; the `roamers-home`
    # fault kills their broker, `roamers-drain` drains and then stops it
    plain_roamers: int = 0
    # how long the pubends keep released events (None: CONFIG's, which keeps nothing). A plain
    # subscriber that moves resumes after the last tick it got, which is exactly once only while
    # the logs still hold what followed (a GAP says what they dropped): the roaming runs keep a
    # replay margin, as the default's hour does
    release_keep_ns: int | None = None
    join_interval_ns: int = 20 * MILLISECOND_NS  # between the brokers' starts as the overlay is built
    publishers: int = 2
    durables: int = 1  # durable subscribers, when durable_moves: each moves on its own
    # churn of brokers while events flow (the 1,000-broker sweep): `crashes` brokers that host no
    # client crash at random instants, and each either restarts from its disk 2 s later or leaves
    # for good (one in two, drawn); `joins` new brokers join the overlay, the first half of them
    # with a late subscriber each, subscribing while its broker joins
    crashes: int = 0
    joins: int = 0
    scale_timers: bool = False  # the liveness timers of SCALE_TIMERS instead of the config's
    # quiet after publishing: 0 for a fixed 8 s; else checked every second until complete, at most this
    quiet_max_ns: int = 0


@dataclass
class DeliveryResult:
    problems: list[str]
    delivered: int
    acked: int
    faults_done: list[str] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)


class DeliveryRun:
    def __init__(self, scenario: DeliveryScenario, config: BrokerConfig = CONFIG) -> None:
        self.scenario = scenario
        if scenario.early_release:
            config = replace(config, max_retain_ns=EARLY_RELEASE_NS)
        if scenario.scale_timers:
            config = replace(config, **SCALE_TIMERS)
        if scenario.release_keep_ns is not None:
            config = replace(config, release_keep_ns=scenario.release_keep_ns)
        self.config = config
        self.world = World(scenario.seed)
        self.net = Network(self.world, coalesce_probability=scenario.coalesce_probability)
        rng = self.world.derive_rng("scenario")
        self.rng = rng
        self.nodes: list[BrokerNode] = []
        self.victims: list[int] = []
        for i in range(scenario.brokers):
            self.world.call_at(i * scenario.join_interval_ns, self._add_node(None if i == 0 else "b0:7000").start)
        self.run(scenario.brokers * scenario.join_interval_ns + 2 * SECOND_NS)
        self.subscribers: list[Subscriber] = []
        self.publishers: list[Publisher] = []
        self.faults_done: list[str] = []

    def _add_node(self, join: str | None) -> BrokerNode:
        """Broker i (the next), not started yet, with its own disk, clock skew and link faults."""
        s = self.scenario
        i = len(self.nodes)
        skew = self.rng.randint(-s.clock_skew_us_max, s.clock_skew_us_max)
        node = BrokerNode(self.world, self.net, Disk(self.world, f"disk{i}"), f"b{i}:7000", self.config,
                          pubend_id=f"p{i}", name=f"b{i}", overlay=True, join=join, clock_skew_us=skew)
        node.peer_faults = PeerFaults(self.world.derive_rng(f"faults{i}"), s.loss, s.duplication, s.reordering)
        self.nodes.append(node)
        return node

    def run(self, duration_ns: int) -> None:
        self.world.run(until_ns=self.world.now + duration_ns)

    def rendezvous(self, tree: str) -> int:
        key = tree_key(tree)
        best = 0
        for i in range(1, len(self.nodes)):
            if i >= self.scenario.brokers and not self.nodes[i].up:
                continue  # a broker that joined later counts once it runs
            if closer(key, node_id_from(f"p{i}"), node_id_from(f"p{best}")):
                best = i
        return best

    def tree_status(self, i: int, tree: str) -> dict[str, Any] | None:
        core = self.nodes[i].core
        if core is None:
            return None
        return next((t for t in core.status().get("trees", []) if t["name"] == tree), None)

    def execute(self) -> DeliveryResult:
        s = self.scenario
        n = len(self.nodes)
        order = list(range(1, n))
        self.rng.shuffle(order)
        sub_at, pub_at = order[: s.subscribers], order[s.subscribers: s.subscribers + s.publishers]
        rest = order[s.subscribers + s.publishers:]
        self.victims = rest[: s.crashes]  # brokers that crash at random (broker churn)
        homes = rest[s.crashes:] or order  # where durable subscribers live and move
        clients = set(sub_at) | set(pub_at)
        for k, i in enumerate(sub_at):
            pattern, flt = SUBSCRIPTIONS[k % len(SUBSCRIPTIONS)]
            rate = SLOW_READER_BYTES_PER_S if s.slow_subscriber and k == 0 else None
            sub = Subscriber(self.world, self.net, f"b{i}:7000", f"s{k}@b{i}", pattern, filter=flt,
                             read_rate_bytes_per_s=rate, order="total" if s.total_order else "publisher")
            sub.gaps_judged = True
            sub.start(self.world.now)
            self.subscribers.append(sub)
        durables = self._durables(homes)
        self._roamers(homes)
        self.run(SECOND_NS)
        for k, i in enumerate(pub_at):
            pub = Publisher(self.world, self.net, f"b{i}:7000", f"pub{k}@b{i}", s.events_per_publisher,
                            bad_event_probability=0, interval_ns=(2 * MILLISECOND_NS, 20 * MILLISECOND_NS))
            pub.start(self.world.now)
            self.publishers.append(pub)
        for durable in durables:
            self._moves(durable, homes)
        self.run(300 * MILLISECOND_NS)
        self._churn(sub_at, pub_at)
        self._broker_churn(sub_at)
        for fault in s.faults:
            self._inject(fault, clients | set(self.victims), pub_at)
        self._until_published(60 * SECOND_NS)
        published_at = self.world.now
        complete_after_ns = None
        if s.quiet_max_ns:
            complete_after_ns = self._until_complete(s.quiet_max_ns)
        else:
            self.run(8 * SECOND_NS)  # quiet: repairs finish, nacks are answered
        if s.slow_subscriber:
            self._until_delivered(self.subscribers[0], 120 * SECOND_NS)
        problems = self._check()
        for pub in self.publishers:
            problems += pub.violations
        acked = sum(len(p.acked) for p in self.publishers)
        if acked < len(self.publishers) * s.events_per_publisher // 2:  # a crash leaves a few in doubt
            problems.append(f"only {acked} events were acknowledged")
        delivered = sum(len(sub.received) for sub in self.subscribers)
        stats = {"lost": sum(nd.peer_faults.lost for nd in self.nodes if nd.peer_faults),
                 "released": sum(len(nd.disk.released_records) for nd in self.nodes),
                 "gaps": sum(len(sub.gaps) for sub in self.subscribers),
                 "connected_subscribers": sum(1 for sub in self.subscribers if not sub.downs),
                 **{key: sum(nd.core.status().get("delivery", {}).get(key, 0) for nd in self.nodes
                             if nd.core is not None)
                    for key in ("records_unwanted", "complete_nack_ticks_silenced")},
                 "nack_records_read": sum(nd.core.status()["delivery"]["source"]["records_read"]
                                          for nd in self.nodes if nd.core is not None),
                 **{key: sum(getattr(nd.core.constream, attr) for nd in self.nodes if nd.core is not None)
                    for key, attr in (("pfs_records", "records_written"), ("pfs_catchups", "catchups"),
                                      ("pfs_ticks_silenced", "ticks_silenced"))}}
        if s.quiet_max_ns:
            stats["complete_after_s"] = (None if complete_after_ns is None
                                         else round((complete_after_ns - published_at) / SECOND_NS, 1))
        return DeliveryResult(problems, delivered, acked, self.faults_done, stats)

    def _check(self) -> list[str]:
        """What the overlay-wide checker finds now."""
        for sub in self.subscribers:  # the start point each broker gave (its clock at SUBSCRIBED, less the allowance)
            node = self.nodes[int(sub.address[1:].split(":")[0])]
            if sub.subscribed_at is not None:
                sub.start_tick = (node.wall_us() - (self.world.now - sub.subscribed_at) // 1000
                                  - self.config.clock_skew_allowance_ns // 1000)
        return check_overlay_delivery(self.publishers, self.subscribers,
                                      [node.disk.durable_records() for node in self.nodes], self.scenario.early_release)

    def _until_complete(self, limit_ns: int) -> int | None:
        """Quiet, checked every second until every subscriber has all it was promised (then
        QUIET_AFTER_COMPLETE_NS more, in which a late duplicate would show), at most `limit_ns`;
        returns when it was complete, or None."""
        deadline = self.world.now + limit_ns
        while self.world.now < deadline:
            self.run(SECOND_NS)
            if not self._check():
                complete_at = self.world.now
                self.run(QUIET_AFTER_COMPLETE_NS)
                return complete_at
        return None

    def _durables(self, homes: list[int]) -> list[DurableSubscriber]:
        if not self.scenario.durable_moves:
            return []
        pattern, flt = DURABLE_SUBSCRIPTION
        s = self.scenario
        subs = []
        for k in range(s.durables):
            home = homes[0] if k == 0 else self.rng.choice(homes)
            # the first fails over with the client library's rules (core/session/roaming.py), when asked
            failover = tuple(f"b{h}:7000" for h in homes[1:3]) if s.durable_failover and k == 0 else ()
            sub = DurableSubscriber(self.world, self.net, f"b{home}:7000", "durable" if k == 0 else f"durable{k}",
                                    pattern, filter=flt, failover=failover)
            sub.follow_advice = s.durable_failover and k == 0
            sub.start(self.world.now)
            self.subscribers.append(sub)
            subs.append(sub)
        return subs

    def _roamers(self, homes: list[int]) -> None:
        failover = tuple(f"b{h}:7000" for h in homes[1:3])
        for k in range(self.scenario.plain_roamers):
            pattern, flt = SUBSCRIPTIONS[k % len(SUBSCRIPTIONS)]
            sub = RoamingSubscriber(self.world, self.net, f"b{homes[0]}:7000", f"roamer{k}", pattern, filter=flt,
                                    failover=failover, read_rate_bytes_per_s=ROAMER_BYTES_PER_S if k else None)
            sub.start(self.world.now)
            self.subscribers.append(sub)

    def _moves(self, durable: DurableSubscriber, homes: list[int]) -> None:
        """Schedule the durable subscriber's moves between brokers (or away and back)."""
        s = self.scenario
        away = DURABLE_AWAY_NS if s.durable_away else 0
        for m in range(s.durable_moves):
            home = durable.address if s.durable_returns else f"b{self.rng.choice(homes)}:7000"
            rewind = s.durable_rewind and m == s.durable_moves - 1
            if s.durable_returns:
                self.world.call_later(DURABLE_MOVE_EVERY_NS + m * (DURABLE_MOVE_EVERY_NS + DURABLE_RETURN_NS),
                                      durable.move, home, DURABLE_RETURN_NS, rewind)
                continue
            self.world.call_later((m + 1) * DURABLE_MOVE_EVERY_NS + (away if m else 0), durable.move, home,
                                  away if m == 0 else None, rewind)

    def _broker_churn(self, sub_at: list[int]) -> None:
        """Brokers leaving and joining while events flow: each victim crashes at a random instant
        of the publishing window and restarts from its disk RESTART_AFTER_NS later, or leaves for
        good; each new broker joins through a subscriber's broker (never crashed), and the first
        half of them get a late subscriber, connecting while the broker joins."""
        s = self.scenario
        window_ns = s.events_per_publisher * PUBLISH_NS_PER_EVENT
        for i in self.victims:
            leaves = self.rng.random() < 0.5
            self.world.call_at(self.world.now + self.rng.randrange(window_ns), self._crash, i, leaves)
        for k in range(s.joins):
            node = self._add_node(f"b{self.rng.choice(sub_at)}:7000")
            at = self.world.now + self.rng.randrange(window_ns)
            self.world.call_at(at, node.start)
            if k < (s.joins + 1) // 2:
                pattern, flt = SUBSCRIPTIONS[self.rng.randrange(len(SUBSCRIPTIONS))]
                sub = Subscriber(self.world, self.net, node.address, f"joined{k}@{node.name}", pattern, filter=flt,
                                 order="total" if s.total_order else "publisher")
                sub.gaps_judged = True
                sub.start(at + 100 * MILLISECOND_NS)
                self.subscribers.append(sub)

    def _crash(self, i: int, leaves: bool) -> None:
        node = self.nodes[i]
        if not node.up:
            return
        node.crash()
        self.faults_done.append(f"{'leave' if leaves else 'crash'}: b{i}")
        if not leaves:
            self.world.call_later(RESTART_AFTER_NS, node.restart)

    def _churn(self, sub_at: list[int], pub_at: list[int]) -> None:
        """Late subscribers on brokers drawn at random (publishers' and others'), starting while
        events flow, and as many early subscribers (never the slow reader) unsubscribing."""
        s = self.scenario
        window_ns = s.events_per_publisher * 11 * MILLISECOND_NS  # about the publishing time
        victims = set(self.victims)
        candidates = [i for i in range(1, len(self.nodes)) if i not in victims]
        for k in range(s.churn):
            i = self.rng.choice(candidates)  # the same draw as randrange(1, n) when nothing churns
            pattern, flt = SUBSCRIPTIONS[self.rng.randrange(len(SUBSCRIPTIONS))]
            sub = Subscriber(self.world, self.net, f"b{i}:7000", f"late{k}@b{i}", pattern, filter=flt,
                             order="total" if s.total_order else "publisher")
            sub.gaps_judged = True
            sub.start(self.world.now + self.rng.randrange(window_ns))
            self.subscribers.append(sub)
        quitters = self.subscribers[1:len(sub_at)]
        for sub in self.rng.sample(quitters, min(s.churn, len(quitters))):
            self.world.call_at(self.world.now + self.rng.randrange(window_ns), sub.quit)

    def _until_published(self, limit_ns: int) -> None:
        deadline = self.world.now + limit_ns
        while self.world.now < deadline and not all(p.finished for p in self.publishers):
            self.run(200 * MILLISECOND_NS)

    def _until_delivered(self, sub: Subscriber, limit_ns: int) -> None:
        """Let a slow reader drain: until nothing more arrives for two seconds."""
        deadline = self.world.now + limit_ns
        count = -1
        while self.world.now < deadline and count != len(sub.received):
            count = len(sub.received)
            self.run(2 * SECOND_NS)

    def _partition(self) -> None:
        """Cut the overlay in two random halves for a few seconds (the trees and the overlay split
        and repair on each side), then heal it."""
        order = list(range(len(self.nodes)))
        self.rng.shuffle(order)
        side = set(order[: len(order) // 2])
        a = {self.nodes[i].address for i in side}
        b = {node.address for node in self.nodes} - a
        for i, node in enumerate(self.nodes):
            assert node.peer_faults is not None
            node.peer_faults.cut = b if i in side else a
        self.faults_done.append(f"partition: {sorted(side)}")
        self.run(3 * SECOND_NS)
        for node in self.nodes:
            if node.up:
                node.heal_partition()
            elif node.peer_faults is not None:
                node.peer_faults.heal()
        self.run(400 * MILLISECOND_NS)

    def _inject(self, fault: str, clients: set[int], pub_at: list[int]) -> None:
        if fault == "partition":
            self._partition()
            return
        root = self.rendezvous(MAIN_TREE)
        durable = [sub for sub in self.subscribers if sub.durable]
        if fault == "publisher":
            target: int | None = pub_at[0]
        elif fault in ("durable-home", "durable-drain"):  # the broker hosting the durable subscriber
            target = int(durable[0].address[1:-5]) if durable else None
        elif fault in ("roamers-home", "roamers-drain"):  # the broker hosting the first roaming subscriber
            roamers = [sub for sub in self.subscribers if sub.roams]
            target = int(roamers[0].address[1:-5]) if roamers else None
        elif fault == "root":
            target = root if root not in clients else None
        elif fault == "forwarder":
            target = self._pick(lambda st, i: bool(st["children"]) and i != root, clients)
        elif fault == "parent":
            parents = [self.tree_status(int(sub.address[1:-5]), MAIN_TREE) for sub in self.subscribers]
            addresses = [p["parent"] for p in parents if p and p["parent"]]
            ids = sorted({int(a[1:-5]) for a in addresses} - clients)
            target = ids[0] if ids else None
        else:  # stall: a forwarder (or the root) that forwards nothing for a while, then dies
            target = self._pick(lambda st, i: bool(st["children"]), clients)
        if target is None or not self.nodes[target].up:
            self.faults_done.append(f"{fault}: no candidate")
            return
        node = self.nodes[target]
        if fault in ("durable-drain", "roamers-drain"):  # SIGTERM: its clients are advised to move, then it stops
            node.drain(DRAIN_NS)
            self.run(DRAIN_NS + 100 * MILLISECOND_NS)
        if fault == "stall":
            assert node.peer_faults is not None
            node.peer_faults.stalled = True
            self.run(1500 * MILLISECOND_NS)
            node.peer_faults.stalled = False
        if node.up:  # (a drained one stopped by itself)
            node.crash()
        self.faults_done.append(f"{fault}: b{target}")
        self.world.call_later(RESTART_AFTER_NS, node.restart)
        self.run(400 * MILLISECOND_NS)

    def _pick(self, want: Any, clients: set[int]) -> int | None:
        candidates = []
        for i in range(len(self.nodes)):
            st = self.tree_status(i, MAIN_TREE)
            if i not in clients and st is not None and want(st, i):
                candidates.append(i)
        return self.rng.choice(candidates) if candidates else None


def run_delivery(scenario: DeliveryScenario) -> DeliveryResult:
    return DeliveryRun(scenario).execute()


def sweep_scenario(seed: int, brokers: int = 24) -> DeliveryScenario:
    """The scenario of one seed of the sweep: loss, duplication, reordering, skew, up to three
    broker failures (the durable subscriber's broker among the candidates) and a durable subscriber
    moving between brokers, all drawn from the seed."""
    rng = random.Random(f"sweep/{seed}")
    return DeliveryScenario(
        seed=seed, brokers=brokers, loss=rng.choice([0.0, 0.01, 0.05, 0.1]), duplication=rng.choice([0.0, 0.01]),
        reordering=rng.choice([0.0, 0.02]), clock_skew_us_max=rng.choice([0, 200_000]),
        faults=tuple(rng.sample(FAULTS + DURABLE_FAULTS, rng.randint(0, 3))), durable_moves=rng.choice([2, 6]))


def failover_scenario(seed: int, brokers: int = 8, plain_roamers: int = 2) -> DeliveryScenario:
    """A seed of the sweep whose durable subscriber and `plain_roamers` plain subscribers roam as
    the client library does (its roaming machine and cursor): the durable one's broker is killed
    (it fails over) or, on odd seeds, drained and then stopped (it follows the draining advice to
    another broker); the plain ones' broker the other way round."""
    base = sweep_scenario(seed, brokers)
    home_fault = "durable-drain" if seed % 2 else "durable-home"  # a drain (and a move) or a kill (and a failover)
    roamer_fault = ("roamers-home" if seed % 2 else "roamers-drain",) if plain_roamers else ()
    return replace(base, faults=tuple(dict.fromkeys((home_fault, *roamer_fault, *base.faults))),
                   durable_failover=True, plain_roamers=plain_roamers,
                   release_keep_ns=ROAMERS_KEEP_NS if plain_roamers else None)


def churn_scenario(seed: int, brokers: int = 1000) -> DeliveryScenario:
    """The scenario of one seed of the sweep at scale (`tidings sim delivery --churn`): brokers
    leaving and joining while events flow (1 to 2 in 100 crash, each restarting or leaving for good,
    and as many new ones join), loss of 1 to 5 % on every link between brokers, up to two failures
    by role (forwarder, root, ...) on top, publishers, plain subscribers (some of them late, some
    quitting, some on the new brokers) and durable subscribers moving between brokers, spread over
    the overlay; all drawn from the seed."""
    rng = random.Random(f"churn/{seed}")
    k = max(1, brokers // 100)
    return DeliveryScenario(
        seed=seed, brokers=brokers, loss=rng.choice([0.01, 0.02, 0.05]), duplication=rng.choice([0.0, 0.01]),
        reordering=rng.choice([0.0, 0.01]), clock_skew_us_max=rng.choice([0, 200_000]),
        faults=tuple(rng.sample(FAULTS + DURABLE_FAULTS, rng.randint(0, 2))), events_per_publisher=300,
        subscribers=max(6, brokers // 40), publishers=max(2, brokers // 250), durables=max(1, brokers // 250),
        durable_moves=rng.choice([2, 6]), churn=max(2, brokers // 100), crashes=rng.randint(k, 2 * k),
        joins=rng.randint(k, 2 * k), coalesce_probability=0.95, join_interval_ns=5 * MILLISECOND_NS,
        scale_timers=True, quiet_max_ns=30 * SECOND_NS)
