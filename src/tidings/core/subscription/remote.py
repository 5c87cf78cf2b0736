"""Other pubends' events for local subscriptions: each one's share of what the trees deliver.

Theory of operation. The reliability node (reliability/node.py) hands over each tree's records in
delivery order, exactly once, below the doubt horizon (`DeliverRecords`), naming the local subscriptions
that consume them; `RemoteDelivery` picks each subscription's share, those matching its pattern and
filter, for its `Subscription.deliver`. A record that does not name the pubend whose stream
carried it is a peer's error: counted and dropped, never delivered.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from tidings.core.event import record_routing_fields
from tidings.core.subscription.subscription import Subscription

if TYPE_CHECKING:
    from tidings.core.reliability.node import DeliverRecords


class RemoteDelivery:
    """Other pubends' events for local subscriptions, with the counts `status()` reports."""

    __slots__ = ("events_delivered", "records_rejected")

    def __init__(self) -> None:
        self.events_delivered = 0
        self.records_rejected = 0  # malformed records in knowledge from peers

    def fan(self, deliver: DeliverRecords, subscriptions: Mapping[int, Subscription]) -> dict[int, list[bytes]]:
        """The records of `deliver` each of its subscriptions (`deliver.keys`, those still in
        `subscriptions`) gets: those matching its pattern and filter, in delivery order."""
        fan: dict[int, list[bytes]] = {}
        for pubend, record in zip(deliver.pubends, deliver.records, strict=True):
            fields = record_routing_fields(record)
            if fields is None or fields.pubend != pubend:
                self.records_rejected += 1
                continue
            channel, attributes = fields.channel, fields.attributes
            for key in deliver.keys:
                s = subscriptions.get(key)
                if s is not None and s.matches(channel, attributes):
                    fan.setdefault(key, []).append(record)
                    self.events_delivered += 1
        return fan
