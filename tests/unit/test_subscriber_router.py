"""The subscriber side's router (core/subscription/router.py): its table by type names an owner for
every effect of the subscriber's side that is not the runtime's, and for what the cluster member hands
the broker for its subscriptions; a runtime effect has no route (it goes out in its place), and a
remote event has none either (the composer hands it to the fan-out: the event's path)."""

from __future__ import annotations

import types
import typing
from typing import Any, cast

from tidings.core.durable.constream import Recorded
from tidings.core.effects import Effect, Send
from tidings.core.multicast.effects import AccessChanged
from tidings.core.reliability.node import DeliverRecords, Lost, MovedAway
from tidings.core.subscription.router import SubscriberRouter
from tidings.core.subscription.subscribers import SubscriberEffect


def members(union: Any) -> set[type]:
    """The classes of a (nested) union of effect types."""
    if isinstance(union, types.UnionType) or typing.get_origin(union) is typing.Union:
        return set().union(*(members(arg) for arg in typing.get_args(union)))
    return {union}


def router() -> SubscriberRouter:
    return SubscriberRouter(cast(Any, None), lambda effects, out: out, lambda effects, out: None)


def test_every_effect_of_the_subscriber_side_has_its_owner_or_is_the_runtimes():
    routes = router().routes
    runtime = members(Effect)
    assert members(SubscriberEffect) - runtime <= routes.keys()
    assert routes.keys().isdisjoint(runtime)
    assert {Lost, AccessChanged, Recorded, MovedAway} <= routes.keys()
    assert DeliverRecords not in routes


def test_a_runtime_effect_goes_out_in_its_place():
    send = Send(1, b"x")
    assert router().carry([send, send], [Send(2, b"y")]) == [Send(2, b"y"), send, send]
