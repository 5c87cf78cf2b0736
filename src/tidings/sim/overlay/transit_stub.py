"""A transit-stub Internet (GT-ITM's model): routers in domains, end nodes on LANs, shortest paths.

Theory of operation. Zegura, Calvert and Bhattacharjee's transit-stub model (the Georgia Tech
internetwork topology models, GT-ITM) builds the Internet in two levels. `transit_domains` transit
domains, each of `transit_routers` routers, form the core: the routers of one domain are joined by
a random graph, and the domains by a random graph of their own (each domain-level edge links a
random router of each). Every transit router has `stubs_per_transit` stub domains attached, each of
`stub_routers` routers joined by a random graph, with one of them linked to the transit router
(the stub's gateway). The defaults are the Scribe paper's 5,050 routers: 10 transit domains of 5
routers, 10 stubs of 10 routers per transit router (50 + 5,000). Each random graph is a random tree
(every router links to an earlier one, so the domain is connected, as GT-ITM insists) plus each
other pair with the kind's edge probability.

Link delays are drawn by kind, uniformly in the ranges of `LinkDelays` (in whole microseconds, so
sums are exact): long links between transit domains, shorter ones inside a domain, shorter still
from a stub to its transit router and inside a stub. End nodes (the brokers, hosts 0..n-1) are
attached to stub routers chosen uniformly at random, each by a LAN link of `lan_us`.

IP routes are shortest paths by delay (scipy's Dijkstra over the sparse router graph), computed once
for all router pairs: a delay matrix and a predecessor matrix, R x R int32 each (R = 5,050: about
100 MB each). Nothing is ever n x n in the end nodes: the delay between hosts a and b is
lan(a) + D[router(a), router(b)] + lan(b), and their RTT twice that. So 100,000 hosts cost two
arrays of n integers beyond the routers' matrices.

Physical links are numbered: router links 0..E-1 (undirected), then host h's LAN link is E + h.
`path_links` gives the links of the unicast route between two hosts; `multicast_links` those of
IP multicast's shortest-path tree from a source host to a set of hosts. Both walk the
predecessor matrix with numpy, many paths at once.

Invariants: every router reaches every other; D is symmetric with a zero diagonal and satisfies the
triangle inequality (it is a shortest-path metric); a path's link delays sum to D.
"""

from __future__ import annotations

import random
from array import array
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.sparse import csr_matrix  # type: ignore[import-untyped]  # scipy ships no stubs
from scipy.sparse.csgraph import dijkstra  # type: ignore[import-untyped]

from tidings.core.units import MICROSECOND_NS
from tidings.sim.overlay.topology import Topology


@dataclass(frozen=True)
class LinkDelays:
    """One-way delay ranges by link kind, in microseconds (uniform in [low, high])."""

    inter_transit_us: tuple[int, int] = (20_000, 60_000)
    intra_transit_us: tuple[int, int] = (5_000, 20_000)
    transit_stub_us: tuple[int, int] = (2_000, 8_000)
    intra_stub_us: tuple[int, int] = (500, 3_000)
    lan_us: int = 1_000


@dataclass(frozen=True)
class TransitStubShape:
    transit_domains: int = 10
    transit_routers: int = 5  # per transit domain
    stubs_per_transit: int = 10  # stub domains per transit router
    stub_routers: int = 10  # per stub domain
    domain_edge_probability: float = 0.5  # between transit domains
    transit_edge_probability: float = 0.6  # inside a transit domain
    stub_edge_probability: float = 0.42  # inside a stub domain

    @property
    def routers(self) -> int:
        transit = self.transit_domains * self.transit_routers
        return transit + transit * self.stubs_per_transit * self.stub_routers


KIND_NAMES = ("inter-transit", "intra-transit", "transit-stub", "intra-stub")


