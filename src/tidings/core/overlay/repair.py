"""Failures and repair: forgetting a failed node, mending what it leaves empty, and reviving.

A node the transport reports unreachable, or a leaf silent for failure_timeout_ns, is failed
(`fail`): removed from the leaf set, routing table and neighbourhood set, and remembered for
failed_memory_ns so that stale lists elsewhere cannot bring it back (`may_learn` refuses third-party
mentions; a message from the node itself always clears it). The leaf set is repaired at once by
asking the farthest live leaf on each side that lost a member for its leaf set (if that whole side
failed, the nearest known node on that side); a routing-table entry is repaired lazily by asking a
few other nodes of its row for their own row (`repair_row`). Every routing_repair_interval_ns
`maintain` refreshes one random row and asks both farthest leaves for their leaf sets.

The last lost_nodes_max failed nodes are kept, and every revive_interval_ns the longest-unasked one
is asked for its leaf set (`revive`): a node that was only cut off answers, and its answer (a
message from a node declared failed) clears the whole failed memory, so the two sides of a healed
partition find each other again through the leaf sets exchanged. All memories are bounded.
"""

from __future__ import annotations

from collections.abc import Callable

from tidings.core.deadlines import Deadlines
from tidings.core.overlay import messages as m
from tidings.core.overlay.envelope import PeerSend
from tidings.core.overlay.events import NodeFailed, OverlayEffect
from tidings.core.overlay.leaf_set import LeafSet
from tidings.core.overlay.neighbourhood import NeighbourhoodSet
from tidings.core.overlay.node_id import DIGITS, HALF_RING, RING, NodeRef
from tidings.core.overlay.routing_table import RoutingTable
from tidings.core.overlay.settings import OverlayConfig, OverlayTimer, Rng


