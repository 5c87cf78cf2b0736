"""The rendez-vous point: the root's metadata, its replicas, its hand-over, and empty trees.

A tree's root is the live node numerically closest to its key. It keeps the tree's metadata
(creator, access list) and replicates it with REPLICA to the `replicas` leaf-set nodes nearest the
key; a node that becomes root (`become_root`: a CREATE, SUBSCRIBE or PUBLISH delivered to it) takes
the metadata from its replica if it has none, and from a CREATE of the tree's first creator. When the
leaf set changes (`leaf_set_changed`), a root re-replicates, or, when a leaf-set node is now closer
to the key, hands the tree over (`hand_over`): it sends the metadata to the successor and subscribes
towards the key like any child.

A root with nothing to multicast to answers a publish with TREE_EMPTY (`answer_empty`) and remembers
the publisher's node; when the tree gains a member or child, or its key moves to a closer node,
`activated` sends those publishers TREE_ACTIVE. The publishing side's memory (`suppressed`) holds a
tree this node was told is empty (see empty_trees.py; the pubend's source reads it too). Both
memories and the replicas are bounded.
"""

from __future__ import annotations

from collections.abc import Sequence

from tidings.core.multicast.effects import AccessChanged, ScribeEffect, TreeActivated
from tidings.core.multicast.empty_trees import EmptyTreeMemory, Suppressions
from tidings.core.multicast.entry import TreeEntry
from tidings.core.multicast.messages import Access, Replica, ScribeUnsubscribe, TreeActive, TreeEmpty, TreeMetadata
from tidings.core.multicast.settings import ScribeConfig
from tidings.core.multicast.table import TreeTable
from tidings.core.multicast.trees import tree_key
from tidings.core.overlay.envelope import PeerSend
from tidings.core.overlay.node_id import NodeRef, closer, ring_distance


class RendezVous:
    """The root's side of every tree this node is (or may become) the rendez-vous point of."""

    def __init__(self, me: NodeRef, config: ScribeConfig, table: TreeTable) -> None:
        self.me = me
        self.config = config
        self._table = table
        self.replicas: dict[str, TreeMetadata] = {}
        self._leaf_set: list[NodeRef] = []
        self.told_empty = EmptyTreeMemory(config.publisher_memory_max)
        self.suppressed = Suppressions(config.empty_trees_max, config.empty_hold_ns)

    def become_root(
        self, now: int, tree: str, created: TreeMetadata | None = None
    ) -> tuple[TreeEntry | None, list[ScribeEffect]]:
        """This node is now the rendez-vous point of `tree` (a message for its key was delivered
        here): leave any old parent, take the metadata from a replica if it has none, and from a
        CREATE of the tree's first creator (or of the only one, the first time)."""
        entry = self._table.trees.get(tree) or self._table.new_entry(now, tree)
        if entry is None:
            return None, []
        effects: list[ScribeEffect] = []
        before = entry.held()
        if entry.parent is not None:
            effects.append(PeerSend(entry.parent, ScribeUnsubscribe(tree).to_wire()))
        entry.root = True
        entry.parent = None
        self._table.touch(tree)
        if entry.metadata is None and tree in self.replicas:
            entry.metadata = self.replicas.pop(tree)
        if created is not None and created != entry.metadata and (
                entry.metadata is None or entry.metadata.broker == created.broker):
            entry.metadata = created
            entry.replicated_to = ()
        return entry, effects + self._access_changed(entry, before) + self._replicate(entry)

    def _access_changed(self, entry: TreeEntry, before: TreeMetadata | None) -> list[ScribeEffect]:
        held = entry.held()
        if held is None or held == before:
            return []
        wire = Access(entry.name, held).to_wire()
        return [AccessChanged(entry.name, held), *(PeerSend(a, wire) for a in entry.children)]

    def answer_empty(self, now: int, tree: str, publisher: NodeRef) -> list[ScribeEffect]:
        """TREE_EMPTY to the publisher's node, remembered (bounded) for a later TREE_ACTIVE."""
        self.told_empty.remember(tree, publisher.address)
        if publisher.address == self.me.address:
            self.suppressed.suppress(now, tree, self.me.address)
            return []
        return [PeerSend(publisher.address, TreeEmpty(tree).to_wire())]

    def activated(self, tree: str) -> list[ScribeEffect]:
        """The tree gained a member or child here, or its rendez-vous point moved away: publishers
        told it was empty may publish again (to the new rendez-vous point, if it moved)."""
        self.suppressed.lift(tree)
        wire = TreeActive(tree).to_wire()
        publishers = self.told_empty.release(tree)
        out: list[ScribeEffect] = [PeerSend(a, wire) for a in publishers if a != self.me.address]
        if self.me.address in publishers and not self.config.forward_events:
            out.append(TreeActivated(tree))
        return out

    def leaf_set_changed(self, now: int, members: Sequence[NodeRef]) -> list[ScribeEffect]:
        """Replicate each root's metadata to its nearest leaf-set nodes, or hand the tree over when
        a leaf-set node is now numerically closer to its key than this node."""
        self._leaf_set = [m for m in members if m.address != self.me.address]
        if not self._leaf_set:
            return []
        effects: list[ScribeEffect] = []
        for tree in self.told_empty.trees():
            if not self._is_closest(tree_key(tree)):
                effects += self.activated(tree)
        for entry in list(self._table.trees.values()):
            if not entry.root:
                continue
            if self._is_closest(entry.key):
                effects += self._replicate(entry)
            else:
                effects += self._hand_over(now, entry, self._nearest(entry.key)[0])
        return effects

    def _is_closest(self, key: int) -> bool:
        """True when no leaf-set node is numerically closer to `key` than this node."""
        return all(not closer(key, m.node_id, self.me.node_id) for m in self._leaf_set)

    def _nearest(self, key: int) -> list[NodeRef]:
        """The leaf-set nodes ordered by numerical closeness to `key` (ties to the smaller id)."""
        return sorted(self._leaf_set, key=lambda m: (ring_distance(key, m.node_id), m.node_id))

    def _replicate(self, entry: TreeEntry) -> list[ScribeEffect]:
        """REPLICA to the k leaf-set nodes nearest the key that do not hold it yet."""
        if entry.metadata is None:
            return []
        targets = tuple(m.address for m in self._nearest(entry.key)[: self.config.replicas])
        wire = Replica(entry.name, entry.metadata).to_wire()
        effects: list[ScribeEffect] = [PeerSend(a, wire) for a in targets if a not in entry.replicated_to]
        entry.replicated_to = targets
        return effects

    def store_replica(self, tree: str, metadata: TreeMetadata) -> None:
        if tree not in self.replicas and len(self.replicas) >= self.config.replicas_max:
            del self.replicas[next(iter(self.replicas))]
        self.replicas[tree] = metadata

    def _hand_over(self, now: int, entry: TreeEntry, successor: NodeRef) -> list[ScribeEffect]:
        """A node closer to the key joined: give it the metadata and become its child."""
        effects: list[ScribeEffect] = []
        if entry.metadata is not None:
            effects.append(PeerSend(successor.address, Replica(entry.name, entry.metadata).to_wire()))
            self.store_replica(entry.name, entry.metadata)
        entry.root = False
        self._table.touch(entry.name)
        entry.access = entry.metadata  # held until the new root's ACCESS replaces it
        entry.metadata = None
        entry.replicated_to = ()
        if not entry.needed():
            del self._table.trees[entry.name]
            return effects
        return effects + self._table.join(now, entry, None)
