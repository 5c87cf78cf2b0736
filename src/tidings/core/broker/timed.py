"""Every machine that keeps time, checked against the one timer contract (core/deadlines.py).

Each machine with time-driven rules has `next_deadline() -> int | None` and
`handle_timeout(now: int) -> list[E]`, `E` its typed effect union (`TimedMachine[E]`). This table
names them with their `E`, so that mypy (strict on core/) fails when one drifts: a second argument,
an output list passed in, a tuple or `list[Any]` returned. tests/unit/test_deadlines.py checks the
same table at run time (each `handle_timeout` takes `now` alone) and that no other class under core/
defines `handle_timeout` without being listed here.

The broker itself is not listed: its timer is the runtime's `TimerFired` input (core/drive.py), and
its `next_deadline()` is the earliest of these machines', kept by the `Alarm` as they move.
"""

from __future__ import annotations

from typing import Any

from tidings.core.broker.cluster import ClusterEffect, ClusterMember
from tidings.core.broker.directory import DirectoryEffect, PubendDirectory
from tidings.core.broker.lifecycle import Lifecycle, LifecycleEffect
from tidings.core.broker.reading import Reading, ReadingEffect
from tidings.core.deadlines import TimedMachine
from tidings.core.links.link import LinkOutput
from tidings.core.links.peer_links import PeerLinks
from tidings.core.mqtt.effects import MqttEffect
from tidings.core.mqtt.protocol import MqttConnection
from tidings.core.multicast.agent import ScribeAgent, ScribeEffect
from tidings.core.overlay.events import OverlayEffect
from tidings.core.overlay.node import OverlayNode
from tidings.core.reliability.acks import AckBatcher, SendAck
from tidings.core.reliability.curiosity import Curiosity, CuriosityEffect
from tidings.core.reliability.effects import StreamEffect
from tidings.core.reliability.flow_window import FlowOutput, FlowWindows
from tidings.core.reliability.interest import Interest, SendSummary
from tidings.core.reliability.merge import MergeEffect, TotalOrderMerge
from tidings.core.reliability.node import NodeEffect, ReliabilityNode
from tidings.core.reliability.tree_streams import TreeStreams
from tidings.core.session.roaming import RoamEffect, Roamer
from tidings.core.share.group import Hand, ShareGroup
from tidings.core.share.home import HomeOutput, ShareHomes
from tidings.core.share.hub import HubOutput, ShareHub
from tidings.core.share.members import RouteJoin, ShareMembers
from tidings.core.subscription.leases import LeaseExpired, Leases

# the broker's: the cluster member and what it composes, then the broker's own machines
CLUSTER: type[TimedMachine[ClusterEffect]] = ClusterMember
LINKS: type[TimedMachine[LinkOutput]] = PeerLinks
OVERLAY: type[TimedMachine[OverlayEffect]] = OverlayNode
SCRIBE: type[TimedMachine[ScribeEffect]] = ScribeAgent
RELIABILITY: type[TimedMachine[NodeEffect]] = ReliabilityNode
STREAMS: type[TimedMachine[StreamEffect]] = TreeStreams
CURIOSITY: type[TimedMachine[CuriosityEffect]] = Curiosity
ACKS: type[TimedMachine[SendAck]] = AckBatcher
INTEREST: type[TimedMachine[SendSummary]] = Interest
MERGE: type[TimedMachine[MergeEffect]] = TotalOrderMerge
FLOW: type[TimedMachine[FlowOutput]] = FlowWindows
DIRECTORY: type[TimedMachine[DirectoryEffect]] = PubendDirectory
READING: type[TimedMachine[ReadingEffect]] = Reading
LEASES: type[TimedMachine[LeaseExpired]] = Leases
LIFECYCLE: type[TimedMachine[LifecycleEffect]] = Lifecycle
# the client's (tidings.client and the simulator's clients drive it)
ROAMING: type[TimedMachine[RoamEffect]] = Roamer
# an MQTT connection's protocol machine (its session, core/mqtt/session.py, is driven by core/mqtt/gateway.py)
MQTT_CONNECTION: type[TimedMachine[MqttEffect]] = MqttConnection
# shared subscriptions (core/share/; the hub composes the rest, driven by core/mqtt/gateway.py)
SHARE_HUB: type[TimedMachine[HubOutput]] = ShareHub
SHARE_HOMES: type[TimedMachine[HomeOutput]] = ShareHomes
SHARE_GROUP: type[TimedMachine[Hand]] = ShareGroup
SHARE_MEMBERS: type[TimedMachine[RouteJoin]] = ShareMembers

MACHINES: tuple[type[TimedMachine[Any]], ...] = (
    CLUSTER, LINKS, OVERLAY, SCRIBE, RELIABILITY, STREAMS, CURIOSITY, ACKS, INTEREST, MERGE, FLOW, DIRECTORY,
    READING, LEASES, LIFECYCLE, ROAMING, MQTT_CONNECTION, SHARE_HUB, SHARE_HOMES, SHARE_GROUP, SHARE_MEMBERS)