class Repair:
    """The failed-node memory and the repairs of the leaf set and routing table of one node."""

    __slots__ = ("_failed", "_known", "_lost", "_rng", "config", "leaf_set", "me", "neighbourhood",
                 "routing_table", "timers")

    def __init__(self, me: NodeRef, config: OverlayConfig, rng: Rng, leaf_set: LeafSet,
                 routing_table: RoutingTable, neighbourhood: NeighbourhoodSet,
                 timers: Deadlines[OverlayTimer], known: Callable[[], list[NodeRef]]) -> None:
        self.me = me
        self.config = config
        self._rng = rng
        self.leaf_set = leaf_set
        self.routing_table = routing_table
        self.neighbourhood = neighbourhood
        self.timers = timers
        self._known = known  # every node in the node's state once
        self._failed: dict[int, int] = {}  # nodeId -> end of its failed memory (insertion order = age)
        self._lost: dict[int, NodeRef] = {}  # failed nodes to ask again now and then (order = next asked)

    def is_failed(self, node_id: int) -> bool:
        return node_id in self._failed

    def may_learn(self, node_id: int, heard: bool) -> bool:
        """Whether a node may be taken into this node's state: not one declared failed, unless it
        spoke itself (`heard`), which also ends its failed memory; and a node we had declared
        failed that speaks means a partition healed, so what we declared failed may be alive too:
        third parties may name those again (they still answer a keep-alive before they enter the
        leaf set), which merges the two sides in a few exchanges."""
        if node_id in self._failed:
            if not heard:
                return False
            del self._failed[node_id]
        if heard and self._lost.pop(node_id, None) is not None:
            self._failed.clear()
        return True

    def fail(self, now: int, node: NodeRef, out: list[OverlayEffect]) -> None:
        """Forget `node` everywhere and start repairing what it leaves empty."""
        node_id = node.node_id
        on_sides = self.leaf_set.sides_of(node_id)
        was_leaf = self.leaf_set.remove(node_id)
        row = None
        if self.routing_table.holds(node_id):
            row = self.routing_table.slot_of(node_id)[0]
            self.routing_table.remove(node_id)
        was_neighbour = self.neighbourhood.remove(node_id)
        self._failed.pop(node_id, None)
        self._failed[node_id] = now + self.config.failed_memory_ns
        if len(self._failed) > self.config.failed_memory_max:
            del self._failed[next(iter(self._failed))]
        self._lost.pop(node_id, None)
        self._lost[node_id] = node
        if len(self._lost) > self.config.lost_nodes_max:
            del self._lost[next(iter(self._lost))]
        if OverlayTimer.REVIVE not in self.timers:
            self.timers.set(OverlayTimer.REVIVE, now + self.config.revive_interval_ns)
        if was_leaf or was_neighbour or row is not None:
            out.append(NodeFailed(node))
        if was_leaf:
            self._repair_leaves(on_sides, out)
        if row is not None:
            self.repair_row(row, self.config.row_repair_helpers, out)

    def _repair_leaves(self, on_sides: tuple[bool, bool], out: list[OverlayEffect]) -> None:
        """Ask the farthest live leaf of each side that lost a member for its leaf set: it knows
        the nodes just beyond ours."""
        self._ask_for_leaves([larger for larger, lost in zip((False, True), on_sides, strict=True) if lost], out)

    def _ask_for_leaves(self, sides: list[bool], out: list[OverlayEffect]) -> None:
        asked: list[str] = []
        for larger in sides:
            helper = self._side_helper(larger) or self._side_helper(not larger)
            if helper is not None and helper.address not in asked:
                asked.append(helper.address)
                out.append(PeerSend(helper.address, m.LeafSetRequest(self.me).to_wire()))

    def _side_helper(self, larger: bool) -> NodeRef | None:
        """The farthest leaf on one side; if that whole side failed (more than half a leaf set of
        adjacent nodes at once), the nearest node on that side that we know of at all."""
        helper = self.leaf_set.extreme(larger)
        if helper is None:
            me = self.me.node_id

            def away(n: NodeRef) -> int:
                return (n.node_id - me) % RING if larger else (me - n.node_id) % RING

            known = [n for n in self._known() if away(n) < HALF_RING]
            helper = min(known, key=lambda n: (away(n), n.node_id), default=None)
        return helper

    def repair_row(self, row: int, helpers: int, out: list[OverlayEffect]) -> None:
        """Ask up to `helpers` other nodes of `row` (or, if none, of the next row) for their own row
        `row`: its entries share as long a prefix with us and may fill the gap. More than one,
        because a helper may still hold the very node that failed."""
        for source in (row, row + 1):
            candidates = self.routing_table.row(source) if source < DIGITS else []
            if candidates:
                request = m.RowRequest(self.me, row).to_wire()
                for i in range(min(helpers, len(candidates))):
                    pick = i + self._rng.randrange(len(candidates) - i)
                    candidates[i], candidates[pick] = candidates[pick], candidates[i]
                    out.append(PeerSend(candidates[i].address, request))
                return

    def revive(self, now: int, out: list[OverlayEffect]) -> None:
        """Ask the longest-unasked failed node for its leaf set. A node that was only cut off (a
        partition that healed) answers, and both sides learn each other and their neighbours again:
        without this, two halves of an overlay that each repaired around the other stay apart."""
        if not self._lost:
            return
        self.timers.set(OverlayTimer.REVIVE, now + self.config.revive_interval_ns)
        node_id, node = next(iter(self._lost.items()))
        del self._lost[node_id]
        self._lost[node_id] = node  # to the back: the next round asks another
        out.append(PeerSend(node.address, m.LeafSetRequest(self.me).to_wire()))

    def maintain(self, out: list[OverlayEffect]) -> None:
        """Periodic lazy maintenance: refresh one random routing-table row, and ask the farthest
        leaf of each side for its leaf set (it would know of any node we missed in between)."""
        depth = self.routing_table.depth()
        if depth:
            self.repair_row(self._rng.randrange(depth), 1, out)
        self._ask_for_leaves([False, True], out)

    def forget_old_failures(self, now: int) -> None:
        while self._failed:
            oldest = next(iter(self._failed))
            if self._failed[oldest] > now:
                return
            del self._failed[oldest]
