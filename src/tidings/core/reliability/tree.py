"""One tree's state at one broker: its streams, its children's defaults, its local subscriptions.

`Tree` is plain data shared by the tree streams (tree_streams.py) and the local and PFS consumers
(local_consumers.py): the istreams per pubend, where each child wants pubends it has not heard of,
the tree's interest (interest.py), and its local part: the local subscriptions' starts, total-order
merge points, summaries, checkpoint positions and the durable registrations recorded in the PFS,
written only by `LocalConsumers` and read by the tree streams.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from tidings.core.reliability.interest import Interest
from tidings.core.reliability.istream import Istream
from tidings.core.reliability.summary import Summary

PFS_CONSUMER = -1  # the consumer key of the PFS consumer on a recorded tree's streams (constream.py)

# the smallest tick this broker's own durable subscriptions released of a pubend, on a tree (None:
# on any tree); None when none of them wants that pubend (release.py)
Held = Callable[[str | None, str], int | None]


@dataclass(slots=True)
class Tree:
    istreams: dict[str, Istream]
    defaults: dict[str, int | None]  # child address -> where it wants pubends it has not heard of
    # (None: from wherever the stream is when it first reaches this broker)
    locals: dict[int, int]  # local subscription key -> start
    total: dict[int, int]  # total-order subscriptions (also in locals) -> the merge point delivered
    interest: Interest  # the filter-summary epoch protocol of the tree (interest.py)
    interests: dict[int, Summary | None] = field(default_factory=dict)  # local subscription -> its summary
    # where a durable local subscription wants the pubends it names, overriding its start for them
    # (its checkpoint token's vector, core/durable/checkpoint.py)
    positions: dict[int, dict[str, int]] = field(default_factory=dict)
    # durable registrations recorded in the PFS (connected or away) -> their summary, part of the interest
    recorded: dict[int, Summary | None] = field(default_factory=dict)

    def own_interests(self) -> list[Summary | None]:
        """This broker's own parts of the tree's interest: its local subscriptions' and recorded
        registrations' summaries (counted in `interest` as they are set and dropped)."""
        return [*self.interests.values(), *self.recorded.values()]

    def set_own(self, key: int, part: Summary | None, recorded: bool = False) -> None:
        """Local subscription (or, `recorded`, durable registration) `key`'s part of the interest is `part`."""
        table = self.recorded if recorded else self.interests
        if key in table:
            self.interest.own_removed(table[key])
        table[key] = part
        self.interest.own_added(part)

    def drop_own(self, key: int, recorded: bool = False) -> None:
        """Local subscription (or, `recorded`, durable registration) `key` is no part of the interest."""
        table = self.recorded if recorded else self.interests
        if key in table:
            self.interest.own_removed(table.pop(key))

    def start_of(self, key: int, pubend: str, otherwise: int) -> int:
        return self.positions.get(key, {}).get(pubend, otherwise)

    def wants(self, key: int, pubend: str, own: str) -> bool:
        """Local subscription `key` consumes `pubend`'s stream: other pubends always; this broker's
        own only in total order (publisher order gets those from the log, at once)."""
        return pubend != own or key in self.total


__all__ = ["PFS_CONSUMER", "Held", "Tree"]
