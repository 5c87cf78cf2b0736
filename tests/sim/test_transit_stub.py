"""The transit-stub topology: the paper's router count, a shortest-path metric, paths that add up,
multicast trees that are unions of unicast routes, and the same network for the same seed."""

from __future__ import annotations

import random

import pytest

np = pytest.importorskip("numpy")
pytest.importorskip("scipy")

from tidings.sim.overlay.transit_stub import TransitStub, TransitStubShape  # noqa: E402

SMALL = TransitStubShape(transit_domains=4, transit_routers=3, stubs_per_transit=3, stub_routers=6)


def small(seed: int = 1, hosts: int = 300) -> TransitStub:
    return TransitStub(hosts, random.Random(seed), SMALL)


def test_the_default_shape_has_the_papers_5050_routers() -> None:
    assert TransitStubShape().routers == 5050
    assert SMALL.routers == 4 * 3 + 4 * 3 * 3 * 6


def test_router_delays_are_a_shortest_path_metric() -> None:
    topo = small()
    d = topo.router_us.astype(np.int64)
    assert (d == d.T).all()
    assert (np.diag(d) == 0).all()
    assert (d[~np.eye(len(d), dtype=bool)] > 0).all()
    # triangle inequality over every triple of routers: d[a, c] <= d[a, b] + d[b, c]
    for b in range(len(d)):
        assert (d <= d[:, b:b + 1] + d[b:b + 1, :]).all()
    # no link is shorter than the shortest path it is: every direct link's delay >= d[u, v]
    keys = topo._edge_keys
    u, v = keys // topo.routers, keys % topo.routers
    assert (topo.edge_us[topo._edge_ids] >= d[u, v]).all()


def test_each_route_is_a_chain_of_links_whose_delays_sum_to_the_shortest_delay() -> None:
    topo = small()
    rng = random.Random(5)
    for _ in range(200):
        a, b = rng.randrange(topo.routers), rng.randrange(topo.routers)
        counts = topo.router_path_links([a], [b], [1])
        assert int((counts * topo.edge_us).sum()) == int(topo.router_us[a, b])
        assert set(np.unique(counts)) <= {0, 1}  # a shortest path crosses no link twice


def test_weights_count_copies_on_every_link_of_their_route() -> None:
    topo = small()
    one = topo.router_path_links([3], [150], [1])
    assert (topo.router_path_links([3, 3], [150, 150], [2, 5]) == 7 * one).all()
    assert not topo.router_path_links([7], [7], [4]).any()  # same router: no router link


def test_a_multicast_tree_is_the_union_of_the_unicast_routes_from_its_source() -> None:
    topo = small()
    rng = random.Random(9)
    for _ in range(20):
        src = rng.randrange(topo.routers)
        dsts = [rng.randrange(topo.routers) for _ in range(rng.randrange(1, 40))]
        tree = topo.multicast_router_links(src, dsts)
        assert len(tree) == len(set(tree.tolist())), "each link of the tree once"
        union = set()
        for d in dsts:
            union |= set(np.nonzero(topo.router_path_links([src], [d], [1]))[0].tolist())
        assert set(tree.tolist()) == union


def test_hosts_sit_on_stub_routers_and_their_rtt_is_lan_route_lan_both_ways() -> None:
    topo = small()
    assert all(topo.stub_first <= r < topo.routers for r in topo.host_router)
    for a, b in ((0, 1), (5, 200), (17, 17)):
        route_us = int(topo.router_us[topo.host_router[a], topo.host_router[b]])
        expected = 0 if a == b else 2 * (2 * topo.lan_us + route_us)
        assert topo.rtt_ns(a, b) == topo.rtt_ns(b, a) == expected * 1000
    candidates = list(range(1, 60))
    assert topo.rtt_ns(0, topo.nearest(0, candidates)) == min(topo.rtt_ns(0, c) for c in candidates)


def test_the_same_seed_builds_the_same_network_and_another_seed_another() -> None:
    a, b, c = small(1), small(1), small(2)
    assert (a.edge_us == b.edge_us).all() and (a.router_us == b.router_us).all()
    assert list(a.host_router) == list(b.host_router)
    assert len(a.edge_us) != len(c.edge_us) or (a.edge_us != c.edge_us).any()
