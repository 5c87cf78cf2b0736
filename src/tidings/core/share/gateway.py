"""The shared subscriptions' glue in the MQTT gateway (core/mqtt/gateway.py): what the hub
(core/share/hub.py) asks, carried out on the broker, the overlay and the MQTT sessions.

- `BrokerInput`: the broker handles it (a group's connection at its home); what it answers comes back
  through the gateway's `_to_client`, which hands the groups' connections and the cluster member's
  `ShareArrived` to `taken`;
- `Vouch`: the broker opens a group's connection as the members' identity (core/broker/reading.py
  `vouch`), its WELCOME (or ERROR) coming back as `BrokerInput`'s answers do;
- `RouteJoin`: routed by the overlay towards the group's key (core/share/wire.py `route`), from this
  broker; without an overlay this broker is every group's home;
- `PeerOut`: sent on the peer link to the broker named (dialled if need be); a SHARE_MOVED or
  SHARE_LEFT only over a link speaking peer version SHARE_HANDOVER (core/wire/peer.py "Versions"):
  to a broker not linked yet it dials instead (the handover's repeats find the link open), and to
  an older broker it is never sent (that broker keeps an old home's behaviour of version 1);
- `Forget`: the broker forgets one of its durable registrations, as a MOVED from a peer makes it
  (`MovedAway`, core/subscription/router.py), when the pubend named is its own;
- `LocalDeliver`: the MQTT session of the connection delivers it (RETURNed when it is gone).

What each of these makes the hub do is taken again, at most `ROUNDS_MAX` times in one turn (the
rest waits for the next input: a JOIN routed here makes the group's connection, whose WELCOME makes
its SUBSCRIBE, and so on, a few rounds at most).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from tidings.core.broker.metrics import COUNTER, GAUGE, Figure
from tidings.core.effects import Disconnect, Effect, Send
from tidings.core.reliability.effects import MovedAway
from tidings.core.share.group import ShareLimits
from tidings.core.share.home import BrokerInput, Forget, PeerOut, Vouch
from tidings.core.share.hub import HubOutput, ShareHub
from tidings.core.share.members import LocalDeliver, RouteJoin
from tidings.core.share.wire import ShareArrived, ShareLeft, ShareMoved, encode, route
from tidings.core.wire.peer import PEER_VERSION_MIN, SHARE_HANDOVER

if TYPE_CHECKING:
    from tidings.core.broker.broker import Broker
    from tidings.core.mqtt.gateway import MqttGateway

ROUNDS_MAX = 16
MQTT = ("mqtt",)

FIGURES: tuple[Figure, ...] = (  # (in core/mqtt/figures.py's FIGURES: /metrics as tidings_mqtt_share_*)
    Figure("share_homed", "mqtt_share_groups_homed", GAUGE,
           "shared subscription groups whose home is this broker (open)", "ShareHomes", under=MQTT),
    Figure("share_groups_joined", "mqtt_share_groups_joined", GAUGE,
           "shared subscription groups with members on this broker", "ShareMembers", under=MQTT),
    Figure("share_members", "mqtt_share_members", GAUGE,
           "MQTT connections on this broker that are members of a shared subscription group", "ShareMembers",
           under=MQTT),
    Figure("share_deliveries", "mqtt_share_deliveries", COUNTER,
           "events handed to a member by the groups homed here (a redelivery counts again)", "ShareHomes",
           under=MQTT),
    Figure("share_redelivered", "mqtt_share_redelivered", COUNTER,
           "deliveries of the groups homed here that went back for another member (a member left or returned it)",
           "ShareGroup", under=MQTT),
    Figure("share_returned", "mqtt_share_returned", COUNTER,
           "deliveries this broker returned to their home: the member had left", "ShareMembers", under=MQTT),
    Figure("share_queued_bytes", "mqtt_share_queued_bytes", GAUGE,
           "bytes of events waiting at the groups homed here for a member with window space", "ShareGroup",
           under=MQTT),
    Figure("share_paced", "mqtt_share_paced", COUNTER,
           "times a group's subscription here was paced: its queue passed share_queued_bytes_max", "ShareHomes",
           under=MQTT),
    Figure("share_handed_over", "mqtt_share_handed_over", COUNTER,
           "groups stopped here at once by their new home's SHARE_MOVED (this broker was their old home)",
           "ShareHomes", under=MQTT),
    Figure("share_moved_owed", "mqtt_share_moved_owed", GAUGE,
           "old homes of groups homed here not yet answering SHARE_MOVED (core/share/handover.py)", "ShareHomes",
           under=MQTT),
    Figure("share_joins_dropped", "mqtt_share_joins_dropped", COUNTER,
           "JOINs of new groups dropped: this broker was home to GROUPS_HOMED_MAX groups", "ShareHomes", under=MQTT),
)


def hub_of(broker: Broker) -> ShareHub:
    """The broker's shared subscriptions, with its limits (core/config.py)."""
    return ShareHub(ShareLimits(queued_bytes_max=broker.config.share_queued_bytes_max), access(broker))


