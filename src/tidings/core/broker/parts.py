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
    @property
    def config(self) -> BrokerConfig: ...
    @property
    def now(self) -> int: ...  # the input being handled's
    @property
    def clock(self) -> WallClock: ...  # the last wall clock an input brought
    @property
    def log(self) -> LogState: ...
    @property
    def directory_saved(self) -> bytes | None: ...
    @property
    def guard(self) -> Guard: ...
    @property
    def alarm(self) -> Alarm: ...
    @property
    def advice(self) -> RouteAdvice: ...
    @property
    def reading(self) -> Reading: ...
    @property
    def connections(self) -> Mapping[int, ClientConnection]: ...  # the reading machine's table
    @property
    def pubend(self) -> Pubend: ...
    @property
    def intake(self) -> Intake: ...
    @property
    def dedup(self) -> DedupWindow: ...
    @property
    def local(self) -> LocalSubscriptions: ...
    @property
    def leases(self) -> Leases: ...
    @property
    def subscribers(self) -> Subscribers: ...
    @property
    def registrations(self) -> Registrations: ...
    @property
    def constream(self) -> Constream: ...
    @property
    def cluster(self) -> ClusterMember | None: ...  # once start_overlay made it
    @property
    def machines(self) -> BrokerMachines: ...
    @property
    def lifecycle(self) -> Lifecycle: ...
