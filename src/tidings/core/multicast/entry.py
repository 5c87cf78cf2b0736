"""One tree as one Scribe agent sees it: its role there, its parent and children, and the tree's
metadata it holds.

A node is in a tree as a member (a local subscription), a forwarder (it has children) or the root
(the rendez-vous point, holding the metadata); `needed` says whether any of these still holds, and
the agent forgets the entry as soon as none does. `held` is the metadata whose access list this node
applies: its own at the root, below it the copy its parent passed down (ACCESS, access.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tidings.core.multicast.access import Member
from tidings.core.multicast.messages import TreeMetadata
from tidings.core.overlay.node_id import NodeRef


@dataclass(slots=True)
class ChildEntry:
    ref: NodeRef
    heard_ns: int  # the last SUBSCRIBE or REFRESH from it
    sent_ns: int  # the last EVENT or HEARTBEAT to it


@dataclass(slots=True)
class TreeEntry:
    name: str
    key: int
    member: bool = False
    root: bool = False
    parent: str | None = None  # address; None while this node's SUBSCRIBE is under way (or root)
    heard_ns: int = 0  # the last EVENT or HEARTBEAT from the parent, or when SUBSCRIBE left
    refresh_due_ns: int = 0
    children: dict[str, ChildEntry] = field(default_factory=dict)
    metadata: TreeMetadata | None = None  # at the root
    replicated_to: tuple[str, ...] = ()
    access: TreeMetadata | None = None  # below the root: the metadata the parent passed down
    members: tuple[Member, ...] = ()  # (identity, pattern) this node's own SUBSCRIBE names

    def held(self) -> TreeMetadata | None:
        return self.metadata if self.root else self.access

    def needed(self) -> bool:
        return self.member or bool(self.children) or (self.root and self.metadata is not None)
