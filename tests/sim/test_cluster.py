"""Many brokers in the byte-level simulator: the real Broker cores, peer links, Pastry and Scribe.

Each broker runs on its own simulated disk and talks to the others over simulated TCP (frames split
and coalesced at random), exactly as `tidings broker --join` does over the network. Clients connect
to different brokers; the checks compare what each subscriber received with what the publishers
had acknowledged, by the subscription's pattern and filter (the same semantics as on one broker).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tidings.core.channels import pattern_matches
from tidings.core.config import BrokerConfig
from tidings.core.filters import parse_filter
from tidings.core.multicast.trees import tree_key
from tidings.core.overlay.node_id import closer, node_id_from
from tidings.core.units import MILLISECOND_NS, SECOND_NS
from tidings.sim.broker_node import BrokerNode
from tidings.sim.clients import Publisher, Subscriber
from tidings.sim.disk import Disk
from tidings.sim.network import Network
from tidings.sim.world import World

# a small leaf set, so that a dozen brokers already route in several hops and trees have forwarders
CONFIG = BrokerConfig(leaf_set_size=4, keepalive_interval_ns=200 * MILLISECOND_NS,
                      failure_timeout_ns=600 * MILLISECOND_NS, heartbeat_interval_ns=200 * MILLISECOND_NS,
                      parent_timeout_ns=600 * MILLISECOND_NS, ping_interval_ns=SECOND_NS)
REPAIR_NS = 3 * SECOND_NS


class Cluster:
    def __init__(self, seed: int, brokers: int) -> None:
        self.world = World(seed)
        self.net = Network(self.world)
        self.nodes = [
            BrokerNode(self.world, self.net, Disk(self.world, f"disk{i}"), f"b{i}:7000", CONFIG,
                       pubend_id=f"p{i}", name=f"b{i}", overlay=True, join=None if i == 0 else "b0:7000")
            for i in range(brokers)
        ]
        for i, node in enumerate(self.nodes):
            self.world.call_at(i * 30 * MILLISECOND_NS, node.start)
        self.run(2 * SECOND_NS)

    def run(self, duration_ns: int) -> None:
        self.world.run(until_ns=self.world.now + duration_ns)

    def status(self, i: int) -> dict[str, Any]:
        core = self.nodes[i].core
        assert core is not None
        return core.status()

    def rendezvous(self, tree: str, among: list[int]) -> int:
        """The broker numerically closest to the tree's key: its rendez-vous point."""
        key = tree_key(tree)
        best = among[0]
        for i in among[1:]:
            if closer(key, node_id_from(f"p{i}"), node_id_from(f"p{best}")):
                best = i
        return best


def expected(sub: Subscriber, publishers: list[Publisher], after_tick: int = 0) -> set[bytes]:
    flt = parse_filter(sub.filter) if sub.filter else None
    out = set()
    for pub in publishers:
        for ident, tick in pub.acked.items():
            channel, attributes, _ = pub.sent[ident]
            if tick > after_tick and pattern_matches(sub.pattern, channel) and (flt is None or flt.matches(attributes)):
                out.add(ident.encode())
    return out


def received(sub: Subscriber) -> list[bytes]:
    return [fields.payload for _, fields in sub.received]


def in_pubend_order(sub: Subscriber) -> bool:
    last: dict[str, int] = {}
    for tick, fields in sub.received:
        if tick <= last.get(fields.pubend, 0):
            return False
        last[fields.pubend] = tick
    return True


