"""Steady-state Pastry: each node's state as the join protocol converges to it, built directly.

Theory of operation. Joining 100,000 brokers one by one through the real protocol costs millions
of messages; the routing experiments only need the state the joins leave behind, and that state is
determined by the sorted list of nodeIds and the proximity metric:

- leaf set: the `size/2` nodes just below and just above the node on the ring, exactly (the join
  protocol and leaf-set repair make it exact, and the tests check that they do);
- routing table, row r, column c: Pastry keeps, among all nodes whose id shares r digits with
  this node's and has digit c next, the one nearest by the proximity metric (proximity neighbour
  selection). Those nodes are one contiguous run of the sorted id list, found by bisection. When
  the run holds at most `sample_max` nodes every one is considered; otherwise a window of
  `sample_max` consecutive ids starting at a seeded random offset. Ids are hashes, independent of
  position, so the window is a uniform sample of the run's hosts: the entry is the nearest of
  `sample_max` random candidates, which is about what the join protocol's rows copied from nearby
  nodes and its probes achieve, at a cost of a few dozen RTT computations per slot;
- neighbourhood set: the `neighbourhood_size` nearest among the node's routing-table entries and
  leaves (an approximation: the true nearest hosts would need an all-pairs search, and the set is
  read only by joins and repairs, never by routing).

Routing quality (the hop count) depends on which slots are filled and on the leaf set, not on which
candidate fills a slot, so this state routes like the joined one; tests/sim compares the two hop
distributions at 5,000 brokers. The builder yields host indices; the simulation turns them into
NodeRefs and hands them, with their RTTs, to the real RoutingTable, LeafSet and NeighbourhoodSet.
"""

from __future__ import annotations

import random
from bisect import bisect_left
from collections.abc import Sequence

from tidings.core.overlay.node_id import BASE, DIGIT_BITS, DIGITS, ID_BITS, digit
from tidings.sim.overlay.topology import Topology


class SteadyState:
    def __init__(self, ids: Sequence[int], hosts: Sequence[int], topology: Topology, rng: random.Random,
                 leaf_set_size: int = 16, sample_max: int = 16, neighbourhood_size: int = 32) -> None:
        """`hosts` are the host indices taking part, `ids[h]` host h's nodeId (all distinct)."""
        self.ids = ids
        self.order = sorted(hosts, key=lambda h: ids[h])
        self.sorted_ids = [ids[h] for h in self.order]
        assert len(set(self.sorted_ids)) == len(self.sorted_ids), "nodeIds are distinct"
        self.position = {h: p for p, h in enumerate(self.order)}
        self.topology = topology
        self.rng = rng
        self.half = leaf_set_size // 2
        self.sample_max = sample_max
        self.neighbourhood_size = neighbourhood_size

    def leaves(self, host: int) -> list[int]:
        """The hosts of `host`'s leaf set: smaller side nearest first, then the larger side."""
        n = len(self.order)
        p = self.position[host]
        reach = min(self.half, n - 1)
        smaller = [self.order[(p - k) % n] for k in range(1, reach + 1)]
        larger = [self.order[(p + k) % n] for k in range(1, reach + 1)]
        return smaller + larger

    def routing_entries(self, host: int) -> list[int]:
        """One host per non-empty routing-table slot of `host`, row by row."""
        x = self.ids[host]
        sorted_ids, order = self.sorted_ids, self.order
        lo, hi = 0, len(order)  # the run of ids sharing the first r digits with x
        entries: list[int] = []
        for r in range(DIGITS):
            if hi - lo <= 1:
                break
            shift = ID_BITS - DIGIT_BITS * (r + 1)
            top = (x >> (shift + DIGIT_BITS)) << (shift + DIGIT_BITS)
            bounds = [lo, *(bisect_left(sorted_ids, top + (c << shift), lo, hi) for c in range(1, BASE)), hi]
            own = digit(x, r)
            for c in range(BASE):
                if c != own and bounds[c] < bounds[c + 1]:
                    entries.append(self._nearest_in(host, bounds[c], bounds[c + 1]))
            lo, hi = bounds[own], bounds[own + 1]
        return entries

    def _nearest_in(self, host: int, start: int, end: int) -> int:
        order, size, k = self.order, end - start, self.sample_max
        if size <= k:
            return self.topology.nearest(host, order[start:end])
        offset = self.rng.randrange(size)
        window = (order[start + (offset + t) % size] for t in range(k))
        return self.topology.nearest(host, window)

    def neighbours(self, host: int, known: Sequence[int]) -> list[int]:
        """The `neighbourhood_size` hosts of `known` nearest to `host` (ties by nodeId)."""
        rtt, ids = self.topology.rtt_ms, self.ids
        unique = sorted(set(known) - {host})
        unique.sort(key=lambda h: (rtt(host, h), ids[h]))
        return unique[: self.neighbourhood_size]
