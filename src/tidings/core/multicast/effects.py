"""What a Scribe agent asks of the node that runs it, beyond the overlay's `PeerSend` and `RouteTo`.

`DeliverLocal` hands an event of a tree this node is a member of to the broker's local
subscriptions; `AccessChanged` gives the broker the access list it now holds for a tree (access.py),
which the broker applies to its own subscriptions there. The other three are the paper's upcalls
for a reliability layer, returned as values in the order Scribe would have called them:

- `EventForwarded(tree, event, children)` comes just before the EVENT `PeerSend`s to those children,
  one per child in the same order; a composer that treats children differently (filter summaries,
  silence) replaces those sends.
- `ChildAdded(tree, child, subscribe_extra)` follows every SUBSCRIBE this node accepts, including a
  repeated one from an existing child (a repairing child is the case a reliability layer cares
  about most), with the `extra` that child put in its SUBSCRIBE.
- `ParentSuspected(tree, subscribe)` is always immediately followed by the `RouteTo` that carries
  exactly `subscribe` towards the tree key, to repair the tree. A composer that wants to add to the
  SUBSCRIBE rewrites that `RouteTo`; `extend_repairs` does so for a whole list of effects.

With the reliability layer (`forward_events` off) Scribe emits, in place of the SUBSCRIBE routes
whose extra is that layer's (a repair, a new forwarder's for its first child), a typed `Join` the
composer completes and routes; and `ScribeAgent.shape_changes` gives `TreeShape`s, the trees'
presence, root, parent and children, which the composer hands to that layer as they change.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import StrEnum

from tidings.core.multicast.messages import ScribeSubscribe, TreeMetadata
from tidings.core.overlay.envelope import PeerSend, RouteTo
from tidings.core.overlay.node_id import NodeRef
from tidings.core.wire.packable import Packable, WireArray


@dataclass(frozen=True, slots=True)
class DeliverLocal:
    """An event of `tree` for this node's own (member) subscriptions."""

    tree: str
    event: WireArray


@dataclass(frozen=True, slots=True)
class AccessChanged:
    """This node now holds `metadata` for `tree` (from its parent, or from a node that refused its
    SUBSCRIBE: `refused`); local subscriptions its access list does not admit must end."""

    tree: str
    metadata: TreeMetadata
    refused: bool = False


@dataclass(frozen=True, slots=True)
class EventArrived:
    """With `ScribeConfig.forward_events` off: an event of `tree` reached this node from `sender`
    (its parent, or the publisher's node at the root); the reliability layer forwards it per child
    with `ScribeAgent.send_event` and delivers it to local members itself."""

    tree: str
    event: WireArray
    sender: str


@dataclass(frozen=True, slots=True)
class EventForwarded:
    tree: str
    event: WireArray
    children: tuple[NodeRef, ...]


@dataclass(frozen=True, slots=True)
class ChildAdded:
    tree: str
    child: NodeRef
    subscribe_extra: Packable


@dataclass(frozen=True, slots=True)
class TreeActivated:
    """With `ScribeConfig.forward_events` off: `tree` gained members again at its rendez-vous point
    (TREE_ACTIVE reached this publisher's node, or this node is that rendez-vous point); the
    reliability layer tells the tree of its pubend's stream, so brokers that want history find it."""

    tree: str


@dataclass(frozen=True, slots=True)
class ParentSuspected:
    tree: str
    subscribe: ScribeSubscribe


class JoinPurpose(StrEnum):
    OWN = "own"  # this node's repair SUBSCRIBE: the layer above puts in its own extra
    FORWARDER = "forwarder"  # a new forwarder's SUBSCRIBE for its first child, whose extra it carries


@dataclass(frozen=True, slots=True)
class Join:
    """With `ScribeConfig.forward_events` off: route `subscribe` towards `key` once the layer above
    has put its own extra in it (Scribe carries the extra without reading it): for `OWN`, its
    positions and interest; for `FORWARDER`, those merged with the first child's
    (`subscribe.extra`). Stands where Scribe would route the SUBSCRIBE as it is."""

    key: int
    subscribe: ScribeSubscribe
    purpose: JoinPurpose


@dataclass(frozen=True, slots=True)
class TreeShape:
    """With `ScribeConfig.forward_events` off: `tree` as this node now takes part in it (`present`
    False: not at all), for the reliability layer, which keeps what it is told and never asks."""

    tree: str
    present: bool = False
    root: bool = False
    parent: str | None = None
    children: tuple[str, ...] = ()


ScribeEffect = (PeerSend | RouteTo | DeliverLocal | EventArrived | EventForwarded | ChildAdded | ParentSuspected
                | TreeActivated | AccessChanged | Join)


def extend_repairs(
    effects: list[ScribeEffect], extra_for: Callable[[ParentSuspected], Packable]
) -> list[ScribeEffect]:
    """`effects` with the repair SUBSCRIBE after each ParentSuspected carrying `extra_for(upcall)`
    as its `extra`; every other effect unchanged and in order."""
    out: list[ScribeEffect] = []
    suspected: ParentSuspected | None = None
    for effect in effects:
        if suspected is not None and type(effect) is RouteTo:
            repaired = replace(suspected.subscribe, extra=extra_for(suspected))
            effect = RouteTo(effect.key, repaired.to_wire())  # noqa: PLW2901 - the rewrite is the point
        suspected = effect if type(effect) is ParentSuspected else None
        out.append(effect)
    return out