def access(broker: Broker) -> Callable[[int, str], bool]:
    """Whether the client of a connection may subscribe to a pattern, by the broker's rules as they
    are now (a reload of the auth file replaces them) for the identity the broker admitted it as."""
    def may_subscribe(conn: int, pattern: str) -> bool:
        c = broker.connections.get(conn)
        return c is not None and broker.guard.policy.rules.may_subscribe(c.identity, pattern)
    return may_subscribe


def taken(gateway: MqttGateway, eff: object) -> bool:
    """Whether `eff` (the broker's output) is the shared subscriptions': then it is handed to the hub."""
    hub = gateway.shares
    hub.wall_us = gateway.wall_us
    if type(eff) is ShareArrived:
        hub.now = gateway.now
        hub.arrived(eff.sender, eff.message)
        return True
    if isinstance(eff, Send | Disconnect) and hub.owns(eff.conn):
        hub.now = gateway.now
        hub.from_broker(eff.conn, eff.data if isinstance(eff, Send) else None)
        return True
    return False


def run(gateway: MqttGateway, out: list[Effect]) -> None:
    """Carry out what the hub asks, as the module says."""
    hub, cluster = gateway.shares, gateway.broker.cluster
    if cluster is not None and hub.me != cluster.me.address:  # (once its overlay started: before any JOIN)
        hub.set_me(cluster.me.address)
    if not hub.outbox and not hub.members.acks:  # (most turns: nothing)
        return
    hub.wall_us = gateway.wall_us
    for _ in range(ROUNDS_MAX):
        items = hub.take()
        if not items:
            return
        for item in items:
            _carry(gateway, item, out)


def timed_out(gateway: MqttGateway, now: int, out: list[Effect]) -> None:
    """The hub's deadlines, what they ask carried out at once."""
    gateway.shares.wall_us = gateway.wall_us
    for item in gateway.shares.handle_timeout(now):
        _carry(gateway, item, out)


def _carry(gateway: MqttGateway, item: HubOutput, out: list[Effect]) -> None:
    hub, broker, now, cluster = gateway.shares, gateway.broker, gateway.now, gateway.broker.cluster
    if isinstance(item, BrokerInput):
        gateway._to_client(broker.handle(item.input), out)
    elif isinstance(item, Vouch):
        opened: list[Effect] = []
        broker.reading.vouch(now, item.conn, item.identity, opened)
        gateway._to_client(opened, out)
    elif isinstance(item, RouteJoin):
        if cluster is None:
            hub.arrived(hub.me, item.join)
        else:
            effects = cluster.received(now, cluster.me.address, route(cluster.me, item.join))
            gateway._to_client(effects, out)  # type: ignore[arg-type]  # (peer sends, or ShareArrived)
    elif isinstance(item, PeerOut):
        peers = None if cluster is None else cluster.peers
        if peers is None:
            pass
        elif not isinstance(item.message, ShareMoved | ShareLeft) or peers.speaks(item.address, SHARE_HANDOVER):
            out += peers.send(now, item.address, encode(item.message))
        elif not peers.speaks(item.address, PEER_VERSION_MIN):  # (not linked, or not open yet)
            out += peers.probe(now, item.address)  # dialled if not linked: a repeat finds it open
    elif isinstance(item, Forget):
        if item.pubend == broker.pubend.pubend_id:
            gateway._to_client(broker.settle(now, [MovedAway(item.registration)]), out)
    else:
        _deliver(gateway, item, out)


def _deliver(gateway: MqttGateway, item: LocalDeliver, out: list[Effect]) -> None:
    session = gateway.sessions.get(item.conn)
    if session is None:
        gateway.shares.acked(item.ref, False)
        return
    session.deliver_shared(item.ref, item.record, out)
    gateway._arm(session)
