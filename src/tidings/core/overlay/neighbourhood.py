"""Pastry's neighbourhood set: the nodes nearest to this one by the proximity metric.

Routing never reads it. It serves joins (a newcomer starts from the neighbourhood set of the nearby
node it contacted, so its routing table begins with nearby nodes) and gives repair a pool of live
nodes to ask. Proximity is the round-trip time the runtime measured; the set keeps the `size`
smallest, ties broken by nodeId so every run orders it the same way.
"""

from __future__ import annotations

from tidings.core.overlay.node_id import NodeRef


class NeighbourhoodSet:
    __slots__ = ("_entries", "size")

    def __init__(self, size: int = 32) -> None:
        assert size >= 0
        self.size = size
        self._entries: list[tuple[int, int, NodeRef]] = []  # (rtt_ns, node_id, node), nearest first

    def add(self, node: NodeRef, rtt_ns: int) -> bool:
        """Offer `node` at measured `rtt_ns` (a new measurement replaces the old); True if changed."""
        entry = (rtt_ns, node.node_id, node)
        kept = [e for e in self._entries if e[1] != node.node_id]
        if len(kept) == len(self._entries) - 1 and entry in self._entries:
            return False
        kept.append(entry)
        kept.sort(key=lambda e: (e[0], e[1]))
        del kept[self.size :]
        changed = kept != self._entries
        self._entries = kept
        return changed

    def remove(self, node_id: int) -> bool:
        kept = [e for e in self._entries if e[1] != node_id]
        changed = len(kept) != len(self._entries)
        self._entries = kept
        return changed

    def members(self) -> list[NodeRef]:
        """Nearest first."""
        return [e[2] for e in self._entries]

    def with_rtt(self) -> list[tuple[NodeRef, int]]:
        return [(e[2], e[0]) for e in self._entries]

    def find(self, address: str) -> NodeRef | None:
        for e in self._entries:
            if e[2].address == address:
                return e[2]
        return None

    def __contains__(self, node_id: object) -> bool:
        return any(e[1] == node_id for e in self._entries)

    def __len__(self) -> int:
        return len(self._entries)
