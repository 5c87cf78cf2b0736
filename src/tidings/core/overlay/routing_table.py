"""Pastry's routing table: one row per shared-prefix length, one column per next digit.

A node with nodeId `me` keeps, in row `r` and column `c`, some node whose nodeId shares exactly `r`
leading digits with `me` and whose digit `r` is `c` (column `me[r]` of row `r` stays empty: such a
node would belong to a deeper row). Routing a key that shares `r` digits with `me` looks at row `r`,
column `key[r]`: any node there shares at least `r + 1` digits with the key, so each hop lengthens
the match and a route takes about log16(N) hops.

Many nodes fit a slot; Pastry keeps the one nearest by the proximity metric (proximity neighbour
selection), here the round-trip time the runtime measured. A candidate of unknown RTT never displaces
an entry, except one of unknown RTT too (the first one stays: offers do not churn the table).

Memory: a simulation holds one table per broker for 100,000 brokers, and only the first
log16(N) + 1 rows ever fill, so rows are allocated on first use, each one flat list of 2 * 16 slots
(the nodes, then their RTTs) instead of per-entry objects.
"""

from __future__ import annotations

from tidings.core.overlay.node_id import BASE, DIGITS, NodeRef, digit, shared_prefix_digits

_Row = list[NodeRef | int | None]  # [node_0 .. node_15, rtt_0 .. rtt_15]


class RoutingTable:
    __slots__ = ("_count", "_rows", "me_id")

    def __init__(self, me_id: int) -> None:
        self.me_id = me_id
        self._rows: list[_Row | None] = [None] * DIGITS
        self._count = 0

    def _slot(self, node_id: int) -> tuple[int, int]:
        row = shared_prefix_digits(self.me_id, node_id)
        assert row < DIGITS, "a node never sits in its own routing table"
        return row, digit(node_id, row)

    def add(self, node: NodeRef, rtt_ns: int | None = None) -> bool:
        """Offer `node` (with its measured RTT, if known) for its slot; True if the table changed."""
        if node.node_id == self.me_id:
            return False
        row, col = self._slot(node.node_id)
        cells = self._rows[row]
        if cells is None:
            cells = self._rows[row] = [None] * (2 * BASE)
        held = cells[col]
        if isinstance(held, NodeRef):
            held_rtt = cells[BASE + col]
            assert held_rtt is None or isinstance(held_rtt, int)
            if held.node_id == node.node_id:
                rtt_ns = held_rtt if rtt_ns is None else rtt_ns
                if held == node and held_rtt == rtt_ns:
                    return False
            elif rtt_ns is None or (held_rtt is not None and held_rtt <= rtt_ns):
                return False
        else:
            self._count += 1
        cells[col] = node
        cells[BASE + col] = rtt_ns
        return True

    def remove(self, node_id: int) -> bool:
        """Forget `node_id` if it holds its slot; True if it did."""
        if node_id == self.me_id:
            return False
        row, col = self._slot(node_id)
        cells = self._rows[row]
        if cells is None:
            return False
        held = cells[col]
        if not isinstance(held, NodeRef) or held.node_id != node_id:
            return False
        cells[col] = cells[BASE + col] = None
        self._count -= 1
        return True

    def entry(self, row: int, col: int) -> NodeRef | None:
        cells = self._rows[row]
        held = None if cells is None else cells[col]
        assert held is None or isinstance(held, NodeRef)
        return held

    def rtt_ns(self, row: int, col: int) -> int | None:
        """The proximity of the entry at (row, col), None when empty or never measured."""
        cells = self._rows[row]
        rtt = None if cells is None else cells[BASE + col]
        assert rtt is None or isinstance(rtt, int)
        return rtt

    def slot_of(self, node_id: int) -> tuple[int, int]:
        """The (row, column) where `node_id` belongs."""
        return self._slot(node_id)

    def holds(self, node_id: int) -> bool:
        if node_id == self.me_id:
            return False
        held = self.entry(*self._slot(node_id))
        return held is not None and held.node_id == node_id

    def lookup(self, key: int) -> NodeRef | None:
        """The entry that shares a longer prefix with `key` than this node does, if any."""
        row = shared_prefix_digits(self.me_id, key)
        if row >= DIGITS:
            return None
        return self.entry(row, digit(key, row))

    def row(self, i: int) -> list[NodeRef]:
        """The non-empty entries of row `i`, by column."""
        cells = self._rows[i]
        if cells is None:
            return []
        return [held for held in cells[:BASE] if isinstance(held, NodeRef)]

    def nodes(self) -> list[NodeRef]:
        """Every entry, row by row, column by column."""
        return [node for i in range(DIGITS) for node in self.row(i)]

    def find(self, address: str) -> NodeRef | None:
        """The entry at `address`, if any (a scan of the rows in use: the runtime reports RTTs by address)."""
        for cells in self._rows:
            if cells is not None:
                for held in cells[:BASE]:
                    if isinstance(held, NodeRef) and held.address == address:
                        return held
        return None

    def fill(self) -> list[int]:
        """How many entries each row holds (for status pages)."""
        return [len(self.row(i)) for i in range(DIGITS)]

    def depth(self) -> int:
        """One past the deepest non-empty row (0 for an empty table)."""
        for i in range(DIGITS - 1, -1, -1):
            if self.row(i):
                return i + 1
        return 0

    def __len__(self) -> int:
        return self._count
