"""The Scribe agent: this node's part in every multicast tree it knows, as a sans-IO machine.

Each tree has a key (trees.tree_key); its rendez-vous point, the live node numerically closest to
the key, is the root. A node joins a tree by routing SUBSCRIBE towards the key. Every node on the
route sees it (Pastry's forward, `on_forward`): the first node already in the tree adds the previous
hop to its children table and stops the route; a node not yet in the tree adds the child, creates
its tree entry and routes a SUBSCRIBE of its own, becoming a forwarder. The trees are thus the
reverse of Pastry routes, and a node's children are nodes whose route to the key passes through it.
A PUBLISH is routed to the rendez-vous point (`on_deliver`), which sends the event as EVENT to its
children; each forwarder passes it to its own children, and members deliver it locally.

A child learns its parent from the parent: accepting a SUBSCRIBE answers it with a HEARTBEAT, and
a node with a SUBSCRIBE under way adopts the first node it hears from in that tree. Everyone else
that sends it EVENTs or HEARTBEATs for the tree is told UNSUBSCRIBE, so a node has at most one
parent and stale branches prune themselves.

Liveness runs on one tick per node, every heartbeat_interval_ns: a parent sends HEARTBEAT to each
child that got no EVENT since the previous tick; a child that heard nothing from its parent for
parent_timeout_ns (or that Pastry declared dead) suspects it and routes SUBSCRIBE again, so the tree
repairs itself around the failure. Children send REFRESH every refresh_interval_ns and a parent
drops a child it has not heard from for child_timeout_ns. Timeouts therefore fire up to one tick
late.

The root keeps the tree's metadata (creator, acl) and replicates it with REPLICA to the `replicas`
leaf-set nodes nearest the key; a node that becomes root (CREATE, SUBSCRIBE or PUBLISH delivered to
it) takes the metadata from its replica. A root that learns of a node numerically closer to the key
hands the tree over by subscribing towards the key like any child. A root with nothing to multicast
to answers a publish with TREE_EMPTY; that publisher's node sends nothing to the tree until the
root sends TREE_ACTIVE (a member or child joined, or the key moved to a closer node), the root is
reported dead, or empty_hold_ns passes (see empty_trees.py).

The metadata also carries the tree's access list (access.py): a node holding it (the root, and every
node it reached down the tree in ACCESS) sends it to each child it adopts, passes a new one to its
children, and answers a SUBSCRIBE whose members it admits none of with ACCESS instead of adopting.
A node whose SUBSCRIBE was refused so joins again at once for what the list admits of its members,
or, with children, for them (they hold the list and apply it themselves); `AccessChanged` tells the
broker, which ends its subscriptions the list excludes.

Invariants: a tree entry exists only while needed (a member, children, or a root holding metadata);
a root has no parent; a parent is never also a child; every table is bounded by ScribeConfig.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

from tidings.core import defaults
from tidings.core.deadlines import Deadlines
from tidings.core.errors import BAD_MESSAGE, TOO_MANY_TREES, ProtocolError, TidingsError
from tidings.core.multicast.access import MEMBERS_PER_SUBSCRIBE_MAX, Acl, Member, admits, admitted
from tidings.core.multicast.effects import (
    AccessChanged,
    ChildAdded,
    DeliverLocal,
    EventArrived,
    EventForwarded,
    Join,
    JoinPurpose,
    ParentSuspected,
    ScribeEffect,
    TreeActivated,
    TreeShape,
)
from tidings.core.multicast.empty_trees import EmptyTreeMemory, Suppressions
from tidings.core.multicast.entry import ChildEntry, TreeEntry
from tidings.core.multicast.messages import (
    TREES_PER_MESSAGE_MAX,
    Access,
    Create,
    Heartbeat,
    Refresh,
    Replica,
    ScribePublish,
    ScribeSubscribe,
    ScribeUnsubscribe,
    TreeActive,
    TreeEmpty,
    TreeEvent,
    TreeMetadata,
    decode,
    decode_routed,
)
from tidings.core.multicast.trees import tree_key
from tidings.core.overlay.envelope import Deliver, Forward, PeerSend, RouteMessage, RouteTo
from tidings.core.overlay.node_id import NodeRef, closer, id_hex, ring_distance

__all__ = [
    "AccessChanged",
    "ChildAdded",
    "DeliverLocal",
    "EventArrived",
    "EventForwarded",
    "ParentSuspected",
    "ScribeAgent",
    "ScribeConfig",
    "ScribeEffect",
]



class ScribeTimer(Enum):
    TICK = "tick"  # liveness's one tick per node: heartbeats, refreshes, parent and child timeouts


TICK = ScribeTimer.TICK


@dataclass(frozen=True, slots=True)
class ScribeConfig:
    heartbeat_interval_ns: int = defaults.HEARTBEAT_INTERVAL_NS
    parent_timeout_ns: int = defaults.PARENT_TIMEOUT_NS
    refresh_interval_ns: int = defaults.TREE_REFRESH_INTERVAL_NS
    child_timeout_ns: int = defaults.CHILD_TIMEOUT_NS
    replicas: int = defaults.TREE_REPLICAS  # k: leaf-set nodes holding a copy of a root's tree metadata
    empty_hold_ns: int = defaults.EMPTY_TREE_HOLD_NS  # a publisher's node sends nothing to an empty tree this long
    trees_max: int = defaults.TREES_MAX  # tree entries on this node (member, forwarder or root)
    children_per_tree_max: int = defaults.CHILDREN_PER_TREE_MAX
    replicas_max: int = 10_000  # metadata replicas held for nearby roots
    publisher_memory_max: int = 4096  # (tree, publisher node) pairs a root told TREE_EMPTY
    empty_trees_max: int = 10_000  # trees this node was told are empty
    # False hands every event that reaches a node to the reliability layer as EventArrived, which
    # decides per child what to send (send_event); True multicasts each event to every child
    forward_events: bool = True

    def __post_init__(self) -> None:
        assert 0 < self.heartbeat_interval_ns < self.parent_timeout_ns
        assert 0 < self.refresh_interval_ns < self.child_timeout_ns


class ScribeAgent:
    """Scribe on one node. Every input returns the effects to carry out, in order."""

    def __init__(self, me: NodeRef, config: ScribeConfig | None = None) -> None:
        self.me = me
        self.config = config or ScribeConfig()
        self._trees: dict[str, TreeEntry] = {}
        self._replicas: dict[str, TreeMetadata] = {}
        self._created: dict[str, str] = {}  # tree -> creator identity: trees this node created
        self._leaf_set: list[NodeRef] = []
        self._told_empty = EmptyTreeMemory(self.config.publisher_memory_max)
        self._suppressed = Suppressions(self.config.empty_trees_max, self.config.empty_hold_ns)
        self.timers: Deadlines[ScribeTimer] = Deadlines()  # the tick, set while there are trees
        # with the reliability layer (forward_events off): trees whose shape (presence, root, parent,
        # children) changed since `shape_changes` was last asked, in the order they first changed
        self._reshaped: dict[str, None] | None = None if self.config.forward_events else {}

    # -- local API ---------------------------------------------------------------------------

    def create(self, now: int, tree: str, creator: str, acl: Acl | None = None) -> list[ScribeEffect]:
        """CREATE `tree` as `creator` at this node with access list `acl` (access.py); again
        to change the list (the root takes a CREATE only from the node that created the tree)."""
        if tree not in self._created and len(self._created) >= self.config.trees_max:
            del self._created[next(iter(self._created))]  # that tree's list can no longer be changed
        self._created[tree] = creator
        metadata = TreeMetadata(creator, acl, self.me.address)
        return [RouteTo(tree_key(tree), Create(tree, metadata).to_wire())]

    def created(self) -> list[tuple[str, str]]:
        """(tree, creator) of the trees this node created, oldest first (bounded by trees_max)."""
        return list(self._created.items())

    def subscribe(self, now: int, tree: str, extra: Any = None, members: tuple[Member, ...] = ()) -> list[ScribeEffect]:
        """Make this node a member of `tree` for `members`; `extra` rides in its SUBSCRIBE (see
        ChildAdded)."""
        entry = self._trees.get(tree)
        if entry is not None:
            entry.member = True
            for member in members:
                self.add_member(tree, member)
            return self._activated(tree)
        entry = self._new_entry(now, tree)
        if entry is None:
            raise TidingsError(f"this node is in {self.config.trees_max} trees already", TOO_MANY_TREES)
        entry.member = True
        entry.members = members[:MEMBERS_PER_SUBSCRIBE_MAX]
        return self._join(now, entry, extra) + self._activated(tree)

    def add_member(self, tree: str, member: Member) -> None:
        """One more (identity, pattern) this node is in `tree` for, named by its next SUBSCRIBE
        (the first MEMBERS_PER_SUBSCRIBE_MAX of them)."""
        entry = self._trees.get(tree)
        if entry is not None and member not in entry.members and len(entry.members) < MEMBERS_PER_SUBSCRIBE_MAX:
            entry.members += (member,)

    def remove_member(self, tree: str, member: Member) -> None:
        """No local subscription stands for (identity, pattern) in `tree` any more: its next
        SUBSCRIBE no longer names it (else the bound fills with ended members, and a list that
        admits none of them refuses the branch)."""
        entry = self._trees.get(tree)
        if entry is not None and member in entry.members:
            entry.members = tuple(m for m in entry.members if m != member)

    def members(self, tree: str) -> tuple[Member, ...]:
        """The (identity, pattern) pairs this node's SUBSCRIBE to `tree` names."""
        entry = self._trees.get(tree)
        return () if entry is None else entry.members

    def creator(self, tree: str) -> str:
        """The creator named by the metadata this node holds for `tree` ("" when none)."""
        entry = self._trees.get(tree)
        held = None if entry is None else entry.held()
        return "" if held is None else held.creator

    def admits_everywhere(self, identity: str) -> bool:
        """Whether every access list this node holds lets `identity` subscribe to its whole tree
        (a tree's name is the pattern of its channels)."""
        return all(admits(held.acl, identity, tree) for tree, entry in self._trees.items()
                   if (held := entry.held()) is not None)

    def admits(self, tree: str, identity: str, pattern: str) -> bool | None:
        """Whether the access list this node holds for `tree` admits `identity` subscribing to
        `pattern`; None when it holds none (an open tree, or none reached it yet)."""
        entry = self._trees.get(tree)
        metadata = None if entry is None else entry.held()
        return None if metadata is None else admits(metadata.acl, identity, pattern)

    def unsubscribe(self, now: int, tree: str) -> list[ScribeEffect]:
        entry = self._trees.get(tree)
        if entry is None or not entry.member:
            return []
        entry.member = False
        return self._prune(entry)

    def publish(self, now: int, tree: str, event: list[Any], even_if_empty: bool = False) -> list[ScribeEffect]:
        """Route `event` to the rendez-vous point, unless it said the tree is empty (and
        `even_if_empty` is not set: the reliability layer knows someone needs it)."""
        if not even_if_empty and self._suppressed.suppressed(now, tree):
            return []
        return [RouteTo(tree_key(tree), ScribePublish(tree, event).to_wire())]

    # -- Pastry upcalls ----------------------------------------------------------------------

    def on_forward(self, now: int, decision: Forward) -> tuple[list[ScribeEffect], RouteMessage | None]:
        """The paper's forward(): only a SUBSCRIBE from another node may stop here."""
        message = decode_routed(decision.message.payload)
        if type(message) is not ScribeSubscribe or message.subscriber.address == self.me.address:
            return [], decision.message
        entry = self._trees.get(message.tree)
        if entry is None:
            entry = self._new_entry(now, message.tree)
            if entry is None:
                return [], decision.message
            # a new forwarder wants what its first child wants: it passes the child's extra on
            entry.members = message.members
            adopted = self._adopt(now, entry, message)
            if self._reshaped is None:
                return adopted + self._join(now, entry, message.extra), None
            # the reliability layer makes the forwarder's own extra of its child's (Join)
            route = self._join(now, entry, message.extra)[0]
            assert type(route) is RouteTo
            subscribe = ScribeSubscribe(entry.name, self.me, message.extra, entry.members)
            join = Join(route.key, subscribe, JoinPurpose.FORWARDER)
            return [*adopted, join], None
        if not self._accepts(entry, message):
            return [], decision.message
        refusal = self._refuse(entry, message)
        return refusal or self._adopt(now, entry, message), None

    def on_deliver(self, now: int, decision: Deliver) -> list[ScribeEffect]:
        """The paper's deliver(): this node is the rendez-vous point of the message's tree."""
        message = decode_routed(decision.message.payload)
        if type(message) is ScribePublish:
            return self._root_publish(now, message, decision.message.source)
        # the creating broker is the node the CREATE came from, whatever its payload says
        created = (replace(message.metadata, broker=decision.message.source.address) if type(message) is Create
                   else None)
        entry, effects = self._become_root(now, message.tree, created)
        if entry is None or type(message) is not ScribeSubscribe:
            return effects
        if message.subscriber.address == self.me.address or not self._accepts(entry, message):
            return effects + self._prune(entry)
        return effects + (self._refuse(entry, message) or self._adopt(now, entry, message))

    def handle(self, now: int, sender: NodeRef | str, message: object) -> list[ScribeEffect]:
        """A direct Scribe message from the node at `sender`; ProtocolError if malformed."""
        address = sender if isinstance(sender, str) else sender.address
        decoded = decode(message)
        if type(decoded) is TreeEvent:
            return self._on_event(now, address, decoded)
        if type(decoded) is Heartbeat:
            return self._on_heartbeat(now, address, decoded)
        if type(decoded) is ScribeUnsubscribe:
            return self._on_unsubscribe(address, decoded)
        if type(decoded) is Refresh:
            self._on_refresh(now, address, decoded)
        elif type(decoded) is Replica:
            self._store_replica(decoded.tree, decoded.metadata)
        elif type(decoded) is Access:
            return self._on_access(now, address, decoded)
        elif type(decoded) is TreeEmpty:
            self._suppressed.suppress(now, decoded.tree, address)
        elif type(decoded) is TreeActive:
            self._suppressed.lift(decoded.tree)
            return [TreeActivated(decoded.tree)] if not self.config.forward_events else []
        else:
            raise ProtocolError(BAD_MESSAGE, "scribe: a routed message arrived as a direct one")
        return []

    def node_failed(self, now: int, node: NodeRef) -> list[ScribeEffect]:
        """Pastry declared `node` dead: drop it as a child, and repair every tree it was parent in."""
        self._suppressed.lift_root(node.address)
        effects: list[ScribeEffect] = []
        for entry in list(self._trees.values()):
            dropped = entry.children.pop(node.address, None) is not None
            if dropped:
                self._touch(entry.name)
            if entry.parent == node.address:
                effects += self._repair(now, entry)
            elif dropped:
                effects += self._prune(entry)
        return effects

    def leaf_set_changed(self, now: int, members: Sequence[NodeRef]) -> list[ScribeEffect]:
        """Replicate each root's metadata to its nearest leaf-set nodes, or hand the tree over when
        a leaf-set node is now numerically closer to its key than this node."""
        self._leaf_set = [m for m in members if m.address != self.me.address]
        if not self._leaf_set:
            return []
        effects: list[ScribeEffect] = []
        for tree in self._told_empty.trees():
            if not self._is_closest(tree_key(tree)):
                effects += self._activated(tree)
        for entry in list(self._trees.values()):
            if not entry.root:
                continue
            if self._is_closest(entry.key):
                effects += self._replicate(entry)
            else:
                effects += self._hand_over(now, entry, self._nearest(entry.key)[0])
        return effects

    # -- timers ------------------------------------------------------------------------------

    def next_deadline(self) -> int | None:
        return self.timers.next_deadline()

    def handle_timeout(self, now: int) -> list[ScribeEffect]:
        if not self.timers.pop_due(now):
            return []
        heartbeats: dict[str, list[str]] = {}
        refreshes: dict[str, list[str]] = {}
        effects: list[ScribeEffect] = []
        for entry in list(self._trees.values()):
            effects += self._expire_children(now, entry)
            if entry.name not in self._trees:
                continue
            for address, child in entry.children.items():
                if now - child.sent_ns >= self.config.heartbeat_interval_ns:
                    child.sent_ns = now
                    heartbeats.setdefault(address, []).append(entry.name)
            if entry.root:
                continue
            if now - entry.heard_ns >= self.config.parent_timeout_ns:
                effects += self._repair(now, entry)
            elif entry.parent is not None and now >= entry.refresh_due_ns:
                entry.refresh_due_ns = now + self.config.refresh_interval_ns
                refreshes.setdefault(entry.parent, []).append(entry.name)
        effects += _batched(heartbeats, Heartbeat) + _batched(refreshes, Refresh)
        if self._trees:
            self.timers.set(TICK, now + self.config.heartbeat_interval_ns)
        return effects

    # -- introspection -----------------------------------------------------------------------

    def status(self) -> list[dict[str, Any]]:
        """One JSON-serialisable dict per tree this node takes part in, in the order it joined."""
        out: list[dict[str, Any]] = []
        for entry in self._trees.values():
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
        if not self._reshaped:
            return []
        trees, self._reshaped = self._reshaped, {}
        out: list[TreeShape] = []
        for tree in trees:
            entry = self._trees.get(tree)
            out.append(TreeShape(tree) if entry is None else
                       TreeShape(tree, True, entry.root, entry.parent, tuple(entry.children)))
        return out

    def _touch(self, tree: str) -> None:
        if self._reshaped is not None:
            self._reshaped[tree] = None

    def children(self, tree: str) -> list[str]:
        """The addresses of this node's children in `tree`, in the order they were adopted."""
        entry = self._trees.get(tree)
        return [] if entry is None else list(entry.children)

    def has_tree(self, tree: str) -> bool:
        """This node is on `tree` (not pruned from it)."""
        return tree in self._trees

    def parent(self, tree: str) -> str | None:
        """This node's parent in `tree` (None at the root, or while its SUBSCRIBE is under way)."""
        entry = self._trees.get(tree)
        return None if entry is None else entry.parent

    def told_empty(self, now: int, tree: str) -> bool:
        """The rendez-vous point of `tree` said it has no members (and has not said otherwise since)."""
        return self._suppressed.suppressed(now, tree)

    def is_root(self, tree: str) -> bool:
        """This node is the rendez-vous point of `tree` (as far as it knows)."""
        entry = self._trees.get(tree)
        return entry is not None and entry.root

    def send_event(self, now: int, tree: str, child: str, event: list[Any]) -> list[ScribeEffect]:
        """EVENT to one child of `tree` (the reliability layer's per-child forwarding); nothing if
        `child` is no longer a child there."""
        entry = self._trees.get(tree)
        record = None if entry is None else entry.children.get(child)
        if record is None:
            return []
        record.sent_ns = now
        return [PeerSend(child, TreeEvent(tree, event).to_wire())]

    # -- tree entries ------------------------------------------------------------------------

    def _new_entry(self, now: int, tree: str) -> TreeEntry | None:
        if len(self._trees) >= self.config.trees_max:
            return None
        entry = TreeEntry(tree, tree_key(tree), heard_ns=now)
        self._trees[tree] = entry
        self._touch(tree)
        if TICK not in self.timers:
            self.timers.set(TICK, now + self.config.heartbeat_interval_ns)
        return entry

    def _join(self, now: int, entry: TreeEntry, extra: Any) -> list[ScribeEffect]:
        """Route a SUBSCRIBE of this node's own towards the key; the first tree node adopts us."""
        entry.parent = None
        entry.heard_ns = now
        self._touch(entry.name)
        return [RouteTo(entry.key, ScribeSubscribe(entry.name, self.me, extra, entry.members).to_wire())]

    def _repair(self, now: int, entry: TreeEntry) -> list[ScribeEffect]:
        subscribe = ScribeSubscribe(entry.name, self.me, members=entry.members)
        entry.parent = None
        entry.heard_ns = now
        self._touch(entry.name)
        if self._reshaped is not None:  # the reliability layer puts its positions and interest in it
            return [ParentSuspected(entry.name, subscribe), Join(entry.key, subscribe, JoinPurpose.OWN)]
        return [ParentSuspected(entry.name, subscribe), RouteTo(entry.key, subscribe.to_wire())]

    def _prune(self, entry: TreeEntry) -> list[ScribeEffect]:
        """Forget `entry` when nothing needs it any more, telling its parent (recursively upward)."""
        if entry.needed():
            return []
        del self._trees[entry.name]
        self._touch(entry.name)
        if entry.parent is None:
            return []
        return [PeerSend(entry.parent, ScribeUnsubscribe(entry.name).to_wire())]

    def _accepts(self, entry: TreeEntry, subscribe: ScribeSubscribe) -> bool:
        address = subscribe.subscriber.address
        if address == entry.parent:
            return False  # adopting our own parent would close a loop; let a node further on take it
        return address in entry.children or len(entry.children) < self.config.children_per_tree_max

    def _adopt(self, now: int, entry: TreeEntry, subscribe: ScribeSubscribe) -> list[ScribeEffect]:
        address = subscribe.subscriber.address
        entry.children[address] = ChildEntry(subscribe.subscriber, now, now)
        self._touch(entry.name)
        held = entry.held()
        access: list[ScribeEffect] = [] if held is None else [PeerSend(address, Access(entry.name, held).to_wire())]
        return [
            PeerSend(address, Heartbeat((entry.name,)).to_wire()),
            *access,  # before any EVENT on the link, so the child applies it first
            ChildAdded(entry.name, subscribe.subscriber, subscribe.extra),
            *self._activated(entry.name),
        ]

    def _refuse(self, entry: TreeEntry, subscribe: ScribeSubscribe) -> list[ScribeEffect]:
        """ACCESS instead of adoption when the list held here admits none of the SUBSCRIBE's
        members (a child that asks so again is dropped); [] when the SUBSCRIBE may be adopted."""
        held = entry.held()
        if held is None or held.acl is None or not subscribe.members or admitted(held.acl, subscribe.members):
            return []
        address = subscribe.subscriber.address
        effects: list[ScribeEffect] = [PeerSend(address, Access(entry.name, held).to_wire())]
        if entry.children.pop(address, None) is not None:
            self._touch(entry.name)
            effects += self._prune(entry)
        return effects

    def _on_access(self, now: int, address: str, message: Access) -> list[ScribeEffect]:
        """The tree's list from our parent, or from a node that refused our SUBSCRIBE (while it is
        under way): keep it, pass it down, and after a refusal join again for what it admits."""
        entry = self._trees.get(message.tree)
        if entry is None or entry.root or entry.parent not in (None, address):
            return []
        refused = entry.parent is None
        entry.access = message.metadata
        effects: list[ScribeEffect] = [AccessChanged(entry.name, message.metadata, refused)]
        effects += [PeerSend(a, message.to_wire()) for a in entry.children]
        if refused:
            entry.members = admitted(message.metadata.acl, entry.members)
            if entry.members or entry.children:
                effects += self._repair(now, entry)
        return effects

    def _access_changed(self, entry: TreeEntry, before: TreeMetadata | None) -> list[ScribeEffect]:
        held = entry.held()
        if held is None or held == before:
            return []
        wire = Access(entry.name, held).to_wire()
        return [AccessChanged(entry.name, held), *(PeerSend(a, wire) for a in entry.children)]

    def _expire_children(self, now: int, entry: TreeEntry) -> list[ScribeEffect]:
        timeout = self.config.child_timeout_ns
        stale = [a for a, child in entry.children.items() if now - child.heard_ns >= timeout]
        if not stale:
            return []
        for address in stale:
            del entry.children[address]
        self._touch(entry.name)
        return self._prune(entry)

    # -- the rendez-vous point ---------------------------------------------------------------

    def _become_root(
        self, now: int, tree: str, created: TreeMetadata | None = None
    ) -> tuple[TreeEntry | None, list[ScribeEffect]]:
        """This node is now the rendez-vous point of `tree` (a message for its key was delivered
        here): leave any old parent, take the metadata from a replica if it has none, and from a
        CREATE of the tree's first creator (or of the only one, the first time)."""
        entry = self._trees.get(tree) or self._new_entry(now, tree)
        if entry is None:
            return None, []
        effects: list[ScribeEffect] = []
        before = entry.held()
        if entry.parent is not None:
            effects.append(PeerSend(entry.parent, ScribeUnsubscribe(tree).to_wire()))
        entry.root = True
        entry.parent = None
        self._touch(tree)
        if entry.metadata is None and tree in self._replicas:
            entry.metadata = self._replicas.pop(tree)
        if created is not None and created != entry.metadata and (
                entry.metadata is None or entry.metadata.broker == created.broker):
            entry.metadata = created
            entry.replicated_to = ()
        return entry, effects + self._access_changed(entry, before) + self._replicate(entry)

    def _root_publish(self, now: int, publish: ScribePublish, publisher: NodeRef) -> list[ScribeEffect]:
        entry: TreeEntry | None = None
        effects: list[ScribeEffect] = []
        if publish.tree in self._trees or publish.tree in self._replicas:
            entry, effects = self._become_root(now, publish.tree)
        if entry is None or not (entry.children or entry.member):
            return effects + self._answer_empty(now, publish.tree, publisher)
        return effects + self._multicast(now, entry, publish.event, publisher.address)

    def _answer_empty(self, now: int, tree: str, publisher: NodeRef) -> list[ScribeEffect]:
        """TREE_EMPTY to the publisher's node, remembered (bounded) for a later TREE_ACTIVE."""
        self._told_empty.remember(tree, publisher.address)
        if publisher.address == self.me.address:
            self._suppressed.suppress(now, tree, self.me.address)
            return []
        return [PeerSend(publisher.address, TreeEmpty(tree).to_wire())]

    def _activated(self, tree: str) -> list[ScribeEffect]:
        """The tree gained a member or child here, or its rendez-vous point moved away: publishers
        told it was empty may publish again (to the new rendez-vous point, if it moved)."""
        self._suppressed.lift(tree)
        wire = TreeActive(tree).to_wire()
        publishers = self._told_empty.release(tree)
        out: list[ScribeEffect] = [PeerSend(a, wire) for a in publishers if a != self.me.address]
        if self.me.address in publishers and not self.config.forward_events:
            out.append(TreeActivated(tree))
        return out

    def remember_publisher(self, tree: str, publisher: str) -> None:
        """A publisher's node to tell TREE_ACTIVE when `tree` gains members here again (the
        reliability layer names the pubends whose streams a tree it leaves had)."""
        self._told_empty.remember(tree, publisher)

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

    def _store_replica(self, tree: str, metadata: TreeMetadata) -> None:
        if tree not in self._replicas and len(self._replicas) >= self.config.replicas_max:
            del self._replicas[next(iter(self._replicas))]
        self._replicas[tree] = metadata

    def _hand_over(self, now: int, entry: TreeEntry, successor: NodeRef) -> list[ScribeEffect]:
        """A node closer to the key joined: give it the metadata and become its child."""
        effects: list[ScribeEffect] = []
        if entry.metadata is not None:
            effects.append(PeerSend(successor.address, Replica(entry.name, entry.metadata).to_wire()))
            self._store_replica(entry.name, entry.metadata)
        entry.root = False
        self._touch(entry.name)
        entry.access = entry.metadata  # held until the new root's ACCESS replaces it
        entry.metadata = None
        entry.replicated_to = ()
        if not entry.needed():
            del self._trees[entry.name]
            return effects
        return effects + self._join(now, entry, None)

    # -- direct messages ---------------------------------------------------------------------

    def _multicast(self, now: int, entry: TreeEntry, event: list[Any], sender: str) -> list[ScribeEffect]:
        if not self.config.forward_events:
            return [EventArrived(entry.name, event, sender)]
        effects: list[ScribeEffect] = []
        if entry.children:
            effects.append(EventForwarded(entry.name, event, tuple(c.ref for c in entry.children.values())))
            wire = TreeEvent(entry.name, event).to_wire()
            for address, child in entry.children.items():
                child.sent_ns = now
                effects.append(PeerSend(address, wire))
        if entry.member:
            effects.append(DeliverLocal(entry.name, event))
        return effects

    def _heard_from_parent(self, now: int, tree: str, address: str) -> TreeEntry | None:
        """The entry of `tree` if `address` is (or, with our SUBSCRIBE under way, becomes) our
        parent in it; None when the sender should not be sending us anything for it."""
        entry = self._trees.get(tree)
        if entry is None or entry.root or address in entry.children:
            return None  # a child of ours as our parent would close a loop
        if entry.parent is None:
            entry.parent = address
            self._touch(tree)
            entry.refresh_due_ns = now + self.config.refresh_interval_ns
        elif entry.parent != address:
            return None
        entry.heard_ns = now
        return entry

    def _on_event(self, now: int, address: str, message: TreeEvent) -> list[ScribeEffect]:
        entry = self._heard_from_parent(now, message.tree, address)
        if entry is None:
            return [PeerSend(address, ScribeUnsubscribe(message.tree).to_wire())]
        return self._multicast(now, entry, message.event, address)

    def _on_heartbeat(self, now: int, address: str, message: Heartbeat) -> list[ScribeEffect]:
        return [
            PeerSend(address, ScribeUnsubscribe(tree).to_wire())
            for tree in message.trees
            if self._heard_from_parent(now, tree, address) is None
        ]

    def _on_refresh(self, now: int, address: str, message: Refresh) -> None:
        for tree in message.trees:
            entry = self._trees.get(tree)
            child = None if entry is None else entry.children.get(address)
            if child is not None:
                child.heard_ns = now

    def _on_unsubscribe(self, address: str, message: ScribeUnsubscribe) -> list[ScribeEffect]:
        entry = self._trees.get(message.tree)
        if entry is None or entry.children.pop(address, None) is None:
            return []
        self._touch(entry.name)
        return self._prune(entry)


def _acl_size(metadata: TreeMetadata | None) -> int | None:
    return None if metadata is None or metadata.acl is None else len(metadata.acl)


def _batched(trees_by_peer: dict[str, list[str]], shape: type[Heartbeat] | type[Refresh]) -> list[ScribeEffect]:
    """One HEARTBEAT (or REFRESH) per peer naming all its trees, split at the per-message limit."""
    return [
        PeerSend(address, shape(tuple(trees[i : i + TREES_PER_MESSAGE_MAX])).to_wire())
        for address, trees in trees_by_peer.items()
        for i in range(0, len(trees), TREES_PER_MESSAGE_MAX)
    ]
