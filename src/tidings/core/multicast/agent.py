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

Where each part lives: the agent (this module) takes the inputs, joins and adopts children with
their access lists and the member cap, and multicasts events; the tree table with its liveness tick,
repair and the shape reports to the reliability layer is `table.TreeTable`; the root's metadata,
replicas, hand-over and TREE_EMPTY/TREE_ACTIVE are `rendezvous.RendezVous`; the parameters are
`settings.ScribeConfig`.

Invariants: a tree entry exists only while needed (a member, children, or a root holding metadata);
a root has no parent; a parent is never also a child; every table is bounded by ScribeConfig.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from tidings.core.deadlines import Alarm, Deadlines
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
from tidings.core.multicast.empty_trees import Suppressions
from tidings.core.multicast.entry import ChildEntry, TreeEntry
from tidings.core.multicast.messages import (
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
from tidings.core.multicast.rendezvous import RendezVous
from tidings.core.multicast.settings import ScribeConfig, ScribeTimer
from tidings.core.multicast.table import TreeTable
from tidings.core.multicast.trees import tree_key
from tidings.core.overlay.envelope import Deliver, Forward, PeerSend, RouteMessage, RouteTo
from tidings.core.overlay.node_id import NodeRef
from tidings.core.wire.packable import Packable, WireArray

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


class ScribeAgent:
    """Scribe on one node. Every input returns the effects to carry out, in order."""

    def __init__(self, me: NodeRef, config: ScribeConfig | None = None, alarm: Alarm | None = None) -> None:
        self.me = me
        self.config = config or ScribeConfig()
        self._table = TreeTable(me, self.config, alarm)
        self._root = RendezVous(me, self.config, self._table)
        self._created: dict[str, str] = {}  # tree -> creator identity: trees this node created
        self.timers: Deadlines[ScribeTimer] = self._table.timers  # the tick, set while there are trees

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

    def subscribe(self, now: int, tree: str, extra: Packable = None,
                  members: tuple[Member, ...] = ()) -> list[ScribeEffect]:
        """Make this node a member of `tree` for `members`; `extra` rides in its SUBSCRIBE (see
        ChildAdded)."""
        entry = self._table.trees.get(tree)
        if entry is not None:
            entry.member = True
            for member in members:
                self.add_member(tree, member)
            return self._root.activated(tree)
        entry = self._table.new_entry(now, tree)
        if entry is None:
            raise TidingsError(f"this node is in {self.config.trees_max} trees already", TOO_MANY_TREES)
        entry.member = True
        entry.members = members[:MEMBERS_PER_SUBSCRIBE_MAX]
        return self._table.join(now, entry, extra) + self._root.activated(tree)

    def add_member(self, tree: str, member: Member) -> None:
        """One more (identity, pattern) this node is in `tree` for, named by its next SUBSCRIBE
        (the first MEMBERS_PER_SUBSCRIBE_MAX of them)."""
        entry = self._table.trees.get(tree)
        if entry is not None and member not in entry.members and len(entry.members) < MEMBERS_PER_SUBSCRIBE_MAX:
            entry.members += (member,)

    def remove_member(self, tree: str, member: Member) -> None:
        """No local subscription stands for (identity, pattern) in `tree` any more: its next
        SUBSCRIBE no longer names it (else the bound fills with ended members, and a list that
        admits none of them refuses the branch)."""
        entry = self._table.trees.get(tree)
        if entry is not None and member in entry.members:
            entry.members = tuple(m for m in entry.members if m != member)

    def members(self, tree: str) -> tuple[Member, ...]:
        """The (identity, pattern) pairs this node's SUBSCRIBE to `tree` names."""
        entry = self._table.trees.get(tree)
        return () if entry is None else entry.members

    def creator(self, tree: str) -> str:
        """The creator named by the metadata this node holds for `tree` ("" when none)."""
        entry = self._table.trees.get(tree)
        held = None if entry is None else entry.held()
        return "" if held is None else held.creator

    def admits_everywhere(self, identity: str) -> bool:
        """Whether every access list this node holds lets `identity` subscribe to its whole tree
        (a tree's name is the pattern of its channels)."""
        return all(admits(held.acl, identity, tree) for tree, entry in self._table.trees.items()
                   if (held := entry.held()) is not None)

    def admits(self, tree: str, identity: str, pattern: str) -> bool | None:
        """Whether the access list this node holds for `tree` admits `identity` subscribing to
        `pattern`; None when it holds none (an open tree, or none reached it yet)."""
        entry = self._table.trees.get(tree)
        metadata = None if entry is None else entry.held()
        return None if metadata is None else admits(metadata.acl, identity, pattern)

    def unsubscribe(self, now: int, tree: str) -> list[ScribeEffect]:
        entry = self._table.trees.get(tree)
        if entry is None or not entry.member:
            return []
        entry.member = False
        return self._table.prune(entry)

    def publish(self, now: int, tree: str, event: WireArray, even_if_empty: bool = False) -> list[ScribeEffect]:
        """Route `event` to the rendez-vous point, unless it said the tree is empty (and
        `even_if_empty` is not set: the reliability layer knows someone needs it)."""
        if not even_if_empty and self._root.suppressed.suppressed(now, tree):
            return []
        return [RouteTo(tree_key(tree), ScribePublish(tree, event).to_wire())]

    # -- Pastry upcalls ----------------------------------------------------------------------

    def on_forward(self, now: int, decision: Forward) -> tuple[list[ScribeEffect], RouteMessage | None]:
        """The paper's forward(): only a SUBSCRIBE from another node may stop here."""
        message = decode_routed(decision.message.payload)
        if type(message) is not ScribeSubscribe or message.subscriber.address == self.me.address:
            return [], decision.message
        entry = self._table.trees.get(message.tree)
        if entry is None:
            entry = self._table.new_entry(now, message.tree)
            if entry is None:
                return [], decision.message
            # a new forwarder wants what its first child wants: it passes the child's extra on
            entry.members = message.members
            adopted = self._adopt(now, entry, message)
            if self._table.reshaped is None:
                return adopted + self._table.join(now, entry, message.extra), None
            # the reliability layer makes the forwarder's own extra of its child's (Join)
            route = self._table.join(now, entry, message.extra)[0]
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
        entry, effects = self._root.become_root(now, message.tree, created)
        if entry is None or type(message) is not ScribeSubscribe:
            return effects
        if message.subscriber.address == self.me.address or not self._accepts(entry, message):
            return effects + self._table.prune(entry)
        return effects + (self._refuse(entry, message) or self._adopt(now, entry, message))

    def handle(self, now: int, sender: NodeRef | str, message: object) -> list[ScribeEffect]:
        """A direct Scribe message from the node at `sender`; ProtocolError if malformed."""
        address = sender if isinstance(sender, str) else sender.address
        decoded = decode(message)
        if type(decoded) is TreeEvent:
            return self._on_event(now, address, decoded)
        if type(decoded) is Heartbeat:
            return self._table.on_heartbeat(now, address, decoded)
        if type(decoded) is ScribeUnsubscribe:
            return self._table.on_unsubscribe(address, decoded)
        if type(decoded) is Refresh:
            self._table.on_refresh(now, address, decoded)
        elif type(decoded) is Replica:
            self._root.store_replica(decoded.tree, decoded.metadata)
        elif type(decoded) is Access:
            return self._on_access(now, address, decoded)
        elif type(decoded) is TreeEmpty:
            self._root.suppressed.suppress(now, decoded.tree, address)
        elif type(decoded) is TreeActive:
            self._root.suppressed.lift(decoded.tree)
            return [TreeActivated(decoded.tree)] if not self.config.forward_events else []
        else:
            raise ProtocolError(BAD_MESSAGE, "scribe: a routed message arrived as a direct one")
        return []

    def node_failed(self, now: int, node: NodeRef) -> list[ScribeEffect]:
        """Pastry declared `node` dead: drop it as a child, and repair every tree it was parent in."""
        self._root.suppressed.lift_root(node.address)
        return self._table.node_failed(now, node)

    def leaf_set_changed(self, now: int, members: Sequence[NodeRef]) -> list[ScribeEffect]:
        """Replicate each root's metadata to its nearest leaf-set nodes, or hand the tree over when
        a leaf-set node is now numerically closer to its key than this node."""
        return self._root.leaf_set_changed(now, members)

    # -- timers ------------------------------------------------------------------------------

    def next_deadline(self) -> int | None:
        return self.timers.next_deadline()

    def handle_timeout(self, now: int) -> list[ScribeEffect]:
        return self._table.tick(now)

    # -- introspection -----------------------------------------------------------------------

    def status(self) -> list[dict[str, Any]]:
        """One JSON-serialisable dict per tree this node takes part in, in the order it joined."""
        return self._table.status()

    def shape_changes(self) -> list[TreeShape]:
        """The shape now of each tree whose presence, root, parent or children changed since this
        was last asked (with the reliability layer; always [] without), in the order they changed.
        Asked after every Scribe call: most change none, and are answered here."""
        return self._table.shape_changes() if self._table.reshaped else []

    def children(self, tree: str) -> list[str]:
        """The addresses of this node's children in `tree`, in the order they were adopted."""
        entry = self._table.trees.get(tree)
        return [] if entry is None else list(entry.children)

    def has_tree(self, tree: str) -> bool:
        """This node is on `tree` (not pruned from it)."""
        return tree in self._table.trees

    def parent(self, tree: str) -> str | None:
        """This node's parent in `tree` (None at the root, or while its SUBSCRIBE is under way)."""
        entry = self._table.trees.get(tree)
        return None if entry is None else entry.parent

    @property
    def said_empty(self) -> Suppressions:
        """This node's memory of the trees whose rendez-vous point said they have no members
        (TREE_EMPTY), lapsing after `empty_hold_ns` (empty_trees.py): written here on TREE_EMPTY,
        TREE_ACTIVE and a root's failure, read by the pubend's source on its own (a leaf), so a
        sync's publish asks no question of the agent per tree."""
        return self._root.suppressed

    def is_root(self, tree: str) -> bool:
        """This node is the rendez-vous point of `tree` (as far as it knows)."""
        entry = self._table.trees.get(tree)
        return entry is not None and entry.root

    def send_event(self, now: int, tree: str, child: str, event: WireArray) -> list[ScribeEffect]:
        """EVENT to one child of `tree` (the reliability layer's per-child forwarding); nothing if
        `child` is no longer a child there."""
        entry = self._table.trees.get(tree)
        record = None if entry is None else entry.children.get(child)
        if record is None:
            return []
        record.sent_ns = now
        return [PeerSend(child, TreeEvent(tree, event).to_wire())]

    # -- adoption and access lists ------------------------------------------------------------

    def _accepts(self, entry: TreeEntry, subscribe: ScribeSubscribe) -> bool:
        address = subscribe.subscriber.address
        if address == entry.parent:
            return False  # adopting our own parent would close a loop; let a node further on take it
        return address in entry.children or len(entry.children) < self.config.children_per_tree_max

    def _adopt(self, now: int, entry: TreeEntry, subscribe: ScribeSubscribe) -> list[ScribeEffect]:
        address = subscribe.subscriber.address
        entry.children[address] = ChildEntry(subscribe.subscriber, now, now)
        self._table.touch(entry.name)
        held = entry.held()
        access: list[ScribeEffect] = [] if held is None else [PeerSend(address, Access(entry.name, held).to_wire())]
        return [
            PeerSend(address, Heartbeat((entry.name,)).to_wire()),
            *access,  # before any EVENT on the link, so the child applies it first
            ChildAdded(entry.name, subscribe.subscriber, subscribe.extra),
            *self._root.activated(entry.name),
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
            self._table.touch(entry.name)
            effects += self._table.prune(entry)
        return effects

    def _on_access(self, now: int, address: str, message: Access) -> list[ScribeEffect]:
        """The tree's list from our parent, or from a node that refused our SUBSCRIBE (while it is
        under way): keep it, pass it down, and after a refusal join again for what it admits."""
        entry = self._table.trees.get(message.tree)
        if entry is None or entry.root or entry.parent not in (None, address):
            return []
        refused = entry.parent is None
        entry.access = message.metadata
        effects: list[ScribeEffect] = [AccessChanged(entry.name, message.metadata, refused)]
        effects += [PeerSend(a, message.to_wire()) for a in entry.children]
        if refused:
            entry.members = admitted(message.metadata.acl, entry.members)
            if entry.members or entry.children:
                effects += self._table.repair(now, entry)
        return effects

    # -- the rendez-vous point ---------------------------------------------------------------

    def _root_publish(self, now: int, publish: ScribePublish, publisher: NodeRef) -> list[ScribeEffect]:
        entry: TreeEntry | None = None
        effects: list[ScribeEffect] = []
        if publish.tree in self._table.trees or publish.tree in self._root.replicas:
            entry, effects = self._root.become_root(now, publish.tree)
        if entry is None or not (entry.children or entry.member):
            return effects + self._root.answer_empty(now, publish.tree, publisher)
        return effects + self._multicast(now, entry, publish.event, publisher.address)

    def remember_publisher(self, tree: str, publisher: str) -> None:
        """A publisher's node to tell TREE_ACTIVE when `tree` gains members here again (the
        reliability layer names the pubends whose streams a tree it leaves had)."""
        self._root.told_empty.remember(tree, publisher)

    # -- direct messages ---------------------------------------------------------------------

    def _multicast(self, now: int, entry: TreeEntry, event: WireArray, sender: str) -> list[ScribeEffect]:
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

    def _on_event(self, now: int, address: str, message: TreeEvent) -> list[ScribeEffect]:
        entry = self._table.heard_from_parent(now, message.tree, address)
        if entry is None:
            return [PeerSend(address, ScribeUnsubscribe(message.tree).to_wire())]
        return self._multicast(now, entry, message.event, address)


