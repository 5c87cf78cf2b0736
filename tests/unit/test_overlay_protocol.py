"""Pastry as a protocol: many OverlayNodes joined one by one through a tiny deterministic message
pump (FIFO delivery by address, msgpack on the way, a fake clock advanced by the test), checked
against brute force: leaf sets equal the true ones and routes end at the numerically closest node,
before and after a tenth of the nodes die silently."""

from __future__ import annotations

import random
from collections import Counter, deque
from typing import Any

import msgpack
import pytest

from tidings.core.errors import ProtocolError
from tidings.core.overlay import messages as m
from tidings.core.overlay.envelope import Deliver, PeerSend
from tidings.core.overlay.events import JoinCompleted, LeafSetChanged, NodeFailed, Probe
from tidings.core.overlay.node import OverlayConfig, OverlayNode
from tidings.core.overlay.node_id import NodeRef, node_id_from
from tidings.core.wire.types import OverlayType

from .overlay_reference import closest, leaf_members

MS = 1_000_000
SECOND = 1000 * MS
CONFIG = OverlayConfig()


class Pump:
    """Delivers every effect in FIFO order; Probes are answered from points on a line (the RTT is
    twice the distance), or with peer_unreachable for a dead node (a probe times out); messages to
    dead nodes vanish unless `refuse_dead` (a transport that sees connections refused)."""

    def __init__(self, seed: int, config: OverlayConfig = CONFIG, ref_pool: dict | None = None) -> None:
        self.ref_pool = ref_pool
        self.rng = random.Random(seed)
        self.seed = seed
        self.config = config
        self.nodes: dict[str, OverlayNode] = {}
        self.dead: set[str] = set()
        self.where: dict[str, int] = {}
        self.queue: deque[tuple[str, Any]] = deque()
        self.notes: dict[str, list[Any]] = {}
        self.now = 0
        self.delivered = 0
        self.delivered_by_type: Counter[int] = Counter()  # OverlayType -> messages delivered
        self.refuse_dead = False
        self.side: dict[str, int] = {}  # a partition: messages between different sides vanish

    def add(self, index: int) -> OverlayNode:
        address = f"10.0.{index // 250}.{index % 250}:7000"
        node = OverlayNode(NodeRef(node_id_from(f"broker-{self.seed}-{index}"), address), self.config,
                           random.Random(self.seed * 100_003 + index), self.ref_pool)
        self.nodes[address] = node
        self.where[address] = self.rng.randrange(100_000)
        self.notes[address] = []
        return node

    def live(self) -> list[OverlayNode]:
        return [n for a, n in self.nodes.items() if a not in self.dead]

    def apply(self, address: str, effects: list[Any]) -> None:
        for effect in effects:
            if isinstance(effect, PeerSend | Probe):
                self.queue.append((address, effect))
            else:
                self.notes[address].append(effect)

    def run(self) -> None:
        while self.queue:
            sender, effect = self.queue.popleft()
            node = self.nodes[sender]
            if sender in self.dead:
                continue
            target = effect.address
            if target in self.dead or target not in self.nodes or self.side.get(sender) != self.side.get(target):
                if self.refuse_dead or isinstance(effect, Probe):
                    self.apply(sender, node.peer_unreachable(self.now, target))
                continue
            if isinstance(effect, Probe):
                rtt = 2 * abs(self.where[sender] - self.where[target]) * 1000 + 100_000
                self.apply(sender, node.rtt_measured(self.now, target, rtt))
                continue
            wire = msgpack.unpackb(msgpack.packb(effect.message))
            self.delivered += 1
            self.delivered_by_type[wire[0]] += 1
            self.apply(target, self.nodes[target].handle(self.now, sender, wire))

    def advance(self, duration_ns: int, step_ns: int = 100 * MS) -> None:
        end = self.now + duration_ns
        while self.now < end:
            self.now += step_ns
            for node in self.live():
                deadline = node.next_deadline()
                if deadline is not None and deadline <= self.now:
                    self.apply(node.me.address, node.handle_timeout(self.now))
            self.run()

    def walk(self, start: OverlayNode, key: int) -> tuple[OverlayNode, int]:
        """Route `key` from `start` as a runtime would (a refused hop is reported, then retried)."""
        message = start.route(key, ["probe"])
        node = start
        while True:
            decision = node.route_step(self.now, message)
            if isinstance(decision, Deliver):
                return node, message.hops
            if decision.next_hop.address in self.dead:
                self.apply(node.me.address, node.peer_unreachable(self.now, decision.next_hop.address))
                self.run()
                continue
            sent = node.forward(decision)
            message = m.decode_route(msgpack.unpackb(msgpack.packb(sent.message)))
            node = self.nodes[sent.address]


