"""What an `OverlayNode` tells the world besides wire messages (`envelope.PeerSend`).

Notifications are for the layers above (the Scribe agent replicates tree roots in the leaf set and
repairs trees when a parent fails); `Probe` is for the runtime, which measures round-trip times and
reports them back through `OverlayNode.rtt_measured`, the proximity metric Pastry assumes exists.
"""

from __future__ import annotations

from dataclasses import dataclass

from tidings.core.overlay.envelope import PeerSend
from tidings.core.overlay.node_id import NodeRef


@dataclass(frozen=True, slots=True)
class JoinCompleted:
    """This node is now a member of the overlay: it routes, delivers and appears in others' state."""


@dataclass(frozen=True, slots=True)
class LeafSetChanged:
    """The leaf set is now `members` (sorted by nodeId); emitted only once joined."""

    members: tuple[NodeRef, ...]


@dataclass(frozen=True, slots=True)
class NodeFailed:
    """`node` was declared failed (silent past the failure timeout, or unreachable) and forgotten."""

    node: NodeRef


@dataclass(frozen=True, slots=True)
class Probe:
    """Measure the round-trip time to `address`, then call `rtt_measured` (or `peer_unreachable`)."""

    address: str


OverlayEffect = PeerSend | Probe | JoinCompleted | LeafSetChanged | NodeFailed
