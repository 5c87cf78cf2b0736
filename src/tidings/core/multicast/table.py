"""The tree table: the trees this node is on, their parent and children, and their liveness.

Every tree a node takes part in (as member, forwarder or root) has one `TreeEntry` here, created by
`new_entry` (bounded by trees_max) and forgotten by `prune` as soon as nothing needs it, which tells
the parent UNSUBSCRIBE. A node with no parent in a tree routes a SUBSCRIBE of its own (`join`, or
`repair` when the parent was lost) and adopts as parent the first node it then hears from in that
tree (`heard_from_parent`); anyone else sending it EVENT or HEARTBEAT for that tree is not its parent.

Liveness runs on one tick per node (`tick`, every heartbeat_interval_ns, armed while there are
trees): a parent sends HEARTBEAT to each child that got no EVENT since the previous tick; a child
that heard nothing from its parent for parent_timeout_ns repairs (routes SUBSCRIBE again); a child
sends REFRESH every refresh_interval_ns; a parent drops a child it has not heard from for
child_timeout_ns. HEARTBEATs and REFRESHes are batched, one message per peer naming all its trees.

With the reliability layer (forward_events off), the table also records which trees changed shape
(presence, root, parent, children) since `shape_changes` was last asked, in the order they first
changed; `touch` marks one.
"""

from __future__ import annotations

from typing import Any

from tidings.core.deadlines import Alarm, Deadlines
from tidings.core.multicast.effects import Join, JoinPurpose, ParentSuspected, ScribeEffect, TreeShape
from tidings.core.multicast.entry import TreeEntry
from tidings.core.multicast.messages import (
    TREES_PER_MESSAGE_MAX,
    Heartbeat,
    Refresh,
    ScribeSubscribe,
    ScribeUnsubscribe,
    TreeMetadata,
)
from tidings.core.multicast.settings import TICK, ScribeConfig, ScribeTimer
from tidings.core.multicast.trees import tree_key
from tidings.core.overlay.envelope import PeerSend, RouteTo
from tidings.core.overlay.node_id import NodeRef, id_hex
from tidings.core.wire.packable import Packable


