"""Brute-force answers for the overlay tests: what Pastry's state and routes should come to, computed
from the full list of live nodeIds with no cleverness at all."""

from __future__ import annotations

from tidings.core.overlay.node_id import RING, ring_distance


def closest(key: int, ids: list[int]) -> int:
    """The live nodeId numerically closest to `key` (ties to the smaller id)."""
    return min(ids, key=lambda i: (ring_distance(key, i), i))


def smaller_side(me: int, ids: list[int], half: int) -> list[int]:
    """The `half` nodeIds met first going down the ring from `me`, nearest first."""
    return sorted({i for i in ids if i != me}, key=lambda i: (me - i) % RING)[:half]  # a set: ids may repeat


def larger_side(me: int, ids: list[int], half: int) -> list[int]:
    return sorted({i for i in ids if i != me}, key=lambda i: (i - me) % RING)[:half]


def leaf_members(me: int, ids: list[int], half: int) -> list[int]:
    """The true leaf set of `me` among `ids`, by nodeId."""
    return sorted(set(smaller_side(me, ids, half)) | set(larger_side(me, ids, half)))


class SideModel:
    """The leaf-set semantics spelled out slowly: each side keeps the `half` nearest of what it held
    plus what it is offered; removal just drops (the side stays short until something refills it)."""

    def __init__(self, me: int, half: int) -> None:
        self.me = me
        self.half = half
        self.smaller: list[int] = []
        self.larger: list[int] = []

    def add(self, node_id: int) -> None:
        if node_id == self.me:
            return
        self.smaller = smaller_side(self.me, list({*self.smaller, node_id}), self.half)
        self.larger = larger_side(self.me, list({*self.larger, node_id}), self.half)

    def remove(self, node_id: int) -> None:
        self.smaller = [i for i in self.smaller if i != node_id]
        self.larger = [i for i in self.larger if i != node_id]