def grow(pump: Pump, count: int) -> None:
    first = pump.add(0)
    pump.apply(first.me.address, first.start(pump.now, None))
    for index in range(1, count):
        members = [n for n in pump.live() if n.joined]
        bootstrap = members[pump.rng.randrange(len(members))]
        node = pump.add(index)
        pump.apply(node.me.address, node.start(pump.now, bootstrap.me.address))
        pump.run()
        assert node.joined, index
        pump.now += 10 * MS


def assert_consistent(pump: Pump, keys_per_node: int = 3) -> None:
    live = pump.live()
    ids = [n.me.node_id for n in live]
    half = pump.config.leaf_set_size // 2
    for node in live:
        got = [n.node_id for n in node.leaf_set.members()]
        assert got == leaf_members(node.me.node_id, ids, half), node.me
    for node in live:
        for _ in range(keys_per_node):
            key = pump.rng.getrandbits(128)
            end, hops = pump.walk(node, key)
            assert end.me.node_id == closest(key, ids)
            assert hops <= 6
        end, _ = pump.walk(node, node.me.node_id)
        assert end is node


@pytest.mark.parametrize("seed,count", [(1, 100), (2, 200)])
def test_joins_build_true_leaf_sets_and_routes_reach_the_closest_node(seed, count):
    pump = Pump(seed)
    grow(pump, count)
    assert_consistent(pump)
    for node in pump.live():
        notes = pump.notes[node.me.address]
        assert sum(isinstance(n, JoinCompleted) for n in notes) == 1
        changes = [n for n in notes if isinstance(n, LeafSetChanged)]
        assert [n.node_id for n in changes[-1].members] == [n.node_id for n in node.leaf_set.members()]
        assert len(node.neighbourhood) > 0


def test_a_shared_ref_pool_stores_each_node_reference_once():
    pool: dict = {}
    pump = Pump(15, ref_pool=pool)
    grow(pump, 60)
    assert_consistent(pump)
    for node in pump.live():
        for known in node.leaf_set.members() + node.routing_table.nodes() + node.neighbourhood.members():
            assert known is pool[known.node_id]


def test_silent_failures_are_detected_and_leaf_sets_repaired():
    pump = Pump(3)
    grow(pump, 150)
    pump.advance(2 * SECOND)
    victims = pump.rng.sample(sorted(pump.nodes), 15)
    pump.dead.update(victims)
    dead_ids = {pump.nodes[a].me.node_id for a in victims}
    pump.advance(CONFIG.failure_timeout_ns + 3 * SECOND)
    for node in pump.live():
        assert not dead_ids & {n.node_id for n in node.leaf_set.members()}
        failed = {n.node.node_id for n in pump.notes[node.me.address] if isinstance(n, NodeFailed)}
        assert failed <= dead_ids
    assert_consistent(pump)


