"""PsEPR's routing strategies and Scribe on one small PLDB-like workload: the spanning trees are
minimal, interest entries are what a brute force finds, no strategy beats the direct route, every
strategy reaches every subscriber before churn and after repair, and one seed is one run."""

from __future__ import annotations

import itertools
import random

import pytest

np = pytest.importorskip("numpy")
pytest.importorskip("scipy")

from tidings.sim.overlay.routing_strategies import (  # noqa: E402
    STRATEGIES,
    RoutingExperiment,
    _adjacency,
    _interest,
    mst,
)
from tidings.sim.overlay.transit_stub import TransitStubShape  # noqa: E402

SMALL = TransitStubShape(transit_domains=4, transit_routers=3, stubs_per_transit=3, stub_routers=6)


def run(seed: int = 1):
    return RoutingExperiment(150, seed, channels=40, churn=8, shape=SMALL).run()


@pytest.fixture(scope="module")
def report():
    return run()


def kruskal_weight(lat, nodes):
    parent = {n: n for n in nodes}

    def find(x):
        while parent[x] != x:
            x = parent[x]
        return x

    total = 0
    for w, a, b in sorted((int(lat[a, b]), a, b) for a, b in itertools.combinations(nodes, 2)):
        if find(a) != find(b):
            parent[find(a)] = find(b)
            total += w
    return total


def test_the_spanning_tree_is_minimal() -> None:
    rng = random.Random(3)
    for _ in range(20):
        n = rng.randrange(2, 12)
        pts = np.array([[rng.random(), rng.random()] for _ in range(n)])
        lat = (1000 * np.hypot(*(pts[:, None, :] - pts[None, :, :]).transpose(2, 0, 1))).astype(np.int64)
        nodes = list(range(n))
        edges = mst(lat, nodes)
        assert len(edges) == n - 1
        assert sum(int(lat[a, b]) for a, b in edges) == kruskal_weight(lat, nodes)


def test_interest_entries_point_at_neighbours_with_a_subscriber_behind_them() -> None:
    edges = [(0, 1), (1, 2), (1, 3), (3, 4)]
    adj = _adjacency(edges)
    got = _interest(adj, 7, [2, 4])

    def behind(node, neighbour):  # the side of the tree reached through `neighbour`
        seen, todo = {node, neighbour}, [neighbour]
        while todo:
            at = todo.pop()
            for nxt in adj[at]:
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen - {node}

    expected = {(a, b, 7) for a in adj for b in adj[a] if behind(a, b) & {2, 4}}
    assert got == expected


def test_every_strategy_reaches_everyone_before_churn_and_after_repair(report) -> None:
    assert list(report["strategies"]) == list(STRATEGIES)
    for name, row in report["strategies"].items():
        assert row["delivered"] == 1.0, name
        assert row["delivered_after_repair"] == 1.0, name
        assert 0.0 < row["delivered_right_after"] <= 1.0, name


def test_no_strategy_beats_the_direct_route_and_broadcast_is_it(report) -> None:
    rows = report["strategies"]
    for name, row in rows.items():
        assert row["stretch_mean"] >= 1.0, name
    assert rows["broadcast"]["stretch_mean"] == 1.0
    assert rows["broadcast"]["messages_per_event"] == report["brokers"] - 1
    # a tree per channel sends one message per member; the shared tree carries events through others
    assert rows["tree-per-channel"]["messages_per_event"] < rows["spanning-tree"]["messages_per_event"]
    assert rows["scribe"]["extra"]["periodic_messages_per_broker_s"] > 0


def test_the_same_seed_gives_the_same_report(report) -> None:
    assert run() == report
