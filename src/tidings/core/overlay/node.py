"""The Pastry node: one broker's membership of the overlay, as a sans-IO machine.

API (every method that changes state returns a list of effects: `PeerSend`, `Probe`, `JoinCompleted`,
`LeafSetChanged`, `NodeFailed`; nothing is sent or measured by the node itself):

    node = OverlayNode(me: NodeRef, config: OverlayConfig, rng: Rng)  # rng: a seeded random.Random
        optional ref_pool: dict[int, NodeRef] shared by every node of a large simulation, so equal
        NodeRefs decoded from many messages are stored once
    node.start(now, bootstrap_address: str | None) -> effects      None: first node of a new overlay
    node.handle(now, sender_address, message: list) -> effects      any overlay message but ROUTE;
                                                                    ProtocolError if malformed
    node.route(key, payload) -> RouteMessage                        a new route from here (hops 0)
    node.route_step(now, RouteMessage) -> Deliver | Forward         decode ROUTE with messages.decode_route
    node.forward(Forward, payload=None) -> PeerSend                 the next hop's ROUTE (hops + 1)
    node.rtt_measured(now, address, rtt_ns) -> effects              answer to a Probe
    node.peer_unreachable(now, address) -> effects                  the transport lost that peer
    node.handle_timeout(now) -> effects;  node.next_deadline() -> int | None
    node.joined, node.leaf_set, node.routing_table, node.neighbourhood, node.status() -> dict

Theory. A key is routed to the live node whose nodeId is numerically closest to it. Each node
knows three sets: the leaf set (the numerically nearest nodeIds on both sides), the routing table
(for each prefix length, one node per next digit, chosen nearest by measured round-trip time) and
the neighbourhood set (the nearest nodes by round-trip time). A routing step delivers when the key
falls within the leaf set range and this node is the closest there; otherwise it forwards to the
closest leaf, else to the routing-table entry sharing one more digit with the key, else (the rare
case of an empty entry) to any known node that shares as long a prefix and is numerically closer.
Each hop therefore either lengthens the shared prefix or gets numerically closer: routes cannot
loop, and take about log16(N) hops. A route over `route_hops_max` hops means inconsistent state
somewhere; it is delivered where it stands and counted (`routes_over_hops_max` in status) rather
than dropped, so the application above still sees it.

Join: the newcomer asks a nearby member (the bootstrap) to route a JOIN with key = the newcomer's
nodeId. Every node on that route sends the newcomer its routing-table rows up to the prefix it
shares with the newcomer, the first one also its neighbourhood set, and the last one (numerically
closest to the newcomer) its leaf set. That last reply completes the join: the newcomer sends its
leaf set to its leaves and announces itself to the other nodes it knows, and they add it. Whenever a
node takes a new member into its leaf set it sends it its own leaf set, which is how nodes that
joined side by side at the same time come to know each other; and a keep-alive from a node it does
not take as a leaf (that node holds it for a neighbour, but this node's side holds nearer ones,
between them) is answered with its leaf set too, which names those: with a small leaf set the common
neighbour may have taken only one of the two (one leaf a side: neither heard of the other until the
periodic repair). That answer goes to a sender at most once per half keep-alive interval, a bare ack
otherwise: its periodic keep-alive, once an interval, always gets it, but a node also vets by
keep-alive each admissible node a leaf set names, once per leaf set naming it. Where sides are short
(a partition, heavy churn) and nodes walk the ring towards their nearest, answering each of those
with a leaf set named the next nodes on as many times again, a count that multiplied at every step
(up to 100,000 answers per 10 ms of simulated time in the 1,000-broker churn seed 2). A node only
named by a third party enters a leaf set once it has answered a keep-alive, so stale lists cannot
plant dead leaves. A join that has not completed after `join_timeout_ns` is asked again; when the
bootstrap cannot even be reached, sooner: after `join_retry_interval_ns_min`, doubling at each
unreachable attempt up to `join_timeout_ns` (backoff, so a bootstrap that is not up yet is found
quickly and a dead one is not hammered). A node still joining does not answer a join; but when two
nodes each ask to join through the other (two brokers restarted together, each given the other to
join), the one with the smaller nodeId founds the overlay on receiving the other's request and
answers it, so exactly one of them founds and they form one overlay (were others still up, they meet
them through the failed nodes they revive, as after a partition).

Failure: leaves exchange keep-alives every `keepalive_interval_ns` (and any message is a sign of
life); a leaf silent for `failure_timeout_ns`, or one the transport reports unreachable, is failed:
removed everywhere, and the leaf set is repaired by asking the farthest live leaf on the side that
lost a member for its leaf set (if the whole side failed, the nearest known node on that side).
Routing-table entries are repaired lazily: a failed entry's row is asked of a few other nodes of
that row; every `routing_repair_interval_ns` a random row is refreshed the same way and the
farthest leaf of each side is asked for its leaf set. A failed node is not re-learned from third
parties for `failed_memory_ns`, so stale lists elsewhere cannot bring a dead node back; a message
from the node itself always does. Every `revive_interval_ns` one of the last `lost_nodes_max`
failed nodes is asked for its leaf set: one that was only cut off answers, which is how the two
sides of a partition find each other again once it heals; its answer clears the failed memory, so
the rest of the other side comes back through the leaf sets exchanged.

Where each part lives: the node (this module) joins, learns nodes, routes and tracks leaf liveness;
the failed-node memory, leaf-set and routing-table repair and reviving are `repair.Repair`; the
parameters, timers and random source are in `settings.py`.
"""