def test_more_than_half_a_leaf_set_of_adjacent_nodes_failing_at_once_is_repaired():
    pump = Pump(14)
    grow(pump, 100)
    pump.advance(SECOND)
    ring = sorted(pump.live(), key=lambda n: n.me.node_id)
    first = pump.rng.randrange(len(ring))
    pump.dead.update(ring[(first + i) % len(ring)].me.address for i in range(CONFIG.leaf_set_size // 2 + 2))
    pump.advance(CONFIG.failure_timeout_ns + 3 * SECOND)
    assert_consistent(pump)


def test_a_lost_join_is_retried():
    pump = Pump(4)
    grow(pump, 5)
    newcomer = pump.add(99)
    pump.apply(newcomer.me.address, newcomer.start(pump.now, "10.9.9.9:1"))  # nobody there
    pump.run()
    assert not newcomer.joined
    assert newcomer.next_deadline() == pump.now + CONFIG.join_timeout_ns
    pump.nodes["10.9.9.9:1"] = pump.nodes["10.0.0.0:7000"]  # the bootstrap address now answers
    pump.advance(CONFIG.join_timeout_ns)
    assert newcomer.joined
    assert_consistent(pump)


def test_unreachable_peer_fails_at_once_and_is_not_relearned_from_others():
    pump = Pump(5)
    grow(pump, 40)
    node = pump.live()[0]
    leaf = node.leaf_set.members()[0]
    pump.dead.add(leaf.address)
    pump.apply(node.me.address, node.peer_unreachable(pump.now, leaf.address))
    pump.run()
    assert leaf.node_id not in node.leaf_set
    assert not node.routing_table.holds(leaf.node_id)
    assert NodeFailed(leaf) in pump.notes[node.me.address]


def test_the_first_node_is_alone_and_delivers_everything():
    pump = Pump(6)
    first = pump.add(0)
    effects = first.start(0, None)
    assert effects[0] == JoinCompleted()
    assert first.joined
    assert isinstance(first.route_step(0, first.route(12345, [])), Deliver)
    status = first.status()
    assert status["joined"] and status["leaf_set"] == []


def test_status_is_json_serialisable():
    import json

    pump = Pump(7)
    grow(pump, 30)
    status = pump.live()[3].status()
    assert json.loads(json.dumps(status)) == status
    assert len(status["leaf_set"]) == 16 and sum(status["routing_table_fill"]) > 0


def test_same_seed_same_trace():
    def trace(seed):
        pump = Pump(seed)
        grow(pump, 40)
        pump.advance(2 * SECOND)
        return pump.delivered, [n.status() for n in pump.live()]

    assert trace(8) == trace(8)


@pytest.mark.parametrize("message", [
    None, [], [64], [99, 1], ["x"], [True, 1], [65], [65, [b"x" * 16, ""]], [65, [b"x" * 15, "a:1"]],
    [66, [b"x" * 16, "a:1"], -1], [66, [b"x" * 16, "a:1"], True], [67, [b"x" * 16, "a:1"], [[40, []]], None, None],
    [67, [b"x" * 16, "a:1"], [[0, [[b"x" * 16, "a:1"]] * 17]], None, None],
    [67, [b"x" * 16, "a:1"], [], [1], None], [72, [b"x" * 16, "a:1"], "no"], [73, [b"x" * 16, "a:1"], 32],
    [74, [b"x" * 16, "a:1"], 0, [[b"x" * 16]]], [64, b"k" * 16, [b"x" * 16, "a:1"], 0, "not a list"],
    [64, b"k" * 16, [b"x" * 16, "a:1"], 1 << 20, []], [69, [b"x" * 16, "a:1"], 5],
])
def test_malformed_messages_raise_protocol_error(message):
    node = OverlayNode(NodeRef(1, "me:1"), CONFIG, random.Random(0))
    with pytest.raises(ProtocolError) as caught:
        node.handle(0, "peer:1", message)
    assert caught.value.code == "bad-message"
    with pytest.raises(ProtocolError):
        m.decode(message)


def test_concurrent_joins_converge_through_keep_alives():
    pump = Pump(9)
    grow(pump, 50)
    newcomers = []
    for index in range(50, 80):  # all start before any message moves
        members = [n for n in pump.live() if n.joined]
        node = pump.add(index)
        newcomers.append(node)
        pump.apply(node.me.address, node.start(pump.now, members[pump.rng.randrange(len(members))].me.address))
    pump.run()
    assert all(n.joined for n in newcomers)
    pump.advance(3 * SECOND)
    assert_consistent(pump)


@pytest.mark.parametrize("leaf_set_size,count", [(2, 5), (2, 8), (4, 8)])
@pytest.mark.parametrize("seed", range(6))
def test_concurrent_joins_converge_with_a_small_leaf_set(seed, leaf_set_size, count):
    """gd_bench's 5 brokers (leaf sets of two): the founder, then the others joining at once. A
    node that took a neighbour too far (the one between was joining too) sends it keep-alives; the
    neighbour, whose side holds the nearer node, answers with its leaves, so it learns of the
    nearer one within a keep-alive round. Before, it answered a bare ack: with one leaf a side no
    common leaf took both, and the two stayed apart until the periodic repair (15-45 s), each
    the rendez-vous point of keys the other owned (before: every seed of (2, 5) and (2, 8), and 5
    of 6 of (4, 8), stayed wrong)."""
    pump = Pump(seed, OverlayConfig(leaf_set_size=leaf_set_size))
    first = pump.add(0)
    pump.apply(first.me.address, first.start(pump.now, None))
    pump.run()
    newcomers = [pump.add(index) for index in range(1, count)]
    for node in newcomers:  # all start before any message moves
        pump.apply(node.me.address, node.start(pump.now, first.me.address))
    pump.run()
    assert all(n.joined for n in newcomers)
    pump.advance(CONFIG.keepalive_interval_ns + SECOND)  # far below routing_repair_interval_ns / 2
    assert_consistent(pump)


def test_a_keep_alive_from_a_node_we_do_not_take_as_a_leaf_is_answered_with_our_leaves():
    """The node at 500 (leaf sets of two) holds 400 and 600; a keep-alive from 300, which takes
    it for a neighbour, is answered with its leaves, naming 400 (between them); one from a leaf
    is not answered at all (it sends its own), and one from a node it now takes is answered with a
    bare ack (its leaf set follows, as to every new leaf)."""
    node = OverlayNode(NodeRef(500, "n:500"), OverlayConfig(leaf_set_size=2), random.Random(1))
    node.start(0, None)
    for leaf in (400, 600):
        node.handle(0, f"n:{leaf}", m.KeepAlive(NodeRef(leaf, f"n:{leaf}")).to_wire())
    assert [n.node_id for n in node.leaf_set.members()] == [400, 600]
    far = node.handle(1, "n:300", m.KeepAlive(NodeRef(300, "n:300")).to_wire())
    (reply,) = [e for e in far if isinstance(e, PeerSend)]
    assert reply.address == "n:300" and m.decode(reply.message) == m.LeafSetReply(
        NodeRef(500, "n:500"), (NodeRef(400, "n:400"), NodeRef(600, "n:600")))
    from_leaf = node.handle(2, "n:400", m.KeepAlive(NodeRef(400, "n:400")).to_wire())
    assert not any(isinstance(e, PeerSend) for e in from_leaf)
    near = node.handle(3, "n:450", m.KeepAlive(NodeRef(450, "n:450")).to_wire())
    sent = [m.decode(e.message) for e in near if isinstance(e, PeerSend) and e.address == "n:450"]
    assert [type(x) for x in sent] == [m.KeepAliveAck, m.LeafSetReply]


def test_a_sender_not_taken_as_a_leaf_gets_our_leaves_at_most_once_per_half_keep_alive_interval():
    """The node at 500 holds 400 and 600; 300 takes it for a neighbour. 300's periodic keep-alive
    (one an interval) gets the leaf set each time; a second one within half an interval, as a node
    vetting us once per leaf set naming us sends, gets a bare ack."""
    node = OverlayNode(NodeRef(500, "n:500"), OverlayConfig(leaf_set_size=2), random.Random(1))
    node.start(0, None)
    for leaf in (400, 600):
        node.handle(0, f"n:{leaf}", m.KeepAlive(NodeRef(leaf, f"n:{leaf}")).to_wire())
    interval = CONFIG.keepalive_interval_ns
    far = m.KeepAlive(NodeRef(300, "n:300")).to_wire()

    def answers(now: int) -> list[type]:
        return [type(m.decode(e.message)) for e in node.handle(now, "n:300", far) if isinstance(e, PeerSend)]

    assert answers(interval) == [m.LeafSetReply]
    assert answers(interval) == answers(interval + interval // 2 - 1) == [m.KeepAliveAck]
    assert answers(2 * interval - interval // 4) == [m.LeafSetReply]  # the next round, a little early


def test_a_restarted_node_rejoins_under_its_nodeid():
    pump = Pump(10)
    grow(pump, 60)
    pump.advance(SECOND)
    old = pump.live()[17]
    pump.dead.add(old.me.address)
    pump.advance(CONFIG.failure_timeout_ns + 2 * SECOND)
    assert all(old.me.node_id not in n.leaf_set for n in pump.live())
    pump.dead.discard(old.me.address)
    fresh = OverlayNode(old.me, CONFIG, random.Random(77))
    pump.nodes[old.me.address] = fresh
    pump.apply(fresh.me.address, fresh.start(pump.now, pump.live()[0].me.address))
    pump.run()
    assert fresh.joined
    pump.advance(2 * SECOND)
    assert_consistent(pump)


def test_a_failed_routing_table_entry_is_replaced_lazily():
    pump = Pump(11)
    grow(pump, 100)
    pump.refuse_dead = True
    node = pump.live()[0]
    gone = node.routing_table.row(0)[0]
    slot = node.routing_table.slot_of(gone.node_id)
    pump.dead.add(gone.address)
    effects = node.peer_unreachable(pump.now, gone.address)
    asked = [e for e in effects if isinstance(e, PeerSend) and e.message[0] == OverlayType.ROW_REQUEST]
    assert len(asked) == CONFIG.row_repair_helpers and all(e.message[2] == 0 for e in asked)
    pump.apply(node.me.address, effects)
    pump.run()
    replacement = node.routing_table.entry(*slot)
    assert replacement is not None and replacement.address not in pump.dead
    assert node.routing_table.slot_of(replacement.node_id) == slot


def test_proximity_neighbour_selection_keeps_the_nearer_node_of_each_slot():
    pump = Pump(12)
    grow(pump, 120)
    for node in pump.live():
        measured = [rtt for row in range(8) for col in range(16)
                    if node.routing_table.entry(row, col) and (rtt := node.routing_table.rtt_ns(row, col))]
        assert len(measured) >= len(node.routing_table) * 0.8
        for neighbour, rtt in node.neighbourhood.with_rtt():
            slot = node.routing_table.slot_of(neighbour.node_id)
            held = node.routing_table.rtt_ns(*slot)
            assert held is not None and held <= rtt
        rtts = [rtt for _, rtt in node.neighbourhood.with_rtt()]
        assert rtts == sorted(rtts) and len(rtts) == CONFIG.neighbourhood_size


def test_a_node_that_has_not_joined_ignores_join_requests():
    pump = Pump(13)
    waiting = pump.add(0)
    waiting.start(0, "10.9.9.9:1")
    assert waiting.handle(0, "x:1", m.JoinRequest(NodeRef(5, "x:1")).to_wire()) == []
    assert waiting.handle(0, "x:1", m.Join(NodeRef(5, "x:1"), 2).to_wire()) == []
    assert not waiting.joined and waiting.next_deadline() == CONFIG.join_timeout_ns


def test_a_partition_that_heals_merges_the_two_overlays_again():
    """Each side repairs its leaf sets around the other; once the partition heals, failed nodes
    asked again (revive_interval_ns) answer, and the leaf sets are those of one overlay again."""
    config = OverlayConfig(leaf_set_size=8, revive_interval_ns=2 * SECOND)
    pump = Pump(21, config)
    grow(pump, 40)
    pump.advance(SECOND)
    addresses = sorted(pump.nodes)
    pump.side = {a: i % 2 for i, a in enumerate(addresses)}
    pump.advance(config.failure_timeout_ns + 3 * SECOND)
    for node in pump.live():  # two overlays: every leaf is on the node's own side
        assert all(pump.side[leaf.address] == pump.side[node.me.address] for leaf in node.leaf_set.members())
    pump.side = {}
    pump.advance(len(addresses) * config.revive_interval_ns // 4)
    assert_consistent(pump)


@pytest.mark.parametrize("seed", range(3))
def test_a_partition_into_interleaved_halves_sets_off_no_storm_of_leaf_set_answers(seed):
    """150 nodes with leaf sets of four (the delivery simulations'), cut into two random halves:
    every leaf set loses about half its members, and short sides admit any node named, so nodes
    walk the ring back to their nearest on their own side, vetting by keep-alive each node a leaf
    set names, once per naming. When every such keep-alive from a node not taken as a leaf was
    answered with the leaf set, each answer named the next nodes on as many times as it had been
    sent, and the count multiplied at each step (seeds 0-2: 10,026, 11,607 and 3,695 leaf sets in
    3 s; 640-700 before those answers; the 1,000-broker churn seed 2, which has a partition, took
    1,787 s instead of about 90). A sender now gets them at most once per half keep-alive interval: 1,300 to 1,549,
    below one leaf set a node per keep-alive round."""
    config = OverlayConfig(leaf_set_size=4, keepalive_interval_ns=200 * MS, failure_timeout_ns=600 * MS)
    pump = Pump(seed, config)
    grow(pump, 150)
    pump.advance(SECOND)
    addresses = sorted(pump.nodes)
    cut = set(pump.rng.sample(addresses, len(addresses) // 2))
    pump.side = {a: int(a in cut) for a in addresses}
    before = pump.delivered_by_type[OverlayType.LEAF_SET_REPLY]
    pump.advance(3 * SECOND, step_ns=10 * MS)
    rounds = 3 * SECOND // config.keepalive_interval_ns
    assert pump.delivered_by_type[OverlayType.LEAF_SET_REPLY] - before <= len(addresses) * rounds


def test_a_leaf_set_installed_as_known_is_tracked_without_being_sent_again():
    """The steady-state builder fills a founder's leaf set from outside and calls leaf_set_known:
    the layers above hear of the leaves, their liveness is tracked, and no LeafSetReply goes out
    on the next input (an input without it would send each new leaf our leaf set)."""

    def installed(known: bool) -> tuple[OverlayNode, list[Any], list[Any]]:
        node = OverlayNode(NodeRef(node_id_from("me"), "me:1"), CONFIG, random.Random(1))
        node.start(0, None)
        leaves = [NodeRef(node_id_from(f"leaf-{k}"), f"leaf:{k}") for k in range(4)]
        for leaf in leaves:
            node.leaf_set.add(leaf)
        told = node.leaf_set_known(0) if known else []
        return node, told, node.handle(1, "leaf:0", m.KeepAlive(leaves[0]).to_wire())

    node, told, after = installed(known=True)
    assert [type(e) for e in told] == [LeafSetChanged] and len(told[0].members) == 4
    assert not any(isinstance(e, PeerSend) and e.message[0] == OverlayType.LEAF_SET_REPLY for e in after)
    assert node.next_deadline() is not None
    _, _, fresh = installed(known=False)
    assert sum(isinstance(e, PeerSend) and e.message[0] == OverlayType.LEAF_SET_REPLY for e in fresh) == 4
