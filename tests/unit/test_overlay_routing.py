"""Pastry routing on ideal state: for N random nodes, leaf sets and routing tables are built directly
(each slot filled with some node of the right prefix, if one exists); every route must end at the
brute-force closest node in about log16(N) hops, also with holes in the routing tables."""

from __future__ import annotations

import bisect
import math
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from tidings.core.overlay.envelope import Deliver, Forward
from tidings.core.overlay.node import OverlayConfig, OverlayNode
from tidings.core.overlay.node_id import BASE, DIGIT_BITS, DIGITS, ID_BITS, NodeRef, digit

from .overlay_reference import closest, larger_side, smaller_side

CONFIG = OverlayConfig()


def ideal_overlay(count: int, rng: random.Random, hole_fraction: float = 0.0) -> dict[int, OverlayNode]:
    ids = sorted({rng.getrandbits(ID_BITS) for _ in range(count)})
    nodes = {i: OverlayNode(NodeRef(i, f"n{k}:1"), CONFIG, random.Random(k)) for k, i in enumerate(ids)}
    half = CONFIG.leaf_set_size // 2
    for k, node_id in enumerate(ids):
        node = nodes[node_id]
        window = [ids[(k + d) % len(ids)] for d in range(-half, half + 1)]
        for leaf in {*smaller_side(node_id, window, half), *larger_side(node_id, window, half)}:
            node.leaf_set.add(nodes[leaf].me)
        for row in range(DIGITS):
            shift = ID_BITS - DIGIT_BITS * (row + 1)
            stem = node_id >> (shift + DIGIT_BITS)
            if bisect.bisect_left(ids, (stem + 1) << (shift + DIGIT_BITS)) - bisect.bisect_left(
                    ids, stem << (shift + DIGIT_BITS)) <= 1:
                break  # nobody else shares this prefix: deeper rows stay empty
            for col in range(BASE):
                if col == digit(node_id, row) or rng.random() < hole_fraction:
                    continue
                low = ((stem << DIGIT_BITS) | col) << shift
                at = bisect.bisect_left(ids, low)
                if at < len(ids) and ids[at] < low + (1 << shift):
                    pick = ids[rng.randrange(at, bisect.bisect_left(ids, low + (1 << shift)))]
                    node.routing_table.add(nodes[pick].me)
    return nodes


def walk(nodes: dict[int, OverlayNode], start: OverlayNode, key: int) -> tuple[int, int]:
    message = start.route(key, [])
    node = start
    while True:
        decision = node.route_step(0, message)
        if isinstance(decision, Deliver):
            return node.me.node_id, message.hops
        assert isinstance(decision, Forward)
        message = type(message)(message.key, message.source, message.hops + 1, message.payload)
        node = nodes[decision.next_hop.node_id]


@settings(max_examples=6)
@given(st.integers(200, 2000), st.integers(0, 2**32))
def test_routes_on_ideal_state_reach_the_closest_node_in_log_hops(count, seed):
    rng = random.Random(seed)
    nodes = ideal_overlay(count, rng)
    ids = sorted(nodes)
    bound = math.ceil(math.log(len(ids), BASE)) + 2
    hops_seen = []
    for _ in range(300):
        key = rng.getrandbits(ID_BITS) if rng.random() < 0.8 else rng.choice(ids) + rng.randrange(-3, 4)
        key %= 1 << ID_BITS
        start = nodes[rng.choice(ids)]
        end, hops = walk(nodes, start, key)
        assert end == closest(key, ids)
        assert hops <= bound
        hops_seen.append(hops)
    assert sum(hops_seen) / len(hops_seen) <= math.log(len(ids), BASE) + 1


@settings(max_examples=3)
@given(st.integers(200, 800), st.integers(0, 2**32))
def test_routes_still_arrive_with_holes_in_the_routing_tables(count, seed):
    rng = random.Random(seed)
    nodes = ideal_overlay(count, rng, hole_fraction=0.5)  # the rare case: empty entries
    ids = sorted(nodes)
    for _ in range(200):
        key = rng.getrandbits(ID_BITS)
        end, hops = walk(nodes, nodes[rng.choice(ids)], key)
        assert end == closest(key, ids)
        assert hops < CONFIG.route_hops_max


def test_forward_builds_the_next_hop_route_message():
    rng = random.Random(1)
    nodes = ideal_overlay(50, rng)
    start = nodes[min(nodes)]
    decision = start.route_step(0, start.route(max(nodes), ["p", 1]))
    assert isinstance(decision, Forward)
    sent = start.forward(decision)
    assert sent.address == decision.next_hop.address
    assert sent.message[0] == 64 and sent.message[3] == 1 and sent.message[4] == ["p", 1]
    assert start.forward(decision, ["q"]).message[4] == ["q"]


def test_a_route_over_the_hop_limit_is_delivered_where_it_stands_and_counted():
    rng = random.Random(2)
    nodes = ideal_overlay(50, rng)
    start = nodes[min(nodes)]
    message = start.route(max(nodes), [])
    looping = type(message)(message.key, message.source, CONFIG.route_hops_max, message.payload)
    assert start.route_step(0, looping) == Deliver(looping)
    assert start.status()["routes_over_hops_max"] == 1