from __future__ import annotations

from typing import Any

from tidings.core.deadlines import Alarm, Deadlines
from tidings.core.overlay import messages as m
from tidings.core.overlay.envelope import Deliver, Forward, PeerSend, RouteDecision, RouteMessage
from tidings.core.overlay.events import JoinCompleted, LeafSetChanged, NodeFailed, OverlayEffect, Probe
from tidings.core.overlay.leaf_set import LeafSet
from tidings.core.overlay.neighbourhood import NeighbourhoodSet
from tidings.core.overlay.node_id import DIGITS, NodeRef, closer, id_hex, shared_prefix_digits
from tidings.core.overlay.repair import Repair
from tidings.core.overlay.routing_table import RoutingTable
from tidings.core.overlay.settings import OverlayConfig, OverlayTimer, Rng
from tidings.core.wire.packable import WireArray

__all__ = [
    "JoinCompleted",
    "LeafSetChanged",
    "NodeFailed",
    "OverlayConfig",
    "OverlayEffect",
    "OverlayNode",
    "Probe",
    "Rng",
]


class OverlayNode:
    __slots__ = (
        "_bootstrap",
        "_heard_ns",
        "_join_retry_ns",
        "_joined",
        "_leaf_version",
        "_leaves_told",
        "_probing",
        "_ref_pool",
        "_repair",
        "_rng",
        "config",
        "leaf_set",
        "me",
        "neighbourhood",
        "routes_over_hops_max",
        "routing_table",
        "timers",
    )

    def __init__(self, me: NodeRef, config: OverlayConfig, rng: Rng,
                 ref_pool: dict[int, NodeRef] | None = None, alarm: Alarm | None = None) -> None:
        self.me = me
        self._ref_pool = ref_pool
        self.config = config
        self._rng = rng
        self.leaf_set = LeafSet(me.node_id, config.leaf_set_size)
        self.routing_table = RoutingTable(me.node_id)
        self.neighbourhood = NeighbourhoodSet(config.neighbourhood_size)
        self._joined = False
        self._bootstrap: str | None = None
        self._join_retry_ns = config.join_retry_interval_ns_min
        self.timers: Deadlines[OverlayTimer] = Deadlines(alarm)  # (alarm: core/deadlines.py)
        self._heard_ns: dict[str, int] = {}  # leaf address -> last sign of life
        self._repair = Repair(me, config, rng, self.leaf_set, self.routing_table, self.neighbourhood,
                              self.timers, self._known)
        self._probing: dict[str, NodeRef] = {}  # address -> node awaiting an RTT (insertion order = age)
        self._leaf_version = self.leaf_set.version
        self._leaves_told: dict[str, int] = {}  # non-leaf keep-alive sender -> when it last got our leaf set
        self.routes_over_hops_max = 0

    @property
    def joined(self) -> bool:
        return self._joined

    # -- joining -------------------------------------------------------------------------------

    def start(self, now: int, bootstrap_address: str | None) -> list[OverlayEffect]:
        """Found a new overlay (no bootstrap) or join one through the member at `bootstrap_address`."""
        assert self._bootstrap is None and not self._joined, "start once"
        out: list[OverlayEffect] = []
        if bootstrap_address is None:
            self._complete_join(now, out)
        else:
            self._bootstrap = bootstrap_address
            self._ask_to_join(now, out)
        return self._finish(now, out)

    def leaf_set_known(self, now: int) -> list[OverlayEffect]:
        """The leaf set was filled from outside with the state the joins converge to (the
        simulator's steady state), so every leaf already knows its neighbours: track their liveness
        and tell the layers above, without the exchange `_finish` makes for new leaves."""
        assert self._joined, "a founder or a joined node only"
        self._leaf_version = self.leaf_set.version
        members = self.leaf_set.members()
        self._heard_ns = {n.address: now for n in members}
        self._arm_silence()
        return [LeafSetChanged(tuple(members))]

    def _ask_to_join(self, now: int, out: list[OverlayEffect]) -> None:
        assert self._bootstrap is not None
        out.append(PeerSend(self._bootstrap, m.JoinRequest(self.me).to_wire()))
        self.timers.set(OverlayTimer.JOIN, now + self.config.join_timeout_ns)

    def _joins_through_us(self, newcomer: NodeRef, sender_address: str) -> bool:
        """Whether `newcomer` asks to join through this node while this node, not yet joined, asks to
        join through it, and this node's id is the smaller: two brokers restarted together, each
        with the other as its bootstrap, would otherwise each wait for the other for ever."""
        return (not self._joined and self._bootstrap in (newcomer.address, sender_address)
                and self.me.node_id < newcomer.node_id)

    def _join_hop(self, join: m.Join, first: bool, out: list[OverlayEffect]) -> None:
        """This node is on the route of `join`: send the newcomer its share, pass the join on."""
        newcomer = join.newcomer
        if newcomer.node_id == self.me.node_id:
            return  # our own join came back (a stale entry elsewhere): the retry will do better
        shared = shared_prefix_digits(self.me.node_id, newcomer.node_id)
        rows = tuple(
            (i, tuple(row)) for i in range(min(shared + 1, DIGITS)) if (row := self.routing_table.row(i))
        )
        next_hop = self._next_hop(newcomer.node_id, exclude=newcomer.node_id)
        last = next_hop is None or join.hops + 1 >= self.config.route_hops_max
        leaves = tuple(n for n in self.leaf_set.members() if n.node_id != newcomer.node_id) if last else None
        neighbours = tuple(self.neighbourhood.members()) if first else None
        out.append(PeerSend(newcomer.address, m.JoinState(self.me, rows, leaves, neighbours).to_wire()))
        if not last:
            assert next_hop is not None
            out.append(PeerSend(next_hop.address, m.Join(newcomer, join.hops + 1).to_wire()))

    def _absorb_join_state(self, now: int, state: m.JoinState, out: list[OverlayEffect]) -> None:
        self._learn(state.sender, out, heard=True)
        for _, row in state.rows:
            for node in row:
                self._learn(node, out)
        for node in state.neighbours or ():
            self._learn(node, out)
        if state.leaf_set is not None:
            for node in state.leaf_set:  # taken as is only while joining
                self._learn(node, out, verified=not self._joined)
            if not self._joined:
                self._complete_join(now, out)

    def _complete_join(self, now: int, out: list[OverlayEffect]) -> None:
        self._joined = True
        self.timers.cancel(OverlayTimer.JOIN)
        interval = self.config.keepalive_interval_ns
        self.timers.set(OverlayTimer.KEEPALIVE, now + self._rng.randrange(max(1, interval)))
        repair_ns = self.config.routing_repair_interval_ns
        self.timers.set(OverlayTimer.REPAIR, now + repair_ns // 2 + self._rng.randrange(max(1, repair_ns)))
        announce = m.Announce(self.me).to_wire()
        for node in self._known():
            if node.node_id not in self.leaf_set:  # leaves get our leaf set instead (see _finish)
                out.append(PeerSend(node.address, announce))
        out.append(JoinCompleted())

    # -- messages ------------------------------------------------------------------------------

    def handle(self, now: int, sender_address: str, message: object) -> list[OverlayEffect]:
        """React to one overlay message (not ROUTE: that goes to `route_step`) from `sender_address`.
        Raises ProtocolError(BAD_MESSAGE) on a malformed message, before changing anything."""
        msg = m.decode(message)
        assert not isinstance(msg, RouteMessage), "ROUTE goes to route_step"
        out: list[OverlayEffect] = []
        if sender_address in self._heard_ns:
            self._heard_ns[sender_address] = now
        if isinstance(msg, m.JoinState):
            self._absorb_join_state(now, msg, out)
        elif isinstance(msg, m.JoinRequest | m.Join):
            if isinstance(msg, m.JoinRequest) and self._joins_through_us(msg.newcomer, sender_address):
                self._complete_join(now, out)  # the smaller of two nodes joining through each other founds
            if self._joined:
                self._join_hop(m.Join(msg.newcomer, 0) if isinstance(msg, m.JoinRequest) else msg,
                               isinstance(msg, m.JoinRequest), out)
        elif isinstance(msg, m.Announce):
            self._learn(msg.node, out, heard=True)
        else:
            self._handle_maintenance(now, msg, out)
        return self._finish(now, out)

    def _handle_maintenance(self, now: int, msg: m.OverlayMessage, out: list[OverlayEffect]) -> None:
        if isinstance(msg, m.KeepAlive):
            was_leaf = msg.sender.node_id in self.leaf_set
            self._learn(msg.sender, out, heard=True, probe=False)
            if msg.sender.node_id not in self.leaf_set and self._may_tell_leaves(now, msg.sender.address):
                # it takes us for a leaf (or vets us as one), but the side of ours it would be on
                # is full of nodes nearer to us, so between it and us: its leaf set lacks them.
                # Our leaves (which answer as an ack) name them; without this, two nodes that
                # joined side by side never met when their common neighbour had taken the other
                # (a small leaf set: gd_bench's 5 brokers), until the periodic repair, 15-45 s on
                self._send_leaves(msg.sender.address, out)
            elif not was_leaf:  # it may be verifying us: answer now rather than at our next round
                out.append(PeerSend(msg.sender.address, m.KeepAliveAck(self.me).to_wire()))
        elif isinstance(msg, m.KeepAliveAck):
            self._learn(msg.sender, out, heard=True, probe=False)
        elif isinstance(msg, m.LeafSetRequest):
            self._learn(msg.sender, out, heard=True, probe=False)
            self._send_leaves(msg.sender.address, out)
        elif isinstance(msg, m.LeafSetReply):
            self._learn(msg.sender, out, heard=True, probe=False)
            for node in msg.leaves:
                self._learn(node, out)
        elif isinstance(msg, m.RowRequest):
            self._learn(msg.sender, out, heard=True, probe=False)
            reply = m.RowReply(self.me, msg.row, tuple(self.routing_table.row(msg.row)))
            out.append(PeerSend(msg.sender.address, reply.to_wire()))
        else:
            assert isinstance(msg, m.RowReply)
            self._learn(msg.sender, out, heard=True, probe=False)
            for node in msg.nodes:
                self._learn(node, out)

    def _may_tell_leaves(self, now: int, address: str) -> bool:
        """Whether a keep-alive from `address`, which we do not take as a leaf, may be answered with
        our leaf set: not if we answered it so less than half a keep-alive interval ago (noted if it
        may). The sender's periodic keep-alive comes once an interval, so each is answered unless its
        latency varies by half an interval; the vetting keep-alives it sends, one for every leaf set
        naming us, are not, so an answer cannot set off more vetting than the last (see the module
        docstring)."""
        told = self._leaves_told.get(address)
        if told is not None and now - told < self._leaves_told_hold_ns:
            return False
        self._leaves_told[address] = now
        return True

    @property
    def _leaves_told_hold_ns(self) -> int:
        """How long a leaf-set answer holds back the next one to the same sender: half an interval."""
        return self.config.keepalive_interval_ns // 2

    def _send_leaves(self, address: str, out: list[OverlayEffect]) -> None:
        reply = m.LeafSetReply(self.me, tuple(self.leaf_set.members()))
        out.append(PeerSend(address, reply.to_wire()))

    def _learn(self, node: NodeRef, out: list[OverlayEffect], heard: bool = False, verified: bool = False,
               probe: bool = True) -> None:
        """Take `node` into the leaf set and routing table where it fits.

        `heard`: the node spoke to us itself, so it is alive even if we had declared it failed.
        Others' lists may still name nodes that died, so a node only named by a third party enters
        the leaf set once it answers a keep-alive (`verified` skips that: the leaf set a newcomer
        receives on joining is taken as is; a node still joining vets nobody, it announces itself once
        joined). A node that takes an empty routing-table slot is probed
        for its RTT; a rival for a held slot only if `probe` (keep-alive senders that lost their slot
        are not re-measured every second)."""
        if node.node_id == self.me.node_id:
            return
        if not self._repair.may_learn(node.node_id, heard):
            return
        if self._ref_pool is not None:
            pooled = self._ref_pool.setdefault(node.node_id, node)
            if pooled == node:
                node = pooled
            else:
                self._ref_pool[node.node_id] = node  # it moved: newer news wins
        if heard or verified:
            self.leaf_set.add(node)
        elif self._joined and node.node_id not in self.leaf_set and self.leaf_set.would_admit(node.node_id):
            # vetting by keep-alive waits for the join: a keep-alive makes its receiver take us as a
            # leaf, and a node that cannot route yet must not be handed JOINs and lookups
            out.append(PeerSend(node.address, m.KeepAlive(self.me).to_wire()))
        if self.routing_table.holds(node.node_id):
            self.routing_table.add(node)  # the same node at a new address replaces the old one
        elif self.routing_table.add(node) or probe:  # a new entry, or a rival for a held slot
            self._probe(node, out)

    def _probe(self, node: NodeRef, out: list[OverlayEffect]) -> None:
        """Ask the runtime for `node`'s RTT: proximity decides its routing-table slot and whether it
        joins the neighbourhood set."""
        if node.address in self._probing or self.config.probes_pending_max <= 0:
            return
        if len(self._probing) >= self.config.probes_pending_max:
            del self._probing[next(iter(self._probing))]  # the oldest is likely never answered
        self._probing[node.address] = node
        out.append(Probe(node.address))

    # -- routing -------------------------------------------------------------------------------

    def route(self, key: int, payload: WireArray) -> RouteMessage:
        return RouteMessage(key, self.me, 0, payload)

    def route_step(self, now: int, message: RouteMessage) -> RouteDecision:
        """Pastry's routing decision for `message` at this node (see the module docstring)."""
        if message.hops >= self.config.route_hops_max:
            self.routes_over_hops_max += 1
            return Deliver(message)
        next_hop = self._next_hop(message.key)
        return Deliver(message) if next_hop is None else Forward(message, next_hop)

    def forward(self, decision: Forward, payload: WireArray | None = None) -> PeerSend:
        sent = decision.message
        onward = RouteMessage(sent.key, sent.source, sent.hops + 1, sent.payload if payload is None else payload)
        return PeerSend(decision.next_hop.address, m.encode_route(onward))

    def _next_hop(self, key: int, exclude: int | None = None) -> NodeRef | None:
        """The next node towards `key`, None when this node is the destination."""
        if self.leaf_set.covers(key):
            return self.leaf_set.closest(key, exclude)
        entry = self.routing_table.lookup(key)
        if entry is not None and entry.node_id != exclude:
            return entry
        shared = shared_prefix_digits(key, self.me.node_id)
        best: NodeRef | None = None
        best_id = self.me.node_id
        for node in self._known():
            if (node.node_id != exclude and shared_prefix_digits(key, node.node_id) >= shared
                    and closer(key, node.node_id, best_id)):
                best, best_id = node, node.node_id
        return best

    def _known(self) -> list[NodeRef]:
        """Every node in this node's state once: leaves, routing table, neighbourhood."""
        seen: dict[int, NodeRef] = {}
        for node in self.leaf_set.members() + self.routing_table.nodes() + self.neighbourhood.members():
            seen.setdefault(node.node_id, node)
        return list(seen.values())

    # -- proximity and failures ----------------------------------------------------------------

    def rtt_measured(self, now: int, address: str, rtt_ns: int) -> list[OverlayEffect]:
        """The runtime measured the round-trip time to `address` (after a Probe, or on its own)."""
        out: list[OverlayEffect] = []
        node = self._probing.pop(address, None) or self._find(address)
        if node is not None and not self._repair.is_failed(node.node_id):
            if address in self._heard_ns:
                self._heard_ns[address] = now
            self.routing_table.add(node, rtt_ns)
            self.neighbourhood.add(node, rtt_ns)
        return self._finish(now, out)

    def peer_unreachable(self, now: int, address: str) -> list[OverlayEffect]:
        """The transport could not reach `address` (refused, reset): the node there has failed."""
        out: list[OverlayEffect] = []
        if not self._joined and address == self._bootstrap:  # try again soon, backing off
            self.timers.set(OverlayTimer.JOIN, now + self._join_retry_ns)
            self._join_retry_ns = min(2 * self._join_retry_ns, self.config.join_timeout_ns)
        node = self._probing.pop(address, None) or self._find(address)
        if node is not None:
            self._fail(now, node, out)
        return self._finish(now, out)

    def _find(self, address: str) -> NodeRef | None:
        found = self.leaf_set.find(address) or self.neighbourhood.find(address)
        return found if found is not None else self.routing_table.find(address)

    def _fail(self, now: int, node: NodeRef, out: list[OverlayEffect]) -> None:
        """Forget `node` everywhere and start repairing what it leaves empty."""
        self._probing.pop(node.address, None)
        self._repair.fail(now, node, out)

    # -- timers --------------------------------------------------------------------------------

    def handle_timeout(self, now: int) -> list[OverlayEffect]:
        out: list[OverlayEffect] = []
        due = self.timers.pop_due(now)
        if not self._joined:
            if OverlayTimer.JOIN in due:
                self._ask_to_join(now, out)
            return self._finish(now, out)
        self._repair.forget_old_failures(now)
        if OverlayTimer.KEEPALIVE in due:
            self.timers.set(OverlayTimer.KEEPALIVE, now + self.config.keepalive_interval_ns)
            keepalive = m.KeepAlive(self.me).to_wire()
            out.extend(PeerSend(node.address, keepalive) for node in self.leaf_set.members())
            recent = now - self._leaves_told_hold_ns  # older answers no longer hold one back
            self._leaves_told = {a: told for a, told in self._leaves_told.items() if told > recent}
        for address, heard in list(self._heard_ns.items()):
            if now - heard >= self.config.failure_timeout_ns:
                node = self.leaf_set.find(address)
                if node is not None:
                    self._fail(now, node, out)
        if OverlayTimer.REPAIR in due:
            self.timers.set(OverlayTimer.REPAIR, now + self.config.routing_repair_interval_ns)
            self._repair.maintain(out)
        if OverlayTimer.REVIVE in due:
            self._repair.revive(now, out)
        return self._finish(now, out)

    def next_deadline(self) -> int | None:
        return self.timers.next_deadline()

    def _arm_silence(self) -> None:
        """The leaf-set failure check is due when the longest-silent leaf reaches failure_timeout_ns.
        A leaf's last sign of life only moves forward, so a setting is never late; it is set again
        only when it moves, which keeps the heap small."""
        if not self._heard_ns:
            self.timers.cancel(OverlayTimer.LEAF_SILENCE)
            return
        due = min(self._heard_ns.values()) + self.config.failure_timeout_ns
        if self.timers.when(OverlayTimer.LEAF_SILENCE) != due:
            self.timers.set(OverlayTimer.LEAF_SILENCE, due)

    def _finish(self, now: int, out: list[OverlayEffect]) -> list[OverlayEffect]:
        """Once joined, keep liveness tracking in step with the leaf set, send every new leaf our
        leaf set, and tell the layers above that it changed.

        Sending the leaf set to each newcomer to it is what makes concurrent joins converge: of two
        nodes that joined side by side without hearing of each other, a common leaf adds one after
        the other and so tells the second about the first, which it then verifies and keeps."""
        if not self._joined or self.leaf_set.version == self._leaf_version:
            self._arm_silence()
            return out
        self._leaf_version = self.leaf_set.version
        members = self.leaf_set.members()
        fresh = [n for n in members if n.address not in self._heard_ns]
        self._heard_ns = {n.address: self._heard_ns.get(n.address, now) for n in members}
        if fresh:
            leaves = m.LeafSetReply(self.me, tuple(members)).to_wire()
            out.extend(PeerSend(n.address, leaves) for n in fresh)
        out.append(LeafSetChanged(tuple(members)))
        self._arm_silence()
        return out

    # -- status --------------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        return {
            "node_id": id_hex(self.me.node_id),
            "address": self.me.address,
            "joined": self._joined,
            "leaf_set": [[id_hex(n.node_id), n.address] for n in self.leaf_set.members()],
            "routing_table_fill": self.routing_table.fill(),
            "neighbours": [
                [id_hex(n.node_id), n.address, rtt / 1e6] for n, rtt in self.neighbourhood.with_rtt()
            ],
            "routes_over_hops_max": self.routes_over_hops_max,
        }
