"""Pastry's leaf set: the nodes numerically closest to this node's nodeId, half on each side.

The ring of 2**128 ids is read both ways from `me`: the smaller side holds the `size/2` nodes met
first going down (counter-clockwise, wrapping past 0), the larger side the `size/2` met first going
up. The two sides are kept independently, so in an overlay of fewer than `size/2 + 1` nodes every
node sits on both sides, which is what tells this node that it knows the whole ring.

The leaf set is what makes routing end right: a key between the farthest smaller leaf and the
farthest larger leaf has its numerically closest live node among the leaves and `me` (no node can
hide between two consecutive leaves), so the last hop is decided here rather than by prefix. Keys
outside that range are left to the routing table.

Invariants: each side is sorted nearest first, holds at most `size/2` nodes, never `me`, and no
nodeId twice; `version` grows on every change so callers can tell "changed" without copying.
"""

from __future__ import annotations

from collections.abc import Callable

from tidings.core.overlay.node_id import HALF_RING, RING, NodeRef, ring_distance


class LeafSet:
    __slots__ = ("_larger", "_smaller", "_wraps", "half", "me_id", "version")

    def __init__(self, me_id: int, size: int = 16) -> None:
        assert size >= 2 and size % 2 == 0, "a leaf set has two equal sides"
        self.me_id = me_id
        self.half = size // 2
        self._smaller: list[NodeRef] = []
        self._larger: list[NodeRef] = []
        self._wraps = False
        self.version = 0

    def _down(self, node_id: int) -> int:
        """Distance from `me` going down the ring to `node_id`."""
        return (self.me_id - node_id) % RING

    def _up(self, node_id: int) -> int:
        return (node_id - self.me_id) % RING

    def add(self, node: NodeRef) -> bool:
        """Offer `node`; it enters each side where it is among the `size/2` nearest. True if changed."""
        if node.node_id == self.me_id:
            return False
        changed = self._offer(self._smaller, node, self._down)
        changed = self._offer(self._larger, node, self._up) or changed
        if changed:
            self._changed()
        return changed

    def _offer(self, side: list[NodeRef], node: NodeRef, distance: Callable[[int], int]) -> bool:
        far = distance(node.node_id)
        for i, held in enumerate(side):
            if held.node_id == node.node_id:
                if held.address == node.address:
                    return False
                side[i] = node  # same node, new address (it restarted elsewhere)
                return True
            if far < distance(held.node_id):
                side.insert(i, node)
                del side[self.half :]
                return True
        if len(side) < self.half:
            side.append(node)
            return True
        return False

    def would_admit(self, node_id: int) -> bool:
        """True if adding `node_id` (not yet a leaf) would put it on at least one side."""
        if node_id == self.me_id:
            return False
        for side, distance in ((self._smaller, self._down), (self._larger, self._up)):
            if len(side) < self.half or distance(node_id) < distance(side[-1].node_id):
                return True
        return False

    def remove(self, node_id: int) -> bool:
        """Forget `node_id` on both sides; True if it was a leaf. Sides shrink until refilled."""
        before = len(self._smaller) + len(self._larger)
        self._smaller = [n for n in self._smaller if n.node_id != node_id]
        self._larger = [n for n in self._larger if n.node_id != node_id]
        changed = len(self._smaller) + len(self._larger) != before
        if changed:
            self._changed()
        return changed

    def _changed(self) -> None:
        self.version += 1
        far_up = self._larger[-1].node_id if self._larger else None
        self._wraps = any(n.node_id == far_up for n in self._smaller)

    def covers(self, key: int) -> bool:
        """True when `key` lies within the range of the leaf set, so `closest(key)` is final."""
        if self._wraps or not (self._smaller or self._larger):
            return True  # the leaves span the whole ring (or this node is alone)
        if self._larger and self._up(key) <= self._up(self._larger[-1].node_id):
            return True
        return bool(self._smaller) and self._down(key) <= self._down(self._smaller[-1].node_id)

    def closest(self, key: int, exclude: int | None = None) -> NodeRef | None:
        """The leaf numerically closest to `key` (ties to the smaller nodeId, as `node_id.closer`),
        or None when `me` is the closest. `exclude` leaves one nodeId out (a joining node must not
        be routed to itself)."""
        best: NodeRef | None = None
        best_id = self.me_id
        best_distance = ring_distance(key, best_id)
        for side in (self._smaller, self._larger):
            for node in side:
                distance = ring_distance(key, node.node_id)
                if (distance < best_distance or (distance == best_distance and node.node_id < best_id)) and (
                    node.node_id != exclude
                ):
                    best, best_id, best_distance = node, node.node_id, distance
        return best

    def members(self) -> list[NodeRef]:
        """Every leaf once, by nodeId."""
        seen = {n.node_id: n for n in self._smaller}
        seen.update((n.node_id, n) for n in self._larger)
        return [seen[k] for k in sorted(seen)]

    def smaller(self) -> list[NodeRef]:
        """The smaller side, nearest first."""
        return list(self._smaller)

    def larger(self) -> list[NodeRef]:
        """The larger side, nearest first."""
        return list(self._larger)

    def extreme(self, larger: bool) -> NodeRef | None:
        """The farthest leaf on one side within half the ring: whom to ask for leaves when that
        side lost one. (A short side also holds nodes from the far side of the ring, met by going
        all the way round; those know nothing about the gap.)"""
        side, distance = (self._larger, self._up) if larger else (self._smaller, self._down)
        proper = [n for n in side if distance(n.node_id) < HALF_RING]
        return proper[-1] if proper else None

    def sides_of(self, node_id: int) -> tuple[bool, bool]:
        """(on the smaller side, on the larger side)."""
        return (any(n.node_id == node_id for n in self._smaller), any(n.node_id == node_id for n in self._larger))

    def find(self, address: str) -> NodeRef | None:
        """The leaf at `address`, if any."""
        for node in self._smaller + self._larger:
            if node.address == address:
                return node
        return None

    def __contains__(self, node_id: object) -> bool:
        return any(n.node_id == node_id for n in self._smaller) or any(n.node_id == node_id for n in self._larger)

    def __len__(self) -> int:
        return len(self.members())