def test_events_reach_matching_subscribers_on_every_broker_exactly_once():
    c = Cluster(seed=11, brokers=10)
    assert all(c.status(i)["overlay"]["joined"] for i in range(10))
    w, net = c.world, c.net
    subs = [
        Subscriber(w, net, "b1:7000", "all", "nodes/#"),
        # on the same broker, in another tree that the same events reach: each still once
        Subscriber(w, net, "b1:7000", "exact", "nodes/h1/load"),
        Subscriber(w, net, "b4:7000", "load", "nodes/+/load", filter="load > 2"),
        Subscriber(w, net, "b6:7000", "h1", "nodes/h1/#"),
        Subscriber(w, net, "b3:7000", "mem-exact", "nodes/h2/mem", filter="mem < 500000"),
        Subscriber(w, net, "b8:7000", "site", "+/+/load", filter='site = "s1"'),
    ]
    for s in subs:
        s.start(w.now)
    c.run(SECOND_NS)
    pubs = [Publisher(w, net, "b3:7000", "pa", 150, bad_event_probability=0),
            Publisher(w, net, "b7:7000", "pb", 150, bad_event_probability=0)]
    for p in pubs:
        p.start(w.now)
    c.run(4 * SECOND_NS)
    assert all(p.finished and len(p.acked) == 150 for p in pubs)
    for s in subs:
        got = received(s)
        assert len(got) == len(set(got)), f"{s.name} got duplicates"
        assert set(got) == expected(s, pubs), s.name
        assert in_pubend_order(s), s.name
        assert not s.violations and not s.errors
    assert sum(len(received(s)) for s in subs) > 300
    # the status of a member broker shows its tree and its place in the overlay
    status = c.status(1)
    assert any(t["name"] == "nodes/#" and t["member"] for t in status["trees"])
    assert status["overlay"]["node_id"] == f"{node_id_from('p1'):032x}"


@pytest.mark.parametrize("seed", [5, 6, 7])  # seeds whose tree has a forwarder without clients
def test_subscribers_receive_again_after_the_rendezvous_point_and_a_forwarder_crash(seed):
    c = Cluster(seed=seed, brokers=12)
    w, net = c.world, c.net
    tree = "nodes/#"
    root = c.rendezvous(tree, list(range(12)))
    clients_at = [i for i in range(1, 12) if i != root][:6]
    subs = [Subscriber(w, net, f"b{i}:7000", f"s{i}", tree) for i in clients_at[:5]]
    pub_at = clients_at[5]
    for s in subs:
        s.start(w.now)
    c.run(SECOND_NS)
    trees = {i: {t["name"]: t for t in c.status(i)["trees"]} for i in range(12)}
    assert trees[root][tree]["role"].startswith("root")
    forwarders = [i for i in range(12) if i not in (root, pub_at) and i not in clients_at
                  and trees[i].get(tree, {}).get("children")]
    assert forwarders, "the tree has a forwarder that hosts no client"
    crashed = [root, forwarders[0]]

    first = Publisher(w, net, f"b{pub_at}:7000", "before", 60, bad_event_probability=0)
    first.start(w.now)
    c.run(2 * SECOND_NS)
    for s in subs:
        assert set(received(s)) == expected(s, [first])

    for i in crashed:
        c.nodes[i].crash()
    c.run(REPAIR_NS)  # failure detection, leaf-set repair, parents suspected, subscribes re-routed
    new_root = c.rendezvous(tree, [i for i in range(12) if i not in crashed])
    assert c.status(new_root)["trees"][0]["role"].startswith("root")
    after = Publisher(w, net, f"b{pub_at}:7000", "after", 80, bad_event_probability=0)
    after.start(w.now)
    c.run(3 * SECOND_NS)
    assert len(after.acked) == 80
    for s in subs:
        got = received(s)
        assert len(got) == len(set(got)), s.name
        assert expected(s, [after]) <= set(got), f"{s.name} missed events after the repair"
        assert in_pubend_order(s)


def digest(seed: int) -> str:
    """The trace digest of a small cluster run: joins, a tree, 30 events across brokers."""
    c = Cluster(seed=seed, brokers=6)
    s = Subscriber(c.world, c.net, "b2:7000", "s", "nodes/#")
    s.start(c.world.now)
    c.run(SECOND_NS)
    p = Publisher(c.world, c.net, "b4:7000", "p", 30, bad_event_probability=0)
    p.start(c.world.now)
    c.run(2 * SECOND_NS)
    assert len(received(s)) == 30
    return c.world.trace_digest()


def test_same_seed_same_trace_with_many_brokers():
    assert digest(3) == digest(3)
    assert digest(3) != digest(4)


def test_the_cluster_trace_does_not_depend_on_the_process_hash_seed():
    code = "from tests.sim.test_cluster import digest; print(digest(3))"
    env = {**os.environ, "PYTHONHASHSEED": "4242"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True,
                         cwd=Path(__file__).parents[2], timeout=120)
    assert out.stdout.strip() == digest(3)
