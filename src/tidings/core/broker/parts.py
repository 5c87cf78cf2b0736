"""What the composer's helpers read of the broker (core/broker/broker.py `Broker`): its machines and
its present (the input's `now`, the wall clock, the log), read-only.

The figures (metrics.py), the subscriber side's router (core/subscription/router.py) and the join of
an overlay (lifecycle.py `join_overlay`) take the broker as `BrokerParts`, so none of them imports the
composer that imports them, and each reads what it needs where its owner keeps it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from tidings.core.auth.guard import Guard
    from tidings.core.broker.advice import RouteAdvice
    from tidings.core.broker.cluster import ClusterMember
    from tidings.core.broker.connection import ClientConnection
    from tidings.core.broker.lifecycle import BrokerMachines, Lifecycle
    from tidings.core.broker.reading import Reading
    from tidings.core.clock import WallClock
    from tidings.core.config import BrokerConfig
    from tidings.core.deadlines import Alarm
    from tidings.core.durable.constream import Constream
    from tidings.core.durable.registrations import Registrations
    from tidings.core.inputs import LogState
    from tidings.core.publish.dedup import DedupWindow
    from tidings.core.publish.intake import Intake
    from tidings.core.publish.pubend import Pubend
    from tidings.core.subscription.leases import Leases
    from tidings.core.subscription.subscribers import Subscribers
    from tidings.core.subscription.table import LocalSubscriptions


class BrokerParts(Protocol):
    """The broker as its helpers read it: each machine where its owner keeps it (the connection
    table read-only, a property)."""

    config: BrokerConfig
    now: int  # the input being handled's
    clock: WallClock  # the last wall clock an input brought
    log: LogState
    directory_saved: bytes | None
    guard: Guard
    alarm: Alarm
    advice: RouteAdvice
    reading: Reading
    pubend: Pubend
    intake: Intake
    dedup: DedupWindow
    local: LocalSubscriptions
    leases: Leases
    subscribers: Subscribers
    registrations: Registrations
    constream: Constream
    cluster: ClusterMember | None  # once start_overlay made it
    machines: BrokerMachines
    lifecycle: Lifecycle

    @property
    def connections(self) -> Mapping[int, ClientConnection]: ...  # the reading machine's table
