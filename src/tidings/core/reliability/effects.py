"""What the reliability machines ask of the broker and of Scribe, as typed values.

To the broker: `DeliverRecords` (records for local subscriptions), `Lost` (released ticks a subscription
was not given: a GAP) and `MovedAway` (a durable subscription resumed elsewhere). To Scribe, which
the reliability layer never calls (the cluster member carries these across at once, in order):
`SendToChild` (a knowledge message to one child of a tree, the per-child forwarding of Scribe's
EVENT), `PublishRouted` (a pubend's knowledge routed to the rendez-vous point) and
`RememberPublisher` (a pubend's broker to tell TREE_ACTIVE when a tree this broker leaves has
members again).
"""

from __future__ import annotations

from dataclasses import dataclass

from tidings.core.durable.constream import Recorded
from tidings.core.reliability.curiosity import SendNack
from tidings.core.reliability.interest import SendSummary
from tidings.core.wire.packable import WireArray


@dataclass(frozen=True, slots=True)
class DeliverRecords:
    """Records of `tree` in delivery order for the local subscriptions `keys` (each gets those that
    match its pattern and filter): one pubend's in tick order, or for total-order subscriptions
    several pubends' merged on (tick, pubend). `pubends[i]` is the pubend of `records[i]`."""

    tree: str
    keys: tuple[int, ...]
    pubends: tuple[str, ...]
    records: list[bytes]


@dataclass(frozen=True, slots=True)
class Lost:
    """Ticks (after, through] of `pubend` were released before the local subscriptions `keys` were
    given them: events they wanted may be missing, and each is told so (a GAP), never skipped."""

    tree: str
    keys: tuple[int, ...]
    pubend: str
    after: int
    through: int


@dataclass(frozen=True, slots=True)
class MovedAway:
    """The durable subscription this broker hosted as `registration` resumed on another broker."""

    registration: int


@dataclass(frozen=True, slots=True)
class SendToChild:
    """Scribe EVENT `event` ([origin address, knowledge wire]) to `child` of `tree`, if it is still a
    child there (Scribe keeps its liveness by it)."""

    tree: str
    child: str
    event: WireArray


@dataclass(frozen=True, slots=True)
class PublishRouted:
    """Route `event` to the rendez-vous point of `tree` as a Scribe PUBLISH, unless the root said the
    tree is empty and `even_if_empty` is not set."""

    tree: str
    event: WireArray
    even_if_empty: bool = False


@dataclass(frozen=True, slots=True)
class RememberPublisher:
    """Scribe is to tell `publisher` TREE_ACTIVE when `tree` has members here again."""

    tree: str
    publisher: str


ScribeRequest = SendToChild | PublishRouted | RememberPublisher
# what the tree streams hand the reliability node for one input (their acks wait in its AckBatcher)
StreamEffect = SendToChild | RememberPublisher | DeliverRecords | Lost | Recorded | SendSummary | SendNack

__all__ = ["DeliverRecords", "Lost", "MovedAway", "PublishRouted", "RememberPublisher", "ScribeRequest", "SendToChild",
           "StreamEffect"]