class TreeTable:
    """This node's tree entries, their parent/child links and the liveness tick that keeps them."""

    def __init__(self, me: NodeRef, config: ScribeConfig, alarm: Alarm | None = None) -> None:
        self.me = me
        self.config = config
        self.trees: dict[str, TreeEntry] = {}
        self.timers: Deadlines[ScribeTimer] = Deadlines(alarm)  # the tick, set while there are trees
        # with the reliability layer (forward_events off): trees whose shape (presence, root, parent,
        # children) changed since `shape_changes` was last asked, in the order they first changed
        self.reshaped: dict[str, None] | None = None if config.forward_events else {}

    # -- entries -----------------------------------------------------------------------------

    def new_entry(self, now: int, tree: str) -> TreeEntry | None:
        if len(self.trees) >= self.config.trees_max:
            return None
        entry = TreeEntry(tree, tree_key(tree), heard_ns=now)
        self.trees[tree] = entry
        self.touch(tree)
        if TICK not in self.timers:
            self.timers.set(TICK, now + self.config.heartbeat_interval_ns)
        return entry

    def touch(self, tree: str) -> None:
        if self.reshaped is not None:
            self.reshaped[tree] = None

    def join(self, now: int, entry: TreeEntry, extra: Packable) -> list[ScribeEffect]:
        """Route a SUBSCRIBE of this node's own towards the key; the first tree node adopts us."""
        entry.parent = None
        entry.heard_ns = now
        self.touch(entry.name)
        return [RouteTo(entry.key, ScribeSubscribe(entry.name, self.me, extra, entry.members).to_wire())]

    def repair(self, now: int, entry: TreeEntry) -> list[ScribeEffect]:
        subscribe = ScribeSubscribe(entry.name, self.me, members=entry.members)
        entry.parent = None
        entry.heard_ns = now
        self.touch(entry.name)
        if self.reshaped is not None:  # the reliability layer puts its positions and interest in it
            return [ParentSuspected(entry.name, subscribe), Join(entry.key, subscribe, JoinPurpose.OWN)]
        return [ParentSuspected(entry.name, subscribe), RouteTo(entry.key, subscribe.to_wire())]

    def prune(self, entry: TreeEntry) -> list[ScribeEffect]:
        """Forget `entry` when nothing needs it any more, telling its parent (recursively upward)."""
        if entry.needed():
            return []
        del self.trees[entry.name]
        self.touch(entry.name)
        if entry.parent is None:
            return []
        return [PeerSend(entry.parent, ScribeUnsubscribe(entry.name).to_wire())]

    # -- links -------------------------------------------------------------------------------

    def heard_from_parent(self, now: int, tree: str, address: str) -> TreeEntry | None:
        """The entry of `tree` if `address` is (or, with our SUBSCRIBE under way, becomes) our
        parent in it; None when the sender should not be sending us anything for it."""
        entry = self.trees.get(tree)
        if entry is None or entry.root or address in entry.children:
            return None  # a child of ours as our parent would close a loop
        if entry.parent is None:
            entry.parent = address
            self.touch(tree)
            entry.refresh_due_ns = now + self.config.refresh_interval_ns
        elif entry.parent != address:
            return None
        entry.heard_ns = now
        return entry

    def on_heartbeat(self, now: int, address: str, message: Heartbeat) -> list[ScribeEffect]:
        return [
            PeerSend(address, ScribeUnsubscribe(tree).to_wire())
            for tree in message.trees
            if self.heard_from_parent(now, tree, address) is None
        ]

    def on_refresh(self, now: int, address: str, message: Refresh) -> None:
        for tree in message.trees:
            entry = self.trees.get(tree)
            child = None if entry is None else entry.children.get(address)
            if child is not None:
                child.heard_ns = now

    def on_unsubscribe(self, address: str, message: ScribeUnsubscribe) -> list[ScribeEffect]:
        entry = self.trees.get(message.tree)
        if entry is None or entry.children.pop(address, None) is None:
            return []
        self.touch(entry.name)
        return self.prune(entry)

    def node_failed(self, now: int, node: NodeRef) -> list[ScribeEffect]:
        """Drop `node` as a child everywhere, and repair every tree it was parent in."""
        effects: list[ScribeEffect] = []
        for entry in list(self.trees.values()):
            dropped = entry.children.pop(node.address, None) is not None
            if dropped:
                self.touch(entry.name)
            if entry.parent == node.address:
                effects += self.repair(now, entry)
            elif dropped:
                effects += self.prune(entry)
        return effects

    # -- the tick ----------------------------------------------------------------------------

    def tick(self, now: int) -> list[ScribeEffect]:
        if not self.timers.pop_due(now):
            return []
        heartbeats: dict[str, list[str]] = {}
        refreshes: dict[str, list[str]] = {}
        effects: list[ScribeEffect] = []
        for entry in list(self.trees.values()):
            effects += self._expire_children(now, entry)
            if entry.name not in self.trees:
                continue
            for address, child in entry.children.items():
                if now - child.sent_ns >= self.config.heartbeat_interval_ns:
                    child.sent_ns = now
                    heartbeats.setdefault(address, []).append(entry.name)
            if entry.root:
                continue
            if now - entry.heard_ns >= self.config.parent_timeout_ns:
                effects += self.repair(now, entry)
            elif entry.parent is not None and now >= entry.refresh_due_ns:
                entry.refresh_due_ns = now + self.config.refresh_interval_ns
                refreshes.setdefault(entry.parent, []).append(entry.name)
        effects += _batched(heartbeats, Heartbeat) + _batched(refreshes, Refresh)
        if self.trees:
            self.timers.set(TICK, now + self.config.heartbeat_interval_ns)
        return effects

    def _expire_children(self, now: int, entry: TreeEntry) -> list[ScribeEffect]:
        timeout = self.config.child_timeout_ns
        stale = [a for a, child in entry.children.items() if now - child.heard_ns >= timeout]
        if not stale:
            return []
        for address in stale:
            del entry.children[address]
        self.touch(entry.name)
        return self.prune(entry)

    # -- reports -----------------------------------------------------------------------------

    def status(self) -> list[dict[str, Any]]:
        """One JSON-serialisable dict per tree this node takes part in, in the order it joined."""
        out: list[dict[str, Any]] = []
        for entry in self.trees.values():
            held = entry.held()
            roles = ["root"] if entry.root else ["forwarder"] if entry.children else []
            roles += ["member"] if entry.member else []
            out.append({
                "name": entry.name,
                "key": id_hex(entry.key),
                "role": "+".join(roles),
                "parent": entry.parent,
                "children": list(entry.children),
                "member": entry.member,
                "creator": None if held is None else held.creator,
                "acl_rules": _acl_size(held),
            })
        return out

    def shape_changes(self) -> list[TreeShape]:
        """The shape now of each tree whose presence, root, parent or children changed since this
        was last asked (with the reliability layer; always [] without), in the order they changed."""
        if not self.reshaped:
            return []
        trees, self.reshaped = self.reshaped, {}
        out: list[TreeShape] = []
        for tree in trees:
            entry = self.trees.get(tree)
            out.append(TreeShape(tree) if entry is None else
                       TreeShape(tree, True, entry.root, entry.parent, tuple(entry.children)))
        return out


def _acl_size(metadata: TreeMetadata | None) -> int | None:
    return None if metadata is None or metadata.acl is None else len(metadata.acl)


def _batched(trees_by_peer: dict[str, list[str]], shape: type[Heartbeat] | type[Refresh]) -> list[ScribeEffect]:
    """One HEARTBEAT (or REFRESH) per peer naming all its trees, split at the per-message limit."""
    return [
        PeerSend(address, shape(tuple(trees[i : i + TREES_PER_MESSAGE_MAX])).to_wire())
        for address, trees in trees_by_peer.items()
        for i in range(0, len(trees), TREES_PER_MESSAGE_MAX)
    ]
