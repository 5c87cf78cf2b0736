"""One broker's place in the overlay: its Pastry node and its Scribe agent, composed.

Theory of operation. Pastry (`OverlayNode`) and Scribe (`ScribeAgent`) are separate machines that
talk only through values (core/overlay/envelope.py). This composer is the glue the paper's API
implies, and nothing more:

- a ROUTE message from a peer is given to Pastry for a decision; a `Forward` goes to Scribe's
  forward upcall, which may stop it (a subscribe that reached the tree) or replace its payload, and
  only then does Pastry send it on; a `Deliver` goes to Scribe's deliver upcall (this node is the
  rendez-vous point);
- Scribe's `RouteTo` effects go through the same path, starting at this node (the first hop may
  already be the destination);
- Pastry's notifications about the leaf set and failed nodes are handed to Scribe (root metadata
  replication and tree repair);
- with guaranteed delivery (`reliability` given), Scribe hands every event that reaches this node to
  the `ReliabilityNode` (`EventArrived`), as well as `ChildAdded`; ACK and NACK from peers go to it
  too. The two talk only through values: after each Scribe call the node is told the shapes of the
  trees it changed (`TreeShape`), what the node asks of Scribe (`SendToChild`, `PublishRouted`,
  `RememberPublisher`) is carried to Scribe at once, in order, and Scribe's typed `Join` (a repair,
  a new forwarder's SUBSCRIBE) is completed with the node's extra (`join_extra`, `forwarder_extra`)
  and routed where it stands;
- with peer links (`PeerLinks`, core/links/peer_links.py, given in a broker), the member owns them: the
  runtime's inputs on peer connections come here (`peer_input`, `adopt`), each message a link yields
  is dispatched by its type number to Pastry, Scribe or the reliability node, a malformed one is
  answered on its link (`peer_messages_rejected`), RTT samples and unreachable peers go to Pastry,
  and every `PeerSend` and `Probe` leaves through the links as runtime effects (Send, Connect,
  Disconnect). A peer message thus never leaves this object before it is handled;
- with guaranteed delivery, the pubend directory (core/broker/directory.py) hears the leaf set's changes,
  gets DIRECTORY messages, the wall clock and the timer, and sends through the same links: every
  member knows every pubend of the overlay, also those whose broker is down;
- what is left (`ClusterEffect`: DeliverRecords, Lost, Recorded, MovedAway and AccessChanged for
  the broker, and the runtime effects) goes to the broker; without links (the message-level
  simulator) PeerSend and Probe go to the caller as well, and without guaranteed delivery Scribe's
  upcalls.

Time: the member is one `TimedMachine` (core/deadlines.py) over its machines: `next_deadline()` is
the earliest of theirs, and `handle_timeout(now)` gives each its `handle_timeout(now)` in a fixed
order (the links, Pastry, Scribe, the reliability node, the directory), then settles their effects
as above. A broker's member keeps that earliest deadline in an `Alarm` of its own, whose parent is
the broker's (lifecycle.py `join_overlay`): every machine's `Deadlines` tells it when a deadline moves, so
`next_deadline()` (which the broker asks at every timer) walks the five machines only when their
minimum is unknown. Scribe, the reliability node and the directory each keep theirs in an alarm
under the member's, which says whether it is due: `handle_timeout` calls them only then (with
nothing due, theirs do nothing), Pastry and the links at every deadline of the member (Pastry
forgets old failures on any call, the links hand out their pending reports).

Until Pastry reports `JoinCompleted`, its state is partial and a route could end at the wrong node,
so messages Scribe routes before then (a broker's subscriptions at start) wait, at most
`ROUTES_BEFORE_JOIN_MAX` of them, and leave in order when the join completes.

It holds no protocol rule of its own and does no I/O, so the asyncio broker, the byte-level
simulator and the message-level simulator at scale all drive this same object.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, NamedTuple

from tidings.core.broker.directory import DirectoryConfig, DirectoryEffect, PubendDirectory
from tidings.core.clock import WallClock
from tidings.core.deadlines import Alarm
from tidings.core.durable.constream import Recorded
from tidings.core.effects import Effect
from tidings.core.errors import UNKNOWN_MESSAGE, ProtocolError, TidingsError
from tidings.core.inputs import Connected, ConnectFailed, ConnectionLost, LogState, Received, SendBlocked, SendDrained
from tidings.core.links.link import LinkOutput, PeerMessage, PeerUnreachable, RttMeasured
from tidings.core.links.peer_links import PeerLinks
from tidings.core.multicast.access import Acl, Member
from tidings.core.multicast.agent import ScribeAgent, ScribeConfig
from tidings.core.multicast.effects import (
    AccessChanged,
    ChildAdded,
    DeliverLocal,
    EventArrived,
    EventForwarded,
    Join,
    JoinPurpose,
    ParentSuspected,
    ScribeEffect,
    TreeActivated,
)
from tidings.core.multicast.local_trees import AccessLists, CreateTree, JoinTree, NameMembers, TreeEffect
from tidings.core.overlay import messages as overlay_messages
from tidings.core.overlay.envelope import (
    Deliver,
    Forward,
    PeerSend,
    RouteMessage,
    RouteTo,
)
from tidings.core.overlay.events import OverlayEffect, Probe
from tidings.core.overlay.node import JoinCompleted, LeafSetChanged, NodeFailed, OverlayConfig, OverlayNode, Rng
from tidings.core.overlay.node_id import NodeRef
from tidings.core.reliability.effects import (
    DeliverRecords,
    Lost,
    MovedAway,
    PublishRouted,
    RememberPublisher,
    SendToChild,
)
from tidings.core.reliability.node import Held, NodeEffect, ReliabilityConfig, ReliabilityNode, Synced
from tidings.core.share.wire import SHARE_TYPES, ShareArrived, arrived, routed
from tidings.core.wire.frames import FrameDecoder
from tidings.core.wire.types import BrokerType, Layer, OverlayType

ROUTES_BEFORE_JOIN_MAX = 10_000


RELIABILITY_UPCALLS = (EventArrived, ChildAdded, ParentSuspected, TreeActivated, Join)

PeerInput = Received | ConnectionLost | Connected | ConnectFailed | SendBlocked | SendDrained

# the reliability node's effects once what it asks of Scribe is carried out (`_asked`)
Asked = PeerSend | DeliverRecords | Lost | Recorded | MovedAway | Effect | ShareArrived
# what the machines hand the member to settle (`_settle`)
Settled = OverlayEffect | ScribeEffect | Asked | DirectoryEffect
# what the member hands on: to the broker (remote events, their losses, PFS records, durable moves,
# access lists) and to the runtime (Effect); without links (the message-level simulator) the
# peers' sends and probes, and without guaranteed delivery Scribe's upcalls and deliveries, too
ClusterEffect = (Effect | DeliverRecords | Lost | Recorded | MovedAway | AccessChanged | PeerSend | Probe | ShareArrived
                 | DeliverLocal | EventArrived | EventForwarded | ChildAdded | ParentSuspected | TreeActivated | Join)
# what the broker hands `settle`: the reliability node's effects, with what the member already
# output for the same request (a tree joined beside a subscription's streams) to pass on in order
Settleable = NodeEffect | ClusterEffect


class Reliability:
    """What guaranteed delivery needs from the broker: its pubend, the trees of a channel, the
    pubend's durable tail and log state (for answering nacks), and what its durable subscriptions
    released (for the release protocol)."""

    def __init__(self, pubend_id: str, config: ReliabilityConfig, trees_of: Callable[[str], list[str]],
                 pubend_state: Callable[[], tuple[int, LogState]], held: Held = lambda tree, pubend: None,
                 directory: bytes | None = None, directory_config: DirectoryConfig | None = None) -> None:
        """`directory`: the pubend directory the last SaveDirectory saved."""
        self.pubend_id = pubend_id
        self.directory = directory
        self.directory_config = directory_config or DirectoryConfig()
        self.config = config
        self.trees_of = trees_of
        self.pubend_state = pubend_state
        self.held = held


class PeerOutput(NamedTuple):
    """What the member made of a report on a peer connection: its output, and (Received) the bytes
    the connection holds in a partial frame now, which the broker charges to its budget."""

    effects: list[ClusterEffect]
    held_bytes: int = 0


class _DueAlarms(NamedTuple):
    """The earliest deadlines of the machines the member calls only when due."""

    scribe: Alarm
    reliability: Alarm
    directory: Alarm


def _is_due(alarm: Alarm, now: int) -> bool:
    when = alarm.earliest if alarm.known else alarm.next_deadline()
    return when is not None and when <= now


class ClusterMember:
    def __init__(self, me: NodeRef, overlay_config: OverlayConfig, scribe_config: ScribeConfig,
                 rng: Rng, reliability: Reliability | None = None, peers: PeerLinks | None = None,
                 alarm: Alarm | None = None) -> None:
        """`alarm`: the member's own earliest deadline (its parent the broker's, lifecycle.py `join_overlay`),
        which every machine's timers tell when they move (`peers` were given it too), and which
        `next_deadline` reads; a member given none keeps one with no parent."""
        alarm = Alarm() if alarm is None else alarm
        assert peers is None or peers.timers.alarm is alarm, "the links' timers tell the member's alarm"
        self.me = me
        self.alarm = alarm
        self.peers = peers
        self.clock = WallClock()  # the broker's, which it sets on each input that has one (core/clock.py)
        self.peer_messages_rejected = 0
        # Scribe's, the reliability node's and the directory's earliest deadlines, each in an alarm
        # under the member's: `handle_timeout` calls those three only when due (Pastry and the links
        # at every deadline: Pastry forgets old failures then, the links hand out their reports)
        self._due = _DueAlarms(Alarm(alarm), Alarm(alarm), Alarm(alarm))
        self.overlay = OverlayNode(me, overlay_config, rng, alarm=alarm)
        gd = reliability is not None
        self.scribe = ScribeAgent(me, replace(scribe_config, forward_events=not gd), alarm=self._due.scribe)
        self.reliability: ReliabilityNode | None = None
        self.directory: PubendDirectory | None = None
        if reliability is not None:
            self.directory = PubendDirectory(me, reliability.pubend_id, reliability.directory_config,
                                             reliability.pubend_state, reliability.directory, self._due.directory)
            self.reliability = ReliabilityNode(me, reliability.pubend_id, reliability.config,
                                               self.scribe.said_empty.suppressed, reliability.trees_of,
                                               reliability.pubend_state, reliability.held,
                                               (lambda address: False) if peers is None else peers.congested,
                                               self._due.reliability,  # and who takes a complete nack:
                                               (lambda address: True) if peers is None else peers.complete_nacks)
            self.directory.clock = self.reliability.streams.clock = self.clock
        self._before_join: deque[RouteTo] = deque(maxlen=ROUTES_BEFORE_JOIN_MAX)
        self._due.scribe.watch(self.scribe)
        if self.reliability is not None and self.directory is not None:
            self._due.reliability.watch(self.reliability)
            self._due.directory.watch(self.directory)
        alarm.watch(self.overlay, *self._due, *([] if peers is None else [peers]))

    # ---- inputs ----------------------------------------------------------------------------------

    def start(self, now: int, bootstrap: str | None) -> list[ClusterEffect]:
        if self.directory is not None:
            self.directory.start(now)
        return self._settle(now, self.overlay.start(now, bootstrap))

    def received(self, now: int, sender: str, message: list[Any]) -> list[ClusterEffect]:
        """A message from the peer at `sender`; raises ProtocolError when it is malformed."""
        kind = message[0] if type(message) is list and message and type(message[0]) is int else None
        if kind == OverlayType.ROUTE:
            return self._route(now, overlay_messages.decode_route(message))
        if kind in Layer.OVERLAY:
            return self._settle(now, self.overlay.handle(now, sender, message))
        if kind in Layer.MULTICAST:
            return self._settle(now, self._told(self.scribe.handle(now, sender, message)))
        if kind in Layer.RELIABILITY and self.reliability is not None:
            return self._settle(now, self._asked(now, self.reliability.received(now, sender, message)))
        if kind == BrokerType.DIRECTORY and self.directory is not None:
            return self._settle(now, self.directory.received(now, sender, message))
        if kind in SHARE_TYPES:  # MQTT shared subscriptions' messages, for the broker (core/share/wire.py)
            return [arrived(sender, message)]
        raise ProtocolError(UNKNOWN_MESSAGE, f"unknown peer message type {kind!r}")

    def rtt_measured(self, now: int, address: str, rtt_ns: int) -> list[ClusterEffect]:
        return self._settle(now, self.overlay.rtt_measured(now, address, rtt_ns))

    def peer_unreachable(self, now: int, address: str) -> list[ClusterEffect]:
        return self._settle(now, self.overlay.peer_unreachable(now, address))

    def handle_timeout(self, now: int) -> list[ClusterEffect]:
        out = [] if self.peers is None else self._peer_output(now, self.peers.handle_timeout(now))
        effects: list[Settled] = [*self.overlay.handle_timeout(now)]
        due = self._due
        if _is_due(due.scribe, now):
            effects += self._told(self.scribe.handle_timeout(now))
        if self.reliability is not None and _is_due(due.reliability, now):
            effects += self._asked(now, self.reliability.handle_timeout(now))
        if self.directory is not None and _is_due(due.directory, now):
            effects += self.directory.handle_timeout(now)
        return out + self._settle(now, effects)

    def next_deadline(self) -> int | None:
        """The earliest deadline of the member's machines (walked by its alarm only when not known)."""
        alarm = self.alarm
        return alarm.earliest if alarm.known else alarm.next_deadline()

    # ---- the peer links (a broker's member only) --------------------------------------------------

    def owns(self, conn: int) -> bool:
        """Whether `conn` is a connection of the peer links."""
        return self.peers is not None and self.peers.owns(conn)

    def peer_input(self, inp: PeerInput) -> PeerOutput | None:
        """The runtime's report on a peer connection (or on a dial of the links); None when the
        connection is not the links' (a client's, for the broker)."""
        peers = self.peers
        if isinstance(inp, Connected | ConnectFailed):
            assert peers is not None  # only the peer links dial
        elif peers is None or not peers.owns(inp.conn):
            return None
        now = inp.now
        if isinstance(inp, Received):
            effects = self._peer_output(now, peers.received(now, inp.conn, inp.data))
            return PeerOutput(effects, peers.held_bytes(inp.conn))
        if isinstance(inp, ConnectionLost):
            return PeerOutput(self._peer_output(now, peers.lost(now, inp.conn)))
        if isinstance(inp, Connected):
            return PeerOutput(self._peer_output(now, peers.connected(now, inp.conn, inp.address)))
        if isinstance(inp, ConnectFailed):
            return PeerOutput(self._peer_output(now, peers.connect_failed(now, inp.address, inp.reason)))
        blocked = isinstance(inp, SendBlocked)
        out: list[ClusterEffect] = [*peers.flow(now, inp.conn, blocked)]  # its messages wait, bounded
        address = peers.address_of(inp.conn)
        if not blocked and address is not None and self.reliability is not None:  # the streams held back go on
            out += self._settle(now, self._asked(now, self.reliability.link_drained(now, address)))
        return PeerOutput(out)

    def peers_held_bytes(self, conn: int) -> int:
        """The bytes a peer connection holds in a partial frame (charged to the broker's budget)."""
        return 0 if self.peers is None else self.peers.held_bytes(conn)

    def refuse(self, now: int, conn: int, code: str, text: str) -> list[ClusterEffect]:
        """Close a peer connection that broke one of the broker's limits (PEER_ERROR `code`)."""
        assert self.peers is not None
        return self._peer_output(now, self.peers.refuse(conn, code, text))

    def adopt(self, now: int, conn: int, decoder: FrameDecoder, hello: bytes, rest: list[bytes]) -> list[ClusterEffect]:
        """An accepted connection whose first frame was PEER_HELLO: the links take it over."""
        assert self.peers is not None
        return self._peer_output(now, self.peers.adopt(now, conn, decoder, hello, rest))

    def _peer_output(self, now: int, output: Sequence[LinkOutput]) -> list[ClusterEffect]:
        """The links' effects, then each message, measurement and failure they report, handled."""
        out: list[ClusterEffect] = []
        for item in output:
            if isinstance(item, PeerMessage):
                try:
                    out += self.received(now, item.sender.address, item.message)
                except TidingsError as exc:
                    self.peer_messages_rejected += 1
                    assert self.peers is not None
                    out += self.peers.reject(now, item.sender.address, str(exc))
            elif isinstance(item, RttMeasured):
                out += self.rtt_measured(now, item.address, item.rtt_ns)
            elif isinstance(item, PeerUnreachable):
                out += self.peer_unreachable(now, item.address)
            else:
                out.append(item)
        return out

    # ---- the broker's requests -------------------------------------------------------------------

    def subscribe(self, now: int, tree: str, members: tuple[Member, ...] = (),
                  creation: tuple[str, Acl | None] | None = None) -> list[ClusterEffect]:
        """Join `tree` for `members` (identity, pattern); with `creation` (creator, access list),
        CREATE it first (multicast/access.py)."""
        extra = None if self.reliability is None else self.reliability.join_extra(tree)
        effects = self._told(self.scribe.subscribe(now, tree, extra, members))
        if creation is not None:
            effects = self._told(self.scribe.create(now, tree, *creation)) + effects
        return self._settle(now, effects)

    def name_members(self, tree: str, gone: Member | None, members: tuple[Member, ...]) -> None:
        """The broker's next SUBSCRIBE to `tree` names `members` too, and no longer `gone`
        (core/multicast/local_trees.py)."""
        if gone is not None:
            self.scribe.remove_member(tree, gone)
        for member in members:
            self.scribe.add_member(tree, member)

    @property
    def access_lists(self) -> AccessLists:
        """The trees' access lists this node holds (Scribe's), for the broker's checks."""
        return self.scribe

    def create(self, now: int, tree: str, creator: str, acl: Acl | None) -> list[ClusterEffect]:
        return self._settle(now, self._told(self.scribe.create(now, tree, creator, acl)))

    def unsubscribe(self, now: int, tree: str) -> list[ClusterEffect]:
        return self._settle(now, self._told(self.scribe.unsubscribe(now, tree)))

    def trees(self, now: int, effects: Sequence[TreeEffect | CreateTree]) -> list[ClusterEffect]:
        """What the broker's local trees decided (core/multicast/local_trees.py), carried out in order
        (a TidingsError when a local limit refuses a join)."""
        out: list[ClusterEffect] = []
        for eff in effects:
            if isinstance(eff, JoinTree):
                out += self.subscribe(now, eff.tree, eff.members, eff.creation)
            elif isinstance(eff, NameMembers):
                self.name_members(eff.tree, eff.gone, eff.members)
            elif isinstance(eff, CreateTree):
                out += self.create(now, eff.tree, eff.creator, eff.acl)
            else:
                out += self.unsubscribe(now, eff.tree)
        return out

    def publish(self, now: int, tree: str, event: list[Any]) -> list[ClusterEffect]:
        return self._settle(now, self._told(self.scribe.publish(now, tree, event)))

    def settle(self, now: int, effects: Sequence[Settleable]) -> list[ClusterEffect]:
        """The reliability node's effects for the broker's requests (publish, local subscriptions,
        log reads), with what they ask of Pastry and Scribe carried out."""
        return self._settle(now, self._asked(now, effects))

    def published(self, now: int, batches: Synced, synced: int) -> list[ClusterEffect]:
        """A sync made this pubend's `batches` and every tick up to `synced` durable: the
        reliability node's knowledge of their events on their trees, sent."""
        assert self.reliability is not None
        return self._settle(now, self._asked(now, self.reliability.published(now, batches, synced)))

    def forget_pubend(self, now: int, pubend: str) -> list[ClusterEffect]:
        """An operator removes a decommissioned broker's pubend from the directory (DirectoryError
        when it is not listed, or is this broker's own)."""
        assert self.directory is not None
        return self._settle(now, self.directory.forget(now, pubend))

    def wall_clock(self, wall_us: int) -> None:
        """The broker's wall clock at its latest input that had one (the reliability node's merge
        points and release use it, the directory its versions and ages)."""
        self.clock.us = wall_us  # (the reliability node's and the directory's)

    def unacknowledged(self, now: int) -> int:
        """Trees whose root has not acknowledged this pubend's stream (0 without guaranteed delivery)."""
        return 0 if self.reliability is None else self.reliability.source.unacknowledged(now)

    def neighbours(self) -> tuple[list[tuple[str, int]], list[str]] | None:
        """For route advice (core/broker/advice.py): the brokers nearest this one, (address, RTT in ns)
        nearest first, and the leaf set's addresses; None until the overlay join completed."""
        overlay = self.overlay
        if not overlay.joined:
            return None
        return ([(n.address, rtt) for n, rtt in overlay.neighbourhood.with_rtt()],
                [n.address for n in overlay.leaf_set.members()])

    def status(self) -> dict[str, Any]:
        status: dict[str, Any] = {"overlay": self.overlay.status(), "trees": self.scribe.status()}
        if self.directory is not None:
            status.update(self.directory.status())
        if self.reliability is not None:
            status["delivery"] = self.reliability.status()
        if self.peers is not None:
            status["peers"] = self.peers.status()
            status["peer_refusals"] = self.peers.refusals_status()
        return status

    # ---- glue ------------------------------------------------------------------------------------

    def _route(self, now: int, message: RouteMessage) -> list[ClusterEffect]:
        decision = self.overlay.route_step(now, message)
        if message.payload and message.payload[0] in SHARE_TYPES:  # to the key's node, not Scribe's (core/share/)
            return self._settle(now, routed(self.overlay, message, decision))
        if isinstance(decision, Deliver):
            return self._settle(now, self._told(self.scribe.on_deliver(now, decision)))
        effects, onward = self.scribe.on_forward(now, decision)
        self._told(effects)
        if onward is not None:
            effects.append(self.overlay.forward(Forward(onward, decision.next_hop)))
        return self._settle(now, effects)

    def _settle(self, now: int, effects: Sequence[Settled]) -> list[ClusterEffect]:
        """Hand the machines' effects meant for each other across; return the rest, in order."""
        out: list[ClusterEffect] = []
        queue: deque[Settled] = deque(effects)
        while queue:
            eff = queue.popleft()
            if isinstance(eff, RouteTo):
                if self.overlay.joined:
                    out += self._route(now, self.overlay.route(eff.key, eff.payload))
                else:
                    self._before_join.append(eff)
            elif isinstance(eff, JoinCompleted):
                queue.extend(self._before_join)
                self._before_join.clear()
            elif isinstance(eff, LeafSetChanged):
                queue.extend(self._told(self.scribe.leaf_set_changed(now, eff.members)))
                if self.directory is not None:
                    queue.extend(self.directory.leaf_set_changed(now, eff.members))
            elif isinstance(eff, NodeFailed):
                queue.extend(self._told(self.scribe.node_failed(now, eff.node)))
            elif self.reliability is not None and type(eff) in RELIABILITY_UPCALLS:
                self._reliability_upcall(now, eff, queue)
            elif self.peers is not None and type(eff) is PeerSend:
                out += self.peers.send(now, eff.address, eff.message)
            elif self.peers is not None and type(eff) is Probe:
                out += self.peers.probe(now, eff.address)
            else:
                out.append(eff)
        return out

    def _reliability_upcall(self, now: int, eff: Settled, queue: deque[Settled]) -> None:
        gd = self.reliability
        assert gd is not None
        if type(eff) is EventArrived:
            try:
                queue.extend(self._asked(now, gd.event_arrived(now, eff.tree, eff.event, eff.sender)))
            except ProtocolError:
                gd.peer_errors += 1  # a malformed event is dropped; the stream nacks what it lacks
        elif type(eff) is ChildAdded:
            queue.extend(self._asked(now, gd.child_added(now, eff.tree, eff.child.address, eff.subscribe_extra)))
        elif type(eff) is TreeActivated:
            queue.extend(self._asked(now, gd.tree_activated(now, eff.tree)))
        elif type(eff) is Join:  # this node's SUBSCRIBE carries its stream positions and interest
            tree = eff.subscribe.tree
            extra = (gd.join_extra(tree) if eff.purpose is JoinPurpose.OWN
                     else gd.forwarder_extra(tree, eff.subscribe.extra))
            queue.appendleft(RouteTo(eff.key, replace(eff.subscribe, extra=extra).to_wire()))
        # (ParentSuspected: the Join right after it carries the repair)

    def _told(self, effects: list[ScribeEffect]) -> list[ScribeEffect]:
        """Scribe's `effects` of one call, once the reliability node has been told the shapes of
        the trees that call changed (it keeps them; it never asks Scribe)."""
        if self.reliability is not None:
            for shape in self.scribe.shape_changes():
                self.reliability.tree_changed(shape)
        return effects

    def _asked(self, now: int, effects: Sequence[Settleable]) -> list[Settled]:
        """The reliability node's `effects`, with what it asks of Scribe (SendToChild, PublishRouted,
        RememberPublisher) carried out at once, in order, each replaced by Scribe's own effects."""
        out: list[Settled] = []
        for eff in effects:
            if isinstance(eff, SendToChild):
                out += self.scribe.send_event(now, eff.tree, eff.child, eff.event)
            elif isinstance(eff, PublishRouted):
                out += self._told(self.scribe.publish(now, eff.tree, eff.event, eff.even_if_empty))
            elif isinstance(eff, RememberPublisher):
                self.scribe.remember_publisher(eff.tree, eff.publisher)
            else:
                out.append(eff)
        return out
