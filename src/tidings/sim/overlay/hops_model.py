"""Ideal Pastry routing from the sorted nodeIds alone: the reference for the simulator's hop counts.

Theory of operation. With b = 4 and every routing-table slot filled whose prefix some node has,
the hops a lookup takes depend only on the nodeIds and the leaf set's size, not on the network nor
on which candidate fills a slot (ids are hashes, independent of position). This model routes a
lookup the way the Pastry paper's algorithm does, with no overlay code at all:

- at node x, if the key lies within x's leaf set (between its `l/2`-th neighbours on each side
  on the ring), the next hop is the node closest to the key, and the route ends there;
- otherwise the next hop is the routing-table entry for the key's next digit: a node, drawn
  uniformly, among those sharing one digit more with the key than x does.

Keys are other nodes' ids (so the destination is known), as in `lookups.py`. Nothing here
touches the overlay machines: if the simulator (real `OverlayNode`s, real tables) and this model
agree, the simulator routes as well as Pastry can with that leaf set, and a different figure
elsewhere comes from a different set-up. docs/experiments.md uses it for the 5,000-broker gap.
"""

from __future__ import annotations

import random
from bisect import bisect_left
from dataclasses import dataclass

from tidings.core.overlay.node_id import DIGIT_BITS, DIGITS, ID_BITS

RING = 1 << ID_BITS


def shared_digits(a: int, b: int) -> int:
    x = a ^ b
    return DIGITS if x == 0 else (ID_BITS - x.bit_length()) // DIGIT_BITS


@dataclass(frozen=True)
class HopsModel:
    nodes: int
    leaf_set_size: int = 16
    seed: int = 1

    def run(self, lookups: int) -> dict[str, object]:
        """Mean hops and the distribution (percent of lookups per hop count) over `lookups`."""
        rng = random.Random(f"hops-model/{self.seed}")
        n, half = self.nodes, self.leaf_set_size // 2
        ids = sorted({rng.getrandbits(ID_BITS) for _ in range(n)})
        n = len(ids)
        counts: dict[int, int] = {}
        for _ in range(lookups):
            x, target = rng.randrange(n), rng.randrange(n)
            key, hops = ids[target], 0
            while x != target:
                hops += 1
                low, high = ids[(x - half) % n], ids[(x + half) % n]
                if 2 * half >= n - 1 or (key - low) % RING <= (high - low) % RING:
                    break  # within the leaf set: one hop to the closest node
                shift = ID_BITS - DIGIT_BITS * (shared_digits(ids[x], key) + 1)
                prefix = key >> shift
                start, end = bisect_left(ids, prefix << shift), bisect_left(ids, (prefix + 1) << shift)
                x = rng.randrange(start, end)  # never empty: the target has that prefix
            counts[hops] = counts.get(hops, 0) + 1
        mean = sum(h * c for h, c in counts.items()) / lookups
        return {"nodes": n, "leaf_set_size": self.leaf_set_size, "mean_hops": round(mean, 3),
                "hops_percent": {h: round(100.0 * c / lookups, 3) for h, c in sorted(counts.items())}}


if __name__ == "__main__":  # python -m tidings.sim.overlay.hops_model 5000 16 [lookups]
    import sys

    args = [int(a) for a in sys.argv[1:]]
    print(HopsModel(args[0], args[1] if len(args) > 1 else 16).run(args[2] if len(args) > 2 else 50_000))