class TransitStub(Topology):
    name = "transit-stub"

    def __init__(self, n: int, rng: random.Random, shape: TransitStubShape | None = None,
                 delays: LinkDelays | None = None) -> None:
        super().__init__(n)
        self.shape = shape or TransitStubShape()
        self.delays = delays or LinkDelays()
        edges = _router_edges(self.shape, self.delays, rng)
        r = self.shape.routers
        self.routers = r
        self.stub_first = self.shape.transit_domains * self.shape.transit_routers
        u = np.array([e[0] for e in edges], dtype=np.int64)
        v = np.array([e[1] for e in edges], dtype=np.int64)
        w = np.array([e[2] for e in edges], dtype=np.int64)
        self.edge_kind = np.array([e[3] for e in edges], dtype=np.int8)
        self.edge_us = w
        self.edges = len(edges)
        # The undirected link of a router pair, by the key min*R + max (sorted, for searchsorted).
        keys = np.minimum(u, v) * r + np.maximum(u, v)
        order = np.argsort(keys)
        self._edge_keys = keys[order]
        self._edge_ids = order.astype(np.int64)
        graph = csr_matrix((w.astype(np.float64), (u, v)), shape=(r, r))
        dist, pred = dijkstra(graph, directed=False, return_predecessors=True)
        assert np.isfinite(dist).all(), "every router reaches every other"
        self.router_us = dist.astype(np.int32)
        del dist
        self.pred = pred.astype(np.int32)
        del pred
        # Scalar reads in the proximity hot loops go through a flat array (numpy's item access is
        # several times slower); it shares nothing with router_us, 4 bytes per router pair.
        self._flat = array("i", self.router_us.tobytes())
        self.host_router = array("i", (self.stub_first + rng.randrange(r - self.stub_first) for _ in range(n)))
        self.lan_us = self.delays.lan_us

    # -- the proximity metric ----------------------------------------------------------------------

    def one_way_us(self, a: int, b: int) -> int:
        """The one-way delay between hosts a and b along the shortest route, in microseconds."""
        if a == b:
            return 0
        ra, rb = self.host_router[a], self.host_router[b]
        return 2 * self.lan_us + int(self._flat[ra * self.routers + rb])

    def rtt_ms(self, i: int, j: int) -> float:
        return 2 * self.one_way_us(i, j) / 1000.0

    def rtt_ns(self, i: int, j: int) -> int:
        return 2 * self.one_way_us(i, j) * MICROSECOND_NS

    def nearest(self, i: int, candidates: Iterable[int]) -> int:
        flat, hr, base = self._flat, self.host_router, self.host_router[i] * self.routers
        best, best_d = -1, 1 << 62
        for j in candidates:
            d = flat[base + hr[j]]
            if d < best_d:
                best, best_d = j, d
        return best

    # -- physical links ------------------------------------------------------------------------------

    @property
    def links(self) -> int:
        """Router links, then one LAN link per host."""
        return self.edges + self.n

    def link_kind(self, link: int) -> str:
        return "lan" if link >= self.edges else KIND_NAMES[int(self.edge_kind[link])]

    def router_path_links(self, src_routers: Any, dst_routers: Any, weights: Any) -> Any:
        """Copies per router link when `weights[k]` copies go from src_routers[k] to dst_routers[k]
        along the shortest routes (numpy arrays; one vectorised walk up the predecessor matrix)."""
        counts = np.zeros(self.edges, dtype=np.int64)
        s = np.asarray(src_routers, dtype=np.int64)
        d = np.asarray(dst_routers, dtype=np.int64)
        wt = np.asarray(weights, dtype=np.int64)
        moving = s != d
        s, d, wt = s[moving], d[moving], wt[moving]
        while len(d):
            p = self.pred[s, d].astype(np.int64)
            np.add.at(counts, self._edge_of(p, d), wt)
            more = p != s
            s, d, wt = s[more], p[more], wt[more]
        return counts

    def multicast_router_links(self, src_router: int, dst_routers: Any) -> Any:
        """The router links of the shortest-path tree from `src_router` to `dst_routers` (each once)."""
        d = np.unique(np.asarray(dst_routers, dtype=np.int64))
        d = d[d != src_router]
        seen = np.zeros(self.routers, dtype=bool)
        links = []
        while len(d):
            seen[d] = True
            p = self.pred[src_router, d].astype(np.int64)
            links.append(self._edge_of(p, d))
            p = np.unique(p[p != src_router])
            d = p[~seen[p]]  # a router already reached is on the tree with its path above it
        return np.concatenate(links) if links else np.zeros(0, dtype=np.int64)

    def _edge_of(self, a: Any, b: Any) -> Any:
        keys = np.minimum(a, b) * self.routers + np.maximum(a, b)
        at = np.searchsorted(self._edge_keys, keys)
        assert (self._edge_keys[at] == keys).all(), "consecutive routers on a path share a link"
        return self._edge_ids[at]

    def describe(self) -> dict[str, Any]:
        kinds = {}
        for k, name in enumerate(KIND_NAMES):
            sel = self.edge_us[self.edge_kind == k]
            if len(sel):
                kinds[name] = {"links": len(sel), "mean_ms": round(float(sel.mean()) / 1000, 2)}
        return {"routers": self.routers, "router_links": self.edges, "hosts": self.n,
                "links_by_kind": kinds, "lan_ms": self.lan_us / 1000,
                "mean_router_delay_ms": round(float(self.router_us.mean()) / 1000, 2),
                "max_router_delay_ms": round(float(np.max(self.router_us)) / 1000, 2),
                "stub_routers_with_hosts": len(set(self.host_router))}


def _router_edges(shape: TransitStubShape, delays: LinkDelays,
                  rng: random.Random) -> list[tuple[int, int, int, int]]:
    """(router, router, one-way delay in us, kind index) for every router link."""
    edges: list[tuple[int, int, int, int]] = []

    def link(a: int, b: int, kind: int, span: tuple[int, int]) -> None:
        edges.append((a, b, rng.randint(*span), kind))

    def domain(first: int, size: int, p: float, kind: int, span: tuple[int, int]) -> None:
        linked = set()
        for k in range(1, size):  # a random tree: connected
            j = rng.randrange(k)
            linked.add((j, k))
            link(first + j, first + k, kind, span)
        for a in range(size):
            for b in range(a + 1, size):
                if (a, b) not in linked and rng.random() < p:
                    link(first + a, first + b, kind, span)

    t, tr = shape.transit_domains, shape.transit_routers
    for dom in range(t):
        domain(dom * tr, tr, shape.transit_edge_probability, 1, delays.intra_transit_us)
    # the domains themselves: a random tree plus random pairs, each edge between random routers
    domain_pairs = [(rng.randrange(k), k) for k in range(1, t)]
    domain_pairs += [(a, b) for a in range(t) for b in range(a + 1, t)
                     if (a, b) not in domain_pairs and rng.random() < shape.domain_edge_probability]
    for a, b in domain_pairs:
        link(a * tr + rng.randrange(tr), b * tr + rng.randrange(tr), 0, delays.inter_transit_us)
    first = t * tr
    for transit in range(t * tr):
        for _ in range(shape.stubs_per_transit):
            domain(first, shape.stub_routers, shape.stub_edge_probability, 3, delays.intra_stub_us)
            link(transit, first + rng.randrange(shape.stub_routers), 2, delays.transit_stub_us)
            first += shape.stub_routers
    return edges
